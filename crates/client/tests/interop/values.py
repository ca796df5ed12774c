"""Values crossing between mnemo-client and the Python memcached clients, both ways.

usage:
  values.py write HOST:PORT PREFIX   store the cases with pymemcache, pylibmc and
                                     python-memcached (compression on), keys PREFIX<lib>:<case>;
                                     print a line `key<TAB>lib<TAB>kind<TAB>hex` per value
  values.py read HOST:PORT KEYFILE   read each key of KEYFILE (one per line, written by
                                     mnemo-client) with each of the three clients; print a line
                                     `key<TAB>lib<TAB>kind<TAB>hex` per read (kind "miss" if absent)

kind is "bytes", "text" (hex of its UTF-8) or "int" (hex of its decimal text), so the Rust side
compares exact bytes.
"""
import sys
import zlib

import memcache
import pylibmc
from pymemcache.client.base import Client as PymemcacheClient
from pymemcache.serde import CompressedSerde, python_memcache_serializer, python_memcache_deserializer, pickle_serde

LONG_TEXT = " ".join(f"word{i % 97}" for i in range(5000))  # compresses well, 40 KB
CASES = {
    "small_bytes": b"\x00\x01binary\xff",
    "small_text": "h\u00e9llo w\u00f6rld",
    "int": 1234567,
    "negative": -42,
    "long_text": LONG_TEXT,
    "long_bytes": LONG_TEXT.encode() * 2,
}


def encode(v):
    if v is None:
        return "miss", ""
    if isinstance(v, bytes):
        return "bytes", v.hex()
    if isinstance(v, str):
        return "text", v.encode().hex()
    if isinstance(v, bool) or not isinstance(v, int):
        return "other", repr(v).encode().hex()
    return "int", str(v).encode().hex()


def clients(addr):
    host, port = addr.rsplit(":", 1)
    serde = CompressedSerde(compress=zlib.compress, decompress=zlib.decompress,
                            serde=pickle_serde, min_compress_len=400)
    pym = PymemcacheClient((host, int(port)), serde=serde)
    lib = pylibmc.Client([addr])
    pmc = memcache.Client([addr])
    return {
        "pymemcache": (lambda k, v: pym.set(k, v, noreply=False), pym.get),
        "pylibmc": (lambda k, v: lib.set(k, v, min_compress_len=400), lib.get),
        "python-memcached": (lambda k, v: pmc.set(k, v, min_compress_len=400), pmc.get),
    }


def write(addr, prefix):
    for name, (set_, _) in clients(addr).items():
        for case, v in CASES.items():
            key = f"{prefix}{name}:{case}"
            assert set_(key, v), f"{name} failed to store {key}"
            print(key, name, *encode(v), sep="\t")


def read(addr, keyfile):
    keys = [k for k in open(keyfile).read().split("\n") if k]
    for name, (_, get) in clients(addr).items():
        for k in keys:
            print(k, name, *encode(get(k)), sep="\t")


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2], sys.argv[3])
