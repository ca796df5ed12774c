"""The flash tier (`-o ext_path=FILE:SIZE`, memcached's extstore) against the real mnemod and,
where the behaviour is memcached's, memcached with the same flags in the same run: values
that leave RAM are read back, overwritten and deleted keys never return an old value, a full
flash file keeps serving, a damaged or truncated file yields misses (never wrong bytes), and
the issue's setting (-m 64, a 1 GB file, 120,000 values of 4 KB) on both servers."""
import os
import pathlib
import shutil
import signal
import socket
import tempfile
import subprocess
import time

import pytest

from servers import MNEMOD, ROOT, Server, command, roundtrip, stats

VALUE = 4096


def value(i, n=VALUE, salt=b""):
    pat = salt + b"%09d|" % i
    return (pat * (n // len(pat) + 1))[:n]


def set_many(s, keys, make, batch=100):
    """Pipelined sets, `batch` at a time (each batch's replies read before the next: the pace
    of a client that waits for its writes). After each batch it also waits until the server's
    queue of flash writes is empty (`extstore_io_queue`): on a loaded machine the writer can
    fall behind a client's pace, and what cannot be written in time is evicted instead, which
    is the documented behaviour but not what these tests measure."""
    for b in range(0, len(keys), batch):
        if b:
            wait_flash_writes(s)
        chunk = keys[b:b + batch]
        req = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v) for k, v in ((k, make(k)) for k in chunk))
        s.sendall(req)
        want = b"STORED\r\n" * len(chunk)
        got = b""
        while len(got) < len(want):
            d = s.recv(1 << 20)
            assert d, "server closed"
            got += d
        assert got == want, got[:200]


def wait_flash_writes(s, deadline=30):
    until = time.monotonic() + deadline
    while stats(s).get("extstore_io_queue", "0") != "0":
        assert time.monotonic() < until, "the flash writer never caught up"


def get_many(s, keys, batch=100):
    """Multi-gets; returns {key: value} for the hits."""
    out = {}
    for b in range(0, len(keys), batch):
        reply = roundtrip(s, b"get " + b" ".join(keys[b:b + batch]) + b"\r\n", b"END\r\n")
        pos = 0
        while not reply.startswith(b"END\r\n", pos):
            eol = reply.index(b"\r\n", pos)
            head = reply[pos:eol].split()
            assert head[0] == b"VALUE", reply[pos:pos + 100]
            n = int(head[3])
            out[head[1]] = reply[eol + 2:eol + 2 + n]
            pos = eol + 2 + n + 2
    return out


def key(i):
    return b"fk:%d" % i


def flash_args(path, size="64m", *more):
    opts = ["ext_page_size=2", "ext_wbuf_size=2", *more, f"ext_path={path}:{size}"]
    return ["-o", ",".join(opts)]


def served_and_wrong(s, n, make):
    got = get_many(s, [key(i) for i in range(n)])
    wrong = [k for k, v in got.items() if v != make(k)]
    return len(got), wrong


def make_value(k):
    return value(int(k.split(b":")[1]))


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_values_beyond_ram_are_served_from_flash(kind, tmp_path):
    n = 12_000  # 48 MB of values into -m 16
    with Server(kind, "-m", "16", *flash_args(tmp_path / "flash", "256m")) as srv, srv.connect() as s:
        set_many(s, [key(i) for i in range(n)], make_value)
        served, wrong = served_and_wrong(s, n, make_value)
        st = stats(s)
    print(f"{kind}: {served} of {n} served from -m 16 + 256 MB of flash, "
          f"extstore_objects_written {st['extstore_objects_written']}")
    assert wrong == []
    assert int(st["extstore_objects_written"]) > 0
    assert int(st["get_extstore"]) > 0
    if kind == "mnemod":
        assert served >= n * 0.95, served


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_overwritten_and_deleted_flashed_keys_never_come_back(kind, tmp_path):
    n = 8_000
    with Server(kind, "-m", "16", *flash_args(tmp_path / "flash", "256m")) as srv, srv.connect() as s:
        set_many(s, [key(i) for i in range(n)], make_value)
        # The oldest keys are on flash by now (memcached: if it kept them at all).
        early = [key(i) for i in range(0, 400)]
        fresh = lambda k: value(int(k.split(b":")[1]), 3000, salt=b"new")
        set_many(s, early[:200], fresh)
        for k in early[200:]:
            assert roundtrip(s, b"delete %s\r\n" % k) in (b"DELETED\r\n", b"NOT_FOUND\r\n")
        # Push the new copies out of RAM too.
        set_many(s, [key(i) for i in range(n, 2 * n)], make_value)
        got = get_many(s, early)
        for k in early[:200]:
            assert got.get(k, fresh(k)) == fresh(k), k
        assert not any(k in got for k in early[200:]), "a deleted key came back"
        if kind == "mnemod":
            assert sum(k in got for k in early[:200]) >= 190
        # flush_all: nothing written before it is served, from RAM or flash.
        assert roundtrip(s, b"flush_all\r\n") == b"OK\r\n"
        assert get_many(s, [key(i) for i in range(2 * n)]) == {}


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_a_full_flash_file_keeps_serving_right_values(kind, tmp_path):
    n = 12_000  # 48 MB of values: -m 8 plus a 16 MB file hold about half
    with Server(kind, "-m", "8", *flash_args(tmp_path / "flash", "16m")) as srv, srv.connect() as s:
        set_many(s, [key(i) for i in range(n)], make_value)
        served, wrong = served_and_wrong(s, n, make_value)
        st = stats(s)
        assert roundtrip(s, b"version\r\n").startswith(b"VERSION")
    print(f"{kind}: full 16 MB file: {served} of {n} served, page evictions {st['extstore_page_evictions']}")
    assert wrong == []
    if kind == "mnemod":
        assert int(st["extstore_page_evictions"]) + int(st["extstore_page_reclaims"]) > 0
        assert int(st["extstore_pages_free"]) == 0
        # The newest values are the ones kept.
        assert served > 3000


def written_to_file(s):
    return int(stats(s)["extstore_bytes_written"]) - 2 * (1 << 20)


def test_flipped_bytes_in_the_file_are_misses_never_wrong_values(tmp_path):
    path = tmp_path / "flash"
    n = 8_000
    with Server("mnemod", "-m", "16", *flash_args(path, "256m")) as srv, srv.connect() as s:
        set_many(s, [key(i) for i in range(n)], make_value)
        assert written_to_file(s) > 8 << 20
        # Flip one byte in every 4 KB of the first 8 MB written, while the server runs.
        with open(path, "r+b") as f:
            for off in range(100, 8 << 20, 4096):
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ 0x40]))
        served, wrong = served_and_wrong(s, n, make_value)
        st = stats(s)
        assert wrong == []
        assert served < n
        assert int(st["badcrc_from_extstore"]) > 0, st
        # Damaged records are forgotten: asked again, they are plain misses without a read.
        again, wrong = served_and_wrong(s, n, make_value)
        assert wrong == [] and again == served
        assert int(stats(s)["badcrc_from_extstore"]) == int(st["badcrc_from_extstore"])


def test_a_truncated_file_is_misses_and_the_server_lives(tmp_path):
    path = tmp_path / "flash"
    n = 8_000
    with Server("mnemod", "-m", "16", *flash_args(path, "256m")) as srv, srv.connect() as s:
        set_many(s, [key(i) for i in range(n)], make_value)
        before, _ = served_and_wrong(s, n, make_value)
        os.truncate(path, 4 << 20)
        served, wrong = served_and_wrong(s, n, make_value)
        assert wrong == []
        assert served < before
        assert int(stats(s)["miss_from_extstore"]) + int(stats(s)["badcrc_from_extstore"]) > 0
        # New writes still work (and read back) after the damage.
        set_many(s, [key(i) for i in range(n, n + 2000)], make_value)
        got = get_many(s, [key(i) for i in range(n, n + 2000)])
        assert all(v == make_value(k) for k, v in got.items())
        assert srv.alive()


def last_list_block(path):
    """The entry count of the last block of a flash list (FILE.entries: mnemo-store
    flash/keep.rs), and that block's offset."""
    b = path.read_bytes()
    pages, nfull = int.from_bytes(b[16:20], "little"), int.from_bytes(b[20:24], "little")
    at, last = 48 + pages * 20 + nfull * 4 + 8, None
    while at < len(b):
        count = int.from_bytes(b[at:at + 4], "little")
        last = (count, at)
        at += 16 + count * 16
    return last


def test_a_graceful_restart_keeps_what_was_on_flash(tmp_path):
    """Beyond memcached (whose extstore contents are lost on every restart): a graceful stop
    keeps the flashed values, without -e (a list of their places beside the file, read at
    the next start) and with -e (the snapshot holds them); deleted keys stay deleted; a
    damaged list costs hits, never a wrong value."""
    n = 12_000
    flash = flash_args(tmp_path / "flash", "256m")
    args = ["-m", "16", "-e", str(tmp_path / "snap"), *flash]
    listed = tmp_path / "flash.entries"
    with Server("mnemod", "-m", "16", *flash) as first:
        with first.connect() as s:
            set_many(s, [key(i) for i in range(n)], make_value)
            for i in range(0, 100):
                assert roundtrip(s, b"delete %s\r\n" % key(i)) == b"DELETED\r\n"
            before = get_many(s, [key(i) for i in range(n)])
            on_flash = int(stats(s)["extstore_objects_used"])
        first.proc.send_signal(signal.SIGTERM)  # a flash tier: write the list and exit
        assert first.proc.wait(timeout=120) == 0, first.stderr()
    # One flipped byte in the list's last entry block: its entries are dropped at the start.
    count, at = last_list_block(listed)
    damaged = bytearray(listed.read_bytes())
    damaged[at + 16 + count * 8] ^= 0x20
    listed.write_bytes(bytes(damaged))
    # -e with no snapshot yet: the list brings the flashed items back.
    with Server("mnemod", *args) as second:
        with second.connect(timeout=60) as s:
            kept = get_many(s, [key(i) for i in range(n)])
        assert not listed.exists(), "the list is removed at the start"
        second.proc.send_signal(signal.SIGTERM)  # -e: write the snapshot and exit
        assert second.proc.wait(timeout=120) == 0, second.stderr()
    print(f"mnemod: {len(before)} served before the restart ({on_flash} on flash), {len(kept)} after it "
          f"without -e, {count} of them in the damaged block")
    assert on_flash > n // 2
    assert all(v == make_value(k) for k, v in kept.items()), "a wrong value after the restart without -e"
    assert not any(key(i) in kept for i in range(100)), "a deleted key came back"
    assert 0.99 * (on_flash - count) <= len(kept) <= on_flash - count, (len(kept), on_flash, count)
    with Server("mnemod", *args) as srv, srv.connect(timeout=120) as s:
        # The listener is bound before the restore runs, so the port answers at once while
        # the first request waits in the backlog for the restore (1.8 s on a quiet machine
        # for these 48 MB, more than the 5 s socket deadline under a loaded one: the cause of
        # this test's timeouts). Its first reply says the restore is done.
        assert stats(s, b"snapshot")["snapshot_restore"] == "complete"
        s.settimeout(5)
        after = get_many(s, [key(i) for i in range(n)])
        st = stats(s)
    print(f"mnemod: {len(after)} served after the restart with -e")
    assert all(v == make_value(k) for k, v in after.items())
    assert not any(key(i) in after for i in range(100)), "a deleted key came back"
    assert len(after) >= 0.99 * len(kept), (len(after), len(kept))
    assert int(st["extstore_objects_used"]) > n // 3


def test_compaction_keeps_the_live_records_of_churned_pages(tmp_path):
    """Nine in ten keys overwritten: their pages are mostly dead; compaction (once a second, in
    the background) copies the live tenth out before the pages are reused."""
    with Server("mnemod", "-m", "8", *flash_args(tmp_path / "flash", "16m")) as srv, srv.connect() as s:
        n = 4000
        set_many(s, [key(i) for i in range(n)], make_value)
        set_many(s, [key(i) for i in range(n) if i % 10], lambda k: b"x")
        # New data until at most a quarter of the pages are free (compaction's trigger), no
        # further: the churned pages must still be there, the oldest ones.
        while int(stats(s)["extstore_pages_free"]) > 2:
            set_many(s, [key(i) for i in range(n, n + 50)], make_value)
            n += 50
        assert int(stats(s)["extstore_page_evictions"]) == 0
        # The maintenance pass (once a second) compacts in the background: poll its counter.
        deadline = time.monotonic() + 30
        while int(stats(s)["extstore_compact_rescues"]) == 0:
            assert time.monotonic() < deadline, stats(s)
            time.sleep(0.05)
        survivors = [key(i) for i in range(0, 4000, 10)]
        got = get_many(s, survivors)
        assert all(v == make_value(k) for k, v in got.items())
        assert len(got) > 0


def test_a_flash_file_on_a_full_disk_stops_the_start(tmp_path):
    """The file's space is reserved at start: a disk without room for it stops mnemod with one
    line (memcached starts and loses the writes later). A 4 MiB tmpfs plays the full disk."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        args = ["-o", f"ext_page_size=2,ext_wbuf_size=2,ext_path={mnt}/flash:64m"]
        mn = subprocess.run([MNEMOD, "-p", "0", "-U", "0", *args], capture_output=True, text=True, timeout=30)
        assert mn.returncode == 2, mn
        assert mn.stderr.strip().splitlines() == [
            "mnemod: -o: Failed to initialize external storage: cannot reserve the file's space: "
            "No space left on device (os error 28)"], mn.stderr
        with Server("memcached", *args) as srv:
            print(f"memcached starts with a 64 MB ext_path on a 4 MB disk: {srv.alive()}")
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_incr_append_and_touch_work_on_flashed_items(tmp_path):
    with Server("mnemod", "-m", "8", *flash_args(tmp_path / "flash", "64m", "ext_item_size=16")) as srv, \
            srv.connect() as s:
        num = b"%020d" % 41
        assert roundtrip(s, b"set num 5 0 20\r\n%s\r\n" % num) == b"STORED\r\n"
        assert roundtrip(s, b"set txt 6 0 20\r\n%s\r\n" % (b"t" * 20)) == b"STORED\r\n"
        set_many(s, [key(i) for i in range(6000)], make_value)
        assert int(stats(s)["extstore_objects_written"]) > 0
        assert roundtrip(s, b"incr num 1\r\n") == b"42\r\n"
        assert roundtrip(s, b"append txt 0 0 2\r\n!!\r\n") == b"STORED\r\n"
        assert roundtrip(s, b"touch txt 1000\r\n") == b"TOUCHED\r\n"
        assert roundtrip(s, b"get num txt\r\n", b"END\r\n") == (
            b"VALUE num 5 20\r\n42                  \r\nVALUE txt 6 22\r\n" + b"t" * 20 + b"!!\r\nEND\r\n")


def test_options_and_refusals(tmp_path):
    path = tmp_path / "flash"
    with Server("mnemod", "-m", "16", "-o", f"ext_page_size=8,ext_wbuf_size=2,ext_item_size=100,ext_path={path}:64m") as srv, \
            srv.connect() as s:
        st = stats(s, b"settings")
        assert (st["ext_item_size"], st["ext_wbuf_size"], st["ext_compact_under"]) == ("100", "2097152", "2")
        g = stats(s)
        assert (g["extstore_limit_maxbytes"], g["extstore_pages_free"]) == (str(64 << 20), "8")
        assert "extended_options_ignored" not in st
    assert os.path.getsize(path) == 64 << 20
    with Server("memcached", "-m", "16", "-o", f"ext_page_size=8,ext_wbuf_size=2,ext_path={path}x:64m") as srv, \
            srv.connect() as s:
        mc = stats(s)
        mc_replies = extstore_replies(s)
        mc_settings = stats(s, b"settings")
    # The same extstore field names, in the same order, as memcached's `stats`; then mnemo's one
    # addition, the flash file's I/O errors (memcached only prints them: issue 47).
    with Server("mnemod", "-m", "16", "-o", f"ext_page_size=8,ext_wbuf_size=2,ext_path={path}:64m") as srv, \
            srv.connect() as s:
        mn = stats(s)
        mn_replies = extstore_replies(s)
        mn_settings = stats(s, b"settings")
    ext = lambda st: [k for k in st if "extstore" in k]
    assert ext(mn) == ext(mc) + ["extstore_io_errors"]
    # `extstore <name> <value>` at run time: memcached's replies, and the values it keeps.
    assert mn_replies == mc_replies
    # memcached's safe_strtoul/strtod zero the setting before refusing a value (`max_frag abc`,
    # `low_ttl abc`): mnemo keeps the last good one (extstore.rs), the one difference.
    quirk = ("ext_max_frag", "ext_low_ttl")
    ext_settings = lambda st: {k: v for k, v in st.items() if k.startswith("ext_") and k not in quirk}
    assert ext_settings(mn_settings) == ext_settings(mc_settings)
    assert [mc_settings[k] for k in quirk] == ["0.00", "0"]
    assert [mn_settings[k] for k in quirk] == ["0.50", "4"]
    assert mn_settings["ext_recache_rate"] == "7" and mn_settings["ext_item_size"] == "600"


EXTSTORE_LINES = [
    b"extstore", b"extstore noreply", b"extstore foo", b"extstore foo 1", b"extstore recache_rate",
    b"extstore recache_rate abc", b"extstore recache_rate -1", b"extstore recache_rate 5 6",
    b"extstore recache_rate +7", b"extstore item_age 0x10", b"extstore item_age 9", b"extstore low_ttl 3",
    b"extstore item_size 600", b"extstore compact_under 2", b"extstore drop_under 1", b"extstore max_sleep 99",
    b"extstore drop_unread 2", b"extstore max_frag 0.5", b"extstore max_frag abc", b"extstore ratio 0.5",
    b"extstore free_memchunks 1 2", b"extstore free_memchunks 1", b"extstore free_memchunks 64 2",
    b"extstore low_ttl 4 noreply", b"extstore low_ttl abc noreply", b"extstore MAX_SLEEP 1",
]


def extstore_replies(s):
    """Each line's reply, up to an `mn` sent after it (so a silent noreply shows as b"")."""
    return [roundtrip(s, line + b"\r\nmn\r\n", b"MN\r\n") for line in EXTSTORE_LINES]


# 43 s, the slowest test of the run: once per test run, under the default loop (uring). What it
# measures is the store's (what stays served), and the other flash tests run under both loops.
@pytest.mark.skipif(os.environ.get("MNEMO_IO_LOOP") == "epoll",
                    reason="runs once per test run, under the default io loop")
def test_the_issues_setting_both_servers(tmp_path):
    """issue 37: -m 64, a 1 GB file, 120,000 values of 4 KB stored at a moderate pace: how
    many are served afterwards, none wrong."""
    n = 120_000
    result = {}
    for kind in ["memcached", "mnemod"]:
        path = tmp_path / f"flash-{kind}"
        with Server(kind, "-m", "64", "-o", f"ext_path={path}:1G,ext_item_size=512") as srv, srv.connect() as s:
            set_many(s, [key(i) for i in range(n)], make_value)
            served, wrong = served_and_wrong(s, n, make_value)
            st = stats(s)
        os.unlink(path)
        result[kind] = served
        print(f"{kind}: {served} of {n} served ({served / n:.1%}), wrong {len(wrong)}, "
              f"written to flash {st['extstore_objects_written']}, evictions {st['evictions']}")
        assert wrong == []
    assert result["mnemod"] >= 0.95 * n, result


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_a_second_server_on_the_same_file_refuses_to_start(kind, tmp_path):
    """extstore.t's first test: the flash file is owned by one process. memcached says
    `extstore open: Resource temporarily unavailable` and `Failed to initialize external
    storage: failed to open file`; mnemod one line naming the owner. The first keeps serving."""
    path = tmp_path / "flash"
    args = flash_args(path)
    with Server(kind, *args) as first, first.connect() as s:
        second = subprocess.run(command(kind, "-p", "0", *args), capture_output=True, text=True, timeout=30)
        assert second.returncode != 0, second
        if kind == "mnemod":
            assert second.stderr.strip().splitlines() == [
                f"mnemod: -o ext_path {path}: in use by another mnemod (pid {first.proc.pid}); refusing to start"], second.stderr
        else:
            assert "Failed to initialize external storage" in second.stderr, second.stderr
        assert roundtrip(s, b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    # Once the owner is gone, the file is free again.
    with Server(kind, *args) as again, again.connect() as s:
        assert roundtrip(s, b"version\r\n").startswith(b"VERSION")


def large_class_items(s):
    """What memcached's suite (`wait_for_ext`) sums: `stats items` numbers of classes 3 and up,
    the RAM items that would go to flash."""
    st = stats(s, b"items")
    return sum(int(v) for k, v in st.items() if k.endswith(":number") and int(k.split(":")[1]) >= 3)


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_item_age_sends_idle_large_items_to_flash_before_memory_is_full(kind, tmp_path):
    """ext_item_age=2 with RAM to spare: the large values go to flash within seconds (classes 3
    and up of `stats items` fall to 0), the small one stays, nothing is evicted, all read back."""
    args = ["-m", "64", "-o", f"ext_item_size=512,ext_item_age=2,ext_wbuf_size=2,ext_page_size=8,ext_path={tmp_path / 'flash'}:64m"]
    with Server(kind, *args) as srv, srv.connect() as s:
        assert roundtrip(s, b"set small 0 0 2\r\nhi\r\n") == b"STORED\r\n"
        big = lambda k: value(int(k.split(b":")[1]), 20000)
        keys = [key(i) for i in range(100)]
        set_many(s, keys, big)
        assert large_class_items(s) > 0
        deadline = time.monotonic() + 30
        while large_class_items(s) > 0:
            assert time.monotonic() < deadline, stats(s, b"items")
            time.sleep(0.2)
        st = stats(s)
        assert int(st["extstore_objects_written"]) >= 100, st
        assert st["evictions"] == "0"
        assert get_many(s, keys) == {k: big(k) for k in keys}
        assert roundtrip(s, b"get small\r\n", b"END\r\n") == b"VALUE small 0 2\r\nhi\r\nEND\r\n"


def test_stats_extstore_lists_every_page_as_memcached_does(tmp_path):
    """memcached 1.6.18's `stats extstore` with ext_path: four lines per page, every page, in
    page order; identical on a fresh file. After large items went to flash (ext_item_age=1),
    the pages written carry a version and their live bytes, which sum to extstore_bytes_used."""
    seen = {}
    for kind in ["memcached", "mnemod"]:
        args = ["-m", "64", "-o", f"ext_item_size=512,ext_item_age=1,ext_wbuf_size=2,ext_page_size=8,ext_path={tmp_path / kind}:64m"]
        with Server(kind, *args) as srv, srv.connect() as s:
            fresh = roundtrip(s, b"stats extstore\r\n", b"END\r\n")
            big = lambda k: value(int(k.split(b":")[1]), 20000)
            keys = [key(i) for i in range(600)]  # 12 MB: more than one 8 MB page
            set_many(s, keys, big)
            # Until the items left RAM and a page was written (memcached fills a write buffer
            # before its page gets a version).
            deadline = time.monotonic() + 30
            while large_class_items(s) > 0 or all(v == "0" for k, v in stats(s, b"extstore").items() if k.endswith(":version")):
                assert time.monotonic() < deadline, (kind, stats(s, b"items"), stats(s, b"extstore"))
                time.sleep(0.2)
            pages = stats(s, b"extstore")
            used = stats(s)["extstore_bytes_used"]
        seen[kind] = (fresh, list(pages))
        assert len(pages) == 8 * 4
        written = [n for n in range(8) if pages[f"{n}:version"] != "0"]
        assert written and all(int(pages[f"{n}:bytes"]) > 0 for n in written), pages
        assert all(pages[f"{n}:bucket"] == pages[f"{n}:free_bucket"] == "0" for n in range(8))
        if kind == "mnemod":
            assert sum(int(pages[f"{n}:bytes"]) for n in range(8)) == int(used)
    assert seen["mnemod"] == seen["memcached"]


def wait_until(s, what, done, limit=40, sub=b""):
    """Polls `stats [sub]` until `done(stats)` holds (memcached's background threads act
    within a second or so; mnemod's maintenance pass runs once a second)."""
    deadline = time.monotonic() + limit
    while True:
        st = stats(s, sub)
        if done(st):
            return st
        assert time.monotonic() < deadline, (what, st)
        time.sleep(0.2)


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_low_ttl_items_go_to_pages_of_their_own_reclaimed_once_expired(kind, tmp_path):
    """ext_low_ttl=60: items with less TTL left when they go to flash (ext_item_age=1) are
    written to pages of their own (`stats extstore` bucket 3, memcached's low-TTL bucket);
    once they have expired those pages are reclaimed whole (extstore_page_reclaims), while
    the items without TTL, on the other pages, are all still served."""
    args = ["-m", "256", "-o", "ext_item_size=512,ext_item_age=1,ext_wbuf_size=2,ext_page_size=8,"
            f"ext_max_frag=0,ext_low_ttl=60,ext_path={tmp_path / 'flash'}:64m"]
    big = lambda k: value(int(k.split(b":")[1]), 20000)
    short = [key(i) for i in range(1000)]  # 20 MB: two full 8 MB pages and an open one
    kept = [key(i) for i in range(1000, 1200)]
    with Server(kind, *args) as srv, srv.connect() as s:
        req = b"".join(b"set %s 0 9 20000 noreply\r\n%s\r\n" % (k, big(k)) for k in short)
        req += b"".join(b"set %s 0 0 20000 noreply\r\n%s\r\n" % (k, big(k)) for k in kept)
        sent = time.monotonic()
        s.sendall(req)
        assert roundtrip(s, b"mn\r\n") == b"MN\r\n"
        wait_until(s, "all on flash", lambda st: int(st["extstore_objects_written"]) >= 1150)
        # memcached shows a page's bucket once it is full (its maintenance thread's copy).
        low_pages = lambda p: [n for n in range(8) if p[f"{n}:bucket"] == "3"]
        low = low_pages(wait_until(s, "low-TTL pages", lambda p: len(low_pages(p)) >= 2, sub=b"extstore"))
        # None reclaimed before the items could expire (a loaded machine can take longer than
        # their 9 s to get here; then only the end state below is checked).
        if time.monotonic() - sent < 8:
            assert stats(s)["extstore_page_reclaims"] == "0"
        # Until they have expired (9 s); memcached drops the expired headers when its crawler
        # passes.
        wait_until(s, "expired", lambda st: get_many(s, short[-1:]) == {})
        assert roundtrip(s, b"lru_crawler crawl all\r\n") == b"OK\r\n"
        st = wait_until(s, "low-TTL pages reclaimed", lambda st: int(st["extstore_page_reclaims"]) >= 2)
        assert get_many(s, short) == {}
        assert get_many(s, kept) == {k: big(k) for k in kept}
    print(f"{kind}: pages {low} in the low-TTL bucket, extstore_page_reclaims {st['extstore_page_reclaims']}")


def drop_unread_args(tmp_path):
    return ["-m", "64", "-o", "ext_item_size=512,ext_item_age=1,ext_wbuf_size=2,ext_page_size=8,"
            f"ext_recache_rate=10000,ext_max_frag=0,ext_compact_under=1,ext_path={tmp_path / 'flash'}:64m"]


DROP_UNREAD_KEYS = [key(i) for i in range(2000)]  # 40 MB of 20 KB values: five 8 MB pages
DROP_UNREAD_READ = DROP_UNREAD_KEYS[:200:2]  # on the oldest page, read twice: kept by both


def big_value(k):
    return value(int(k.split(b":")[1]), 20000)


def drop_unread_pass(s):
    """Fills the file, reads DROP_UNREAD_READ twice, then turns ext_drop_unread on (max_frag 0,
    compact_under and drop_under 4) until a page comes free, and off again. Returns the stats
    before the pass and once it dropped."""
    keys, read = DROP_UNREAD_KEYS, DROP_UNREAD_READ
    set_many(s, keys, big_value)
    before = wait_until(s, "on flash", lambda st: int(st["extstore_objects_written"]) >= 1950
                        and int(st["extstore_pages_free"]) <= 3)
    for _ in range(2):
        assert get_many(s, read) == {k: big_value(k) for k in read}
    for cmd in [b"max_frag 0", b"compact_under 4", b"drop_under 4", b"drop_unread 1"]:
        assert roundtrip(s, b"extstore " + cmd + b"\r\n") == b"OK\r\n"
    dropped = wait_until(s, "dropped", lambda st: int(st["extstore_compact_skipped"]) > 0
                         and int(st["extstore_pages_free"]) > int(before["extstore_pages_free"]))
    assert roundtrip(s, b"extstore drop_unread 0\r\n") == b"OK\r\n"
    return before, dropped


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_drop_unread_compacts_the_oldest_page_keeping_what_was_read(kind, tmp_path):
    """`extstore drop_unread 1` with drop_under above the free pages and max_frag 0 (no page is
    fragmented enough): the oldest page is compacted anyway; its records read since they went
    to flash are copied out (extstore_compact_rescues), the others dropped
    (extstore_compact_skipped), and pages come free. memcached keeps what left its COLD LRU
    (two reads); mnemo what was read at all since it was written: both read twice here."""
    with Server(kind, *drop_unread_args(tmp_path)) as srv, srv.connect() as s:
        before, st = drop_unread_pass(s)
        keys, read = DROP_UNREAD_KEYS, DROP_UNREAD_READ
        got = get_many(s, keys)
        assert all(v == big_value(k) for k, v in got.items())
        if kind == "mnemod":
            assert all(k in got for k in read), [k for k in read if k not in got]
            assert int(stats(s)["extstore_compact_rescues"]) > 0
    print(f"{kind}: compact_rescues {st['extstore_compact_rescues']} compact_skipped "
          f"{st['extstore_compact_skipped']} pages_free {before['extstore_pages_free']} -> "
          f"{st['extstore_pages_free']}, {len(got)} of {len(keys)} served")


# --- reads off the event loop (issue 37 stop 3) ----------------------------------------------------

def recv_exactly(s, n):
    got = b""
    while len(got) < n:
        d = s.recv(min(1 << 20, n - len(got)))
        assert d, "server closed"
        got += d
    return got


def drop_cache(path):
    """Write the file's dirty pages and drop its pages from the page cache: a read of it then
    waits for the disk (mnemod serves a flashed value on the worker only when it needs no disk
    I/O, and otherwise hands the read to its flash I/O threads)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture
def disk_path():
    """A directory on the work tree's disk: the page cache tests need a file system whose pages
    can be dropped (the temp dir may be tmpfs, whose pages never leave memory)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="flash-test-", dir=ROOT / "target"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def flashed_server(path, cache="cold", *more):
    """mnemod -t 1 with 8,000 values of 4 KB in -m 16 (its flash file in directory `path`):
    the first thousand keys are on flash, the last hundred in RAM; "cold": the file's pages
    dropped from the page cache."""
    srv = Server("mnemod", "-t", "1", "-m", "16", *more, *flash_args(path / "flash", "256m"))
    with srv.connect() as s:
        set_many(s, [key(i) for i in range(8000)], make_value)
        # Every full write buffer on disk first (the writer pops a buffer once it is written):
        # a record still in a write buffer is served from memory on the worker, cold or not,
        # and a loaded machine's writer can lag the sets (a CI run saw no flash I/O job).
        wait_until(s, "write buffers written", lambda st: st["extstore_io_queue"] == "0")
    if cache == "cold":
        drop_cache(path / "flash")
    return srv


def text_hit(k, cas=None):
    v = make_value(k)
    head = b"VALUE %s 0 %d" % (k, len(v)) + (b" %d" % cas if cas is not None else b"")
    return head + b"\r\n" + v + b"\r\n"


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_pipelined_text_and_meta_gets_of_flash_and_ram_keys_keep_request_order(cache, disk_path):
    """cold: the flashed values are read by the flash I/O thread; warm: on the worker, from the
    page cache. The replies are the same, in request order."""
    srv = flashed_server(disk_path, cache)
    try:
        with srv.connect() as s:
            flash = [key(i) for i in range(0, 40)]
            ram = [key(i) for i in range(7950, 7990)]
            before = stats(s)
            # Mixed multi-gets (flash first, in the middle, last), single gets, misses, mg
            # with and without the value, a set after a flashed get (it must not overtake).
            reqs = [
                (b"get %s %s %s\r\n" % (flash[0], ram[0], flash[1]), text_hit(flash[0]) + text_hit(ram[0]) + text_hit(flash[1]) + b"END\r\n"),
                (b"get %s nope %s\r\n" % (ram[1], flash[2]), text_hit(ram[1]) + text_hit(flash[2]) + b"END\r\n"),
                (b"get %s nope\r\n" % flash[3], text_hit(flash[3]) + b"END\r\n"),
                (b"get %s\r\n" % ram[2], text_hit(ram[2]) + b"END\r\n"),
                (b"mg %s v k h\r\n" % flash[4], b"VA 4096 k%s h0\r\n%s\r\n" % (flash[4], make_value(flash[4]))),
                (b"mg %s s f O123\r\n" % flash[5], b"HD s4096 f0 O123\r\n"),
                (b"mg %s v\r\n" % ram[3], b"VA 4096\r\n%s\r\n" % make_value(ram[3])),
                (b"mg nope v k O9\r\n", b"EN knope O9\r\n"),
                (b"mg nope v q\r\nmn\r\n", b"MN\r\n"),
                (b"get " + b" ".join(flash[6:30] + ram[4:30]) + b"\r\n",
                 b"".join(text_hit(k) for k in flash[6:30] + ram[4:30]) + b"END\r\n"),
                (b"get %s\r\nset %s 0 0 3\r\nnew\r\nget %s\r\n" % (flash[30], flash[30], flash[30]),
                 text_hit(flash[30]) + b"END\r\nSTORED\r\nVALUE %s 0 3\r\nnew\r\nEND\r\n" % flash[30]),
            ]
            req = b"".join(r for r, _ in reqs)
            want = b"".join(w for _, w in reqs)
            s.sendall(req)
            assert recv_exactly(s, len(want)) == want
            if cache == "cold":
                assert thread_cpu_ticks(srv.proc.pid, "mnemo-flash-io")[1] == 1, "reads went to the I/O thread"
            after = stats(s)
            # Every flashed key above was read from flash (none was in RAM).
            assert int(after["get_extstore"]) - int(before["get_extstore"]) == 6 + 24 + 1
            # Counted as before: 1 more cmd_get per key, hits and misses (the flash I/O thread
            # counts in a block of its own, summed by stats).
            keys_read = 3 + 3 + 2 + 1 + (1 + 1 + 1 + 2) + 50 + 2
            misses = 1 + 1 + 2
            assert int(after["cmd_get"]) - int(before["cmd_get"]) == keys_read
            assert int(after["get_misses"]) - int(before["get_misses"]) == misses
            assert int(after["get_hits"]) - int(before["get_hits"]) == keys_read - misses
            # gets: the CAS is the one stored.
            cas = int(roundtrip(s, b"mg %s c\r\n" % flash[31]).split()[1][1:])
            assert roundtrip(s, b"gets %s\r\n" % flash[31], b"END\r\n") == text_hit(flash[31], cas) + b"END\r\n"
            # The value read once more: now fetched (h1).
            assert roundtrip(s, b"mg %s h\r\n" % flash[4]) == b"HD h1\r\n"
            # A multi-get of 50 flashed keys: values in key order, their reads issued together
            # (cold: the I/O thread's one io_uring submission for the 50 disk reads, so next
            # to no read system call of its own; a pread each where the kernel has no io_uring).
            many = [key(i) for i in range(100, 150)]
            before, preads = stats(s), thread_syscr(srv.proc.pid, "mnemo-flash-io")
            got = roundtrip(s, b"get " + b" ".join(many) + b"\r\n", b"END\r\n")
            assert got == b"".join(text_hit(k) for k in many) + b"END\r\n"
            reads = int(stats(s)["extstore_objects_read"]) - int(before["extstore_objects_read"])
            preads = thread_syscr(srv.proc.pid, "mnemo-flash-io") - preads
            assert reads == 50, reads
            if cache == "cold":
                print(f"multi-get of 50 flashed keys (cold): {reads} records read, {preads} read system calls")
                # With a ring: a few at most, never one per record (51 when each record was
                # read in turn). A read the ring returns short is finished by a pread; the
                # release build shows 1 on every run here (its cause not yet pinned down).
                assert preads <= 5 if io_uring_available() else preads >= 50, preads
            else:
                assert preads == 0, "read from the page cache on the worker"
    finally:
        srv.stop()


def io_uring_available():
    """Whether this kernel lets a process set up an io_uring (io_uring_setup, syscall 425)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)
    if fd < 0:
        return False
    os.close(fd)
    return True


def bin_req(op, k, opaque):
    import struct
    return struct.pack(">BBHBBHIIQ", 0x80, op, len(k), 0, 0, 0, len(k), opaque, 0) + k


def bin_replies(s, n):
    import struct
    out = []
    for _ in range(n):
        h = recv_exactly(s, 24)
        magic, op, klen, elen, _, status, blen, opaque, cas = struct.unpack(">BBHBBHIIQ", h)
        body = recv_exactly(s, blen)
        out.append((op, status, opaque, body[elen:elen + klen], body[elen + klen:]))
    return out


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_pipelined_binary_gets_of_flash_and_ram_keys_keep_request_order(cache, disk_path):
    GET, GETQ, GETK, GETKQ, NOOP = 0x00, 0x09, 0x0C, 0x0D, 0x0A
    srv = flashed_server(disk_path, cache)
    try:
        with srv.connect() as s:
            f = [key(i) for i in range(100, 110)]
            r = [key(i) for i in range(7960, 7970)]
            plan = [  # (opcode, key, expected (key echoed, value) or None for no reply, or "miss")
                (GETQ, f[0], (b"", make_value(f[0]))),
                (GETK, r[0], (r[0], make_value(r[0]))),
                (GET, f[1], (b"", make_value(f[1]))),
                (GETKQ, b"nope", None),
                (GET, b"nope", "miss"),
                (GETK, f[2], (f[2], make_value(f[2]))),
                (GETQ, r[1], (b"", make_value(r[1]))),
                (GETKQ, f[3], (f[3], make_value(f[3]))),
                (GETK, b"nope", "kmiss"),
                (NOOP, b"", "noop"),
            ]
            s.sendall(b"".join(bin_req(op, k, 1000 + i) for i, (op, k, _) in enumerate(plan)))
            expect = [(i, op, w) for i, (op, _, w) in enumerate(plan) if w is not None]
            got = bin_replies(s, len(expect))
            for (i, op, w), (gop, status, opaque, k, v) in zip(expect, got):
                assert (gop, opaque) == (op, 1000 + i), (i, gop, opaque)
                if w == "miss":
                    assert (status, v) == (1, b"Not found")
                elif w == "kmiss":
                    assert (status, k) == (1, b"nope")
                elif w == "noop":
                    assert status == 0
                else:
                    assert (status, k, v) == (0, w[0], w[1]), i
    finally:
        srv.stop()


def thread_syscr(pid, prefix):
    """Read system calls (read, pread, readv, ...: `syscr` of /proc/PID/task/TID/io; an
    io_uring's reads are not among them) of the process's threads whose name starts with
    `prefix`."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/comm") as fh:
            if not fh.read().startswith(prefix):
                continue
        with open(f"/proc/{pid}/task/{t}/io") as fh:
            total += next(int(line.split()[1]) for line in fh if line.startswith("syscr:"))
    return total


def thread_cpu_ticks(pid, prefix):
    """utime + stime of the process's threads whose name starts with `prefix`."""
    total, seen = 0, 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/comm") as fh:
            name = fh.read().strip()
        if name.startswith(prefix):
            with open(f"/proc/{pid}/task/{t}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            seen += 1
    return total, seen


def _stream_flashed_gets(port, batches, cold_path, errors):
    """Child process: pipelined multi-gets of `batches`, each reply checked; the file's pages
    dropped from the page cache before each pass over the keys."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        per_pass = 20
        for p in range(0, len(batches), per_pass):
            drop_cache(cold_path)
            part = batches[p:p + per_pass]
            s.sendall(b"".join(b"get " + b" ".join(ks) + b"\r\n" for ks in part))
            for ks in part:
                w = b"".join(text_hit(k) for k in ks) + b"END\r\n"
                if recv_exactly(s, len(w)) != w:
                    errors.put("wrong reply")
                    return
        s.close()
    except Exception as e:  # reported by the parent
        errors.put(repr(e))


def test_flash_reads_run_off_the_worker_which_keeps_serving_ram_gets(disk_path):
    """-t 1, the flash file's pages out of the page cache: another process streams pipelined
    multi-gets of flashed keys while this one times RAM gets on the same worker. The reads
    that wait for the disk run on the flash I/O thread (it starts with the first one), and
    the RAM gets stay quick."""
    import multiprocessing
    srv = flashed_server(disk_path)
    try:
        pid = srv.proc.pid
        assert thread_cpu_ticks(pid, "mnemo-flash-io")[1] == 0, "no flash read yet, no I/O thread"
        flash = [key(i) for i in range(0, 1000)]
        batches = [flash[b:b + 50] for b in range(0, 1000, 50)] * 3
        errors = multiprocessing.Queue()
        child = multiprocessing.Process(target=_stream_flashed_gets, args=(srv.port, batches, disk_path / "flash", errors))
        with srv.connect() as b:
            child.start()
            lat = []
            while child.is_alive() and len(lat) < 20000:
                k = key(7900 + len(lat) % 100)
                t0 = time.perf_counter()
                assert roundtrip(b, b"get %s\r\n" % k, b"END\r\n") == text_hit(k) + b"END\r\n"
                lat.append(time.perf_counter() - t0)
            child.join(120)
            st = stats(b)
        ticks, threads = thread_cpu_ticks(pid, "mnemo-flash-io")
        lat.sort()
        p99 = lat[int(len(lat) * 0.99)] if lat else 0
        print(f"{len(lat)} RAM gets during {len(batches)} flashed multi-gets of 50 (cold file): p50 "
              f"{lat[len(lat) // 2] * 1e6:.0f} µs, p99 {p99 * 1e6:.0f} µs, max {lat[-1] * 1e6:.0f} µs; "
              f"flash I/O thread CPU {ticks} ticks; get_extstore {st['get_extstore']}")
        assert errors.empty(), errors.get()
        assert child.exitcode == 0
        # 3,000 reads but the few that ext_recache_rate brought back to RAM.
        assert threads == 1 and int(st["get_extstore"]) >= 2_990
        # Bounds loose enough for a machine shared with builds (measured unloaded: p50 95 µs,
        # p99 0.4 ms); a worker that read the cold records itself holds each RAM get up to a
        # whole pipelined batch of disk reads.
        assert len(lat) >= 50 and lat[len(lat) // 2] < 0.005 and p99 < 0.1, (lat[len(lat) // 2], p99)
    finally:
        srv.stop()
