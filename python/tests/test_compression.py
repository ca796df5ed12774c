"""Compression under seed 000's rules, seen from the wire: a size threshold, the compressed form
kept only when it saves enough, already-compressed formats left alone, a per-call off switch."""
import os
import zlib

import pytest

import mnemo
from conftest import raw_get

TEXT = b"the quick brown fox jumps over the lazy dog " * 100  # 4.4 KB, compresses ~95%
ZLIB, ZSTD = 8, 32


@pytest.fixture
def port(mnemod):
    return mnemod.port


def stored(port, key):
    flags, data = raw_get(port, key)
    return flags, data


def test_threshold(port):
    c = mnemo.Client([("127.0.0.1", port)], compress_threshold=1000)
    c.set("small", TEXT[:999])
    c.set("large", TEXT[:1000])
    assert stored(port, "small") == (0, TEXT[:999])
    flags, data = stored(port, "large")
    assert flags == ZLIB and zlib.decompress(data) == TEXT[:1000]
    assert c.get("large") == TEXT[:1000]


def test_default_threshold_is_the_rust_clients():
    assert mnemo.DEFAULT_COMPRESS_THRESHOLD == 1024
    assert mnemo.DEFAULT_MIN_COMPRESS_SAVING == pytest.approx(0.2)


def test_incompressible_values_are_stored_plain(port):
    c = mnemo.Client([("127.0.0.1", port)])
    noise = os.urandom(8000)
    c.set("noise", noise)
    assert stored(port, "noise") == (0, noise)


def test_min_saving_is_configurable(port):
    # About half random, half repeated: zlib saves roughly 45%.
    half = os.urandom(2000) + b"a" * 2000
    saving = 1 - len(zlib.compress(half)) / len(half)
    assert 0.3 < saving < 0.6
    mnemo.Client([("127.0.0.1", port)], min_compress_saving=0.2).set("h", half)
    assert stored(port, "h")[0] == ZLIB
    mnemo.Client([("127.0.0.1", port)], min_compress_saving=0.7).set("h", half)
    assert stored(port, "h") == (0, half)


@pytest.mark.parametrize("magic", [b"\xff\xd8\xff\xe0", b"\x89PNG\r\n\x1a\n", b"GIF89a"])
def test_already_compressed_formats_are_skipped(port, magic):
    c = mnemo.Client([("127.0.0.1", port)])
    image = magic + TEXT  # would compress, but the header says it is an image
    c.set("img", image)
    assert stored(port, "img") == (0, image)


def test_per_call_off_and_on(port):
    c = mnemo.Client([("127.0.0.1", port)])
    c.set("off", TEXT, compress=False)
    assert stored(port, "off") == (0, TEXT)
    c.set_many({"off2": TEXT}, compress=False)
    assert stored(port, "off2") == (0, TEXT)
    off = mnemo.Client([("127.0.0.1", port)], compression=None)
    off.set("plain", TEXT)
    assert stored(port, "plain") == (0, TEXT)
    off.set("forced", TEXT, compress=True)
    assert stored(port, "forced")[0] == ZLIB
    assert off.get("forced") == TEXT  # read back by flags whatever the settings


def test_zstd(port):
    c = mnemo.Client([("127.0.0.1", port)], compression="zstd")
    c.set("z", TEXT.decode())
    flags, data = stored(port, "z")
    assert flags == ZSTD | 16 and data[:4] == b"\x28\xb5\x2f\xfd" and len(data) < 500
    assert c.get("z") == TEXT.decode()
    # A zlib client reads zstd values too (decompression follows the flags).
    assert mnemo.Client([("127.0.0.1", port)]).get("z") == TEXT.decode()


def test_compressed_types_keep_their_flags(port):
    c = mnemo.Client([("127.0.0.1", port)])
    c.set("t", TEXT.decode())
    c.set("p", {"k": TEXT})
    assert stored(port, "t")[0] == ZLIB | 16
    assert stored(port, "p")[0] == ZLIB | 1
    assert c.get("p") == {"k": TEXT}


def store_raw(port, *items):
    """Store (key, flags, bytes) items as they are, past any client's encoding."""
    import socket
    req = b"".join(b"set %s %d 0 %d\r\n%s\r\n" % (k, f, len(v), v) for k, f, v in items)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(req)
        want = b"STORED\r\n" * len(items)
        got = b""
        while len(got) < len(want):
            got += s.recv(100)
        assert got == want


def test_bad_compressed_data_is_a_decode_error(port):
    c = mnemo.Client([("127.0.0.1", port)])
    store_raw(port, (b"bad", 8, b"nope"))
    with pytest.raises(mnemo.DecodeError):
        c.get("bad")


def test_text_that_is_not_utf8_is_a_decode_error(port):
    # Flag 16 promises UTF-8; bytes that are not fail the read (get and get_many alike) rather
    # than coming back as something else, and the client keeps working.
    c = mnemo.Client([("127.0.0.1", port)])
    store_raw(port, (b"badtext", 16, b"\xff\xfeA"), (b"goodtext", 16, b"\xc3\xa9!"))
    with pytest.raises(mnemo.DecodeError):
        c.get("badtext")
    with pytest.raises(mnemo.DecodeError):
        c.get_many(["goodtext", "badtext"])
    assert c.get_many(["goodtext"]) == {"goodtext": "é!"}
    assert c.get("goodtext") == "é!"
