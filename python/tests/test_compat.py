"""What python-memcached, pymemcache and pylibmc store, mnemo reads, and the other way round:
each of them against a real server, compression on (zlib, flag 8) on both sides."""
import zlib

import memcache
import pylibmc
import pytest
from pymemcache.client.base import Client as PymemcacheClient
from pymemcache.serde import CompressedSerde, pickle_serde

import mnemo

LONG = " ".join(f"word{i % 97}" for i in range(3000))  # compresses well, ~20 KB
VALUES = {
    "bytes": b"\x00\x01binary\xff",
    "text": "h\u00e9llo w\u00f6rld",
    "int": 1234567,
    "negative": -42,
    "long_text": LONG,
    "long_bytes": LONG.encode() * 2,
    "dict": {"a": [1, 2.5, None], "b": ("t", b"u")},
    "float": 3.25,
}


def other_clients(server):
    """name -> (set, get) for each third-party client, compression on above 400 bytes."""
    serde = CompressedSerde(compress=zlib.compress, decompress=zlib.decompress,
                            serde=pickle_serde, min_compress_len=400)
    pym = PymemcacheClient(("127.0.0.1", server.port), serde=serde)
    lib = pylibmc.Client([server.addr])
    pmc = memcache.Client([server.addr])
    return {
        "pymemcache": (lambda k, v: pym.set(k, v, noreply=False), pym.get),
        "pylibmc": (lambda k, v: lib.set(k, v, min_compress_len=400), lib.get),
        "python-memcached": (lambda k, v: pmc.set(k, v, min_compress_len=400), pmc.get),
    }


@pytest.mark.parametrize("lib", ["pymemcache", "pylibmc", "python-memcached"])
def test_mnemo_reads_theirs(server, lib):
    set_, _ = other_clients(server)[lib]
    c = mnemo.Client([server.addr])
    for name, v in VALUES.items():
        assert set_(f"{lib}:{name}", v)
    got = c.get_many([f"{lib}:{name}" for name in VALUES])
    for name, v in VALUES.items():
        assert got[f"{lib}:{name}"] == v, (lib, name)
        assert type(got[f"{lib}:{name}"]) is type(v), (lib, name)


@pytest.mark.parametrize("lib", ["pymemcache", "pylibmc", "python-memcached"])
def test_they_read_mnemos(server, lib):
    _, get = other_clients(server)[lib]
    c = mnemo.Client([server.addr])  # default: zlib, what they read
    assert c.set_many({f"m:{name}": v for name, v in VALUES.items()}) == []
    for name, v in VALUES.items():
        got = get(f"m:{name}")
        assert got == v, (lib, name)
        assert type(got) is type(v), (lib, name)


def test_they_count_mnemos_ints(server):
    """An int stored by mnemo is decimal text, so incr works from any client."""
    c = mnemo.Client([server.addr])
    c.set("counter", 41)
    lib = pylibmc.Client([server.addr])
    assert lib.incr("counter") == 42
    assert c.get("counter") == 42


@pytest.mark.parametrize("lib", ["pymemcache", "pylibmc", "python-memcached"])
def test_mnemo_reads_a_large_compressed_batch_of_theirs(server, lib):
    """Past 64 KB of compressed values get_many inflates on two threads (where two CPUs are
    allowed): values, order and misses are as for a small batch."""
    import random
    rng = random.Random(7)
    set_, _ = other_clients(server)[lib]
    want = {}
    for i in range(60):
        # ~6 KB of words from a large vocabulary: zlib keeps ~half, so ~180 KB compressed.
        want[f"{lib}:big{i}"] = " ".join(f"w{rng.randrange(100000)}" for _ in range(900))
    want[f"{lib}:small"] = "short"
    for k, v in want.items():
        assert set_(k, v)
    c = mnemo.Client([server.addr])
    keys = list(want) + [f"{lib}:missing"]
    rng.shuffle(keys)
    assert c.get_many(keys) == want
