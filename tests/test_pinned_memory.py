"""Memory a hostile client can pin outside -m: clients that send big multi-gets and never read,
then many idle connections. mnemod must grow no more than memcached does in the same run, stay
under its documented worst case, and keep serving a fresh client meanwhile.

The documented worst case (docs/compatibility.md, "Safety"): a connection holds at most its unsent
output up to the multi-get pause (256 KiB) plus one value, and its read buffer.
"""
import socket
import time

import pytest

from servers import Server, roundtrip, served

VALUE = 100 * 1024
ITEMS = 1500          # 150 MB of values in -m 256
HOGS = 20             # connections that ask for all of them and never read
IDLE = 900            # connections that just sit there (below -c 1024 with the rest)
GET_PAUSE = 256 * 1024


def load(server):
    with server.connect(timeout=30) as s:
        v = b"v" * VALUE
        batch = b"".join(b"set big:%d 0 0 %d noreply\r\n%s\r\n" % (i, VALUE, v) for i in range(ITEMS))
        s.sendall(batch)
        assert roundtrip(s, b"get big:%d\r\n" % (ITEMS - 1), b"END\r\n").startswith(b"VALUE")


def pin(server):
    """Growth of RSS (KiB) once the hogs and idle connections are in place; the sockets."""
    base = server.rss_kb()
    socks = []
    req = b"get " + b" ".join(b"big:%d" % i for i in range(ITEMS)) + b"\r\n"
    for _ in range(HOGS):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(req)
        socks.append(s)
    for _ in range(IDLE):
        socks.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
    # The servers fill what they can; wait until RSS stops growing (a bound, not a sleep for
    # the server to start: both are serving already).
    peak, still = server.rss_kb(), 0
    deadline = time.monotonic() + 20
    while still < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = server.rss_kb()
        still = still + 1 if now <= peak else 0
        peak = max(peak, now)
    return peak - base, socks


def test_never_reading_clients_pin_no_more_than_in_memcached():
    growth = {}
    for kind in ("memcached", "mnemod"):
        with Server(kind, "-m", "256", "-c", "1024", "-t", "4") as srv:
            load(srv)
            growth[kind], socks = pin(srv)
            # Everyone else is still served, promptly.
            t = time.monotonic()
            served(srv)
            assert time.monotonic() - t < 1.0
            for s in socks:
                s.close()
    # The documented bound per connection, for every connection of this test.
    per_conn_kib = (GET_PAUSE + VALUE + 64 * 1024) // 1024
    assert growth["mnemod"] < HOGS * per_conn_kib + IDLE * 64, growth
    print(f"RSS growth KiB: {growth}")
    assert growth["mnemod"] <= growth["memcached"], growth
