"""mnemo.django.MnemoCache through Django's cache API (django.core.cache.caches), configured
with settings.configure, against mnemod and memcached."""
import pytest

django = pytest.importorskip("django")
from django.conf import settings  # noqa: E402


@pytest.fixture(scope="module")
def caches(mnemod, memcached):
    if not settings.configured:
        settings.configure(CACHES={
            "mnemod": {"BACKEND": "mnemo.django.MnemoCache", "LOCATION": mnemod.addr},
            "memcached": {"BACKEND": "mnemo.django.MnemoCache",
                          "LOCATION": [memcached.addr],
                          "OPTIONS": {"compression": "zlib", "timeout": 2.0}},
            # Django's documented PyMemcacheCache OPTIONS, with only BACKEND changed.
            "from_pymemcache": {"BACKEND": "mnemo.django.MnemoCache",
                                "LOCATION": "127.0.0.1:1",
                                "OPTIONS": {"no_delay": True, "ignore_exc": True,
                                            "max_pool_size": 4, "use_pooling": True}},
            "default": {"BACKEND": "mnemo.django.MnemoCache", "LOCATION": mnemod.addr,
                        "KEY_PREFIX": "site1", "TIMEOUT": 60},
        })
        django.setup()
    from django.core.cache import caches
    return caches


@pytest.fixture(params=["mnemod", "memcached"])
def cache(caches, request):
    c = caches[request.param]
    c.clear()
    yield c
    c.close()


def test_basic(cache):
    cache.set("key", "value")
    assert cache.get("key") == "value"
    assert cache.get("missing") is None
    assert cache.get("missing", "default") == "default"
    assert cache.add("key", "other") is False
    assert cache.add("new", "v") is True
    assert cache.has_key("new") and "new" in cache
    assert cache.delete("new") is True and cache.delete("new") is False


def test_data_types(cache):
    stuff = {"string": "this is a string", "int": 42, "bool": True, "list": [1, 2, 3, 4],
             "tuple": (1, 2, 3, 4), "dict": {"A": 1, "B": 2}, "float": 1.5, "bytes": b"\x00\xff",
             "none_in_list": [None], "unicode": "\u0441\u0442\u0440\u043e\u043a\u0430"}
    cache.set("stuff", stuff)
    assert cache.get("stuff") == stuff
    for k, v in stuff.items():
        cache.set(k, v)
        assert cache.get(k) == v and type(cache.get(k)) is type(v)


def test_many(cache):
    assert cache.set_many({"a": 1, "b": 2, "c": "x" * 5000}) == []
    assert cache.get_many(["a", "b", "c", "d"]) == {"a": 1, "b": 2, "c": "x" * 5000}
    cache.delete_many(["a", "b"])
    assert cache.get_many(["a", "b", "c"]) == {"c": "x" * 5000}


def test_incr_decr(cache):
    cache.set("n", 1)
    assert cache.incr("n") == 2
    assert cache.incr("n", 10) == 12
    assert cache.decr("n") == 11
    assert cache.incr("n", -3) == 8
    with pytest.raises(ValueError):
        cache.incr("missing")
    with pytest.raises(ValueError):
        cache.decr("missing")


def test_timeouts(cache):
    cache.set("zero", "v", 0)  # Django: 0 means expire at once
    assert cache.get("zero") is None
    assert cache.add("zero", "v", 0) is True and cache.get("zero") is None
    cache.set("forever", "v", None)
    assert cache.get("forever") == "v"
    cache.set("long", "v", 60 * 60 * 24 * 31)  # past 30 days: sent as a unix time
    assert cache.get("long") == "v"
    assert cache.touch("long", 10) is True
    assert cache.touch("missing", 10) is False
    cache.set("t", "v")
    assert cache.touch("t", 0) is True
    assert cache.get("t") is None


def test_get_or_set_and_versions(cache):
    assert cache.get_or_set("gos", lambda: "computed") == "computed"
    assert cache.get_or_set("gos", "other") == "computed"
    cache.set("v", "one", version=1)
    cache.set("v", "two", version=2)
    assert cache.get("v", version=1) == "one" and cache.get("v", version=2) == "two"
    assert cache.incr_version("v", version=2) == 3
    assert cache.get("v", version=3) == "two"


def test_invalid_keys_are_refused(cache):
    from django.core.cache.backends.base import InvalidCacheKey
    with pytest.raises(InvalidCacheKey):
        cache.set("key with spaces", 1)
    with pytest.raises(InvalidCacheKey):
        cache.set("x" * 300, 1)


def test_unicode_key(cache):
    cache.set("\u043a\u043b\u044e\u0447", "v")
    assert cache.get("\u043a\u043b\u044e\u0447") == "v"


def test_failed_set_deletes_the_old_value(cache):
    import os
    cache.set("session", "small")
    with pytest.raises(Exception):
        cache.set("session", os.urandom(2 << 20))  # incompressible, over 1 MiB
    assert cache.get("session") is None


def test_default_cache_and_prefix(caches):
    from django.core.cache import cache
    cache.set("k", "v")
    assert cache.get("k") == "v"
    assert caches["mnemod"].get("k") is None  # another key prefix
    assert caches["mnemod"]._cache.get(cache.make_key("k")) == "v"


def test_safe_strings_stay_safe(cache):
    from django.utils.safestring import SafeString, mark_safe
    cache.set("html", mark_safe("<b>x</b>"))
    assert isinstance(cache.get("html"), SafeString)


def test_pymemcache_options_and_ignore_exc(caches):
    down = caches["from_pymemcache"]  # nothing listens on port 1
    assert down.get("k", "fallback") == "fallback"
    assert down.get_many(["a", "b"]) == {}
    import mnemo
    with pytest.raises(mnemo.NetworkError):
        down.set("k", 1)  # ignore_exc covers reads only, as in pymemcache
