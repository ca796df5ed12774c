"""`mnemod -S` in Cyrus SASL's environment, beside `memcached -S` in the same run: with
SASL_CONF_PATH naming a directory whose memcached.conf points at a sasldb (made by Debian's
saslpasswd2), both servers start without -Y, know the same users, and answer the same SASL
conversations. A database mnemod cannot read stops it with one line saying how to move the
users to a -Y file."""
import os
import pathlib
import shutil
import subprocess

import pytest

from servers import MNEMOD, Server
from .binproto import connect, converse, req
from .test_binary_diff import SASL_CASES, run_case

USERS = {"alice": "secret", "bob": "hunter2"}
# Enough users to fill several hash pages.
MANY = {f"user{i:03d}": f"pw-{i}-" + "x" * (i % 40) for i in range(300)}


def saslpasswd(db, users):
    for user, password in users.items():
        subprocess.run(["saslpasswd2", "-p", "-a", "memcached", "-c", "-f", str(db), user],
                       input=password.encode(), check=True)


@pytest.fixture(scope="module")
def sasl_env(tmp_path_factory):
    if not shutil.which("saslpasswd2"):
        pytest.skip("saslpasswd2 (Debian sasl2-bin) is needed to make a SASL user database")
    tmp = tmp_path_factory.mktemp("cyrus")
    db = tmp / "sasldb2"
    (tmp / "memcached.conf").write_text(f"mech_list: plain\nsasldb_path: {db}\n")
    saslpasswd(db, {**USERS, **MANY})
    return tmp


def start_both(conf_dir):
    old = os.environ.get("SASL_CONF_PATH")
    os.environ["SASL_CONF_PATH"] = str(conf_dir)
    try:
        return {"memcached": Server("memcached", "-S"), "mnemod": Server("mnemod", "-S")}
    finally:
        if old is None:
            del os.environ["SASL_CONF_PATH"]
        else:
            os.environ["SASL_CONF_PATH"] = old


@pytest.fixture(scope="module")
def pair(sasl_env):
    servers = start_both(sasl_env)
    yield servers
    for s in servers.values():
        s.stop()


@pytest.mark.parametrize("name", list(SASL_CASES))
def test_same_conversations_from_the_sasldb(pair, name):
    want = run_case(pair["memcached"].port, SASL_CASES[name])
    got = run_case(pair["mnemod"].port, SASL_CASES[name])
    assert got == want


def auth_status(port, user, password):
    with connect(port) as s:
        got, _ = converse(s, req("SASL_AUTH", b"PLAIN", b"\0" + user.encode() + b"\0" + password.encode()))
        return got[0]["status"] if got else None


def test_every_user_of_a_multi_page_database(pair):
    for user, password in list(MANY.items())[::37] + [("user007", "wrong"), ("nobody", "x")]:
        want = auth_status(pair["memcached"].port, user, password)
        assert auth_status(pair["mnemod"].port, user, password) == want, user


def test_unreadable_database_is_one_clear_line(tmp_path):
    (tmp_path / "memcached.conf").write_text(f"sasldb_path: {tmp_path / 'db'}\n")
    (tmp_path / "db").write_bytes(b"\x13\x57\x9a\xce" + b"\0" * 4092)  # a gdbm-like file
    env = dict(os.environ, SASL_CONF_PATH=str(tmp_path))
    r = subprocess.run([MNEMOD, "-S", "-p", "0"], capture_output=True, text=True, timeout=10, env=env)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "-Y" in lines[0] and "MEMCACHED_SASL_PWDB" in lines[0] and str(tmp_path / "db") in lines[0]


def test_a_password_file_still_wins(sasl_env, tmp_path):
    """-Y (or MEMCACHED_SASL_PWDB) is used as before when given, the sasldb ignored."""
    pw = tmp_path / "users"
    pw.write_text("carol:pw\n")
    old = os.environ.get("SASL_CONF_PATH")
    os.environ["SASL_CONF_PATH"] = str(sasl_env)
    try:
        srv = Server("mnemod", "-S", "-Y", str(pw))
    finally:
        if old is None:
            del os.environ["SASL_CONF_PATH"]
        else:
            os.environ["SASL_CONF_PATH"] = old
    with srv:
        assert auth_status(srv.port, "carol", "pw") == 0
        assert auth_status(srv.port, "alice", "secret") == 0x20
