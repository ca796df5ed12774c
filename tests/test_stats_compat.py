"""The `stats` family's field names, beside the real memcached in the same run: the general
`stats` reply, `stats items` and `stats slabs` must list exactly memcached 1.6.18's fields in
its order, under the same flags (the `-o` options that add or drop lines included), and the
counters mnemod has the mechanism for must count what memcached's count.
Values are server-specific and not compared, except where said.
"""
import socket
import time

import pytest

from servers import as_1_6_45_stats, Server, roundtrip, stats, VERSION_REPLY, reported_version

FLAG_SETS = [
    [],
    ["-o", "no_lru_maintainer"],
    ["-o", "no_lru_crawler"],
    ["-o", "idle_timeout=30"],
    ["-o", "no_maxconns_fast"],
    ["-o", "no_slab_reassign"],
    ["-o", "no_modern"],
    ["-o", "modern,track_sizes"],
    ["-o", "hashpower=20,lru_crawler_sleep=50,lru_crawler_tocrawl=7,slab_automove=2,slab_automove_ratio=0.5"],
]
# Settings whose values the flags above change: they must read as memcached's.
FLAG_SETTINGS = ["maxconns_fast", "hashpower_init", "slab_reassign", "slab_automove", "slab_automove_ratio",
                 "lru_crawler", "lru_crawler_sleep", "lru_crawler_tocrawl", "lru_maintainer_thread",
                 "lru_segmented", "idle_timeout", "track_sizes"]


def keys(reply_dict):
    return list(reply_dict)


def both(flags):
    return Server("memcached", *flags), Server("mnemod", *flags)


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: " ".join(f) or "defaults")
def test_stats_field_list_is_memcacheds(flags):
    """Against 1.6.38 (Debian 13), the reference since issue 48; mnemod's `stats` follows
    1.6.45, which adds `slab_reassign_last_busy_status` (1.6.40) before `slab_reassign_running`."""
    mc, mn = Server("memcached-new", *flags), Server("mnemod", *flags)
    try:
        got = {}
        for srv in (mc, mn):
            with srv.connect() as s:
                st = {"stats": keys(stats(s))}
                settings = stats(s, b"settings")
                st["settings"] = keys(settings)
                st["settings values"] = {k: settings[k] for k in FLAG_SETTINGS}
                # A class appears in items/slabs once it holds an item.
                roundtrip(s, b"set k 0 0 1\r\nx\r\n")
                st["items"] = keys(stats(s, b"items"))
                st["slabs"] = keys(stats(s, b"slabs"))
                # (`lru_crawler disable` drops the crawler lines too, but memcached's thread
                # stops asynchronously: its next `stats` may still show them.)
                got["memcached" if srv.kind == "memcached-new" else srv.kind] = st
    finally:
        mc.stop()
        mn.stop()
    got["memcached"]["stats"] = as_1_6_45_stats(got["memcached"]["stats"])
    # mnemo's own settings come after all of memcached's.
    mc_settings = got["memcached"].pop("settings")
    assert got["mnemod"].pop("settings")[:len(mc_settings)] == mc_settings
    for group in got["memcached"]:
        assert got["mnemod"][group] == got["memcached"][group], group


def test_stats_slabs_of_an_empty_server():
    mc, mn = both([])
    try:
        with mc.connect() as a, mn.connect() as b:
            assert keys(stats(b, b"slabs")) == keys(stats(a, b"slabs")) == ["active_slabs", "total_malloced"]
            assert stats(b, b"slabs")["active_slabs"] == "0"
    finally:
        mc.stop()
        mn.stop()


def test_counters_with_a_mechanism_count_alike():
    """cmd_meta (memcached 1.6.18 counts `me` alone), used_chunks (items), connection and
    listener state."""
    script = [b"me nokey\r\n", b"mn\r\n", b"mg k v\r\n", b"ms k 1\r\nx\r\n", b"md k q\r\n", b"ma n\r\n",
              b"set a 0 0 1\r\n1\r\n", b"set b 0 0 1\r\n1\r\n", b"me a\r\n"]
    res = {}
    for kind in ("memcached", "mnemod"):
        with Server(kind) as srv, srv.connect() as s:
            for req in script:
                s.sendall(req)
            roundtrip(s, b"version\r\n", b"VERSION %s\r\n" % reported_version(kind).encode())
            st, sl = stats(s), stats(s, b"slabs")
            res[kind] = dict(cmd_meta=st["cmd_meta"], used_chunks=sl["1:used_chunks"],
                             accepting_conns=st["accepting_conns"], curr_items=st["curr_items"],
                             listen_disabled_num=st["listen_disabled_num"])
            assert int(st["connection_structures"]) >= 2  # a listener and this connection
            assert int(st["hash_bytes"]) > 0 and int(st["hash_power_level"]) > 0
            if kind == "mnemod":  # (memcached hands idle buffers back to a cache)
                assert int(st["read_buf_count"]) >= 1 and int(st["read_buf_bytes"]) > 0
    assert res["mnemod"] == res["memcached"]
    assert res["mnemod"]["cmd_meta"] == "2"


def test_reset_keeps_gauges():
    with Server("mnemod") as srv, srv.connect() as s:
        roundtrip(s, b"me x\r\n")
        assert roundtrip(s, b"stats reset\r\n") == b"RESET\r\n"
        st = stats(s)
        assert st["cmd_meta"] == "0"
        assert int(st["read_buf_count"]) >= 1 and int(st["connection_structures"]) >= 2


def test_no_maxconns_fast_makes_connections_wait():
    """-o no_maxconns_fast: past -c a new connection is not refused with an error; accepting
    pauses (the listen backlog shrinks to nothing, so connects wait) until a connection
    closes, and listen_disabled_num counts the pause, as in memcached."""
    for kind in ("memcached", "mnemod"):
        with Server(kind, "-c", "50", "-o", "no_maxconns_fast") as srv:
            held, waiting = [], 0
            try:
                while waiting < 3 and len(held) < 80:
                    try:
                        # A short timeout only near the limit: far below it, a slow reply is
                        # a loaded machine, not a paused listener.
                        s = srv.connect(timeout=0.5 if len(held) >= 30 else 10)
                    except OSError:
                        waiting += 1
                        continue
                    held.append(s)
                    try:
                        assert VERSION_REPLY.fullmatch(roundtrip(s, b"version\r\n"))
                    except TimeoutError:
                        waiting += 1
                assert waiting == 3 and len(held) < 60, (kind, len(held))
                for s in held[:5]:
                    s.close()
                with srv.connect(timeout=10) as s:
                    s.settimeout(10)
                    st = stats(s)
                assert int(st["listen_disabled_num"]) >= 1, kind
                assert "rejected_connections" not in st
            finally:
                for s in held:
                    s.close()


def conns_rows(sock):
    """`stats conns` as [(fd, {field: value})] in reply order."""
    reply = roundtrip(sock, b"stats conns\r\n", b"END\r\n").decode()
    rows = {}
    order = []
    for line in reply.splitlines()[:-1]:
        _, name, value = line.split(" ", 2)
        fd, field = name.split(":", 1)
        if fd not in rows:
            rows[fd] = {}
            order.append(fd)
        rows[fd][field] = value
    assert [int(fd) for fd in order] == sorted(int(fd) for fd in order), order  # by descriptor
    return [rows[fd] for fd in order]


def test_stats_conns_lists_listeners_and_connections():
    """Same rows, fields and states as memcached: the listener, an idle connection, one with a
    half-sent command, and the asking one; addresses in memcached's form."""
    got = {}
    for kind in ("memcached", "mnemod"):
        with Server(kind) as srv:
            idle, partial, me = srv.connect(), srv.connect(), srv.connect()
            roundtrip(idle, b"version\r\n")
            partial.sendall(b"get half")
            roundtrip(me, b"version\r\n")
            time_wait = roundtrip(idle, b"version\r\n")  # (both connections are adopted by now)
            assert time_wait.startswith(b"VERSION")
            # Adopted is not read: memcached's worker may not have taken partial's bytes yet
            # (it then shows conn_new_cmd), or may be in the middle of them (its state, read
            # from another thread, passes conn_parse_cmd and conn_waiting before it rests in
            # conn_read). Likewise idle's: its VERSION is sent before its worker leaves
            # conn_mwrite (seen with the machine's other core busy). Ask again until both rows
            # leave those passing states, each ask a round trip, for a bounded number of times:
            # a state that stays is still compared below.
            waiting = {f"tcp:127.0.0.1:{s.getsockname()[1]}" for s in (idle, partial)}
            passing = ("conn_new_cmd", "conn_parse_cmd", "conn_waiting", "conn_mwrite")
            for _ in range(1000):
                rows = conns_rows(me)
                rest = {r["addr"] for r in rows if r["addr"] in waiting and r["state"] not in passing}
                if rest == waiting:
                    break
            server = f"tcp:127.0.0.1:{srv.port}"
            names = {f"tcp:127.0.0.1:{s.getsockname()[1]}": n for n, s in
                     (("idle", idle), ("partial", partial), ("me", me))}
            names[server] = "server"
            got[kind] = [(names.get(r["addr"], r["addr"]), names.get(r.get("listen_addr")), r["state"],
                          sorted(r)) for r in rows]
            assert got[kind][0] == ("server", None, "conn_listening", ["addr", "secs_since_last_cmd", "state"])
            assert all(int(r["secs_since_last_cmd"]) >= 0 for r in rows)
            for s in (idle, partial, me):
                s.close()
    # (which descriptor a connection gets depends on when the start-up probe's is freed)
    assert sorted(got["mnemod"]) == sorted(got["memcached"])


def test_out_of_descriptors_pauses_accepting_and_recovers():
    """mnemod alone (memcached raises its own descriptor limit to fit -c): with too few file
    descriptors, accepting pauses instead of spinning on EMFILE (`accepting_conns 0`,
    `listen_disabled_num`), and resumes once connections close."""
    import resource
    import subprocess

    from servers import MNEMOD, free_port

    port = free_port()

    def few_descriptors():
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    proc = subprocess.Popen([MNEMOD, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-t", "1"],
                            preexec_fn=few_descriptors, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held = []
    try:
        first = None
        for _ in range(500):
            try:
                first = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                time.sleep(0.01)
        assert first is not None
        held.append(first)
        for _ in range(50):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=0.2))
            except OSError:
                pass  # the backlog is closed while accepting is paused
        # The pause is seen by the accept loop's next turn: polled, with a deadline.
        deadline = time.monotonic() + 5
        st = stats(first)
        while st["accepting_conns"] != "0" and time.monotonic() < deadline:
            time.sleep(0.01)
            st = stats(first)
        assert st["accepting_conns"] == "0" and int(st["listen_disabled_num"]) >= 1, st
        # Paused, not spinning: the process is nearly idle.
        def cpu():
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        before = cpu()
        time.sleep(1)
        assert cpu() - before < 30, "the accept loop spins"  # clock ticks (1/100 s)
        # Connections that were waiting are served once others close.
        waiting = held[-1]
        for s in held[1:30]:
            s.close()
        waiting.settimeout(5)
        assert VERSION_REPLY.fullmatch(roundtrip(waiting, b"version\r\n"))
        # The backlog drains as the closed connections' descriptors are freed; until it has,
        # a retry can find the process out of descriptors again and pause once more (seen once
        # in CI under --io-loop=uring). It must end up accepting.
        deadline = time.monotonic() + 5
        st = stats(first)
        while st["accepting_conns"] != "1" and time.monotonic() < deadline:
            time.sleep(0.01)
            st = stats(first)
        assert st["accepting_conns"] == "1" and int(st["time_in_listen_disabled_us"]) > 0, st
    finally:
        for s in held:
            s.close()
        proc.kill()
        proc.wait()
