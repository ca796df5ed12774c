"""What an operator's slip or a failing disk does to the flash tier (issue 47): a second server
reaching the flash file through a symlink refuses to start (the lock is on the file, as
memcached's is), one file named twice is refused by name, and a flash file whose writes fail
shows it in `stats`, `/metrics` and the log instead of losing values silently."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from servers import MNEMOD, ROOT, Server, command, roundtrip, stats
from test_flash import flash_args, set_many, wait_flash_writes
from test_metrics import Metrics


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_a_second_server_through_a_symlink_refuses_to_start(kind, tmp_path):
    """Before, mnemod locked FILE.lock beside the path it was given: a symlink to the flash
    file (or a deleted FILE.lock) let a second server start, and the first then served the
    second's values. memcached's lock is on the file itself; so is mnemod's now."""
    path = tmp_path / "flash"
    link = tmp_path / "link"
    with Server(kind, *flash_args(path)) as first, first.connect() as s:
        os.symlink(path, link)
        for lock in tmp_path.glob("*.lock"):
            lock.unlink()
        second = subprocess.run(command(kind, "-p", "0", *flash_args(link)), capture_output=True, text=True,
                                timeout=30)
        assert second.returncode != 0, second
        if kind == "mnemod":
            assert second.stderr.strip().splitlines() == [
                f"mnemod: -o ext_path {link}: in use by another mnemod (pid {first.proc.pid}); refusing to start"], \
                second.stderr
        else:
            assert "Failed to initialize external storage" in second.stderr, second.stderr
        assert roundtrip(s, b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
        assert roundtrip(s, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n"


def test_one_file_named_twice_is_refused_by_name(tmp_path):
    """`-e F` and `-o ext_path=F` (here through a symlink) would write one file two ways."""
    path = tmp_path / "cache"
    link = tmp_path / "link"
    path.touch()
    os.symlink(path, link)
    r = subprocess.run(command("mnemod", "-p", "0", "-e", str(path), *flash_args(link)), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0, r
    assert r.stderr.strip().splitlines() == [
        f"mnemod: -o ext_path {link}: the same file as -e {path}; each needs a file of its own"], r.stderr


def immutable(path, on):
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


def test_flash_write_failures_are_counted_shown_and_logged():
    """Before, a flash file whose writes failed (its disk full, or made immutable as here) lost
    the values it was given while every set said STORED, and nothing showed it: the store
    counted the errors but no stat, metric or log line did."""
    # Under the checkout, not /tmp: chattr needs a filesystem with attributes (ext4 here).
    d = ROOT / "target" / "flash-faults"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    path = d / "flash"
    path.touch()
    if os.geteuid() != 0 or not shutil.which("chattr") or not immutable(path, True):
        pytest.skip("making a file immutable needs root and chattr on an ext4-like filesystem")
    immutable(path, False)
    try:
        with Metrics("-m", "8", *flash_args(path, "64m", "ext_item_size=512")) as srv, srv.connect() as s:
            keys = [b"w:%d" % i for i in range(6000)]
            val = lambda k: (k + b"|") * (4096 // (len(k) + 1))
            set_many(s, keys[:3000], val)
            wait_flash_writes(s)
            assert int(stats(s)["extstore_objects_written"]) > 0
            assert stats(s)["extstore_io_errors"] == "0"
            assert immutable(path, True)
            # Every set is still acknowledged: a cache may forget these values, and says so.
            set_many(s, keys[3000:], val)
            deadline = time.monotonic() + 30
            while int(stats(s)["extstore_io_errors"]) == 0:
                assert time.monotonic() < deadline, "no flash write failed"
                set_many(s, keys[:500], val)
            n = int(stats(s)["extstore_io_errors"])
            values, _ = srv.scrape()
            assert values[("mnemo_extstore_io_errors_total", frozenset())] >= n
            deadline = time.monotonic() + 30
            while "I/O error(s) in the last second" not in srv.stderr():
                assert time.monotonic() < deadline, srv.stderr()
                time.sleep(0.05)
            line = next(l for l in srv.stderr().splitlines() if "I/O error(s)" in l)
            assert line.startswith("mnemod: flash file: ") and "Operation not permitted" in line, line
            assert "stats: extstore_io_errors" in line, line
            # What failed to be written reads as a miss, never as other bytes.
            reply = roundtrip(s, b"get " + b" ".join(keys) + b"\r\n", b"END\r\n")
            pos = 0
            while not reply.startswith(b"END\r\n", pos):
                eol = reply.index(b"\r\n", pos)
                _, k, _, n = reply[pos:eol].split()
                assert reply[eol + 2:eol + 2 + int(n)] == val(k), k
                pos = eol + 2 + int(n) + 2
    finally:
        immutable(path, False)
        shutil.rmtree(d, ignore_errors=True)


def stop_gracefully(srv):
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(timeout=60) == 0, srv.stderr()


def test_a_newer_flash_list_wins_over_an_older_snapshot(tmp_path):
    """Runs with and without `-e` taking turns on one flash file: the snapshot the first wrote
    is older than the flash list the second wrote. Restoring the snapshot served the first
    run's values for keys the second run had overwritten; the newer list is read instead."""
    snap, flash = tmp_path / "snap", tmp_path / "flash"
    keys = [b"t:%d" % i for i in range(3000)]
    old = lambda k: (b"old|" + k) * 300
    new = lambda k: (b"new|" + k) * 300
    with Server("mnemod", "-m", "8", "-e", str(snap), *flash_args(flash)) as a, a.connect() as s:
        set_many(s, keys, old)
        wait_flash_writes(s)
        stop_gracefully(a)
    with Server("mnemod", "-m", "8", *flash_args(flash)) as b, b.connect() as s:
        set_many(s, keys, new)
        wait_flash_writes(s)
        stop_gracefully(b)
    with Server("mnemod", "-m", "8", "-e", str(snap), *flash_args(flash)) as c, c.connect() as s:
        reply = roundtrip(s, b"get " + b" ".join(keys) + b"\r\n", b"END\r\n")
        served = 0
        pos = 0
        while not reply.startswith(b"END\r\n", pos):
            eol = reply.index(b"\r\n", pos)
            _, k, _, n = reply[pos:eol].split()
            assert reply[eol + 2:eol + 2 + int(n)] == new(k), f"{k} holds a value overwritten before the last stop"
            pos = eol + 2 + int(n) + 2
            served += 1
        assert served > 0, c.stderr()
        assert "older than" in c.stderr(), c.stderr()
