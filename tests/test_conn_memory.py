"""Memory per connection (issue 36, item 2), beside the real memcached in the same run.

N connections each send one command, read its reply and then sit idle. mnemod gives an idle
connection's input and output buffers back at its worker's next sweep (once a clock tick, or
when the worker has had nothing to do for a while: worker/serve.rs, `sweep`), so its RSS must
come down to at most BOUND bytes per connection above its level before the wave (memcached's
figure is printed beside it, not asserted). Then every connection closes, and the RSS must come
back within 10% of its level before the wave, on the second wave as on the first (repeated
waves must not pile up memory).

Each RSS figure is read until it is within its bound or RSS_DEADLINE passes (a liveness check:
the sweep runs within about two seconds of the connections going quiet).
"""
import resource
import time

import pytest

from servers import Server, roundtrip, stats, VERSION_REPLY

N = 4000
BOUND = 2048
# RSS after a wave closes, against before it opened.
RETURN = 1.10
SETTLE_DEADLINE = 30.0
# How long the RSS may take to come down to its bound after the connections went quiet: the
# sweep runs once a second for connections idle for two ticks.
RSS_DEADLINE = 10.0


@pytest.fixture(scope="module", autouse=True)
def enough_descriptors():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = N + 200
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.fail(f"RLIMIT_NOFILE hard limit {hard} is below the {want} this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def curr_connections(ctl):
    return int(stats(ctl)["curr_connections"])


def wait_connections(srv, ctl, want):
    """Poll `stats` until the server counts `want` open connections (its closes are done)."""
    deadline = time.monotonic() + SETTLE_DEADLINE
    while curr_connections(ctl) != want:
        assert time.monotonic() < deadline, f"{srv.kind}: connections never settled to {want}"
        time.sleep(0.02)  # polling the server's own count until the deadline


def settled_rss(srv, bound_kb, deadline=RSS_DEADLINE):
    """The server's RSS in KB, read until it is at most `bound_kb` or `deadline` passes."""
    until = time.monotonic() + deadline
    while True:
        rss = srv.rss_kb()
        if rss <= bound_kb or time.monotonic() > until:
            return rss
        time.sleep(0.05)  # polling the RSS down to its bound until the deadline


def wave(srv, ctl, base_conns, before):
    """Open N connections, one command each, idle; return (RSS growth per connection in bytes,
    RSS in KB after they all closed). `before`: the RSS the bounds are taken from."""
    conns = []
    try:
        for _ in range(N):
            conns.append(srv.connect())
        for s in conns:
            s.sendall(b"version\r\n")
        for s in conns:
            assert VERSION_REPLY.fullmatch(roundtrip(s, b""))
        wait_connections(srv, ctl, base_conns + N)
        # memcached's figure is only printed: give it a moment, not the whole deadline.
        limit = RSS_DEADLINE if srv.kind == "mnemod" else 0.5
        per_conn = (settled_rss(srv, before + BOUND * N / 1024, limit) - before) * 1024 / N
        # Still served after its buffers went back: a connection takes them again.
        assert VERSION_REPLY.fullmatch(roundtrip(conns[0], b"version\r\n"))
    finally:
        for s in conns:
            s.close()
    wait_connections(srv, ctl, base_conns)
    limit = RSS_DEADLINE if srv.kind == "mnemod" else 0.5
    return per_conn, settled_rss(srv, before * RETURN, limit)


@pytest.mark.parametrize("kind", ["memcached", "mnemod"])
def test_idle_connections_cost_little_and_memory_comes_back(kind):
    with Server(kind, "-c", str(N + 100), "-t", "4", "-m", "64") as srv:
        ctl = srv.connect()
        # Some use first, so the level before the wave is a server that has served.
        for i in range(200):
            assert roundtrip(ctl, b"set k%d 0 0 100\r\n%s\r\n" % (i, b"v" * 100)) == b"STORED\r\n"
        base_conns = curr_connections(ctl)
        before = srv.rss_kb()
        per_conn, after = wave(srv, ctl, base_conns, before)
        per_conn2, after2 = wave(srv, ctl, base_conns, before)
        print(f"\n{kind}: {N} idle connections: {per_conn:.0f} B each (second wave {per_conn2:.0f});"
              f" RSS before {before} KB, after wave 1 {after} KB, after wave 2 {after2} KB")
        if kind == "mnemod":
            assert per_conn <= BOUND, f"{per_conn:.0f} B per idle connection (bound {BOUND})"
            assert per_conn2 <= BOUND, f"{per_conn2:.0f} B per idle connection, second wave"
            assert after <= before * RETURN, f"RSS {before} KB -> {after} KB after a wave"
            assert after2 <= before * RETURN, f"RSS {before} KB -> {after2} KB after two waves"
        # Still serving after the waves.
        assert roundtrip(ctl, b"get k1\r\n").startswith(b"VALUE k1 0 100\r\n")
