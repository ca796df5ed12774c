"""mnemod's command line: memcached's flags with memcached's meanings, and the stats that
report them. Where memcached's behaviour is the reference, the test runs on both servers."""
import os
import re
import socket
import struct
import subprocess
import tempfile
import time

import pytest

from conversation import step
from servers import as_1_6_45_stats, MNEMOD, Server, command, roundtrip, served, stats, reported_version

IS_ROOT = os.geteuid() == 0


def run(*args):
    return subprocess.run([MNEMOD, *args], capture_output=True, text=True, timeout=10)


# --- command line ------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(flag):
    r = run(flag)
    assert r.returncode == 0, r.stderr
    for word in ("-p", "-m", "-c", "-t", "-I", "-M", "-C", "-F", "-A", "-s", "--memory-limit", "--max-item-size"):
        assert word in r.stdout, word


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flag(flag):
    """mnemo's own version, and the memcached release it answers for: `mnemod 0.1.0 (memcached 1.6.45)`."""
    r = run(flag)
    assert r.returncode == 0
    assert re.fullmatch(r"mnemod (\d+\.\d+\.\d+\S*) \(memcached 1\.6\.\d+\)\n", r.stdout), r.stdout


def test_version_replies_are_memcacheds():
    """Clients parse the version as a number (Perl's Cache::Memcached::Fast dies on a suffix):
    `version`, `stats` and the binary VERSION opcode must read exactly as memcached's, with the
    release mnemod follows (1.6.45: clients choose features by it) in place of 1.6.18's. mnemo's
    own version is in `stats settings` (mnemo_version) and `mnemod -V`."""
    got = {}
    for kind in ("memcached", "mnemod"):
        with Server(kind) as srv, srv.connect() as s:
            text = roundtrip(s, b"version\r\n")
            stat = stats(s)["version"]
            settings = stats(s, b"settings")
        with Server(kind) as srv, srv.connect() as s:
            # 24-byte binary header: magic 0x80, opcode VERSION (0x0b), no key, extras or body.
            s.sendall(bytes([0x80, 0x0B]) + bytes(22))
            head = b""
            while len(head) < 24:
                head += s.recv(24 - len(head))
            body_len = int.from_bytes(head[8:12], "big")
            body = b""
            while len(body) < body_len:
                body += s.recv(body_len - len(body))
        got[kind] = (text, stat, head[:2], head[6:8], body)
        if kind == "mnemod":
            own = settings["mnemo_version"]
    live = subprocess.run(command("memcached", "-V"), capture_output=True, text=True).stdout.split()[1]
    assert got["memcached"][0] == b"VERSION %s\r\n" % live.encode()
    follows = reported_version("mnemod")
    assert follows == "1.6.45"
    same = [x.replace(live.encode(), follows.encode()) if isinstance(x, bytes) else x.replace(live, follows)
            for x in got["memcached"]]
    # The binary reply's body length (bytes 8..12 are not compared) is the same: equal lengths.
    assert len(live) == len(follows)
    assert list(got["mnemod"]) == same
    assert run("-V").stdout.split()[1] == own


@pytest.mark.parametrize("args", [["--bogus"], ["-Z"], ["-p", "abc"], ["-p", "70000"], ["-m", "0"], ["-m", "x"],
                                  ["-t", "0"], ["-c"], ["-c", "-5"], ["-I", "10"], ["-I", "2g"], ["-R", "abc"]],
                         ids=lambda a: " ".join(a))
def test_bad_flags_exit_2_with_one_line(args):
    r = run(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("port", ["65536", "-2", "x"])
def test_a_bad_udp_port_is_refused_clearly(port):
    """UDP itself is served (tests/test_udp.py); a port out of range stops the start-up."""
    r = run("-U", port)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "udp-port" in r.stderr, r.stderr


def test_port_in_use_fails():
    with Server("mnemod") as srv:
        r = subprocess.run([MNEMOD, "-p", str(srv.port), "-l", "127.0.0.1"], capture_output=True, text=True, timeout=10)
        assert r.returncode != 0 and r.stderr.strip(), r


# Flags from Debian's /etc/memcached.conf and other deployments: a drop-in replacement must at
# least start with them. Each runs only if memcached itself accepts it here.
DEPLOYMENT_FLAGS = [
    ["-u", "root"] if IS_ROOT else ["-u", os.environ.get("USER", "nobody")],
    ["-P", "PIDFILE"],
    ["-f", "1.25"],
    ["-n", "48"],
    ["-o", "modern"],
    ["-r"],
    ["-D", ":"],
    ["-B", "ascii"],
    ["-vv"],
]


@pytest.mark.parametrize("flags", DEPLOYMENT_FLAGS, ids=lambda f: " ".join(f))
def test_memcached_deployment_flags_accepted(flags, tmp_path):
    flags = [str(tmp_path / "pid") if f == "PIDFILE" else f for f in flags]
    try:
        Server("memcached", *flags).stop()
    except RuntimeError as e:
        pytest.skip(f"memcached itself does not start with {flags}: {e}")
    with Server("mnemod", *flags) as srv:
        served(srv)
        if "-P" in flags:
            assert (tmp_path / "pid").read_text().strip() == str(srv.proc.pid)


# --- -M, eviction, -C, -F, -A ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_disable_evictions_reports_out_of_memory(kind):
    with Server(kind, "-m", "2", "-M") as srv, srv.connect() as s:
        value = b"v" * 100_000
        replies = [roundtrip(s, b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(value), value)) for i in range(100)]
        assert replies[0] == b"STORED\r\n"
        assert set(replies) == {b"STORED\r\n", b"SERVER_ERROR out of memory storing object\r\n"}
        stored = replies.count(b"STORED\r\n")
        assert 5 <= stored <= 40, stored
        # Nothing was evicted: every stored key is still there, and deleting makes room.
        first = replies.index(b"SERVER_ERROR out of memory storing object\r\n")
        for i in range(first):
            assert roundtrip(s, b"get k%d\r\n" % i, b"END\r\n").startswith(b"VALUE k%d " % i)
        st = stats(s)
        assert st["evictions"] == "0"
        assert roundtrip(s, b"delete k0\r\n") == b"DELETED\r\n"
        assert roundtrip(s, b"set again 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
        assert roundtrip(s, b"set small 0 0 1\r\nx\r\n") in (b"STORED\r\n", b"SERVER_ERROR out of memory storing object\r\n")


def test_eviction_keeps_serving_and_memory_bounded():
    with Server("mnemod", "-m", "64") as srv, srv.connect() as s:
        value = b"x" * 4000
        for round_ in range(32):  # 128 MB of values into 64 MB
            s.sendall(b"".join(b"set r%d_key%d 0 0 %d noreply\r\n%s\r\n" % (round_, i, len(value), value)
                               for i in range(1000)))
            if round_ % 8 == 7:
                served(srv)
        assert roundtrip(s, b"set last 0 0 1\r\nz\r\n") == b"STORED\r\n"
        assert roundtrip(s, b"get last\r\n", b"END\r\n") == b"VALUE last 0 1\r\nz\r\nEND\r\n"
        # The most recent writes are there; the oldest were evicted.
        assert roundtrip(s, b"get r31_key999\r\n", b"END\r\n").startswith(b"VALUE")
        st = stats(s)
        assert int(st["evictions"]) > 0
        assert int(st["bytes"]) <= 64 * 1024 * 1024
        assert int(st["total_items"]) >= 32_001
        rss = srv.rss_kb()
        assert rss < 110_000, f"RSS {rss} kB with -m 64"


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_disable_cas(kind):
    with Server(kind, "-C") as srv, srv.connect() as s:
        roundtrip(s, b"set k 0 0 1\r\nx\r\n")
        assert roundtrip(s, b"gets k\r\n", b"END\r\n") == b"VALUE k 0 1 0\r\nx\r\nEND\r\n"
        assert stats(s, b"settings")["cas_enabled"] == "no"
        # memcached -C: a cas never matches, not even with the 0 that gets reported.
        assert roundtrip(s, b"cas k 0 0 1 0\r\ny\r\n") == b"EXISTS\r\n"
        assert roundtrip(s, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_disable_flush_all(kind):
    with Server(kind, "-F") as srv, srv.connect() as s:
        roundtrip(s, b"set k 0 0 1\r\nx\r\n")
        assert roundtrip(s, b"flush_all\r\n") == b"CLIENT_ERROR flush_all not allowed\r\n"
        assert roundtrip(s, b"flush_all 10\r\n") == b"CLIENT_ERROR flush_all not allowed\r\n"
        assert roundtrip(s, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
        assert stats(s, b"settings")["flush_enabled"] == "no"


# -X (--disable-dumping) and -W (--disable-watch): each request alone on a fresh connection (a
# dump and a watch refuse to run behind pipelined replies). The same replies from memcached 1.6.38.
REFUSED_BY_X_W = [
    (b"stats cachedump 1 0\r\n", b"CLIENT_ERROR stats cachedump not allowed\r\n"),
    (b"stats cachedump\r\n", b"CLIENT_ERROR stats cachedump not allowed\r\n"),
    (b"stats detail on\r\n", b"CLIENT_ERROR stats detail not allowed\r\n"),
    (b"stats detail dump\r\n", b"CLIENT_ERROR stats detail not allowed\r\n"),
    (b"lru_crawler metadump all\r\n", b"ERROR metadump not allowed\r\n"),
    (b"lru_crawler mgdump all\r\n", b"ERROR key dump not allowed\r\n"),
    (b"watch\r\n", b"CLIENT_ERROR watch commands not allowed\r\n"),
    (b"watch fetchers\r\n", b"CLIENT_ERROR watch commands not allowed\r\n"),
]


@pytest.mark.parametrize("kind", ["mnemod", "memcached-new"])
def test_disable_dumping_and_watch(kind):
    with Server(kind, "-X", "-W") as srv:
        for req, want in REFUSED_BY_X_W:
            with srv.connect() as s:
                s.sendall(b"set k 0 0 1\r\nx\r\n")
                assert roundtrip(s, b"") == b"STORED\r\n"
                assert roundtrip(s, req) == want, req
                assert roundtrip(s, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
        with srv.connect() as s:
            assert stats(s, b"settings")["dump_enabled"] == "no"
        with srv.connect() as s:  # a connection's first byte chooses its protocol
            # The binary detail group is refused as an unknown one (status 1, key not found).
            s.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x10, 6, 0, 0, 0, 6, 0, 0) + b"detail")
            head = s.recv(24)
            assert struct.unpack(">BBHBBHIIQ", head)[5] == 1, head
    with Server(kind) as srv, srv.connect() as s:
        assert stats(s, b"settings")["dump_enabled"] == "yes"
        assert roundtrip(s, b"lru_crawler metadump all\r\n", b"END\r\n").endswith(b"END\r\n")


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_shutdown_needs_A(kind):
    # 1.6.40 (which mnemod follows) made the refusal a SERVER_ERROR; 1.6.18 said ERROR.
    refusal = b"SERVER_ERROR: shutdown not enabled\r\n" if kind == "mnemod" else b"ERROR: shutdown not enabled\r\n"
    with Server(kind) as srv, srv.connect() as s:
        assert roundtrip(s, b"shutdown\r\n") == refusal
        assert srv.alive()
    srv = Server(kind, "-A")
    try:
        other = srv.connect()
        with srv.connect() as s:
            s.sendall(b"shutdown\r\n")
            assert read_all(s) == b""
        assert srv.proc.wait(timeout=10) == 0
        other.settimeout(5)
        assert read_all(other) == b""  # other clients are disconnected too
        with pytest.raises(OSError):
            srv.connect(timeout=1)
    finally:
        srv.stop()


def read_all(sock):
    buf = b""
    while True:
        try:
            d = sock.recv(65536)
        except ConnectionResetError:
            return buf
        if not d:
            return buf
        buf += d


# --- listeners and threads ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_unix_socket(kind):
    path = os.path.join(tempfile.mkdtemp(), "mnemo.sock")
    # -s replaces TCP: no -p/-l.
    argv = command(kind, "-s", path, "-a", "0770", "-U", "0")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            c = socket.socket(socket.AF_UNIX)
            try:
                c.connect(path)
                break
            except OSError:
                c.close()
                assert proc.poll() is None, f"{kind} exited {proc.returncode}"
                assert time.monotonic() < deadline, "no UNIX socket"
                time.sleep(0.01)  # polling for the socket until the deadline
        assert oct(os.stat(path).st_mode & 0o777) == "0o770"
        c.settimeout(5)
        assert roundtrip(c, b"set u 0 0 1\r\nx\r\nget u\r\n", b"END\r\n") == b"STORED\r\nVALUE u 0 1\r\nx\r\nEND\r\n"
        st = stats(c, b"settings")
        assert st["domain_socket"] == path
        c.close()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("threads", ["1", "8"])
def test_threads(threads):
    with Server("mnemod", "-t", threads) as srv:
        socks = [srv.connect() for _ in range(16)]
        for i, s in enumerate(socks):
            assert roundtrip(s, b"set t%d 0 0 1\r\nx\r\n" % i) == b"STORED\r\n"
        for i, s in enumerate(socks):
            assert roundtrip(s, b"get t%d\r\n" % ((i + 1) % 16), b"END\r\n").startswith(b"VALUE")
        assert stats(socks[0])["threads"] == threads
        assert stats(socks[0], b"settings")["num_threads"] == threads
        for s in socks:
            s.close()


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_item_size_limit_flag(kind):
    with Server(kind, "-I", "2m") as srv, srv.connect() as s:
        v = b"b" * 1_500_000
        assert roundtrip(s, b"set big 0 0 %d\r\n%s\r\n" % (len(v), v)) == b"STORED\r\n"
        assert roundtrip(s, b"get big\r\n", b"END\r\n") == b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(v), v)
        v = b"c" * (2 * 1024 * 1024 + 1)
        assert roundtrip(s, b"set big 0 0 %d\r\n%s\r\n" % (len(v), v)) == b"SERVER_ERROR object too large for cache\r\n"
        assert stats(s, b"settings")["item_size_max"] == str(2 * 1024 * 1024)


# --- stats -------------------------------------------------------------------------------------

GENERAL = """pid uptime time version pointer_size rusage_user rusage_system max_connections
curr_connections total_connections rejected_connections cmd_get cmd_set cmd_flush cmd_touch
get_hits get_misses get_expired get_flushed delete_hits delete_misses incr_hits incr_misses
decr_hits decr_misses cas_hits cas_misses cas_badval touch_hits touch_misses bytes_read
bytes_written limit_maxbytes threads bytes curr_items total_items evictions reclaimed
expired_unfetched evicted_unfetched""".split()


def test_stats_fields_present_in_memcached_order():
    # Against 1.6.38, the reference since issue 48, its list as 1.6.45 has it.
    with Server("memcached-new") as mc, Server("mnemod") as mn:
        want = as_1_6_45_stats(stats(mc.connect()))
        got = list(stats(mn.connect()))
    assert set(GENERAL) <= set(got), set(GENERAL) - set(got)
    extra = [f for f in got if f not in want]
    assert not extra, f"fields memcached does not have: {extra}"
    assert got == [f for f in want if f in got], "fields in another order than memcached's"


def test_stats_settings_match_memcached():
    flags = ["-m", "32", "-c", "100", "-t", "2", "-I", "2m", "-C", "-F", "-A", "-R", "7", "-b", "128", "-M", "-v"]
    for fl in ([], flags):
        with Server("memcached-new", *fl) as mc, Server("mnemod", *fl) as mn:
            want, got = stats(mc.connect(), b"settings"), stats(mn.connect(), b"settings")
        # (hash_algorithm names the server's own hash: mnemo's index uses xxh3)
        # (slab_automove_window: 1.6.34's default of 10, checked against 1.6.38 by
        # test_options_new.py)
        # (num_napi_ids: 1.6.40 prints 0 where 1.6.38 prints "(null)")
        own = {"tcpport", "hash_algorithm", "slab_automove_window", "num_napi_ids"}
        diff = {k: (want[k], got[k]) for k in got if k in want and want[k] != got[k] and k not in own}
        assert not diff, f"stats settings differ with flags {fl} (memcached, mnemod): {diff}"
        assert got["tcpport"] == str(mn.port)


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_stats_values_and_counters(kind):
    with Server(kind, "-m", "32", "-c", "77") as srv, srv.connect() as s:
        st = stats(s)
        assert st["limit_maxbytes"] == str(32 << 20)
        assert st["max_connections"] == "77"
        if kind == "memcached":
            roundtrip(s, b"version\r\n")  # (memcached's first stats can precede the probe's close)
        assert st["pid"] == str(srv.proc.pid)
        assert abs(int(st["time"]) - time.time()) < 5
        assert st["pointer_size"] == "64"
        assert st["version"].startswith("1.6.")
        assert int(st["curr_connections"]) >= 1
        assert int(st["total_connections"]) >= 2  # the start-up probe and this one
        assert st["curr_items"] == "0" and st["bytes"] == "0"
        roundtrip(s, b"set a 0 0 2\r\n10\r\n")           # cmd_set 1
        roundtrip(s, b"get a b\r\n", b"END\r\n")          # cmd_get 2: hit a, miss b
        roundtrip(s, b"incr a 1\r\nincr zz 1\r\n", b"NOT_FOUND\r\n")
        roundtrip(s, b"decr a 1\r\n")
        roundtrip(s, b"decr zz 1\r\n")
        roundtrip(s, b"delete zz\r\n")
        roundtrip(s, b"touch a 10\r\n")
        roundtrip(s, b"touch zz 10\r\n")
        roundtrip(s, b"gets a\r\n", b"END\r\n")           # cmd_get 3: hit
        got = roundtrip(s, b"gets a\r\n", b"END\r\n")
        cas = got.split(b"\r\n")[0].split()[-1]
        roundtrip(s, b"cas a 0 0 1 %s\r\n2\r\n" % cas)    # cas_hits, cmd_set 2
        roundtrip(s, b"cas a 0 0 1 %s\r\n3\r\n" % cas)    # cas_badval, cmd_set 3
        roundtrip(s, b"cas zz 0 0 1 1\r\n3\r\n")          # cas_misses, cmd_set 4
        roundtrip(s, b"gat 10 a zz\r\n", b"END\r\n")      # cmd_touch +2, cmd_get? touch_hits +1
        roundtrip(s, b"set b 0 0 1\r\n1\r\n")
        roundtrip(s, b"delete b\r\n")
        roundtrip(s, b"flush_all 100\r\n")
        st = stats(s)
        # (gat/gats count as touches, not gets, in memcached)
        expect = {"cmd_get": 4, "get_hits": 3, "get_misses": 1, "cmd_set": 5, "incr_hits": 1, "incr_misses": 1,
                  "decr_hits": 1, "decr_misses": 1, "delete_hits": 1, "delete_misses": 1, "touch_hits": 2,
                  "touch_misses": 2, "cmd_touch": 4, "cas_hits": 1, "cas_badval": 1, "cas_misses": 1,
                  "curr_items": 1, "total_items": 3, "cmd_flush": 1, "get_flushed": 0, "evictions": 0}
        wrong = {k: (v, int(st[k])) for k, v in expect.items() if int(st[k]) != v}
        assert not wrong, f"(expected, got): {wrong}"
        assert int(st["bytes_read"]) > 100 and int(st["bytes_written"]) > 100
        assert int(st["bytes"]) > 0


def test_stats_counters_match_memcached():
    """The same conversation on both servers leaves the same counters."""
    # (no incr/decr hits: memcached sometimes rewrites the item in place and sometimes makes
    # a new one, which counts in total_items)
    script = [b"set a 0 0 1\r\n1\r\n", b"get a b a\r\n", b"gets a\r\n", b"incr no 1\r\n", b"decr no 1\r\n", b"touch a 100\r\n", b"touch no 1\r\n", b"delete no\r\n",
              b"gat 100 a no\r\n", b"gats 100 a\r\n", b"cas no 0 0 1 1\r\nx\r\n", b"add a 0 0 1\r\nx\r\n",
              b"replace no 0 0 1\r\nx\r\n", b"append a 0 0 1\r\n1\r\n", b"prepend no 0 0 1\r\nx\r\n",
              b"set big 0 0 2000000\r\n" + b"x" * 2000000 + b"\r\n", b"set e 0 -1 1\r\nx\r\n", b"get e\r\n",
              b"delete a\r\n", b"get a\r\n", b"flush_all 0\r\n", b"get x y z\r\n"]
    # get_expired is left out: memcached's LRU maintainer thread may reclaim the already
    # expired "e" before the get reaches it (seen once in CI: memcached 0, mnemod 1); the get
    # is a miss either way and get_misses is compared.
    counters = ["cmd_get", "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses",
                "get_flushed", "delete_hits", "delete_misses", "incr_hits", "incr_misses", "decr_hits",
                "decr_misses", "cas_hits", "cas_misses", "cas_badval", "touch_hits", "touch_misses",
                "curr_items", "total_items", "evictions"]
    res = {}
    for kind in ("memcached", "mnemod"):
        with Server(kind) as srv, srv.connect() as s:
            for req in script:
                assert not step(s, req).endswith(b">")  # no <TIMEOUT> or <CLOSED>
            st = stats(s)
            res[kind] = {c: st[c] for c in counters}
    diff = {c: (res["memcached"][c], res["mnemod"][c]) for c in counters if res["memcached"][c] != res["mnemod"][c]}
    assert not diff, f"(memcached, mnemod): {diff}"


def test_stats_subcommands():
    with Server("mnemod") as srv, srv.connect() as s:
        roundtrip(s, b"set a 0 0 5\r\nhello\r\n")
        settings = stats(s, b"settings")
        for f in ("maxbytes", "maxconns", "tcpport", "verbosity", "num_threads", "cas_enabled", "item_size_max",
                  "evictions", "flush_enabled"):
            assert f in settings, f
        assert settings["maxbytes"] == str(64 << 20) and settings["item_size_max"] == str(1 << 20)
        items = stats(s, b"items")
        assert items.get("items:1:number") == "1", items
        slabs = stats(s, b"slabs")
        assert "active_slabs" in slabs and "total_malloced" in slabs
        assert roundtrip(s, b"stats reset\r\n") == b"RESET\r\n"
        st = stats(s)
        assert st["cmd_get"] == "0" and st["cmd_set"] == "0" and st["get_hits"] == "0"
        assert st["curr_items"] == "1" and int(st["bytes"]) > 0  # state, not counters
        assert int(st["total_connections"]) >= 0
        # memcached 1.6.40: a subcommand is named by a prefix of it, in memcached's order
        # (`s` is `settings`, before mnemo's own `snapshot`, which only its whole name names).
        for short in (b"s", b"se", b"setting"):
            assert list(stats(s, short)) == list(settings), short
        assert "snapshot_restored_items" in stats(s, b"snapshot")


# --- time --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_expiry_and_delayed_flush(kind):
    with Server(kind) as srv, srv.connect() as s:
        roundtrip(s, b"set short 0 2 1\r\nx\r\nset long 0 100 1\r\ny\r\n")
        roundtrip(s, b"touch long 100\r\n")
        assert roundtrip(s, b"get short\r\n", b"END\r\n").startswith(b"VALUE")
        t0 = time.monotonic()
        deadline = t0 + 6
        while roundtrip(s, b"get short\r\n", b"END\r\n") != b"END\r\n":
            assert time.monotonic() < deadline, "an item with exptime 2 never expired"
            time.sleep(0.05)
        assert time.monotonic() - t0 > 0.5, "expired far too early"
        assert roundtrip(s, b"get long\r\n", b"END\r\n").startswith(b"VALUE")
        # flush_all N takes effect at the server's clock + N - 1: with 3, at least a second
        # away, so the get right after it still finds the item whatever the tick.
        assert roundtrip(s, b"flush_all 3\r\n") == b"OK\r\n"
        assert roundtrip(s, b"get long\r\n", b"END\r\n").startswith(b"VALUE")
        deadline = time.monotonic() + 8
        while roundtrip(s, b"get long\r\n", b"END\r\n") != b"END\r\n":
            assert time.monotonic() < deadline, "flush_all 3 never took effect"
            time.sleep(0.05)
        # New items live again (memcached also drops items set in the second the flush lands).
        deadline = time.monotonic() + 3
        while not roundtrip(s, b"set after 0 0 1\r\nz\r\nget after\r\n", b"END\r\n").endswith(b"z\r\nEND\r\n"):
            assert time.monotonic() < deadline, "items set after a delayed flush do not stay"
            time.sleep(0.1)
