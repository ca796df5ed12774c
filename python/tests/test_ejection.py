"""A failing server is ejected (its keys go to the next server on the ring) and comes back after
the retry interval."""
import time

import pytest

import mnemo
from conftest import Server


def test_eject_and_return():
    a, b = Server("memcached"), Server("memcached")
    try:
        # A retry interval far above the few round trips made while b is ejected: on a loaded
        # machine they must not outlast it (b would be asked again, dead).
        c = mnemo.Client([a.addr, b.addr], failure_limit=2, retry_interval=3, timeout=5)
        key = next(k for k in (f"k{i}" for i in range(100)) if c.route(k) == b.addr)
        other = next(k for k in (f"k{i}" for i in range(100)) if c.route(k) == a.addr)
        c.set(key, "on b")
        c.set(other, "on a")
        b.stop()
        for _ in range(2):
            with pytest.raises(mnemo.NetworkError):
                c.get(key)
        assert c.ejected() == [b.addr]
        assert c.route(key) == a.addr  # skipped while ejected
        assert c.get(key) is None      # asked a, which never had it
        assert c.set(key, "on a now")
        assert c.get(other) == "on a"  # a's own keys never moved
        assert c.get_many([key, other]) == {key: "on a now", other: "on a"}

        b = Server("memcached", port=b.port)
        deadline = time.monotonic() + 15
        while c.ejected() and time.monotonic() < deadline:
            time.sleep(0.05)  # the retry interval runs out
        assert c.ejected() == []
        assert c.route(key) == b.addr
        assert c.get(key) is None  # b restarted empty; a success clears the failures
        assert c.set(key, "back on b") and c.get(key) == "back on b"
    finally:
        a.stop()
        b.stop()


def test_no_ejection_when_disabled():
    a = Server("memcached")
    c = mnemo.Client([a.addr], failure_limit=None)
    a.stop()
    for _ in range(4):
        with pytest.raises(mnemo.NetworkError):
            c.get("k")
    assert c.ejected() == []


def test_all_ejected_is_no_servers():
    a = Server("memcached")
    c = mnemo.Client([a.addr], failure_limit=1, retry_interval=60)
    a.stop()
    with pytest.raises(mnemo.NetworkError):
        c.get("k")
    with pytest.raises(mnemo.NoServersError):
        c.get("k")
