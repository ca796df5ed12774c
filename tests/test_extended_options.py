"""memcached's `-o` extended options: mnemod starts with every option memcached 1.6.18 starts
with, refuses what memcached refuses (one line, exit 2), and says on stderr which accepted
options it ignores (and `stats settings` lists them). What the options that take effect do
is tested where their behaviour is: idle_timeout (test_idle_timeout.py), maxconns_fast, the
crawler, LRU and slab switches (test_stats_compat.py, tables/stats.txt)."""
import subprocess

import pytest

from servers import MNEMOD, Server, command, served, stats

ACCEPTED = [
    "idle_timeout=5", "maxconns_fast", "no_maxconns_fast", "lru_crawler", "no_lru_crawler",
    "lru_maintainer", "no_lru_maintainer", "track_sizes", "slab_reassign", "no_slab_reassign",
    "slab_automove", "slab_automove=2", "no_slab_automove", "slab_automove_ratio=0.5", "modern",
    "no_modern", "hashpower=20", "lru_crawler_sleep=50", "lru_crawler_tocrawl=10",
    "hash_algorithm=xxh3", "tail_repair_time=10", "hot_lru_pct=30", "warm_lru_pct=30",
    "hot_max_factor=0.3", "warm_max_factor=1.5", "temporary_ttl=30", "watcher_logbuf_size=64",
    "worker_logbuf_size=32", "slab_chunk_max=256", "no_inline_ascii_resp", "no_chunked_items",
    "no_hashexpand", "read_buf_mem_limit=1", "slab_automove_window=10", "ext_item_size=1024",
    "idle_timeout=5,no_lru_crawler,track_sizes",
]
REFUSED = ["bogus", "idle_timeout", "hashpower=10", "hashpower=70", "lru_crawler_sleep=2000000",
           "lru_crawler_tocrawl=x", "hash_algorithm=foo", "lru_segmented", "modern,bogus"]


@pytest.mark.parametrize("opt", ACCEPTED)
def test_memcacheds_options_start(opt):
    try:
        Server("memcached", "-o", opt).stop()
    except RuntimeError as e:
        pytest.skip(f"memcached itself does not start with -o {opt}: {e}")
    with Server("mnemod", "-o", opt) as srv:
        served(srv)


@pytest.mark.parametrize("opt", REFUSED)
def test_memcacheds_refusals(opt):
    mc = subprocess.run(command("memcached", "-p", "0", "-o", opt), capture_output=True, text=True, timeout=10)
    mn = subprocess.run([MNEMOD, "-p", "0", "-o", opt], capture_output=True, text=True, timeout=10)
    assert mc.returncode != 0, mc
    assert mn.returncode == 2, mn
    lines = mn.stderr.strip().splitlines()
    assert len(lines) == 1, mn.stderr
    # memcached's own words, after mnemod's prefix.
    assert lines[0].endswith(mc.stderr.strip().splitlines()[0]), (lines, mc.stderr)


def test_ignored_options_are_reported():
    with Server("mnemod", "-o", "hot_lru_pct=30,idle_timeout=5,ext_io_depth=2") as srv:
        with srv.connect() as s:
            st = stats(s, b"settings")
        assert st["extended_options_ignored"] == "hot_lru_pct=30,ext_io_depth=2"
        assert st["idle_timeout"] == "5"
        err = srv.stderr()
    assert "-o hot_lru_pct=30" in err and "-o ext_io_depth=2" in err, err
    assert "idle_timeout" not in err, err
