"""meta-memcache (PyPI), a meta-protocol client, driving mnemod: plain commands, CAS,
counters, leases (vivify), recache and invalidation (stale) policies."""
import pytest
from meta_memcache import (CacheClient, Key, LeasePolicy, RecachePolicy, ServerAddress,
                           connection_pool_factory_builder)

from servers import Server


# The same assertions hold against the real memcached: the client's behaviour is the spec.
@pytest.fixture(scope="module", params=["mnemod", "memcached"])
def client(request):
    srv = Server(request.param)
    c = CacheClient.cache_client_from_servers(
        servers=[ServerAddress(host="127.0.0.1", port=srv.port)],
        connection_pool_factory_fn=connection_pool_factory_builder())
    yield c
    srv.stop()


def test_set_get_delete(client):
    assert client.set(key=Key("foo"), value="bar", ttl=100)
    assert client.get(key=Key("foo")) == "bar"
    assert client.multi_get(keys=[Key("foo"), Key("nope")]) == {Key("foo"): "bar", Key("nope"): None}
    assert client.touch(key=Key("foo"), ttl=50)
    assert client.delete(key=Key("foo"))
    assert client.get(key=Key("foo")) is None
    big = b"x" * 200_000
    assert client.set(key=Key("big"), value=big, ttl=0)
    assert client.get(key=Key("big")) == big
    assert client.set(key=Key("odd\x01key with space"), value="v", ttl=10)
    assert client.get(key=Key("odd\x01key with space")) == "v"


def test_cas(client):
    client.set(key=Key("c"), value="1", ttl=0)
    value, cas = client.get_cas(key=Key("c"))
    assert value == "1"
    assert client.set(key=Key("c"), value="2", ttl=0, cas_token=cas)
    assert not client.set(key=Key("c"), value="3", ttl=0, cas_token=cas)
    assert client.get(key=Key("c")) == "2"


def test_counters(client):
    assert not client.delta(key=Key("cnt"), delta=1)
    assert client.delta_initialize(key=Key("cnt"), delta=1, initial_value=10, initial_ttl=100)
    assert client.delta_and_get(key=Key("cnt"), delta=5) == 15


def test_lease_recache_and_invalidate(client):
    # First caller on a miss gets the lease (W) and an empty placeholder.
    assert client.get_or_lease(key=Key("leased"), lease_policy=LeasePolicy()) is None
    assert client.set(key=Key("leased"), value="filled", ttl=100)
    assert client.get_or_lease(key=Key("leased"), lease_policy=LeasePolicy()) == "filled"
    assert client.get(key=Key("leased"), recache_policy=RecachePolicy()) == "filled"
    assert client.invalidate(key=Key("leased"))
    # Without a stale policy the client reads an invalidated item as a miss (both servers).
    assert client.get(key=Key("leased")) is None
    assert client.get(key=Key("leased")) is None
    assert client.set(key=Key("leased"), value="fresh", ttl=100)
    assert client.get(key=Key("leased")) == "fresh"
