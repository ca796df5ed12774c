"""Storage commands that fail, in all three protocols, against the real memcached in the same run:
the reply bytes and every counter each command bumps.

Two scenarios, each as text `set`, meta `ms` and binary SET:

  no memory   `-M -m 2`, 200 stores of 50 KB: the first few fit, the rest find no memory
  too large   a key stored small, then the same key set with a value over -I, then read back

How many 50 KB values fit in 2 MB is a property of each server's memory layout, not of the
command, so the no-memory counters are compared as what they count: each counter's change is
named by the replies it equals ("stored" = the number of successful replies, "failed" = the
refused ones, "all" = both) or by its literal value, and the names must be the same for both
servers. The reply texts themselves are compared byte for byte (binary: with the CAS zeroed).
"""
import struct
import sys
import pathlib
from concurrent.futures import ThreadPoolExecutor

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / "binary"))
from binproto import read_response, req, store_extras  # noqa: E402
from servers import Server, roundtrip, stats  # noqa: E402

VALUE = b"x" * 50_000
STORES = 200
TOO_LARGE = b"y" * (1024 * 1024 + 1)  # over the default -I 1m

# The counters a storage or read command may bump (memcached's names); stats that describe
# memory layout, time or connections are left out: they do not say what a command did.
COUNTERS = [
    "cmd_get", "cmd_set", "cmd_touch", "cmd_flush", "get_hits", "get_misses", "get_expired",
    "get_flushed", "store_too_large", "store_no_memory", "total_items", "curr_items",
    "cas_misses", "cas_hits", "cas_badval", "touch_hits", "touch_misses", "delete_hits",
    "delete_misses", "incr_hits", "incr_misses", "decr_hits", "decr_misses", "evictions",
]


def text_set(s, key, value):
    return roundtrip(s, b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))


def meta_set(s, key, value):
    return roundtrip(s, b"ms %s %d T0\r\n%s\r\n" % (key, len(value), value))


def text_get(s, key):
    return roundtrip(s, b"get %s\r\n" % key, b"END\r\n")


def bin_set(s, key, value):
    s.sendall(req("SET", key=key, value=value, extras=store_extras()))
    return bin_reply(read_response(s))


def bin_get(s, key):
    s.sendall(req("GET", key=key))
    return bin_reply(read_response(s))


def bin_reply(r):
    """A binary response as comparable bytes: everything but the CAS, which each server numbers
    its own way."""
    return b"%02x %04x %r %r %r" % (r["op"], r["status"], r["extras"], r["key"], r["value"])


PROTOCOLS = {
    "text": (text_set, text_get),
    "meta": (meta_set, text_get),
    "binary": (bin_set, bin_get),
}
OK = {b"STORED\r\n", b"HD\r\n", b"01 0000 b'' b'' b''"}


def counters(srv):
    # A connection of its own: a connection's first byte fixes its protocol.
    with srv.connect() as s:
        st = stats(s)
    return {k: int(st[k]) for k in COUNTERS if k in st}


def no_memory(kind, proto):
    put, _ = PROTOCOLS[proto]
    with Server(kind, "-M", "-m", "2") as srv:
        before = counters(srv)
        with srv.connect() as s:
            replies = [put(s, b"k%d" % i, VALUE) for i in range(STORES)]
        after = counters(srv)
        assert srv.alive()
    return replies, {k: after[k] - before[k] for k in after if k in before}


def too_large(kind, proto):
    put, get = PROTOCOLS[proto]
    with Server(kind) as srv:
        before = counters(srv)
        with srv.connect() as s:
            steps = [put(s, b"big", b"small"), put(s, b"big", TOO_LARGE), get(s, b"big"),
                     put(s, b"fresh", TOO_LARGE), get(s, b"fresh")]
        after = counters(srv)
        assert srv.alive()
    return steps, {k: after[k] - before[k] for k in after if k in before}


def names(replies, delta):
    """Each counter's change, named by the replies it counts where it equals their number."""
    stored = sum(1 for r in replies if r in OK)
    failed = len(replies) - stored
    out = {}
    for k, v in delta.items():
        if v == 0:
            out[k] = 0
        elif v == stored and v != failed:
            out[k] = "stored"
        elif v == failed and v != stored:
            out[k] = "failed"
        elif v == len(replies):
            out[k] = "all"
        else:
            out[k] = v
    return out


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(2) as ex:
        yield ex


@pytest.mark.parametrize("proto", sorted(PROTOCOLS))
def test_store_without_memory(pool, proto):
    mc_f = pool.submit(no_memory, "memcached", proto)
    mn_f = pool.submit(no_memory, "mnemod", proto)
    (mc_replies, mc_delta), (mn_replies, mn_delta) = mc_f.result(), mn_f.result()
    # The scenario must exercise both outcomes on both servers.
    for replies in (mc_replies, mn_replies):
        assert 0 < sum(1 for r in replies if r in OK) < STORES, set(replies)
    assert set(mn_replies) == set(mc_replies)
    shared = mc_delta.keys() & mn_delta.keys()
    mc_names = {k: v for k, v in names(mc_replies, mc_delta).items() if k in shared}
    mn_names = {k: v for k, v in names(mn_replies, mn_delta).items() if k in shared}
    assert mn_names == mc_names, f"memcached {mc_delta}, mnemod {mn_delta}"


@pytest.mark.parametrize("proto", sorted(PROTOCOLS))
def test_store_too_large(pool, proto):
    mc_f = pool.submit(too_large, "memcached", proto)
    mn_f = pool.submit(too_large, "mnemod", proto)
    (mc_steps, mc_delta), (mn_steps, mn_delta) = mc_f.result(), mn_f.result()
    assert mn_steps == mc_steps
    shared = mc_delta.keys() & mn_delta.keys()
    assert {k: mn_delta[k] for k in shared} == {k: mc_delta[k] for k in shared}
