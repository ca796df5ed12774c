"""Multi-gets over flashed values pause as multi-gets over RAM values do (issue 47, item 4).

A get whose values must be read from the disk is answered by a flash I/O job (flashio.rs). That
job once built the whole reply before anything was sent: 20 clients asking for 600 x 100 KB
each and never reading took mnemod from 23 MiB to 1,202 MiB. Now a job stops at the multi-get
pause (256 KiB of reply and located records) and the connection goes on from there once its
output drains, for a text get as for a binary or meta pipeline.

Checked here, under both event loops: never-reading clients pin a bounded amount; a client
that reads gets every reply byte for byte, in order, through many pauses (text get and gets,
mg pipelines, binary GETQ/GETKQ pipelines, RAM hits, flashed values and misses mixed); and
the counters (cmd_get, get_hits, get_misses, get_extstore) count each key once, as the same
request answered in one pass from the page cache counts them.

The flash file's pages are dropped from the page cache before each cold pass (test_flash.py
`drop_cache`), so the flashed reads really go to the flash I/O threads; ext_recache_rate=0
keeps every flashed item on flash while it is read, so the cold and warm passes read the same.
"""
import os
import shutil
import socket
import struct
import tempfile
import time

import pytest

from servers import ROOT, Server, roundtrip, stats
from test_flash import (bin_replies, drop_cache, flash_args, recv_exactly, set_many, thread_cpu_ticks,
                        value, wait_flash_writes)

BIG = 100 * 1024
N_BIG = 600      # 60 MB of 100 KB values in -m 16: all but the newest few on flash
N_RAM = 60       # small values set last: in RAM (under ext_item_size, never flashed)
HOGS = 5
GET, GETQ, GETK, GETKQ, NOOP = 0x00, 0x09, 0x0C, 0x0D, 0x0A


def fkey(i):
    return b"fk:%d" % i


def rkey(i):
    return b"rk:%d" % i


def val(k):
    kind, n = k.split(b":")
    return value(int(n), BIG if kind == b"fk" else 300, salt=kind)


# The test command runs the suites once per event loop (MNEMO_IO_LOOP); run alone, both.
LOOPS = [os.environ["MNEMO_IO_LOOP"]] if os.environ.get("MNEMO_IO_LOOP") else ["uring", "epoll"]


@pytest.fixture(scope="module", params=LOOPS)
def flashed(request):
    """mnemod on event loop `param` with N_BIG values of 100 KB (fk:*, the first 400 surely on
    flash) and N_RAM small ones (rk:*, in RAM)."""
    d = tempfile.mkdtemp(prefix="flash-pause-", dir=ROOT / "target")
    srv = Server("mnemod", "-t", "2", "-m", "16", "--io-loop", request.param,
                 *flash_args(f"{d}/flash", "256m", "ext_recache_rate=0"))
    srv.flash_file = f"{d}/flash"
    try:
        with srv.connect(timeout=30) as s:
            set_many(s, [fkey(i) for i in range(N_BIG)], val, batch=20)
            set_many(s, [rkey(i) for i in range(N_RAM)], val)
            wait_flash_writes(s)
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)


def counters(srv):
    with srv.connect() as t:
        st = stats(t)
    return {k: int(st[k]) for k in ("cmd_get", "get_hits", "get_misses", "get_extstore")}


def delta(a, b):
    return {k: b[k] - a[k] for k in a}


def wait_still(srv, probe, quiet=1.5, limit=40):
    """The highest RSS (KiB) seen until RSS and the read counters have not moved for `quiet`
    seconds (the server has done what it can for the clients that do not read)."""
    peak, last, since = srv.rss_kb(), None, time.monotonic()
    until = time.monotonic() + limit
    while time.monotonic() < until:
        st = stats(probe)
        now = (srv.rss_kb(), st["get_extstore"], st["cmd_get"])
        peak = max(peak, now[0])
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.1)
    return peak


def test_never_reading_clients_of_flashed_values_pin_a_bounded_amount(flashed):
    """5 clients send `get` of 600 x 100 KB values (nearly all flashed, cold) and never read:
    RSS grows at most 64 MiB (it grew 60 MB per client when a job built its whole reply)."""
    srv = flashed
    drop_cache(srv.flash_file)
    req = b"get " + b" ".join(fkey(i) for i in range(N_BIG)) + b"\r\n"
    with srv.connect() as probe:
        before = stats(probe)
        base = srv.rss_kb()
        hogs = []
        for _ in range(HOGS):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(req)
            hogs.append(s)
        peak = wait_still(srv, probe)
        after = stats(probe)
        # Everyone else is still served meanwhile, flashed values too.
        k = fkey(N_BIG - 200)
        assert roundtrip(probe, b"get %s\r\n" % k, b"END\r\n") == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, BIG, val(k))
    try:
        growth = peak - base
        read = int(after["get_extstore"]) - int(before["get_extstore"])
        print(f"RSS {base // 1024} MiB -> {peak // 1024} MiB (+{growth} KiB) with {HOGS} never-reading "
              f"clients of {N_BIG} x 100 KB flashed values; {read} flashed values read")
        assert thread_cpu_ticks(srv.proc.pid, "mnemo-flash-io")[1] >= 1, "the reads went to the flash I/O pool"
        assert read >= HOGS, "each client had some flashed values read"
        assert growth <= 64 * 1024, f"RSS grew {growth} KiB"
    finally:
        for s in hogs:
            s.close()


def mixed(lo, n):
    """n keys: flashed ones from fk:lo on, RAM hits and misses among them."""
    keys = []
    for j in range(n):
        if j % 7 == 3:
            keys.append(b"nope:%d" % j)
        elif j % 5 == 2:
            keys.append(rkey(j % N_RAM))
        else:
            keys.append(fkey(lo + j))
    return keys


def expected_counts(keys):
    misses = sum(1 for k in keys if k.startswith(b"nope"))
    flashed = sum(1 for k in keys if k.startswith(b"fk"))
    return {"cmd_get": len(keys), "get_hits": len(keys) - misses, "get_misses": misses, "get_extstore": flashed}


def cold_then_warm(srv, req, read):
    """The reply (`read` from the socket) and the counters of `req` with the flash file's pages
    dropped (the flashed reads go to the flash I/O pool, pausing), then again with them in the
    page cache (served by the worker, one pass)."""
    passes = []
    for cold in (True, False):
        if cold:
            drop_cache(srv.flash_file)
        with srv.connect(timeout=30) as s:
            before = counters(srv)
            s.sendall(req)
            got = read(s)
            d = delta(before, counters(srv))
        passes.append((got, d))
    return passes


def until_end(s):
    return roundtrip(s, b"", b"END\r\n")


def hit(k):
    return b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(val(k)), val(k))


def text_reply(keys):
    return b"".join(hit(k) for k in keys if not k.startswith(b"nope")) + b"END\r\n"


def plus(a, b):
    return {k: a[k] + b[k] for k in a}


def test_text_get_and_gets_across_many_pauses_are_exact_and_counted_once(flashed):
    keys = mixed(0, 60)  # 36 flashed values of 100 KB: a dozen pauses
    want = text_reply(keys) + text_reply(keys[:7])
    req = b"get " + b" ".join(keys) + b"\r\nget " + b" ".join(keys[:7]) + b"\r\n"
    (cold, dc), (warm, dw) = cold_then_warm(flashed, req, lambda s: recv_exactly(s, len(want)))
    assert cold == want
    assert warm == want
    assert dc == plus(expected_counts(keys), expected_counts(keys[:7])), dc
    assert dc == dw
    # gets: the same values with their CAS (read until END: the CAS digits are not known).
    keys = mixed(100, 40)
    req = b"gets " + b" ".join(keys) + b"\r\n"
    (cold, dc), (warm, dw) = cold_then_warm(flashed, req, until_end)
    assert cold == warm, "the cold gets differs from the one-pass gets"
    pos = 0
    for k in (k for k in keys if not k.startswith(b"nope")):
        eol = cold.index(b"\r\n", pos)
        head = cold[pos:eol].split()
        assert head[:4] == [b"VALUE", k, b"0", b"%d" % len(val(k))] and len(head) == 5, head
        assert cold[eol + 2:eol + 2 + len(val(k)) + 2] == val(k) + b"\r\n", k
        pos = eol + 2 + len(val(k)) + 2
    assert cold[pos:] == b"END\r\n"
    assert dc == expected_counts(keys) == dw, (dc, dw)


def test_mg_pipelines_across_many_pauses_are_exact_and_counted_once(flashed):
    """Quiet and loud mg, mn in the middle and at the end: replies in request order, EN only
    for the loud misses, each MN where it was asked."""
    keys = mixed(200, 70)
    reqs, want = [], []
    for j, k in enumerate(keys):
        v = val(k)
        if j % 3 == 0:
            reqs.append(b"mg %s v f O%d\r\n" % (k, j))
            want.append(b"EN O%d\r\n" % j if k.startswith(b"nope") else b"VA %d f0 O%d\r\n%s\r\n" % (len(v), j, v))
        else:
            reqs.append(b"mg %s v q k\r\n" % k)
            want.append(b"" if k.startswith(b"nope") else b"VA %d k%s\r\n%s\r\n" % (len(v), k, v))
        if j % 25 == 24:
            reqs.append(b"mn\r\n")
            want.append(b"MN\r\n")
    reqs.append(b"mn\r\n")
    want.append(b"MN\r\n")
    w = b"".join(want)
    (cold, dc), (warm, dw) = cold_then_warm(flashed, b"".join(reqs), lambda s: recv_exactly(s, len(w)))
    assert cold == w
    assert warm == w
    assert dc == expected_counts(keys) == dw, (dc, dw)


def bin_get(op, k, opaque):
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(k), 0, 0, 0, len(k), opaque, 0) + k


def test_binary_getq_getkq_pipelines_across_many_pauses_are_exact_and_counted_once(flashed):
    """GETQ, GETKQ, GETK and GET, NOOPs in the middle and at the end: a quiet miss answers
    nothing, every other reply comes in request order."""
    keys = mixed(300, 90)  # more than a job gathers (64): the pipeline spans jobs and pauses
    plan = []
    for j, k in enumerate(keys):
        plan.append(([GETQ, GETKQ, GETQ, GETK, GET][j % 5], k, 7000 + j))
        if j % 30 == 29:
            plan.append((NOOP, b"", 9000 + j))
    plan.append((NOOP, b"", 9999))
    expect = [(op, k, o) for op, k, o in plan if op in (GET, GETK, NOOP) or not k.startswith(b"nope")]
    req = b"".join(bin_get(op, k, o) for op, k, o in plan)
    (cold, dc), (warm, dw) = cold_then_warm(flashed, req, lambda s: bin_replies(s, len(expect)))
    for got in (cold, warm):
        for (op, k, o), (gop, status, opaque, gk, gv) in zip(expect, got):
            assert (gop, opaque) == (op, o), (o, gop, opaque)
            if op == NOOP:
                assert status == 0
            elif k.startswith(b"nope"):
                assert status == 1 and (gk == k if op == GETK else gv == b"Not found"), (o, status, gk)
            else:
                assert (status, gk, gv) == (0, k if op in (GETK, GETKQ) else b"", val(k)), o
    assert dc == expected_counts(keys) == dw, (dc, dw)
