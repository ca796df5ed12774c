"""`mnemod --metrics`: the `/metrics` page read with the Prometheus client library's own text
parser, checked against the names and labels of the Prometheus memcached_exporter (so its
dashboards work unchanged) and against the commands the test runs."""
import os
import pathlib
import re
import signal
import socket
import subprocess
import tempfile
import time

from prometheus_client.parser import text_string_to_metric_families

from servers import MNEMOD, START_DEADLINE, Server, free_port, roundtrip, stats, reported_version

# Every family the exporter emits from a default memcached 1.6's `stats`, `stats settings`,
# `stats items` and `stats slabs` once it holds an item (its name as the parser reports it:
# a counter's without `_total`).
EXPORTER_FAMILIES = {
    "memcached_up", "memcached_uptime_seconds", "memcached_time_seconds", "memcached_version",
    "memcached_process_user_cpu_seconds", "memcached_process_system_cpu_seconds",
    "memcached_read_bytes", "memcached_written_bytes", "memcached_current_connections",
    "memcached_max_connections", "memcached_connections", "memcached_connections_yielded",
    "memcached_connections_rejected",
    "memcached_connections_listener_disabled", "memcached_accepting_connections",
    "memcached_current_bytes", "memcached_limit_bytes", "memcached_malloced_bytes",
    "memcached_commands", "memcached_current_items", "memcached_items", "memcached_items_evicted",
    "memcached_items_reclaimed", "memcached_item_too_large", "memcached_item_no_memory",
    "memcached_lru_crawler_starts", "memcached_lru_crawler_items_checked",
    "memcached_lru_crawler_reclaimed", "memcached_direct_reclaims",
    "memcached_lru_crawler_moves_to_cold", "memcached_lru_crawler_moves_to_warm",
    "memcached_lru_crawler_moves_within_lru", "memcached_lru_crawler_enabled",
    "memcached_lru_crawler_sleep", "memcached_lru_crawler_to_crawl",
    "memcached_lru_crawler_maintainer_thread", "memcached_lru_crawler_hot_percent",
    "memcached_lru_crawler_warm_percent", "memcached_lru_crawler_hot_max_factor",
    "memcached_lru_crawler_warm_max_factor",
    "memcached_slab_current_items", "memcached_slab_items_age_seconds",
    "memcached_slab_mem_requested_bytes", "memcached_slab_items_evicted",
    "memcached_slab_items_evicted_nonzero", "memcached_slab_items_evicted_time_seconds",
    "memcached_slab_items_outofmemory", "memcached_slab_items_tailrepairs",
    "memcached_slab_items_reclaimed", "memcached_slab_items_expired_unfetched",
    "memcached_slab_items_evicted_unfetched", "memcached_slab_items_crawler_reclaimed",
    "memcached_slab_hot_items", "memcached_slab_warm_items", "memcached_slab_cold_items",
    "memcached_slab_hot_age_seconds", "memcached_slab_warm_age_seconds",
    "memcached_slab_items_moves_to_cold", "memcached_slab_items_moves_to_warm",
    "memcached_slab_items_moves_within_lru", "memcached_slab_lru_hits",
    "memcached_slab_chunk_size_bytes", "memcached_slab_chunks_per_page",
    "memcached_slab_current_pages", "memcached_slab_current_chunks", "memcached_slab_chunks_used",
    "memcached_slab_chunks_free", "memcached_slab_chunks_free_end", "memcached_slab_commands",
}
# The exporter's command/status pairs.
EXPORTER_COMMANDS = {(c, s) for c in ("get", "delete", "incr", "decr", "cas", "touch") for s in ("hit", "miss")} | {
    ("cas", "badval"), ("flush", "hit"), ("set", "hit")}


class Metrics(Server):
    """mnemod with `--metrics PORT`, started once that port accepts too."""

    def __init__(self, *extra):
        self.mport = free_port()
        super().__init__("mnemod", "--metrics", str(self.mport), *extra)
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.mport), timeout=1) as s:
                    if s.getsockname() != s.getpeername():  # not a loopback self-connect
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the metrics port never accepted")
            time.sleep(0.01)  # polling a connect until the deadline

    def http(self, request):
        """Send a raw request; the whole reply, read until the server closes."""
        with socket.create_connection(("127.0.0.1", self.mport), timeout=10) as s:
            s.sendall(request)
            reply = b""
            while True:
                d = s.recv(65536)
                if not d:
                    return reply
                reply += d

    def scrape(self):
        """{(sample name, frozenset of labels): value} and {family name: type}."""
        reply = self.http(b"GET /metrics HTTP/1.1\r\nHost: mnemo\r\n\r\n")
        head, _, body = reply.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 200 OK", lines
        assert "Content-Type: text/plain; version=0.0.4" in lines, lines
        assert f"Content-Length: {len(body)}" in lines, lines
        values, types = {}, {}
        for fam in text_string_to_metric_families(body.decode()):
            assert fam.name not in types, f"{fam.name} twice"
            types[fam.name] = fam.type
            for s in fam.samples:
                values[(s.name, frozenset(s.labels.items()))] = s.value
        return values, types

    def memcache(self, req, end=b"\r\n"):
        with self.connect() as s:
            return roundtrip(s, req, end)


def v(values, name, **labels):
    return values[(name, frozenset(labels.items()))]


def cmd(values, command, status):
    return v(values, "memcached_commands_total", command=command, status=status)


def test_exporter_names_and_types():
    with Metrics() as srv:
        srv.memcache(b"set a 0 0 1\r\nx\r\n")
        values, types = srv.scrape()
    missing = EXPORTER_FAMILIES - set(types)
    assert not missing, missing
    commands = {(dict(k[1])["command"], dict(k[1])["status"]) for k in values if k[0] == "memcached_commands_total"}
    assert commands == EXPORTER_COMMANDS
    for name, typ in types.items():
        if name.startswith("memcached_"):
            assert typ in ("counter", "gauge"), (name, typ)
    assert types["memcached_commands"] == "counter" and types["memcached_current_items"] == "gauge"
    assert v(values, "memcached_up") == 1
    assert v(values, "memcached_version", version=reported_version("mnemod")) == 1
    assert abs(v(values, "memcached_time_seconds") - time.time()) < 5
    # A counter without `_total`, as the exporter names it: the parser adds the suffix.
    assert v(values, "memcached_uptime_seconds_total") >= 0
    assert v(values, "memcached_max_connections") == 1024
    assert v(values, "memcached_limit_bytes") == 64 << 20
    assert v(values, "memcached_slab_lru_hits_total", slab="1", lru="hot") == 0


def test_values_move_as_commands_run():
    n = 23
    with Metrics("-m", "16") as srv:
        before, _ = srv.scrape()
        srv.memcache(b"".join(b"set k%d 0 0 2\r\nab\r\n" % i for i in range(n)) + b"get k0\r\n", b"END\r\n")
        srv.memcache(b"get nope\r\n", b"END\r\n")
        after, _ = srv.scrape()

        def grew(command, status):
            return cmd(after, command, status) - cmd(before, command, status)

        assert grew("set", "hit") == n
        assert grew("get", "miss") == 1 and grew("get", "hit") == 1
        assert v(after, "memcached_current_items") == n
        assert v(after, "memcached_items_total") == n
        assert v(after, "memcached_slab_current_items", slab="1") == n
        assert v(after, "memcached_slab_commands_total", slab="1", command="set", status="hit") == n
        assert v(after, "memcached_limit_bytes") == 16 << 20
        assert v(after, "memcached_current_bytes") > 0
        assert v(after, "memcached_read_bytes_total") > v(before, "memcached_read_bytes_total")
        assert v(after, "memcached_written_bytes_total") > v(before, "memcached_written_bytes_total")
        assert v(after, "memcached_connections_total") >= 2
        # The page matches `stats` taken right after it (no client in between but this one).
        with srv.connect() as s:
            st = stats(s)
        assert int(st["curr_items"]) == v(after, "memcached_current_items")
        assert int(st["get_misses"]) == cmd(after, "get", "miss")
        # Open connections: ours, while it is open.
        with srv.connect() as s:
            roundtrip(s, b"version\r\n")
            assert v(srv.scrape()[0], "memcached_current_connections") >= 1


def test_every_command_status():
    with Metrics() as srv:
        with srv.connect() as s:
            roundtrip(s, b"set c 0 0 1\r\n5\r\n")
            cas = int(roundtrip(s, b"gets c\r\n", b"END\r\n").split(b"\r\n")[0].split()[-1])
            want = b"EXISTS\r\nSTORED\r\nNOT_FOUND\r\n"
            assert roundtrip(s, b"cas c 0 0 1 %d\r\n6\r\ncas c 0 0 1 %d\r\n7\r\ncas nope 0 0 1 1\r\nx\r\n" % (cas + 9, cas),
                             want) == want
            want = b"8\r\nNOT_FOUND\r\n7\r\nNOT_FOUND\r\nTOUCHED\r\nNOT_FOUND\r\nDELETED\r\nNOT_FOUND\r\nOK\r\n"
            got = roundtrip(s, b"incr c 1\r\nincr x 1\r\ndecr c 1\r\ndecr x 1\r\ntouch c 0\r\ntouch x 0\r\n"
                               b"delete c\r\ndelete c\r\nflush_all\r\n", b"OK\r\n")
            assert got == want, got
        values, _ = srv.scrape()
    for c, s in EXPORTER_COMMANDS - {("get", "hit"), ("get", "miss")}:
        # One of each, and set: the one set (cmd_set less the three cas).
        assert cmd(values, c, s) == 1, (c, s)
    assert cmd(values, "get", "hit") == 1  # the gets


def test_mnemo_own_families():
    with Metrics() as srv:
        srv.memcache(b"set a 0 0 3\r\nabc\r\n")
        values, types = srv.scrape()
    for name in ("mnemo_segment_size_bytes", "mnemo_segments_used", "mnemo_segments_free", "mnemo_segments_limit",
                 "mnemo_index_bytes", "mnemo_index_entries", "mnemo_dead_bytes", "mnemo_shards"):
        assert types[name] == "gauge", name
    assert types["mnemo_compactions"] == "counter"
    assert v(values, "mnemo_compactions_total") == 0
    assert v(values, "mnemo_segments_used") >= 1 and v(values, "mnemo_index_bytes") > 0
    assert v(values, "mnemo_index_entries") == 1
    assert v(values, "mnemo_snapshot_restore", state="none") == 1
    assert v(values, "mnemo_snapshot_restore", state="complete") == 0
    assert any(k[0] == "mnemo_build_info" for k in values)


def test_filter_calls():
    module = ('(module (memory (export "memory") 1)'
              ' (func (export "mnemo_abi_version") (result i32) (i32.const 1))'
              ' (func (export "mnemo_filter") (param i32 i32) (result i32) (i32.const 0)))')
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "f.wat"
        path.write_text(module)
        with Metrics("--filter", f"noop={path}", "--filter-timeout-ms", "2000") as srv:
            with srv.connect() as s:
                for _ in range(3):
                    assert roundtrip(s, b"fget noop 0 a\r\n\r\n", b"END\r\n") == b"VALUE noop 0 0\r\n\r\nEND\r\n"
            values, types = srv.scrape()
    assert v(values, "mnemo_filter_info", filter="noop", kind="wasm") == 1
    assert v(values, "mnemo_filter_calls_total", filter="noop") == 3
    assert v(values, "mnemo_filter_errors_total", filter="noop") == 0
    assert v(values, "mnemo_filter_seconds_total", filter="noop") >= 0
    assert types["mnemo_filter_calls"] == "counter"


def test_snapshot_restore():
    with tempfile.TemporaryDirectory() as d:
        snap = str(pathlib.Path(d) / "snap")
        with Server("mnemod", "-e", snap) as first:
            with first.connect() as s:
                for i in range(7):
                    assert roundtrip(s, b"set k%d 0 0 1\r\nx\r\n" % i) == b"STORED\r\n"
            first.proc.send_signal(signal.SIGTERM)  # -e: write the snapshot and exit
            assert first.proc.wait(timeout=30) == 0, first.stderr()
        with Metrics("-e", snap) as srv:
            values, _ = srv.scrape()
    assert v(values, "mnemo_snapshot_restore", state="complete") == 1
    assert v(values, "mnemo_snapshot_restore", state="none") == 0
    assert v(values, "mnemo_snapshot_restored_items") == 7
    assert v(values, "memcached_current_items") == 7


def test_http_edges():
    with Metrics() as srv:
        assert srv.http(b"GET /other HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        assert srv.http(b"DELETE /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        head = srv.http(b"HEAD /metrics HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
        assert srv.http(b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        # The most a request head may be, and no end to it.
        assert srv.http(b"x" * 8192).startswith(b"HTTP/1.1 431 ")
        # A client that never finishes its request is closed within the 2 s deadline.
        with socket.create_connection(("127.0.0.1", srv.mport), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            t = time.monotonic()
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
            assert time.monotonic() - t < 8
        srv.scrape()
        assert srv.alive()
        # memcached traffic is untouched by all that.
        assert srv.memcache(b"version\r\n").startswith(b"VERSION ")


def test_rusage_keeps_memcacheds_form():
    """`stats` stays memcached's: rusage_* are `sec.usec` (six digits), which the exporter
    parses itself as a timeval."""
    with Server("mnemod") as srv, srv.connect() as s:
        st = stats(s)
    for k in ("rusage_user", "rusage_system"):
        assert re.fullmatch(r"\d+\.\d{6}", st[k]), (k, st[k])


def listening_tcp_sockets(pid):
    """How many TCP sockets the process has listening (socket inodes of its fds, in
    /proc/net/tcp{,6} in state 0A)."""
    fds = pathlib.Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            n += sum(1 for line in f if line.split()[3] == "0A" and line.split()[9] in inodes)
    return n


def test_off_unless_asked():
    with Server("mnemod") as plain:
        assert listening_tcp_sockets(plain.proc.pid) == 1
    with Metrics() as srv:
        assert listening_tcp_sockets(srv.proc.pid) == 2
    r = subprocess.run([MNEMOD, "-h"], capture_output=True, text=True, timeout=10)
    assert "--metrics" in r.stdout
