"""pymemcache (PyPI) drives the server through every command it exposes.

Each test runs against mnemod and against the real memcached: the library's behaviour with
memcached is the spec, so an assertion that fails only for mnemod is a mnemod bug.
"""
import re
import time

import pytest
from pymemcache import serde
from pymemcache.client.base import Client, PooledClient
from pymemcache.client.hash import HashClient
from pymemcache.exceptions import (MemcacheClientError, MemcacheIllegalInputError,
                                   MemcacheServerError, MemcacheUnknownCommandError)

from servers import Server

LIMIT = 1024 * 1024


@pytest.fixture(scope="module", params=["mnemod", "memcached"])
def server(request):
    with Server(request.param) as s:
        yield s


def client(server, **kw):
    kw.setdefault("connect_timeout", 5)
    kw.setdefault("timeout", 10)
    return Client(("127.0.0.1", server.port), **kw)


@pytest.fixture
def pm(server):
    c = client(server, serde=serde.pickle_serde)
    assert c.flush_all(noreply=False) is True
    yield c
    c.close()


def test_set_get_and_noreply(pm):
    assert pm.set("a", b"1", noreply=False) is True
    assert pm.set("b", b"2") is True  # default noreply: True without waiting
    assert pm.set("c", b"3", noreply=True) is True
    assert pm.get("a") == b"1" and pm.get("b") == b"2" and pm.get("c") == b"3"
    assert pm.get("missing") is None
    assert pm.get("missing", default=b"dflt") == b"dflt"
    assert pm.set("f", b"x", noreply=False, flags=0) is True


def test_add_replace_append_prepend(pm):
    assert pm.add("k", b"1", noreply=False) is True
    assert pm.add("k", b"2", noreply=False) is False
    assert pm.add("k", b"2") is True  # noreply: no answer to read
    assert pm.replace("k", b"3", noreply=False) is True
    assert pm.replace("nope", b"3", noreply=False) is False
    assert pm.append("k", b"4", noreply=False) is True
    assert pm.prepend("k", b"0", noreply=False) is True
    assert pm.append("nope", b"4", noreply=False) is False
    assert pm.prepend("nope", b"4", noreply=False) is False
    assert pm.append("k", b"5") is True
    assert pm.prepend("k", b"-") is True
    assert pm.get("k") == b"-0345"
    assert pm.get("nope") is None


def test_many_and_multi(pm):
    data = {f"key{i}": b"v%d" % i for i in range(200)}
    assert pm.set_many(data, noreply=False) == []
    assert pm.set_multi({"x": b"1", "y": b"2"}, noreply=False) == []
    got = pm.get_many(list(data) + ["missing1", "missing2"])
    assert got == data
    assert pm.get_multi(["x", "y", "z"]) == {"x": b"1", "y": b"2"}
    assert pm.get_many([]) == {}
    assert pm.delete_many(list(data)[:100], noreply=False) is True
    assert pm.delete_multi(["x", "y"], noreply=False) is True
    assert pm.get_many(list(data)[:100] + ["x"]) == {}
    assert len(pm.get_many(list(data))) == 100


def test_gets_and_cas(pm):
    pm.set("k", b"v1", noreply=False)
    value, cas = pm.gets("k")
    assert value == b"v1" and int(cas) > 0
    assert pm.gets("k")[1] == cas  # reading does not change the CAS
    assert pm.cas("k", b"v2", cas, noreply=False) is True
    assert pm.cas("k", b"v3", cas, noreply=False) is False  # stale CAS: EXISTS
    assert pm.get("k") == b"v2"
    assert pm.cas("missing", b"x", cas, noreply=False) is None  # NOT_FOUND
    assert pm.gets("missing") == (None, None)
    value, cas2 = pm.gets("k")
    assert cas2 != cas
    assert pm.cas("k", b"v4", cas2, noreply=True) is True
    assert pm.get("k") == b"v4"
    many = pm.gets_many(["k", "missing"])
    assert list(many) == ["k"] and many["k"][0] == b"v4"
    with pytest.raises(MemcacheIllegalInputError):
        pm.cas("k", b"x", b"notanumber", noreply=False)


def test_delete(pm):
    pm.set("k", b"v", noreply=False)
    assert pm.delete("k", noreply=False) is True
    assert pm.delete("k", noreply=False) is False
    pm.set("k", b"v", noreply=False)
    assert pm.delete("k") is True  # noreply
    assert pm.get("k") is None


def test_incr_decr(pm):
    pm.set("n", b"10", noreply=False)
    assert pm.incr("n", 5) == 15
    assert pm.decr("n", 6) == 9
    assert pm.get("n") == b"9 "  # memcached keeps the length: "9 "
    assert pm.decr("n", 100) == 0
    assert pm.incr("n", 2**64 - 1) == 2**64 - 1
    assert pm.incr("n", 1) == 0  # wraps at 2^64
    assert pm.incr("missing", 1) is None
    assert pm.decr("missing", 1) is None
    assert pm.incr("n", 1, noreply=True) is None
    assert pm.get("n") == b"1".ljust(20)
    pm.set("s", b"abc", noreply=False)
    with pytest.raises(MemcacheClientError, match="non-numeric"):
        pm.incr("s", 1)
    # The connection is still in step after the error.
    assert pm.get("s") == b"abc"


def test_touch_and_gat(pm):
    pm.set("k", b"v", noreply=False)
    assert pm.touch("k", 100, noreply=False) is True
    assert pm.touch("missing", 100, noreply=False) is False
    assert pm.touch("k", 100) is True  # noreply
    # pymemcache has no gat/gats: raw_command sends them.
    # (raw_command returns the reply without its end token)
    assert pm.raw_command(b"gat 100 k", b"END\r\n") == b"VALUE k 0 1\r\nv\r\n"
    got = pm.raw_command(b"gats 100 k missing", b"END\r\n")
    assert got.startswith(b"VALUE k 0 1 ") and got.endswith(b"\r\nv\r\n")
    assert pm.raw_command(b"gat -1 k", b"END\r\n") == b"VALUE k 0 1\r\nv\r\n"
    assert pm.get("k") is None
    assert pm.touch("k", 10, noreply=False) is False


def test_expire_and_flush(pm):
    pm.set("gone", b"v", expire=-1, noreply=False)
    assert pm.get("gone") is None
    pm.set("k", b"v", expire=100, noreply=False)
    assert pm.get("k") == b"v"
    assert pm.flush_all(delay=100, noreply=False) is True
    assert pm.get("k") == b"v"
    assert pm.flush_all() is True  # noreply
    assert pm.get("k") is None


def test_serde_values(pm):
    for key, value in [("int", 42), ("str", "text é"), ("list", [1, "2", b"3"]),
                       ("dict", {"a": (1, 2)}), ("bytes", b"\x00\xff\r\n"), ("none", None),
                       ("empty", b"")]:
        assert pm.set(key, value, noreply=False) is True
        assert pm.get(key) == value, key
    assert pm.get_many(["int", "str"]) == {"int": 42, "str": "text é"}


def test_large_values_near_the_limit(pm):
    for size in (LIMIT - 1024, LIMIT - 100, 500_000, 1):
        v = bytes([size % 251]) * size
        assert pm.set("big", v, noreply=False) is True, size
        assert pm.get("big") == v
    with pytest.raises(MemcacheServerError, match="object too large for cache"):
        pm.set("big", b"x" * (LIMIT + 1), noreply=False)
    assert pm.get("big") is None  # a too-large set removes the old value, as memcached does
    assert pm.set("after", b"ok", noreply=False) is True
    assert pm.get("after") == b"ok"


def test_keys(server):
    c = client(server, allow_unicode_keys=True)
    c.flush_all(noreply=False)
    for key in ["ключ", "鍵", "émoji😀", b"bytes-key", "k" * 250, "a\x7fb", "x\x80y"]:
        assert c.set(key, b"v", noreply=False) is True, key
        assert c.get(key) == b"v", key
    assert c.get_many(["ключ", "鍵", "nope"]) == {"ключ": b"v", "鍵": b"v"}
    with pytest.raises(MemcacheIllegalInputError):
        c.set("k" * 251, b"v", noreply=False)
    with pytest.raises(MemcacheIllegalInputError):
        c.set("has space", b"v", noreply=False)
    c.close()
    plain = client(server)
    with pytest.raises(MemcacheIllegalInputError):
        plain.set("ключ", b"v", noreply=False)
    plain.close()


def test_key_prefix(server):
    a = client(server, key_prefix=b"a:")
    b = client(server, key_prefix=b"b:")
    a.set("k", b"1", noreply=False)
    b.set("k", b"2", noreply=False)
    assert a.get("k") == b"1" and b.get("k") == b"2"
    assert client(server).get_many(["a:k", "b:k"]) == {"a:k": b"1", "b:k": b"2"}


def test_stats_version_memlimit(pm, server):
    pm.set("a", b"1", noreply=False)
    pm.get("a")
    pm.get("missing")
    st = pm.stats()
    for field in (b"pid", b"uptime", b"curr_items", b"get_hits", b"get_misses", b"cmd_get", b"version",
                  b"limit_maxbytes", b"threads", b"curr_connections"):
        assert field in st, field
    assert st[b"curr_items"] >= 1 and st[b"get_hits"] >= 1 and st[b"get_misses"] >= 1
    settings = pm.stats("settings")
    assert settings[b"item_size_max"] == LIMIT
    assert settings[b"maxbytes"] == 64 * 1024 * 1024
    assert settings[b"cas_enabled"] == b"yes"
    assert settings[b"evictions"] == b"on"
    assert b"items:1:number" in pm.stats("items") or server.kind == "memcached"
    assert b"total_malloced" in pm.stats("slabs")
    assert pm.version().startswith(b"1.6.")


def test_stats_cachedump(pm, server):
    """pymemcache's stats("cachedump", class, limit) returns {key: b"[<size> b; <exp> s]"}."""
    pm.set("cd1", b"v", noreply=False)
    pm.set("cd2", b"w", noreply=False)
    # memcached lists an item once its LRU maintainer has moved it from HOT to COLD.
    deadline = time.monotonic() + 10
    while set(pm.stats("cachedump", "1", "0")) != {b"cd1", b"cd2"}:
        assert time.monotonic() < deadline, pm.stats("cachedump", "1", "0")
        time.sleep(0.05)
    one = pm.stats("cachedump", "1", "1")
    assert len(one) == 1 and re.fullmatch(rb"\[\d+ b; 0 s\]", next(iter(one.values()))), one
    assert pm.stats("cachedump", "2", "0") == {}


def test_cache_memlimit(pm):
    assert pm.cache_memlimit(64) is True
    assert pm.stats()[b"limit_maxbytes"] == 64 * 1024 * 1024
    assert pm.set("k", b"v", noreply=False) is True


def test_verbosity_and_unknown_via_raw_command(pm):
    assert pm.raw_command(b"verbosity 1") == b"OK"
    assert pm.raw_command(b"verbosity 0") == b"OK"
    with pytest.raises(MemcacheUnknownCommandError):
        pm.raw_command(b"bogus")
    assert pm.set("k", b"v", noreply=False) is True


def test_shutdown_not_enabled(pm, server):
    # 1.6.40 changed the refusal from `ERROR: shutdown not enabled` (1.6.18, which pymemcache
    # reads as an unknown command) to `SERVER_ERROR: shutdown not enabled`; mnemod follows 1.6.45.
    if server.kind == "mnemod":
        with pytest.raises(MemcacheServerError, match="shutdown not enabled"):
            pm.shutdown()
    else:
        with pytest.raises(MemcacheUnknownCommandError):
            pm.shutdown()
    assert pm.set("still", b"here", noreply=False) is True


def test_quit_then_reconnect(pm):
    pm.set("k", b"v", noreply=False)
    pm.quit()
    assert pm.get("k") == b"v"  # the client reconnects


def test_pooled_client(server):
    c = PooledClient(("127.0.0.1", server.port), max_pool_size=4, connect_timeout=5, timeout=5)
    assert c.set("p", b"1", noreply=False) is True
    assert c.get("p") == b"1"
    assert c.incr("p", 1) == 2
    c.close()


def test_hash_client_over_two_servers(server):
    with Server(server.kind) as other:
        hc = HashClient([("127.0.0.1", server.port), ("127.0.0.1", other.port)],
                        connect_timeout=5, timeout=5)
        data = {f"h{i}": b"%d" % i for i in range(100)}
        assert hc.set_many(data, noreply=False) == []
        assert hc.get_many(list(data)) == data
        # Both servers got some of the keys.
        on_first = client(server).get_many(list(data))
        assert 0 < len(on_first) < 100
        assert hc.delete_many(list(data), noreply=False) is True
        assert hc.get_many(list(data)) == {}
        hc.close()
