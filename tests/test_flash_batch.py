"""Binary GETQ/GETKQ, meta `mg ... q` and single-key text `get` pipelines over flashed values: the gets pipelined after
one whose value must be read from the disk join its flash I/O job, so their records are read
together (one io_uring submission, as a text multi-get's are) instead of one job, one wake-up
and one pread per request. Every reply stays right and in request order, RAM hits and misses
mixed in, under both event loops; a request that is not a get (a set) stops the gathering, so
a later get sees the new value.

The cold file's pages are dropped from the page cache (test_flash.py `flashed_server`), so the
first flashed get of a pipeline is deferred to the flash I/O thread; the thread's read system
calls (`syscr`) show whether the records were read together (a few at most) or one pread each
(one per flashed get)."""
import struct

import pytest

from servers import roundtrip, stats
from test_flash import (bin_replies, disk_path, flashed_server, io_uring_available, key,  # noqa: F401
                        make_value, recv_exactly, text_hit, thread_syscr)

GET, GETQ, GETK, GETKQ, NOOP, SET = 0x00, 0x09, 0x0C, 0x0D, 0x0A, 0x01

LOOPS = ["uring", "epoll"]
# Flashed keys this far apart are that many values (of 4 KB) apart in the file: further than the
# kernel's readahead (128 KB), so that reading one does not bring the next into the page cache
# (which the worker would then serve itself, gathered or not).
FAR = 60


def bin_get(op, k, opaque):
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(k), 0, 0, 0, len(k), opaque, 0) + k


def bin_set(k, v, opaque):
    extras = struct.pack(">II", 0, 0)
    body = len(extras) + len(k) + len(v)
    return struct.pack(">BBHBBHIIQ", 0x80, SET, len(k), len(extras), 0, 0, body, opaque, 0) + extras + k + v


def counters(srv):
    """The counters, read on a connection of their own (a binary connection cannot send
    `stats` as text)."""
    with srv.connect() as t:
        st = stats(t)
    return {
        "objects_read": int(st["extstore_objects_read"]),
        "get_extstore": int(st["get_extstore"]),
        "cmd_get": int(st["cmd_get"]),
        "get_hits": int(st["get_hits"]),
        "get_misses": int(st["get_misses"]),
        "syscr": thread_syscr(srv.proc.pid, "mnemo-flash-io"),
    }


def delta(a, b):
    return {k: b[k] - a[k] for k in a}


def assert_read_together(d, flashed):
    """`flashed` records read from the disk by the flash I/O thread, together: with io_uring a
    few read system calls at most (one pread each when every get was a job of its own, the
    behaviour before gathering); without it a pread each."""
    assert d["objects_read"] == flashed, d
    if io_uring_available():
        assert d["syscr"] <= 5, f"{d['syscr']} read system calls for {flashed} flashed gets"
    else:
        assert d["syscr"] >= flashed, d


@pytest.mark.parametrize("loop", LOOPS)
def test_a_pipeline_of_50_getq_over_flashed_keys_reads_them_together_in_order(loop, disk_path):
    srv = flashed_server(disk_path, "cold", "--io-loop", loop)
    try:
        with srv.connect() as s:
            # 50 GET-family requests: flashed keys (the first thousand), RAM keys (the last
            # hundred) and misses, quiet and not, with and without the key; then a NOOP.
            plan = []
            for i in range(50):
                op = [GETQ, GETKQ, GETQ, GETK, GET][i % 5]
                if i % 7 == 3:
                    k, want = b"nope%d" % i, None
                elif i % 4 == 1:
                    k, want = key(7910 + i), make_value(key(7910 + i))
                else:
                    k, want = key(FAR * i), make_value(key(FAR * i))
                plan.append((op, k, want))
            flashed = sum(1 for _, k, w in plan if w is not None and int(k.split(b":")[1]) < 7900)
            misses = sum(1 for _, _, w in plan if w is None)
            before = counters(srv)
            s.sendall(b"".join(bin_get(op, k, 5000 + i) for i, (op, k, _) in enumerate(plan)) + bin_get(NOOP, b"", 9999))
            expect = [(i, op, k, w) for i, (op, k, w) in enumerate(plan) if w is not None or op in (GET, GETK)]
            got = bin_replies(s, len(expect) + 1)
            for (i, op, k, w), (gop, status, opaque, gk, gv) in zip(expect, got):
                assert (gop, opaque) == (op, 5000 + i), (i, gop, opaque)
                echoed = k if op in (GETK, GETKQ) else b""
                if w is None:
                    assert status == 1 and (gk == k if op == GETK else gv == b"Not found"), (i, status, gk, gv)
                else:
                    assert (status, gk, gv) == (0, echoed, w), i
            assert got[-1][:3] == (NOOP, 0, 9999), "the NOOP's reply comes last"
            d = delta(before, counters(srv))
            assert (d["cmd_get"], d["get_hits"], d["get_misses"]) == (50, 50 - misses, misses), d
            assert d["get_extstore"] == flashed, d
            assert_read_together(d, flashed)
            print(f"{loop}: 50 GETQ-family gets ({flashed} flashed, cold): {d['objects_read']} records read, "
                  f"{d['syscr']} read system calls on the flash I/O thread")
    finally:
        srv.stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_pipeline_of_50_mg_q_over_flashed_keys_reads_them_together_in_order(loop, disk_path):
    srv = flashed_server(disk_path, "cold", "--io-loop", loop)
    try:
        with srv.connect() as s:
            reqs, want, flashed, misses = [], [], 0, 0
            for i in range(50):
                if i % 9 == 4:
                    k = b"nope%d" % i
                    reqs.append(b"mg %s v q k\r\n" % k)  # a quiet miss: no reply
                    misses += 1
                    continue
                k = key(7910 + i) if i % 4 == 1 else key(FAR * i + 7)
                flashed += k != key(7910 + i)
                v = make_value(k)
                if i % 3 == 0:
                    reqs.append(b"mg %s v q k O%d\r\n" % (k, i))
                    want.append(b"VA %d k%s O%d\r\n%s\r\n" % (len(v), k, i, v))
                else:
                    reqs.append(b"mg %s s v f q\r\n" % k)
                    want.append(b"VA %d s%d f0\r\n%s\r\n" % (len(v), len(v), v))
            reqs.append(b"mg nope-loud v\r\nmn\r\n")
            want.append(b"EN\r\nMN\r\n")
            misses += 1
            before = counters(srv)
            s.sendall(b"".join(reqs))
            w = b"".join(want)
            assert recv_exactly(s, len(w)) == w
            d = delta(before, counters(srv))
            assert (d["cmd_get"], d["get_misses"]) == (51, misses), d
            assert d["get_extstore"] == flashed, d
            assert_read_together(d, flashed)
            print(f"{loop}: 50 mg q ({flashed} flashed, cold): {d['objects_read']} records read, "
                  f"{d['syscr']} read system calls on the flash I/O thread")
            # h: each flashed value read above counts as fetched.
            assert roundtrip(s, b"mg %s h\r\n" % key(7)) == b"HD h1\r\n"
    finally:
        srv.stop()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_pipeline_of_50_single_key_text_gets_reads_them_together_in_order(loop, disk_path):
    """Issue 49: a pipeline of single-key `get`s and `gets` is one flash job, as mg and GETQ
    pipelines are (it was one job, and one pread, per key). A multi-key get ends the gathering:
    it runs after the job, its flashed keys in a job of their own."""
    srv = flashed_server(disk_path, "cold", "--io-loop", loop)
    try:
        with srv.connect() as s:
            plan, flashed, misses = [], 0, 0  # (command, key, whether it is a hit)
            for i in range(50):
                if i % 9 == 4:
                    plan.append((b"get", b"nope%d" % i, False))
                    misses += 1
                    continue
                k = key(7910 + i) if i % 4 == 1 else key(FAR * i + 3)
                flashed += k != key(7910 + i)
                plan.append((b"gets" if i % 3 == 0 else b"get", k, True))
            before = counters(srv)
            s.sendall(b"".join(b"%s %s\r\n" % (cmd, k) for cmd, k, _ in plan))
            for cmd, k, hit in plan:
                if not hit:
                    assert recv_exactly(s, 5) == b"END\r\n", k
                    continue
                v = make_value(k)
                head = recv_line(s).split()
                # gets: a CAS, whatever it is.
                assert head[:4] == [b"VALUE", k, b"0", b"%d" % len(v)], head
                assert len(head) == (5 if cmd == b"gets" else 4), head
                assert recv_exactly(s, len(v) + 7) == v + b"\r\nEND\r\n", k
            d = delta(before, counters(srv))
            assert (d["cmd_get"], d["get_misses"]) == (50, misses), d
            assert d["get_extstore"] == flashed, d
            assert_read_together(d, flashed)
            print(f"{loop}: 50 single-key get/gets ({flashed} flashed, cold): {d['objects_read']} records "
                  f"read, {d['syscr']} read system calls on the flash I/O thread")
            # A multi-key get stops the gathering; a set after it is seen by the get after it.
            a, b, c = key(FAR * 60 + 5), key(FAR * 61 + 5), key(FAR * 62 + 5)
            s.sendall(b"get %s\r\nget %s %s\r\nset %s 0 0 3\r\nnew\r\nget %s\r\n" % (a, b, c, a, a))
            w = (text_hit(a) + b"END\r\n" + text_hit(b) + text_hit(c) + b"END\r\nSTORED\r\n"
                 + b"VALUE %s 0 3\r\nnew\r\nEND\r\n" % a)
            assert recv_exactly(s, len(w)) == w
    finally:
        srv.stop()


def recv_line(s):
    line = b""
    while not line.endswith(b"\r\n"):
        line += recv_exactly(s, 1)
    return line


@pytest.mark.parametrize("loop", LOOPS)
def test_a_set_in_the_middle_of_a_pipeline_stops_the_gathering(loop, disk_path):
    """The set runs on the worker after the job: the get after it answers the new value, the
    gets before it the old one, in both protocols."""
    srv = flashed_server(disk_path, "cold", "--io-loop", loop)
    try:
        with srv.connect() as s:
            a, b, c = key(10), key(11), key(12)
            s.sendall(bin_get(GETQ, a, 1) + bin_get(GETKQ, b, 2) + bin_set(b, b"new-b", 3)
                      + bin_get(GETKQ, b, 4) + bin_get(GETQ, c, 5) + bin_get(NOOP, b"", 6))
            got = bin_replies(s, 6)
            assert [(g[0], g[1], g[2]) for g in got] == [(GETQ, 0, 1), (GETKQ, 0, 2), (SET, 0, 3), (GETKQ, 0, 4), (GETQ, 0, 5), (NOOP, 0, 6)]
            assert [g[4] for g in got] == [make_value(a), make_value(b), b"", b"new-b", make_value(c), b""]
        with srv.connect() as s:
            d, e = key(20), key(21)
            s.sendall(b"mg %s v q\r\nmg %s v q\r\nms %s 5\r\nnew-e\r\nmg %s v q\r\nmn\r\n" % (d, e, e, e))
            want = (b"VA 4096\r\n%s\r\nVA 4096\r\n%s\r\nHD\r\nVA 5\r\nnew-e\r\nMN\r\n" % (make_value(d), make_value(e)))
            assert recv_exactly(s, len(want)) == want
    finally:
        srv.stop()


def test_gathering_stops_at_the_request_budget(disk_path):
    """-R 4: a job takes the deferred get and at most 4 more requests; the rest are parsed at
    later turns (more jobs), and every reply is still right and in order."""
    srv = flashed_server(disk_path, "cold", "-R", "4")
    try:
        with srv.connect() as s:
            ks = [key(FAR * i + 13) for i in range(30)]
            before = counters(srv)
            s.sendall(b"".join(bin_get(GETKQ, k, i) for i, k in enumerate(ks)) + bin_get(NOOP, b"", 99))
            got = bin_replies(s, 31)
            assert [(g[2], g[3], g[4]) for g in got[:-1]] == [(i, k, make_value(k)) for i, k in enumerate(ks)]
            assert got[-1][2] == 99
            d = delta(before, counters(srv))
            assert d["objects_read"] == 30, d
            print(f"-R 4: 30 GETKQ (cold): {d['syscr']} read system calls on the flash I/O thread")
            if io_uring_available():
                # Six jobs of up to five keys: a few reads each at most, not one per key.
                assert d["syscr"] <= 12, d
    finally:
        srv.stop()
