"""Byte-exact conversation tables run against mnemod and the real memcached in the same run.

Each line of tests/tables/*.txt is `name | request` with the request written as a Python bytes
literal body (\\r\\n escapes). The request is sent on a fresh connection to each server,
followed by the meta no-op `mn` as a sentinel; the reply is everything before `MN\\r\\n` (or up
to the close). Cases marked `[nosentinel]` read until the server goes quiet instead (used when
memcached swallows the rest of the input). Replies must be identical, except for what cannot be
(the version string, CAS numbers — compared as "same/different" — and stats values).
"""
import codecs
import pathlib
import re
import socket

import pytest

from servers import Server

TABLES = pathlib.Path(__file__).parent / "tables"


def load(name):
    cases = []
    for n, raw in enumerate((TABLES / name).read_text().splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        title, _, req = raw.partition(" | ")
        cases.append(pytest.param(codecs.escape_decode(req.encode())[0], "[nosentinel]" in title, id=f"{n}:{title.strip()}"))
    return cases


def converse(server, request, sentinel=True):
    s = server.connect(timeout=0.4 if not sentinel else 5)
    try:
        s.sendall(request + (b"mn\r\n" if sentinel else b""))
        # The request may hold its own `mn`s: wait for all of them plus the sentinel.
        expect = request.count(b"mn\r\n") + 1
        buf = b""
        while True:
            if sentinel and buf.endswith(b"MN\r\n") and buf.count(b"MN\r\n") >= expect:
                return buf[:-4]
            try:
                d = s.recv(65536)
            except socket.timeout:
                if sentinel:
                    return buf + b"<TIMEOUT>"
                return buf
            if not d:
                return buf + b"<CLOSED>"
            buf += d
    finally:
        s.close()


def normalize(reply):
    reply = re.sub(rb"VERSION \S+", b"VERSION <v>", reply)
    reply = re.sub(rb"STAT (\S+) [^\r]*", rb"STAT \1 <n>", reply)
    seen = {}

    def cas(m):
        seen.setdefault(m.group(2), b"<cas%d>" % (len(seen) + 1))
        return m.group(1) + seen[m.group(2)]

    reply = re.sub(rb"(VALUE \S+ \d+ \d+ )(\d+)", cas, reply)
    reply = re.sub(rb"( c)(\d+)", cas, reply)
    reply = re.sub(rb"(cas=)(\d+)", cas, reply)
    return reply


@pytest.fixture(scope="module")
def servers():
    pair = (Server("memcached"), Server("mnemod"))
    yield pair
    for s in pair:
        s.stop()


@pytest.mark.parametrize("request_bytes,nosentinel", load("text.txt") + load("meta.txt"))
def test_conversation(servers, request_bytes, nosentinel):
    mc, mn = servers
    # Each case starts from an empty cache on both servers.
    for s in (mc, mn):
        assert converse(s, b"flush_all\r\n") == b"OK\r\n"
    want = normalize(converse(mc, request_bytes, not nosentinel))
    got = normalize(converse(mn, request_bytes, not nosentinel))
    assert got == want
