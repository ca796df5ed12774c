"""Large values (over 32 KiB: mnemod reads them straight into their item and sends them from it)
against the real memcached in the same run: the same bytes in, the same bytes out, and the same
errors for a bad data chunk, with nothing stored; and, through pymemcache, replies left unread
while their item is overwritten keep the value they were answered with (mnemod lends the item's
pages to the socket: docs/operations.md, "Large values and zero-copy sends")."""
import socket

import pytest
from pymemcache.client.base import Client

from servers import Server, roundtrip

SIZES = [32 * 1024 + 1, 100_000, 900_000]


@pytest.fixture(scope="module")
def both():
    # --zero-copy on: every large reply lends its item's pages. The default (auto) lends or
    # copies as its probes find faster, and could leave the lending untested here.
    with Server("mnemod", "-m", "64", "--zero-copy", "on") as m, Server("memcached", "-m", "64") as c:
        yield {"mnemod": m, "memcached": c}


def conversation(server, size):
    value = bytes((i * 7 + size) % 251 for i in range(size))
    s = server.connect()
    out = []
    # A good set sent in pieces, read back by get and by mg.
    req = b"set big 5 0 %d\r\n" % size + value + b"\r\n"
    for i in range(0, len(req), 7919):
        s.sendall(req[i:i + 7919])
    out.append(roundtrip(s, b"", b"\r\n"))
    out.append(roundtrip(s, b"get big\r\n", b"END\r\n"))
    out.append(roundtrip(s, b"mg big v f s\r\n", value + b"\r\n"))
    # A bad data chunk: the error, the connection still in step, the old value kept.
    out.append(roundtrip(s, b"set big 0 0 %d\r\n" % size + value + b"XY" + b"get nothing\r\n",
                         b"END\r\n"))
    out.append(roundtrip(s, b"get big\r\n", b"END\r\n"))
    # noreply, then a value that replaces it.
    s.sendall(b"set big 9 0 %d noreply\r\n" % size + value[::-1] + b"\r\n")
    out.append(roundtrip(s, b"get big\r\n", b"END\r\n"))
    s.close()
    return out, value


@pytest.mark.parametrize("size", SIZES)
def test_large_values_as_memcached(both, size):
    got = {name: conversation(srv, size) for name, srv in both.items()}
    (mine, value), (theirs, _) = got["mnemod"], got["memcached"]
    assert mine == theirs
    # And what both said is what a user relies on:
    assert mine[0] == b"STORED\r\n"
    assert mine[1] == b"VALUE big 5 %d\r\n" % size + value + b"\r\nEND\r\n"
    assert mine[4] == mine[1]
    assert mine[5] == b"VALUE big 9 %d\r\n" % size + value[::-1] + b"\r\nEND\r\n"


def test_unread_replies_keep_their_value_through_overwrites(both):
    n, gets = 500_000, 16
    for name, srv in both.items():
        writer = Client(("127.0.0.1", srv.port), connect_timeout=5, timeout=10)
        assert writer.set("zk", b"1" * n, noreply=False)
        reader = srv.connect(timeout=10)
        # 8 MB of replies asked for, none read yet: the first ones sit in the sockets.
        reader.sendall(b"get zk\r\n" * gets)
        reader.recv(1, socket.MSG_PEEK)
        # zk's old buffer is freed, then (on mnemod) reused for zj's bytes.
        for key, byte in (("zk", b"2"), ("zj", b"3"), ("zi", b"4")):
            assert writer.set(key, byte * n, noreply=False)
        head = b"VALUE zk 0 %d\r\n" % n
        want = len(head) + n + len(b"\r\nEND\r\n")
        buf, seen = b"", []
        for _ in range(gets):
            while len(buf) < want:
                chunk = reader.recv(1 << 20)
                assert chunk, f"{name} closed the connection"
                buf += chunk
            reply, buf = buf[:want], buf[want:]
            assert reply.startswith(head) and reply.endswith(b"\r\nEND\r\n"), name
            body = reply[len(head):len(head) + n]
            assert body in (b"1" * n, b"2" * n), f"{name}: a reply changed after it was answered"
            seen.append(body[:1])
        assert seen == sorted(seen) and seen[0] == b"1", (name, seen)
        # A real client's multi-get of several large values and a small one.
        assert writer.set("zs", b"hi", noreply=False)
        assert writer.get_many(["zk", "zs", "zj", "zi"]) == {
            "zk": b"2" * n, "zs": b"hi", "zj": b"3" * n, "zi": b"4" * n}
        reader.close()
        writer.close()
