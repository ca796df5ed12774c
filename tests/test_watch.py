"""`watch`: memcached's log streams, against mnemod and memcached 1.6.38 in the same run.

Each test runs its conversation on both servers and compares the watchers' lines field by
field after normalising what differs by nature (ts, gid, the client's descriptor and port).
Waits are loops with a deadline (docs/testing.md), never sleeps.
"""
import re
import socket
import time

import pytest

from servers import Server, roundtrip, stats

KINDS = ["mnemod", "memcached-new"]
DEADLINE = 30.0


def normalise(line):
    line = re.sub(r"^ts=\d+\.\d+ gid=\d+ ", "ts=T gid=G ", line)
    line = re.sub(r" cfd=\d+", " cfd=C", line)
    return re.sub(r" rport=\d+", " rport=P", line)


class Watcher:
    """A connection that sent `watch`, read line by line."""

    def line(self):
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self.buf:
            assert time.monotonic() < deadline, f"no line: {self.buf!r}"
            d = self.sock.recv(65536)
            assert d, f"closed: {self.buf!r}"
            self.buf += d
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().rstrip("\r")

    def lines(self, n):
        return [self.line() for _ in range(n)]


def watch(server, streams):
    w = Watcher.__new__(Watcher)
    w.sock = server.connect(timeout=DEADLINE)
    w.buf = b""
    w.sock.sendall(b"watch" + (b" " + streams if streams else b"") + b"\r\n")
    assert w.line() == "OK"
    return w


def wait_stat(server, name, want):
    deadline = time.monotonic() + DEADLINE
    with server.connect() as s:
        while True:
            got = stats(s)[name]
            if got == str(want):
                return
            assert time.monotonic() < deadline, f"{name} is {got}, want {want}"
            time.sleep(0.05)  # polling a stat the server's logger thread updates


def both(scenario):
    """The scenario's result on mnemod and on memcached 1.6.38."""
    out = {}
    for kind in KINDS:
        with Server(kind) as srv:
            out[kind] = scenario(srv)
    return out


def test_item_streams_match_memcached_line_by_line():
    def scenario(srv):
        w = watch(srv, b"fetchers mutations deletions")
        with srv.connect() as c:
            assert roundtrip(c, b"set k 0 0 5\r\nhello\r\n") == b"STORED\r\n"
            assert roundtrip(c, b"get k nokey\r\n", b"END\r\n").endswith(b"END\r\n")
            assert roundtrip(c, b"add k 0 0 1\r\nx\r\n") == b"NOT_STORED\r\n"
            assert roundtrip(c, b"append k 0 0 2\r\nab\r\n") == b"STORED\r\n"
            assert roundtrip(c, b"ms n,k 3 T0\r\nabc\r\n") == b"HD\r\n"
            assert roundtrip(c, b"mg n,k v\r\n").startswith(b"VA 3")
            assert roundtrip(c, b"delete k\r\n") == b"DELETED\r\n"
            assert roundtrip(c, b"md n,k\r\n") == b"HD\r\n"
            assert roundtrip(c, b"md gone\r\n") == b"NF\r\n"
            assert roundtrip(c, b"set done 0 0 1\r\nx\r\n") == b"STORED\r\n"
        got = []
        while not got or "key=done status=stored" not in got[-1]:
            got.append(normalise(w.line()))
        return got

    r = both(scenario)
    assert r["mnemod"] == r["memcached-new"], "\n".join(
        f"{a!r:90} {b!r}" for a, b in zip(r["mnemod"], r["memcached-new"]))
    assert "ts=T gid=G type=item_store key=n%2Ck status=stored cmd=set ttl=0 clsid=1 cfd=C size=3" in r["mnemod"]
    assert "ts=T gid=G type=deleted key=n%2Ck cmd=md clsid=1 size=3" in r["mnemod"]


def test_connevents_name_the_peer_and_the_reason():
    def scenario(srv):
        w = watch(srv, b"connevents")
        got = []
        for req in (b"version\r\nquit\r\n", b"GET / HTTP/1.1\r\n"):
            c = srv.connect()
            port = c.getsockname()[1]
            c.sendall(req)
            deadline = time.monotonic() + DEADLINE
            while c.recv(4096):
                assert time.monotonic() < deadline
            c.close()
            # Other connections' events (the harness's start-up probe) may come in between.
            mine = []
            while len(mine) < 2:
                line = w.line()
                if f" rport={port} " in line:
                    mine.append(normalise(line))
            got += mine
        return got

    r = both(scenario)
    assert r["mnemod"] == r["memcached-new"], r
    assert r["mnemod"][1].endswith("transport=tcp reason=normal cfd=C")
    assert r["mnemod"][3].endswith("transport=tcp reason=error cfd=C")


def test_replies_to_bad_and_pipelined_watch_commands():
    def scenario(srv):
        with srv.connect() as c:
            bad = roundtrip(c, b"watch fetchers bogus\r\n")
            piped = roundtrip(c, b"set a 0 0 1\r\nx\r\nwatch\r\n", b"watch\r\n")
        return bad, piped

    r = both(scenario)
    assert r["mnemod"] == r["memcached-new"] == (b"ERROR\r\n", b"STORED\r\nERROR cannot pipeline other commands before watch\r\n")


def test_several_watchers_each_get_their_streams():
    def scenario(srv):
        ws = {s: watch(srv, s) for s in (b"", b"mutations", b"fetchers mutations")}
        wait_stat(srv, "log_watchers", 3)
        with srv.connect() as c:
            assert roundtrip(c, b"set w 0 0 1\r\nx\r\n") == b"STORED\r\n"
        got = {s.decode(): [normalise(l) for l in w.lines(2 if s == b"fetchers mutations" else 1)] for s, w in ws.items()}
        for w in ws.values():
            w.sock.close()
        wait_stat(srv, "log_watchers", 0)
        return got

    r = both(scenario)
    assert r["mnemod"] == r["memcached-new"], r
    assert r["mnemod"][""] == ["ts=T gid=G type=item_get key=w status=not_found clsid=0 cfd=C size=0"]


def test_a_watcher_that_never_reads_loses_lines_and_slows_nobody():
    def scenario(srv):
        w = socket.socket()
        w.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        w.settimeout(DEADLINE)
        w.connect(("127.0.0.1", srv.port))
        w.sendall(b"watch fetchers\r\n")
        spacer = b"X" * 200
        with srv.connect(timeout=DEADLINE) as c:
            # 20000 misses, 8 MB of log lines: far beyond the watcher's socket and buffer. The
            # client is served throughout (a blocked server would trip the socket timeout).
            for i in range(0, 20000, 100):
                c.sendall(b"".join(b"get k%d%s\r\n" % (j, spacer) for j in range(i, i + 100)))
                got = b""
                while got.count(b"END\r\n") < 100:
                    d = c.recv(65536)
                    assert d, "closed"
                    got += d
            deadline = time.monotonic() + DEADLINE
            while int(stats(c)["log_watcher_skipped"]) == 0:
                assert time.monotonic() < deadline, "no line was skipped"
                time.sleep(0.05)  # polling the logger's counters
            # Now read: the lost lines are reported before the next line that fits.
            buf = b""
            while b"skipped=" not in buf:
                assert time.monotonic() < deadline, "no skipped= line"
                c.sendall(b"get after\r\n")
                assert roundtrip(c, b"", b"END\r\n").endswith(b"END\r\n")
                buf = buf[-64:] + w.recv(1 << 20)
            tail = buf[buf.index(b"skipped="):]
            while tail.count(b"\n") < 2:
                tail += w.recv(1 << 20)
            first, second = tail.split(b"\n")[:2]
        w.close()
        return re.fullmatch(rb"skipped=\d+", first) is not None, re.match(rb"ts=\d+\.\d+ gid=\d+ type=item_get ", second) is not None

    r = both(scenario)
    assert r["mnemod"] == r["memcached-new"] == (True, True), r


if __name__ == "__main__":
    pytest.main([__file__, "-q"])


EVICTION = re.compile(r"ts=\d+\.\d+ gid=\d+ type=eviction key=(\S+) fetch=(yes|no) ttl=(-?\d+) "
                      r"la=\d+ clsid=\d+ size=(\d+)")


@pytest.mark.parametrize("kind", KINDS)
def test_evictions_name_each_evicted_item(kind):
    """`watch evictions` while a small cache overflows: one line per eviction `stats` counts
    (or counted as lost: `skipped=N` in the stream, memcached's `log_worker_dropped`), in
    memcached's format, and each key it names is gone (a watcher never hears of an item that
    is still served). The watcher is read while the cache fills, as a tool would."""
    import urllib.parse
    import threading
    with Server(kind, "-m", "8") as srv:
        w = watch(srv, b"evictions")
        lines, stop = [], threading.Event()

        def read():
            w.sock.settimeout(0.2)
            while not stop.is_set():
                try:
                    lines.append(w.line())
                except TimeoutError:
                    continue

        reader = threading.Thread(target=read)
        reader.start()
        value = b"v" * 1000
        try:
            with srv.connect() as c:
                n = 20_000  # 20 MB into 8
                batch = b"".join(b"set ev:%d 0 %d %d noreply\r\n%s\r\n" % (i, 0 if i % 2 else 500, len(value), value)
                                 for i in range(n))
                assert roundtrip(c, batch + b"mn\r\n") == b"MN\r\n"
                evictions = int(stats(c)["evictions"])
                assert evictions > n // 3, evictions
                dropped = int(stats(c)["log_worker_dropped"])

                def accounted():
                    skipped = sum(int(l.split("=")[1]) for l in list(lines) if l.startswith("skipped="))
                    return len(lines) + skipped + dropped - sum(1 for l in list(lines) if l.startswith("skipped="))

                deadline = time.monotonic() + DEADLINE
                while accounted() < evictions and time.monotonic() < deadline:
                    time.sleep(0.05)  # polling the reader thread's count
                stop.set()
                reader.join()
                assert accounted() == evictions, (len(lines), dropped, evictions, lines[-3:])
                # Lines may be lost to a slow reader on either server (counted above); some come.
                lines = [l for l in lines if not l.startswith("skipped=")]
                assert lines, (dropped, evictions)
                named = []
                for line in lines:
                    m = EVICTION.fullmatch(line)
                    assert m, line
                    key, fetch, ttl, size = m.groups()
                    assert fetch == "no" and int(size) == len(value), line
                    key = urllib.parse.unquote_to_bytes(key)
                    i = int(key.split(b":")[1])
                    assert (ttl == "-1") == (i % 2 == 1) and (ttl == "-1" or 0 < int(ttl) <= 500), line
                    named.append(key)
                assert len(set(named)) == len(named), "an item evicted twice"
                got = roundtrip(c, b"get " + b" ".join(named[:2000]) + b"\r\n", b"END\r\n")
                assert got == b"END\r\n", got[:200]
        finally:
            stop.set()
            reader.join()
