"""Real binary-protocol clients from PyPI drive mnemod (and, for comparison, memcached):
python-binary-memcached with and without SASL, and pylibmc (libmemcached) with binary=True.
memccapable's ascii and binary suites run against mnemod."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import bmemcached
import bmemcached.exceptions
import pylibmc
import pytest

from servers import Server

USERS = {"alice": "secret", "bob": "hunter2"}


@pytest.fixture(scope="module", params=["mnemod", "memcached"])
def server(request):
    s = Server(request.param)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def pwfile():
    fd, path = tempfile.mkstemp(prefix="mnemo-users-")
    with os.fdopen(fd, "w") as f:
        f.write("# SASL users for the binary tests\n")
        f.writelines(f"{u}:{p}\n" for u, p in USERS.items())
    yield path
    os.unlink(path)


@pytest.fixture(scope="module")
def sasl_server(pwfile):
    s = Server("mnemod", "-S", "-Y", pwfile)
    yield s
    s.stop()


def addr(s):
    return f"127.0.0.1:{s.port}"


# ---- python-binary-memcached ------------------------------------------------------------------

def exercise_bmemcached(c):
    assert c.flush_all()
    assert c.get("missing") is None
    assert c.set("k", "value")
    assert c.get("k") == "value"
    assert c.set("n", 10)  # an int is stored with its own flags and comes back an int
    assert c.get("n") == 10
    assert c.set("obj", {"a": [1, 2]})
    assert c.get("obj") == {"a": [1, 2]}
    assert c.set("bytes", b"\x00\xff\r\n")
    assert c.get("bytes") == b"\x00\xff\r\n"
    big = "x" * 200_000  # compressed by the client
    assert c.set("big", big)
    assert c.get("big") == big
    assert c.add("k", "other") is False
    assert c.add("fresh", "1") is True
    assert c.replace("nope", "v") is False
    assert c.replace("k", "v2") is True
    assert c.get("k") == "v2"
    # CAS through gets/cas.
    value, cas = c.gets("k")
    assert value == "v2" and cas
    assert c.cas("k", "v3", cas) is True
    assert c.cas("k", "v4", cas) is False
    assert c.get("k") == "v3"
    # incr/decr: the client sends initial value 0 (created when missing).
    assert c.set("cnt", "5")
    assert c.incr("cnt", 3) == 8
    assert c.decr("cnt", 10) == 0
    assert c.incr("newcnt", 1) == 0
    assert c.incr("newcnt", 1) == 1
    # Pipelined multi operations (SETQ / GETKQ + NOOP).
    assert c.set_multi({"m1": "a", "m2": "b", "m3": "c"}) in (True, [], set(), {})
    assert c.get_multi(["m1", "m2", "m3", "nope"]) == {"m1": "a", "m2": "b", "m3": "c"}
    assert c.delete("m1") is True
    assert c.get("m1") is None
    assert c.delete_multi(["m2", "m3"])
    assert c.get_multi(["m1", "m2", "m3"]) == {}
    stats = c.stats()[addr_of(c)]
    assert "pid" in stats and "curr_items" in stats
    settings = c.stats("settings")[addr_of(c)]
    assert "item_size_max" in settings
    assert c.flush_all()
    assert c.get("k") is None


def addr_of(c):
    return next(iter(c.servers)).server


def test_bmemcached(server):
    c = bmemcached.Client([addr(server)])
    try:
        exercise_bmemcached(c)
    finally:
        c.disconnect_all()


def test_bmemcached_sasl(sasl_server):
    c = bmemcached.Client([addr(sasl_server)], "alice", "secret")
    try:
        exercise_bmemcached(c)
    finally:
        c.disconnect_all()
    c = bmemcached.Client([addr(sasl_server)], "bob", "hunter2")
    try:
        assert c.set("bob", "here")
        assert c.get("bob") == "here"
    finally:
        c.disconnect_all()


# The client expects the auth error status of an old protocol draft (0x08) and so reports
# memcached's 0x20 as a generic MemcachedException carrying code 32, for memcached too.
AUTH_ERROR = 0x20


def test_bmemcached_sasl_wrong_password(sasl_server):
    with pytest.raises(bmemcached.exceptions.MemcachedException) as e:
        c = bmemcached.Client([addr(sasl_server)], "alice", "wrong")
        c.get("k")
    assert e.value.code == AUTH_ERROR


def test_bmemcached_sasl_unauthenticated_is_refused(sasl_server):
    auth = bmemcached.Client([addr(sasl_server)], "alice", "secret")
    try:
        assert auth.set("secret-key", "v")
    finally:
        auth.disconnect_all()
    c = bmemcached.Client([addr(sasl_server)])
    try:
        # No credentials: the server answers "auth error" and closes.
        with pytest.raises(bmemcached.exceptions.MemcachedException) as e:
            c.get("secret-key")
        assert e.value.code == AUTH_ERROR
    finally:
        c.disconnect_all()


def test_sasl_credentials_reload_on_sighup(tmp_path):
    users = tmp_path / "users"
    users.write_text("alice:secret\n")
    s = Server("mnemod", "-S", "-Y", str(users))
    try:
        users.write_text("alice:changed\n")
        s.proc.send_signal(1)  # SIGHUP
        # The reload happens on the maintenance thread's next tick (about a second): poll.
        import time
        deadline = time.monotonic() + 10
        while True:
            c = bmemcached.Client([addr(s)], "alice", "changed")
            try:
                if c.set("k", "v"):
                    break
            except bmemcached.exceptions.MemcachedException:
                pass
            finally:
                c.disconnect_all()
            assert time.monotonic() < deadline, "new password never accepted"
            time.sleep(0.05)  # polling the reload until the deadline
        with pytest.raises(bmemcached.exceptions.MemcachedException):
            bmemcached.Client([addr(s)], "alice", "secret").get("k")
    finally:
        s.stop()


# ---- pylibmc (libmemcached) in binary mode ----------------------------------------------------

def exercise_pylibmc(c):
    c.flush_all()
    assert c.get("missing") is None
    assert c.set("k", "value")
    assert c.get("k") == "value"
    assert c.set("i", 42)
    assert c.get("i") == 42
    assert c.set("b", b"\x00\x01\r\n")
    assert c.get("b") == b"\x00\x01\r\n"
    assert c.set("ttl", "x", time=100)
    assert c.get("ttl") == "x"
    assert c.add("k", "v") is False
    assert c.add("new", "v") is True
    with pytest.raises(pylibmc.NotFound):  # binary REPLACE of a missing key: "not found"
        c.replace("absent", "v")
    assert c.replace("k", "v2") is True
    assert c.append("k", ">") is True
    assert c.prepend("k", "<") is True
    assert c.get("k") == "<v2>"
    assert c.append("absent", "x") is False
    assert c.set("cnt", "10")
    assert c.incr("cnt", 5) == 15
    assert c.decr("cnt", 20) == 0
    with pytest.raises(pylibmc.NotFound):
        c.incr("absent-counter")
    value, cas = c.gets("k")
    assert value == "<v2>"
    assert c.cas("k", "swapped", cas) is True
    assert c.cas("k", "again", cas) is False
    assert c.get("k") == "swapped"
    # libmemcached 1.0's binary touch does not expect the flags memcached (and mnemod) send
    # back with a hit and waits out its 5 s poll timeout before succeeding, against either
    # server; only the miss is exercised here (the differential table covers TOUCH).
    assert c.touch("absent", 100) is False
    assert c.set_multi({"a": "1", "b": "2", "c": "3"}) == []
    assert c.get_multi(["a", "b", "c", "zz"]) == {"a": "1", "b": "2", "c": "3"}
    assert c.delete_multi(["a", "b"]) is True
    assert c.get_multi(["a", "b", "c"]) == {"c": "3"}
    assert c.delete("c") is True
    assert c.delete("c") is False
    big = b"y" * 500_000
    assert c.set("big", big)
    assert c.get("big") == big
    with pytest.raises(pylibmc.TooBig):
        c.set("huge", b"z" * (2 * 1024 * 1024))
    (name, stats), = c.get_stats()
    assert "curr_items" in stats
    c.flush_all()
    assert c.get("swapped") is None


def test_pylibmc_binary(server):
    c = pylibmc.Client([addr(server)], binary=True, behaviors={"cas": True, "tcp_nodelay": True})
    try:
        exercise_pylibmc(c)
    finally:
        c.disconnect_all()


# The pylibmc wheel bundles a Cyrus SASL library that looks for its mechanism plugins in
# /usr/lib64/sasl2; Debian keeps them elsewhere. SASL_PATH must be set before the library
# initialises (when pylibmc is imported), so this client runs in a child process.
DEBIAN_SASL_PLUGINS = "/usr/lib/x86_64-linux-gnu/sasl2"

PYLIBMC_SASL = """
import sys, pylibmc
port, user, password = sys.argv[1:]
c = pylibmc.Client(["127.0.0.1:" + port], binary=True, username=user, password=password,
                   behaviors={"cas": True})
try:
    assert c.set("sasl", "ok")
    assert c.get("sasl") == "ok"
    assert c.incr("sasl-n", 1) if c.set("sasl-n", "1") else False
    assert c.get_multi(["sasl", "none"]) == {"sasl": "ok"}
    print("AUTHENTICATED")
except pylibmc.Error as e:
    print("REFUSED", e)
"""


@pytest.mark.skipif(not pylibmc.support_sasl, reason="pylibmc built without SASL")
@pytest.mark.skipif(not os.path.isdir(DEBIAN_SASL_PLUGINS), reason="Cyrus SASL plugins (libsasl2-modules) missing")
def test_pylibmc_binary_sasl(sasl_server):
    env = dict(os.environ, SASL_PATH=DEBIAN_SASL_PLUGINS)

    def run(user, password):
        out = subprocess.run([sys.executable, "-c", PYLIBMC_SASL, str(sasl_server.port), user, password],
                             capture_output=True, text=True, env=env, timeout=60)
        return out.stdout + out.stderr

    assert "AUTHENTICATED" in run("alice", "secret")
    assert "REFUSED" in run("alice", "wrong")


# ---- memccapable ----------------------------------------------------------------------------------

@pytest.mark.skipif(not shutil.which("memccapable"), reason="memccapable (libmemcached-tools) not installed")
def test_memccapable_ascii_and_binary():
    """Without -a or -b memccapable runs both suites; every binary check must pass, and the
    ASCII ones but the two 1.6.45 fails too (tests/test_memccapable.py)."""
    from test_memccapable import FAILS_SINCE_1_6_40, assert_fails_as_1_6_45, run_memccapable
    s = Server("mnemod")
    try:
        verdicts, text, status = run_memccapable(s.port)
        assert_fails_as_1_6_45(s.port, verdicts, text)
        assert s.proc.poll() is None, "mnemod died"
    finally:
        s.stop()
    binary = [name for name in verdicts if name.startswith("binary")]
    assert len(binary) >= 25, text  # noop quit quitq set setq ... stat: the binary checks ran
    assert all(verdicts[name] for name in binary), text
    assert status == 1 and f"{len(FAILS_SINCE_1_6_40)} of {len(verdicts)} tests failed" in text, text
