"""memcached's and libmemcached's own tools against mnemod and memcached in the same run:
libmemcached-tools (memccp, memccat, memcexist, memctouch, memcping, memcrm, memcdump,
memcstat, memcflush, memcslap) and memcached's memcached-tool. Each must behave the same on
both: exit codes, values, and the fields they show (mnemod may show more, never fewer).

Known differences, in docs/compatibility.md: memcdump lists every live item (memcached only those that
left its HOT LRU); dumps come in the store's walk order; item sizes and CAS values are mnemo's.
"""
import os
import re
import subprocess

import pytest

from servers import as_1_6_45_stats, Server, roundtrip

MEMCACHED_TOOL = "/usr/share/memcached/scripts/memcached-tool"
ITEMS = {b"a": (5, b"abc"), b"b": (0, b"hello"), b"c": (1, b"xy"), b"user:7": (0, b"x" * 3000)}


@pytest.fixture(params=["mnemod", "memcached"])
def server(request):
    with Server(request.param) as s:
        with s.connect() as c:
            for k, (flags, v) in ITEMS.items():
                assert roundtrip(c, b"set %s %d 0 %d\r\n%s\r\n" % (k, flags, len(v), v)) == b"STORED\r\n"
        yield s


def run(*argv, input=None):
    return subprocess.run(argv, capture_output=True, input=input, timeout=60)


def servers(s):
    return f"--servers=127.0.0.1:{s.port}"


def test_libmemcached_tools_read_write_and_remove(server, tmp_path):
    f = tmp_path / "copied.txt"
    f.write_bytes(b"file content\n")
    assert run("memccp", servers(server), str(f)).returncode == 0
    r = run("memccat", servers(server), "copied.txt", "a", "b")
    assert (r.returncode, r.stdout) == (0, b"file content\n\nabc\nhello\n")
    assert run("memcexist", servers(server), "a").returncode == 0
    assert run("memcexist", servers(server), "missing").returncode == 1
    assert run("memctouch", servers(server), "--expire=100", "a").returncode == 0
    assert run("memctouch", servers(server), "--expire=100", "missing").returncode != 0
    assert run("memcping", servers(server)).returncode == 0
    assert run("memcrm", servers(server), "b").returncode == 0
    assert run("memccat", servers(server), "b").returncode == 1
    # memcdump lists keys (memcached only once items leave HOT: a subset of ours).
    r = run("memcdump", servers(server))
    assert r.returncode == 0
    assert set(r.stdout.split()) <= {b"a", b"c", b"user:7", b"copied.txt"}
    assert run("memcflush", servers(server)).returncode == 0
    assert run("memccat", servers(server), "a").returncode == 1


def memcstat_fields(server, *args):
    r = run("memcstat", servers(server), *args)
    assert r.returncode == 0, r.stderr
    return [m.group(1) for m in re.finditer(rb"^\t(\S+):", r.stdout, re.M)]


def test_memcstat_shows_memcached_s_fields():
    fields = {}
    for kind in ("memcached-new", "mnemod"):
        with Server(kind) as s:
            fields[kind] = (memcstat_fields(s), memcstat_fields(s, "--args=settings"))
    # The general stats: the same list in the same order (1.6.38's as 1.6.45 has it); settings:
    # memcached's, then mnemo's own.
    want = [n.encode() for n in as_1_6_45_stats(n.decode() for n in fields["memcached-new"][0])]
    assert fields["mnemod"][0] == want
    assert fields["mnemod"][1][: len(fields["memcached-new"][1])] == fields["memcached-new"][1]


def test_memcslap_runs_clean(server):
    for extra in ([], ["--binary"]):
        r = run("memcslap", servers(server), "--concurrency=2", "--execute-number=500", *extra)
        assert r.returncode == 0, r.stderr
        assert b"Time total" in r.stdout


def tool(server, *args):
    r = run("perl", MEMCACHED_TOOL, f"127.0.0.1:{server.port}", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


def test_memcached_tool_dump_gives_every_item_back(server):
    out = tool(server, "dump")
    # "add KEY FLAGS EXP LEN\r\nVALUE\r\n" per item, in walk order.
    got = {}
    for m in re.finditer(r"^add (\S+) (\d+) (\d+) (\d+)\r?\n", out, re.M):
        n = int(m.group(4))
        got[m.group(1).encode()] = (int(m.group(2)), out[m.end(): m.end() + n].encode())
    assert got == ITEMS


def test_memcached_tool_keys_display_stats_settings(server):
    keys = set(re.findall(r"^key=(\S+) ", tool(server, "keys"), re.M))
    # metadump URL-encodes keys, on both servers.
    assert keys == {"a", "b", "c", "user%3A7"}
    display = tool(server, "display").splitlines()
    assert display[0].split() == ["#", "Item_Size", "Max_age", "Pages", "Count", "Full?", "Evicted", "Evict_Time", "OOM"]
    # One class (mnemo reports its segments as class 1), holding the four items.
    rows = [l.split() for l in display[1:]]
    assert sum(int(r[4]) for r in rows) == 4
    for mode, must in (("stats", ["curr_items", "get_hits", "bytes", "limit_maxbytes"]), ("settings", ["maxbytes", "item_size_max"])):
        shown = set(re.findall(r"^ *(\S+) +\S+\r?$", tool(server, mode), re.M))
        assert set(must) <= shown, (mode, shown)
