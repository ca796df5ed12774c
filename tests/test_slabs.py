"""memcached's slab-class commands on a server without slab classes, beside the real memcached in
the same run: `stats cachedump` listing items (and libmemcached's `memcdump`, which is built on
it), and what `slabs automove` leaves in `stats settings`. Their replies to bad arguments and
empty classes are in tests/tables/slabs.txt.

memcached's cachedump lists one LRU (COLD); with its LRU maintainer on, a new item sits in HOT
until the maintainer moves it, so memcached is started with `-o no_lru_maintainer` (every item
goes straight to COLD) and mnemod with the same flags (it accepts and ignores -o).
"""
import re
import shutil
import subprocess
import time

import pytest

from servers import Server, roundtrip, stats

FLAT = ["-o", "no_lru_maintainer"]
ITEM = re.compile(rb"ITEM (\S+) \[(\d+) b; (\d+) s\]")
# Absolute expiry times (more than 30 days away from 0) come back unchanged from both servers.
ABS_EXP = int(time.time()) + 3600
# key, flags, exptime, value. Small enough for memcached's first slab class (96-byte chunks),
# the only one `stats cachedump 1` lists there; mnemo has only that class.
ITEMS = [
    (b"plain", 0, 0, b"hello"),
    (b"flagged", 7, 0, b"xyz"),
    (b"expiring", 0, ABS_EXP, b"v" * 9),
    ("caf\u00e9:\u00fcber".encode(), 4294967295, ABS_EXP + 5, b""),
]
# Items in memcached's larger classes, for memcdump (which dumps every class `stats items` names).
BIG_ITEMS = [(b"k" * 250, 1, 0, b"x" * 100), (b"large", 0, ABS_EXP, b"y" * 70000)]


def cachedump(sock, cls=b"1", limit=b"0"):
    return roundtrip(sock, b"stats cachedump " + cls + b" " + limit + b"\r\n", b"END\r\n")


def parse(reply):
    """{key: (size, exp)} from a cachedump reply; every line must be an ITEM line but END."""
    lines = reply.split(b"\r\n")
    assert lines[-2:] == [b"END", b""], reply[-100:]
    out = {}
    for line in lines[:-2]:
        m = ITEM.fullmatch(line)
        assert m, line
        assert m.group(1) not in out, f"{m.group(1)!r} listed twice"
        out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


def filled(kind, items):
    srv = Server(kind, *FLAT)
    with srv.connect() as s:
        for key, flags, exp, value in items:
            req = b"set %s %d %d %d\r\n%s\r\n" % (key, flags, exp, len(value), value)
            assert roundtrip(s, req) == b"STORED\r\n"
    return srv


@pytest.fixture(scope="module")
def both():
    mc, mn = filled("memcached", ITEMS), filled("mnemod", ITEMS)
    yield mc, mn
    mc.stop()
    mn.stop()


def test_cachedump_lists_the_same_keys_and_expiry_times(both):
    got = {}
    for srv in both:
        with srv.connect() as s:
            got[srv.kind] = {k: exp for k, (_, exp) in parse(cachedump(s)).items()}
    want = {key: exp for key, _, exp, _ in ITEMS}
    assert got["memcached"] == want
    assert got["mnemod"] == got["memcached"]


def test_cachedump_sizes_are_value_lengths(both):
    got = {}
    for srv in both:
        with srv.connect() as s:
            got[srv.kind] = {k: size for k, (size, _) in parse(cachedump(s)).items()}
    assert got["memcached"] == {key: len(value) for key, _, _, value in ITEMS}
    assert got["mnemod"] == got["memcached"]


def test_cachedump_limit_and_other_classes(both):
    for srv in both:
        with srv.connect() as s:
            everything = parse(cachedump(s))
            for limit in (1, 3, len(ITEMS), len(ITEMS) + 10):
                part = parse(cachedump(s, limit=b"%d" % limit))
                assert len(part) == min(limit, len(ITEMS)), (srv.kind, limit)
                assert part.items() <= everything.items(), srv.kind
            for cls in (b"0", b"2", b"63"):
                assert parse(cachedump(s, cls)) == {}, (srv.kind, cls)


def test_cachedump_stops_at_memcacheds_2mb_bound():
    """A limit of 0 lists what fits in memcached's 2 MB reply buffer with END\\r\\n and a NUL."""
    n = 42000  # 36-byte keys: ~54-byte lines, 2.2 MB in all; still memcached's class 1
    for kind in ("memcached", "mnemod"):
        with Server(kind, *FLAT) as srv, srv.connect() as s:
            batch = b"".join(b"set %s%06d 0 0 1 noreply\r\nx\r\n" % (b"k" * 30, i) for i in range(n))
            assert roundtrip(s, batch + b"version\r\n").startswith(b"VERSION ")
            reply = cachedump(s)
            items = parse(reply)
            assert 0 < len(items) < n, (kind, len(items))
            # Every line has the same length here, so the cut is exact: one more would not fit.
            lines = reply[:-len(b"END\r\n")]
            width = len(lines) // len(items)
            assert width * len(items) == len(lines), kind
            assert len(lines) + 6 <= 2 * 1024 * 1024 < len(lines) + width + 6, (kind, len(items), width)


@pytest.mark.skipif(not shutil.which("memcdump"), reason="libmemcached-tools' memcdump is not installed")
def test_memcdump_dumps_the_keys():
    """libmemcached's memcdump walks `stats items`, then `stats cachedump <class> 0` for each."""
    out = {}
    for kind in ("memcached", "mnemod"):
        srv = filled(kind, ITEMS + BIG_ITEMS)
        try:
            r = subprocess.run(["memcdump", f"--servers=127.0.0.1:{srv.port}"], capture_output=True, timeout=30)
        finally:
            srv.stop()
        assert r.returncode == 0, (kind, r.stderr)
        out[kind] = sorted(r.stdout.splitlines())
    # (memcdump cuts a key at its first non-ASCII byte: "caf" for the UTF-8 one, on both.)
    keys = [re.match(rb"[\x00-\x7f]*", key).group() for key, _, _, _ in ITEMS + BIG_ITEMS]
    assert out["memcached"] == sorted(keys)
    assert out["mnemod"] == out["memcached"]


def test_slabs_automove_shows_in_stats_settings():
    fields = ("slab_reassign", "slab_automove", "slab_automove_ratio")
    seen = {}
    for kind in ("memcached", "mnemod"):
        with Server(kind) as srv, srv.connect() as s:
            steps = []
            for req in (b"", b"slabs automove 2\r\n", b"slabs automove 0 noreply\r\n",
                        b"slabs automove ratio 0.255\r\n", b"slabs automove 3\r\n", b"slabs automove ratio x\r\n",
                        b"slabs reassign 1 2\r\n"):
                if req:
                    s.sendall(req)
                st = stats(s, b"settings")
                steps.append({f: st.get(f) for f in fields})
            seen[kind] = steps
    assert seen["memcached"][0] == {"slab_reassign": "yes", "slab_automove": "1", "slab_automove_ratio": "0.80"}
    assert seen["memcached"][1]["slab_automove"] == "2"
    assert seen["mnemod"] == seen["memcached"]


def test_reassign_from_any_class_finding_none_is_badclass():
    # memcached 1.6.45's answer when `-1` ("any class") finds no class with a spare page. Not
    # in tests/tables/slabs.txt: 1.6.38 answers OK there and then crashes (a race).
    with Server("mnemod") as srv, srv.connect() as s:
        assert roundtrip(s, b"slabs reassign -1 2\r\n") == b"BADCLASS invalid src or dst class id\r\n"
        assert roundtrip(s, b"version\r\n").startswith(b"VERSION ")
