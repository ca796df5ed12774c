"""Hostile input and hostile clients. Each gets memcached's reply or a clean close; a
well-behaved client on another connection is served during and after; memory stays bounded.

Where memcached's behaviour is the reference, the same test runs against memcached too."""
import os
import random
import socket
import struct
import threading
import time

import pytest

from servers import Server, read_until_close, roundtrip, served, stats


@pytest.fixture(scope="module", params=["mnemod", "memcached"])
def server(request):
    with Server(request.param, "-c", "200") as s:
        yield s


@pytest.fixture(scope="module")
def mnemod():
    with Server("mnemod", "-c", "200") as s:
        yield s


def close_or_error(sock):
    """What the server says before closing (reset counts as close). Raises on a hang."""
    sock.settimeout(10)
    return read_until_close(sock)


def test_declared_length_4294967295(server):
    with server.connect() as s:
        assert roundtrip(s, b"set k 0 0 4294967295\r\n") == b"CLIENT_ERROR bad command line format\r\n"
        # Nothing was swallowed: the connection goes on in step.
        assert roundtrip(s, b"version\r\n").startswith(b"VERSION ")
        assert roundtrip(s, b"get k\r\n", b"END\r\n") == b"END\r\n"
    served(server)


def test_declared_length_too_large_is_refused_before_buffering(server):
    # Under 2^31 it parses but does not fit -I: the server must not allocate 2 GB, and swallows
    # what follows. (memcached sends its SERVER_ERROR only once the swallowing is done.)
    base = server.rss_kb()
    with server.connect() as s:
        s.sendall(b"set k 0 0 2147483000\r\n" + b"x" * 100_000)
        served(server)
    assert server.rss_kb() < base + 50_000
    served(server)


@pytest.mark.parametrize("size", [2049, 4096, 64 * 1024, 1024 * 1024])
def test_line_without_newline_closes(server, size):
    with server.connect() as s:
        try:
            s.sendall(b"x" * size)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert close_or_error(s) == b""  # memcached closes without a word
    served(server)


def test_storage_line_with_2048_spaces(server):
    with server.connect() as s:
        assert roundtrip(s, b"set k 0 0 1" + b" " * 3000 + b"\r\nx\r\n") == b"STORED\r\n"


def test_multiget_line_longer_than_2048(server):
    with server.connect() as s:
        keys = b" ".join(b"key%05d" % i for i in range(2000))  # ~18 kB
        roundtrip(s, b"set key00007 0 0 1\r\nz\r\n")
        assert roundtrip(s, b"get " + keys + b"\r\n", b"END\r\n") == b"VALUE key00007 0 1\r\nz\r\nEND\r\n"


def test_mnemod_multiget_line_bound(mnemod):
    # mnemo bounds a multi-get line at 2 MiB (memcached grows its buffer without bound).
    with mnemod.connect() as s:
        try:
            s.sendall(b"get " + b"k" * (3 * 1024 * 1024))
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert close_or_error(s) == b""
    served(mnemod)


@pytest.mark.parametrize("seed", range(6))
def test_binary_garbage(server, seed):
    rng = random.Random(seed)
    junk = bytes(rng.getrandbits(8) for _ in range(64 * 1024))
    if seed == 0:
        junk = b"\x80" + junk[1:]  # a binary-protocol magic byte first
    elif seed == 1:
        junk = bytes(b % 95 + 32 for b in junk)  # printable, no newline
    elif seed == 2:
        junk = junk.replace(b"\x80", b"\n")  # many short lines
    elif seed == 3:
        junk = b"set k 0 0 10\r\n" + junk
    elif seed == 4:
        junk = b"\x81" + junk[1:]
    with server.connect() as s:
        s.settimeout(10)
        try:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            read_until_close(s)
        except socket.timeout:
            # After the client's FIN the server must close. mnemod's epoll loop once left such
            # a connection open when the FIN came with the data's own event.
            pytest.fail("the server did not close the connection within 10 s of the client's FIN")
        except OSError:
            pass  # the server closed first (reset, or not connected by the shutdown): fine
    assert server.alive()
    served(server)


def test_control_bytes_in_keys(server):
    with server.connect() as s:
        for key in (b"\x01\x02", b"a\x7fb", b"\xff\xfe", b"tab\there", b"\x1b[0m"):
            assert roundtrip(s, b"set " + key + b" 0 0 1\r\nv\r\n") == b"STORED\r\n"
            assert roundtrip(s, b"get " + key + b"\r\n", b"END\r\n") == b"VALUE " + key + b" 0 1\r\nv\r\nEND\r\n"
        if server.kind == "memcached":
            # NUL, memcached 1.6.18: the line is a C string, so `set a` has too few tokens ->
            # ERROR, and the data line `v` is another unknown command -> ERROR.
            assert roundtrip(s, b"set a\x00b 0 0 1\r\nv\r\n", b"ERROR\r\nERROR\r\n") == b"ERROR\r\nERROR\r\n"
        else:
            # memcached 1.6.40 and mnemod: a NUL is a key byte like any other.
            assert roundtrip(s, b"set a\x00b 0 0 1\r\nv\r\n") == b"STORED\r\n"
            assert roundtrip(s, b"get a\x00b\r\n", b"END\r\n") == b"VALUE a\x00b 0 1\r\nv\r\nEND\r\n"
            assert roundtrip(s, b"get a\r\n", b"END\r\n") == b"END\r\n"


def test_disconnect_in_the_middle_of_a_value(server):
    for _ in range(20):
        s = server.connect()
        s.sendall(b"set half 0 0 100000\r\n" + b"v" * 50000)
        s.close()
    with server.connect() as s:
        assert roundtrip(s, b"get half\r\n", b"END\r\n") == b"END\r\n"
    served(server)


def test_connection_churn(server):
    with server.connect() as s:
        before = int(stats(s)["curr_connections"])
    for _ in range(300):
        c = server.connect()
        if random.random() < 0.5:
            c.sendall(b"get x\r\n")
        c.close()
    with server.connect() as s:
        deadline = time.monotonic() + 10
        while int(stats(s)["curr_connections"]) > before:
            assert time.monotonic() < deadline, "closed connections are still counted"
            time.sleep(0.05)
    served(server)


def test_more_connections_than_limit():
    """-c 10: connections past the limit get memcached's `ERROR Too many open connections`
    and are closed (or are refused); an existing client keeps working; when the others go
    away, new clients get in. (memcached itself cannot start with -c 10: it lowers its fd
    limit to -c and then has no fds for its threads.)"""
    with Server("mnemod", "-c", "10") as srv:
        first = srv.connect()
        assert roundtrip(first, b"version\r\n").startswith(b"VERSION")
        kept, rejected = [], 0
        for _ in range(20):
            try:
                c = srv.connect()
            except OSError:
                rejected += 1
                continue
            c.settimeout(5)
            try:
                c.sendall(b"version\r\n")
                reply = c.recv(100)
            except (ConnectionResetError, BrokenPipeError):
                reply = b""
            if reply.startswith(b"VERSION"):
                kept.append(c)
            else:
                assert reply in (b"", b"ERROR Too many open connections\r\n"), reply
                if reply:
                    assert close_or_error(c) == b""  # and then closed
                rejected += 1
                c.close()
        assert len(kept) == 9 and rejected == 11, (len(kept), rejected)
        # The existing clients keep working.
        assert roundtrip(first, b"set a 0 0 1\r\n1\r\nget a\r\n", b"END\r\n") == b"STORED\r\nVALUE a 0 1\r\n1\r\nEND\r\n"
        for c in kept:
            assert roundtrip(c, b"version\r\n").startswith(b"VERSION")
        st = stats(first)
        assert int(st["rejected_connections"]) >= 11 and st["max_connections"] == "10"
        for c in kept:
            c.close()
        # Once the others are gone, new clients get in again (the server notices the closes).
        deadline = time.monotonic() + 10
        ok = 0
        while ok < 9:
            c = srv.connect()
            c.settimeout(5)
            c.sendall(b"version\r\n")
            if c.recv(100).startswith(b"VERSION"):
                kept.append(c)
                ok += 1
            else:
                c.close()
                assert time.monotonic() < deadline, f"only {ok} new clients got in"
                time.sleep(0.05)
        for c in kept:
            c.close()
        first.close()


def test_pipeline_that_never_reads():
    """Pipelined `get k` (a 100-byte value) from a client that never reads: at least 200k of
    them, and on until the server stops reading (kernel buffers hold a few MB): the server must
    apply backpressure instead of buffering replies without bound, and serve another client
    throughout."""
    with Server("mnemod", "-t", "2") as srv:
        with srv.connect() as s:
            assert roundtrip(s, b"set k 0 0 100\r\n" + b"v" * 100 + b"\r\n") == b"STORED\r\n"
        base = srv.rss_kb()
        greedy = srv.connect()
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.setblocking(False)
        batch = b"get k\r\n" * 10_000
        sent, peak, blocked_since = 0, 0, None
        deadline = time.monotonic() + 30
        while sent < 40 * 1024 * 1024 and time.monotonic() < deadline:
            try:
                sent += greedy.send(batch)
                blocked_since = None
            except BlockingIOError:
                now = time.monotonic()
                blocked_since = blocked_since or now
                served(srv)  # the server no longer reads from us: it must serve others
                if sent >= 200_000 * 7 and now - blocked_since > 2:
                    break  # the server has stopped reading from us for good
                time.sleep(0.05)
            peak = max(peak, srv.rss_kb())
        assert sent >= 200_000 * 7, f"only {sent} bytes of requests accepted"
        for _ in range(10):
            served(srv)
            peak = max(peak, srv.rss_kb())
        assert peak < 200_000, f"RSS {peak} kB (started at {base} kB) after {sent // 7} pipelined gets"
        greedy.close()
        served(srv)
        assert srv.alive()


def test_slow_reader_of_large_values():
    """A client fetching a 1 MB value 50 times in one write and reading slowly."""
    with Server("mnemod") as srv:
        with srv.connect() as s:
            v = b"x" * 1_000_000
            assert roundtrip(s, b"set big 0 0 %d\r\n%s\r\n" % (len(v), v)) == b"STORED\r\n"
        slow = srv.connect(timeout=30)
        slow.sendall(b"get big\r\n" * 50)
        got = 0
        one = len(b"VALUE big 0 1000000\r\n") + 1_000_000 + len(b"\r\nEND\r\n")
        while got < 50 * one:
            d = slow.recv(256 * 1024)
            assert d
            got += len(d)
            time.sleep(0.005)
            if got % (5 * one) < 256 * 1024:
                served(srv)
        assert got == 50 * one
        assert srv.rss_kb() < 300_000
        slow.close()


def test_many_clients_at_once(server):
    errors = []

    def client(i):
        try:
            with server.connect(timeout=20) as s:
                for j in range(50):
                    v = b"%d-%d" % (i, j)
                    got = roundtrip(s, b"set c%d 0 0 %d\r\n%s\r\nget c%d\r\n" % (i, len(v), v, i), b"END\r\n")
                    if got != b"STORED\r\nVALUE c%d 0 %d\r\n%s\r\nEND\r\n" % (i, len(v), v):
                        errors.append(got)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]


def test_ms_length_overflowing_an_int_is_answered_at_once(server):
    # memcached refuses it before awaiting any data; mnemod used to wait to swallow 2 GiB.
    with server.connect() as s:
        s.settimeout(5)
        for n in (b"2147483647", b"2147483646", b"6442450943"):
            assert roundtrip(s, b"ms k " + n + b" T0\r\n") == b"CLIENT_ERROR bad command line format\r\n"
        # Nothing swallowed: the next line is a command.
        assert roundtrip(s, b"mn\r\n") == b"MN\r\n"
    served(server)


def test_ms_length_over_item_max_is_swallowed_not_buffered(server):
    base = server.rss_kb()
    with server.connect() as s:
        s.sendall(b"ms k 2147483645\r\n" + b"x" * 100_000)
        served(server)
    assert server.rss_kb() < base + 50_000
    served(server)


def binary(opcode, extras=b"", key=b"", value=b"", bodylen=None):
    body = len(extras) + len(key) + len(value) if bodylen is None else bodylen
    return struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0, body, 0, 0) + extras + key + value


def binary_reply(sock):
    head = b""
    while len(head) < 24:
        d = sock.recv(24 - len(head))
        assert d, "closed before a reply"
        head += d
    _, opcode, _, _, _, status, body = struct.unpack(">BBHBBHI", head[:12])
    data = b""
    while len(data) < body:
        d = sock.recv(body - len(data))
        assert d
        data += d
    return opcode, status, data


def test_mnemod_binary_set_with_a_huge_body_is_answered_at_once(mnemod):
    # Declared body past -I (and past what any buffer could hold): "Too large." before any of
    # it arrives. memcached 1.6.18 answers the same bytes at once only while fresh: once a
    # text `ms` has swallowed a refused value, its binary refusals wait for the body (seen
    # here), so this is no differential case.
    with mnemod.connect() as s:
        s.settimeout(5)
        s.sendall(binary(0x01, extras=bytes(8), key=b"k", bodylen=0xFFFFFFFF))
        assert binary_reply(s) == (0x01, 0x03, b"Too large.")
    served(mnemod)


def test_binary_verbosity_without_extras_is_an_unknown_command(server):
    # memcached 1.6.18 has no binary VERBOSITY: "Unknown command", and the connection goes on.
    with server.connect() as s:
        s.settimeout(5)
        s.sendall(binary(0x1B) + binary(0x0A))
        assert binary_reply(s) == (0x1B, 0x81, b"Unknown command")
        assert binary_reply(s) == (0x0A, 0, b"")


def test_metadump_after_a_get_is_served(server):
    # get writes its reply, so memcached lets a metadump follow it; after `mg` it refuses
    # (tests/tables/hostile.txt). memcached's crawler may still be busy with an earlier one.
    deadline = time.monotonic() + 10
    while True:
        with server.connect() as s:
            s.settimeout(5)
            got = roundtrip(s, b"get nope\r\nlru_crawler metadump all\r\n", b"END\r\nEND\r\n"[-5:])
            while got.count(b"END\r\n") < 2 and not got.endswith((b"request\r\n", b"<CLOSED>")):
                got += roundtrip(s, b"", b"\r\n")
        if b"BUSY" not in got or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # memcached's crawler thread finishing an earlier dump
    assert got.startswith(b"END\r\n") and got.endswith(b"END\r\n") and b"ERROR" not in got, got


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_total_connections_does_not_count_refused_ones(kind):
    with Server(kind, "-c", "64") as srv:
        with srv.connect() as a:
            before = int(stats(a)["total_connections"])
            kept, refused = [], 0
            for _ in range(100):
                c = srv.connect()
                c.settimeout(5)
                c.sendall(b"version\r\n")
                try:
                    reply = c.recv(100)
                except (ConnectionResetError, BrokenPipeError):
                    reply = b""
                if reply.startswith(b"VERSION"):
                    kept.append(c)
                else:
                    assert reply in (b"", b"ERROR Too many open connections\r\n"), reply
                    refused += 1
                    c.close()
            st = stats(a)
            assert refused > 0 and int(st["rejected_connections"]) == refused, (refused, st)
            counted = int(st["total_connections"]) - before
            if kind == "mnemod":
                assert counted == len(kept), (len(kept), refused, st)
            else:
                # memcached's figure is not exact under refusals: one run counted 40 with 39
                # kept and 61 refused (a race in its accept path, not looked into). What a
                # reader of the figure relies on holds: refusals are not counted in bulk.
                assert len(kept) <= counted <= len(kept) + 2, (len(kept), refused, st)
            for c in kept:
                c.close()


def test_mnemod_fget_line_of_many_keys_is_not_closed_at_2048(mnemod):
    # A well-formed fget is mnemo's multi-get: its line may pass 2048 bytes before the newline
    # arrives (a junk `fget ...` line closes there: tests/tables/hostile.txt).
    keys = b"".join(b" user:%05d" % i for i in range(400))  # ~4 kB
    with mnemod.connect() as s:
        s.settimeout(5)
        s.sendall(b"fget nofilter 0" + keys)
        time.sleep(0.2)  # the line's end arrives later, as from a slow client
        assert roundtrip(s, b"\r\n\r\n") == b"CLIENT_ERROR unknown filter\r\n"
    served(mnemod)


def test_server_survives_everything(server):
    """Runs last in this module: the server is still the same process and answers."""
    assert server.alive()
    served(server)
    assert os.path.exists(f"/proc/{server.proc.pid}")
