"""mnemo.Client's pymemcache-style API against real mnemod and memcached."""
import socket
import threading
import time

import pytest

import mnemo
from conftest import raw_get


def test_types_round_trip(client):
    values = {"b": b"\x00\xffraw", "s": "h\u00e9llo", "i": 42, "neg": -7, "big": 2**70,
              "t": True, "f": 1.5, "l": [1, {"x": (2, 3)}], "none": None, "empty": b""}
    for k, v in values.items():
        assert client.set(k, v) is True
    for k, v in values.items():
        got = client.get(k)
        assert got == v and type(got) is type(v), k
    assert client.get_many(list(values)) == values


def test_get_default_and_missing(client):
    assert client.get("nope") is None
    assert client.get("nope", default=7) == 7
    assert client.gets("nope") == (None, None)
    assert client.gets("nope", default=1, cas_default=2) == (1, 2)
    assert client.get_many(["nope", "also"]) == {}
    assert client.get_many([]) == {}


def test_keys_keep_their_type(client):
    client.set(b"bk", 1)
    client.set("sk", 2)
    got = client.get_many([b"bk", "sk", "missing"])
    assert got == {b"bk": 1, "sk": 2}
    assert client.get_multi(["sk"]) == {"sk": 2}


def test_conditional_stores(client):
    assert client.add("k", "a") is True
    assert client.add("k", "b") is False
    assert client.replace("k", "c") is True
    assert client.replace("absent", "c") is False
    assert client.append("k", "de") is True
    assert client.prepend("k", b"ab") is True
    assert client.get("k") == "abcde"
    assert client.append("absent", "x") is False


def test_cas(client):
    client.set("k", "v1")
    v, cas = client.gets("k")
    assert v == "v1" and isinstance(cas, int)
    assert client.cas("k", "v2", cas) is True
    assert client.cas("k", "v3", cas) is False
    assert client.cas("k", "v3", str(client.gets("k")[1]).encode()) is True  # pymemcache's bytes
    assert client.cas("absent", "v", 1) is None
    assert client.gets_many(["k", "absent"])["k"][0] == "v3"


def test_counters(client):
    client.set("n", 10)
    assert client.incr("n", 5) == 15
    assert client.decr("n", 20) == 0
    assert client.incr("absent", 1) is None
    assert client.incr("n", 1, noreply=True) is None
    assert client.get("n") == 1


def test_delete_touch_flush(client):
    client.set_many({"a": 1, "b": 2})
    assert client.delete("a") is True
    assert client.delete("a") is False
    assert client.delete("b", noreply=True) is True
    assert client.touch("absent", 10) is False
    client.set("c", 3)
    assert client.touch("c", 100) is True
    assert client.delete_many(["c", "absent"]) is True
    assert client.get("c") is None
    client.set("d", 4)
    assert client.flush_all() is True
    assert client.get("d") is None


def test_negative_expire_means_expired(client):
    assert client.set("k", 1, expire=-1) is True
    assert client.get("k") is None
    client.set("k", 1)
    assert client.touch("k", -1) is True
    assert client.get("k") is None


def test_noreply(client):
    assert client.set("k", "v", noreply=True) is True
    assert client.get("k") == "v"  # the same connection: the noreply set went first
    c = mnemo.Client([f"127.0.0.1:{client.servers[0].split(':')[1]}"], default_noreply=True)
    assert c.add("k", "other") is True  # noreply: not told it was not stored
    assert c.get("k") == "v"


def test_stats_and_version(client, server):
    stats = client.stats()
    assert stats[b"pid"] == server.proc.pid
    assert isinstance(client.version(), bytes)
    assert isinstance(client.stats("settings"), dict)


def test_bad_input():
    c = mnemo.Client(["127.0.0.1:1"])
    for key in ["", "has space", "x" * 251, "ctl\x01"]:
        with pytest.raises(mnemo.IllegalInputError):
            c.get(key)
    with pytest.raises(mnemo.MemcacheIllegalInputError):
        c.set(3, "v")
    with pytest.raises(mnemo.IllegalInputError):
        mnemo.Client(["host:notaport"])
    with pytest.raises(ValueError):
        mnemo.Client(["127.0.0.1:1"], compression="lz4")
    with pytest.raises(mnemo.ConfigurationError):
        mnemo.Client([])


def test_reply_spin_is_seconds_and_off_with_zero(three_mnemods):
    addrs = [s.addr for s in three_mnemods]
    items = {f"spin{i}": "v" * i for i in range(100)}
    for spin in [0, 50e-6, 0.001]:
        c = mnemo.Client(addrs, reply_spin=spin)
        assert c.set_many(items) == []
        assert c.get_many(list(items)) == items
        assert c.get("spin7") == "vvvvvvv"
    for bad in [-1e-6, 0.5, float("nan"), float("inf")]:
        with pytest.raises(mnemo.IllegalInputError):
            mnemo.Client(addrs, reply_spin=bad)


def test_server_errors_map_to_reply_classes(client):
    with pytest.raises(mnemo.ServerError):
        client.set("big", b"x" * (2 << 20), compress=False)  # over the 1 MiB item limit: SERVER_ERROR
    assert client.set("after", 1)  # the connection went on
    assert issubclass(mnemo.ServerError, mnemo.MemcacheServerError)
    assert issubclass(mnemo.UnknownCommandError, mnemo.MemcacheClientError)


def test_server_forms():
    for servers in ["127.0.0.1:1", ("127.0.0.1", 1), [("127.0.0.1", 1, 3)], ["a:1:2", "b:2"],
                    "a:1,b:2"]:
        mnemo.Client(servers)
    assert mnemo.Client([("h", 5, 3), "g:6"]).servers == ["h:5:3", "g:6:1"]


def silent_server():
    """A listener that accepts and never replies."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def test_timeout_is_on_by_default_and_configurable():
    lst = silent_server()
    try:
        port = lst.getsockname()[1]
        c = mnemo.Client([("127.0.0.1", port)], timeout=0.2, failure_limit=None)
        t0 = time.monotonic()
        with pytest.raises(mnemo.TimeoutError) as e:
            c.get("k")
        assert 0.15 < time.monotonic() - t0 < 2
        assert isinstance(e.value, TimeoutError) and isinstance(e.value, mnemo.NetworkError)
    finally:
        lst.close()


def test_refused_connection_is_a_network_error():
    port = silent_server()
    p = port.getsockname()[1]
    port.close()
    with pytest.raises(mnemo.NetworkError):
        mnemo.Client([("127.0.0.1", p)]).get("k")


def test_gil_released_during_io():
    """While one thread waits on a silent server, others run Python code."""
    lst = silent_server()
    try:
        c = mnemo.Client([("127.0.0.1", lst.getsockname()[1])], timeout=0.5)
        t = threading.Thread(target=lambda: pytest.raises(mnemo.TimeoutError, c.get, "k"))
        t.start()
        count, t0 = 0, time.monotonic()
        while t.is_alive() and time.monotonic() - t0 < 0.3:
            count += 1
        t.join()
        assert count > 10_000  # would be ~0 if the wait held the GIL
    finally:
        lst.close()


def test_threads_share_a_client(client):
    errors = []

    def work(i):
        try:
            for j in range(200):
                client.set(f"t{i}:{j}", j)
                assert client.get(f"t{i}:{j}") == j
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_many_keys_over_three_servers(three_mnemods):
    c = mnemo.Client([s.addr for s in three_mnemods])
    c.flush_all()
    items = {f"key{i}": i for i in range(300)}
    assert c.set_many(items) == []
    assert c.get_many(list(items)) == items
    # Every server got some, and holds exactly the keys the client routes to it.
    for s in three_mnemods:
        mine = [k for k in items if c.route(k) == s.addr]
        assert 30 < len(mine) < 200
        assert all(raw_get(s.port, k) is not None for k in mine[:20])
    assert c.delete_many(list(items)[:100]) is True
    assert len(c.get_many(list(items))) == 200
    assert set(c.version()) == {s.addr for s in three_mnemods}


def test_one_write_per_server_per_batch(three_mnemods):
    """get_many of 300 keys over 3 servers: one pipelined `get` per server (cmd_get counts
    keys; the connection count shows one connection each)."""
    c = mnemo.Client([s.addr for s in three_mnemods])
    keys = [f"w{i}" for i in range(300)]
    before = c.stats()
    c.get_many(keys)
    after = c.stats()
    for s in three_mnemods:
        b, a = before[s.addr], after[s.addr]
        assert a[b"cmd_get"] - b[b"cmd_get"] == sum(1 for k in keys if c.route(k) == s.addr)
        assert a[b"total_connections"] == b[b"total_connections"]


def test_hash_tags_keep_a_group_together(three_mnemods):
    c = mnemo.Client([s.addr for s in three_mnemods], hash_tags=True)
    owners = {c.route(f"{{user:7}}:{part}") for part in ["feed", "likes", "profile", "x", "y"]}
    assert len(owners) == 1
    plain = mnemo.Client([s.addr for s in three_mnemods])
    assert len({plain.route(f"{{user:7}}:{i}") for i in range(50)}) == 3


def test_close_and_context_manager(server):
    with mnemo.Client([server.addr]) as c:
        c.set("k", 1)
    assert c.get("k") == 1  # closed: the next call connects again


def test_fork_child_gets_its_own_connections(mnemod):
    """A client used before a fork works in the child (its own connections and runtime) and
    still in the parent (whose connections the child left alone)."""
    import os
    c = mnemo.Client([mnemod.addr])
    c.set("before", "fork")
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = c.get("before") == "fork" and c.set("child", 1) and c.get("child") == 1
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert c.get("child") == 1 and c.get("before") == "fork"


def test_key_prefix(client, server):
    c = mnemo.Client([server.addr], key_prefix="app1:")
    c.set("k", "v")
    c.set_many({"a": 1, b"b": 2})
    assert c.get("k") == "v"
    assert c.get_many(["k", "a", b"b"]) == {"k": "v", "a": 1, b"b": 2}
    plain = mnemo.Client([server.addr])
    assert plain.get("app1:k") == "v" and plain.get("k") is None
    assert c.delete("k") and plain.get("app1:k") is None


def test_stubs_cover_the_api():
    """The shipped .pyi files name every public method (type hints stay in step)."""
    import ast
    import pathlib

    import mnemo.aio
    pkg = pathlib.Path(mnemo.__file__).parent
    assert (pkg / "py.typed").exists()
    for stub, cls in [("_mnemo.pyi", mnemo.Client), ("aio.pyi", mnemo.aio.Client)]:
        tree = ast.parse((pkg / stub).read_text())
        klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Client")
        named = {n.name for n in klass.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        public = {n for n in dir(cls) if not n.startswith("_")}
        if stub == "_mnemo.pyi":
            public -= {"get_multi", "set_multi", "delete_multi", "gets_multi", "quit",
                       "disconnect_all"}  # aliases defined in mnemo/__init__.py
        assert public <= named, public - named
        assert all(getattr(cls, n).__doc__ for n in public - {"servers"}), "docstrings"


def test_ignore_exc_turns_failed_reads_into_misses():
    lst = silent_server()
    p = lst.getsockname()[1]
    lst.close()
    c = mnemo.Client([("127.0.0.1", p)], ignore_exc=True, failure_limit=None)
    assert c.get("k") is None and c.get("k", 5) == 5
    assert c.gets("k") == (None, None)
    assert c.get_many(["a", "b"]) == {} and c.gets_many(["a"]) == {}
    with pytest.raises(mnemo.NetworkError):
        c.set("k", 1)
    with pytest.raises(mnemo.IllegalInputError):
        c.get("bad key")
