"""Hostile input: each gets memcached's reply or a clean close, another client keeps being
served, and memory stays bounded."""
import os
import random
import socket
import time

import pytest

from servers import Server


@pytest.fixture(scope="module")
def server():
    s = Server("mnemod", "-c", "64")
    yield s
    s.stop()


def roundtrip(sock, req, end=b"\r\n"):
    sock.sendall(req)
    buf = b""
    while not buf.endswith(end):
        d = sock.recv(65536)
        if not d:
            return buf + b"<CLOSED>"
        buf += d
    return buf


def read_until_close(sock):
    buf = b""
    while True:
        try:
            d = sock.recv(65536)
        except ConnectionResetError:
            return buf
        if not d:
            return buf
        buf += d


def served(server):
    with server.connect() as s:
        assert roundtrip(s, b"set ok 0 0 2\r\nok\r\nget ok\r\n", b"END\r\n") == b"STORED\r\nVALUE ok 0 2\r\nok\r\nEND\r\n"


def test_huge_declared_length(server):
    with server.connect() as s:
        assert roundtrip(s, b"set k 0 0 4294967295\r\n") == b"CLIENT_ERROR bad command line format\r\n"
        # The connection goes on.
        assert roundtrip(s, b"version\r\n").startswith(b"VERSION ")
        # A length that does not fit -I is refused before anything is buffered.
        assert roundtrip(s, b"set k 0 0 2147483000\r\n") == b"SERVER_ERROR object too large for cache\r\n"
    served(server)


def test_line_without_newline_closes(server):
    with server.connect() as s:
        s.sendall(b"x" * 5000)
        assert read_until_close(s) == b""
    with server.connect() as s:
        # A multi-get may be longer than 2048 bytes, up to mnemo's bound of 2 MiB.
        keys = b" ".join(b"k%d" % i for i in range(2000))
        assert roundtrip(s, b"get " + keys + b"\r\n", b"END\r\n") == b"END\r\n"
        s.sendall(b"get " + b"k" * (3 * 1024 * 1024))
        assert read_until_close(s) == b""
    served(server)


def test_binary_garbage(server):
    rng = random.Random(7)
    for _ in range(5):
        with server.connect() as s:
            s.settimeout(5)
            junk = bytes(rng.getrandbits(8) for _ in range(64 * 1024))
            try:
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                read_until_close(s)
            except (ConnectionResetError, BrokenPipeError):
                pass
        served(server)


def test_control_bytes_in_keys(server):
    with server.connect() as s:
        for key in (b"\x01\x02", b"a\x7fb", b"\xff\xfe", b"tab\there", b"\x00nul"):
            req = b"set " + key + b" 0 0 1\r\nv\r\n"
            got = roundtrip(s, req)
            if b"\x00" in key:
                # memcached reads the line as a C string: everything after NUL is gone,
                # so this is a 1-token set -> ERROR, then "v" -> ERROR.
                assert got.startswith(b"ERROR\r\n")
                roundtrip(s, b"version\r\n")
                continue
            assert got == b"STORED\r\n"
            assert roundtrip(s, b"get " + key + b"\r\n", b"END\r\n") == b"VALUE " + key + b" 0 1\r\nv\r\nEND\r\n"


def test_disconnect_in_the_middle_of_a_value(server):
    for _ in range(20):
        s = server.connect()
        s.sendall(b"set half 0 0 100000\r\n" + b"v" * 50000)
        s.close()
    with server.connect() as s:
        assert roundtrip(s, b"get half\r\n", b"END\r\n") == b"END\r\n"
    served(server)


def test_more_connections_than_limit():
    srv = Server("mnemod", "-c", "5")
    try:
        first = srv.connect()
        assert roundtrip(first, b"version\r\n").startswith(b"VERSION")
        conns = []
        rejected = 0
        for _ in range(10):
            c = srv.connect()
            c.settimeout(5)
            c.sendall(b"version\r\n")
            reply = read_until_close(c) if False else c.recv(100)
            if reply.startswith(b"ERROR Too many open connections"):
                rejected += 1
                c.close()
            else:
                conns.append(c)
        assert rejected >= 5
        assert roundtrip(first, b"version\r\n").startswith(b"VERSION")
        for c in conns:
            c.close()
        # Once the others are gone, new clients get in again.
        deadline = time.monotonic() + 10
        while True:
            c = srv.connect()
            c.sendall(b"version\r\n")
            if c.recv(100).startswith(b"VERSION"):
                c.close()
                break
            c.close()
            assert time.monotonic() < deadline
    finally:
        srv.stop()


def test_pipeline_that_never_reads():
    srv = Server("mnemod", "-t", "2")
    try:
        with srv.connect() as s:
            assert roundtrip(s, b"set k 0 0 100\r\n" + b"v" * 100 + b"\r\n") == b"STORED\r\n"
        greedy = srv.connect()
        greedy.setblocking(False)
        batch = b"get k\r\n" * 20000
        sent = 0
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and sent < 200_000 * 7:
            try:
                sent += greedy.send(batch)
            except BlockingIOError:
                break
        # Someone else is served while the greedy client's replies pile up.
        served(srv)
        assert srv.rss_kb() < 150_000, f"RSS {srv.rss_kb()} kB"
        greedy.close()
        served(srv)
    finally:
        srv.stop()
