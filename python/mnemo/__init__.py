"""mnemo: a client for mnemo's server (mnemod) and memcached, with pymemcache's API.

    import mnemo
    client = mnemo.Client(["10.0.0.1:11211", "10.0.0.2:11211:2"])
    client.set("greeting", "hello", expire=60)
    client.get("greeting")                      # 'hello'
    client.get_many(["a", "b", "c"])            # {found key: value}

The work is done by mnemo's Rust client (the extension module mnemo._mnemo): libmemcached's
weighted ketama (pylibmc's server for every key), optional {hash tags}, ejection of failing
servers, one pipelined write per server for multi-key calls with all servers at once, zlib or
zstd compression, and mnemod's server-side filters (fget). The GIL is released during I/O.

Values: bytes, str and int are stored as python-memcached, pymemcache (with pickle_serde) and
pylibmc store them (flags 0, 16, 2); anything else is pickled (flag 1), so each of those clients
reads what mnemo writes and the other way round. mnemo.aio.Client is the asyncio version.
profile="php" (php-memcached), "php-memcache", "perl" or "java" reads and writes those
families' flags instead (docs/client-profiles.md): float and bool are their own types there, and
their serialized objects come back as mnemo.Serialized.
"""
from collections import namedtuple

from . import exceptions
from ._mnemo import DEFAULT_COMPRESS_THRESHOLD, DEFAULT_MIN_COMPRESS_SAVING
from ._mnemo import Client as _NativeClient
from .exceptions import *  # noqa: F401,F403  (the exception classes are part of the API)

__all__ = ["Client", "FilterPart", "Serialized", "exceptions", "DEFAULT_COMPRESS_THRESHOLD",
           "DEFAULT_MIN_COMPRESS_SAVING"] + [n for n in dir(exceptions) if n.endswith("Error")]

FilterPart = namedtuple("FilterPart", "server flags data keys")
FilterPart.__doc__ = """One server's result of an fget: the server ("host:port"), the flags the
filter set, its output bytes and how many of the requested keys that server was given."""


class Serialized(bytes):
    """An object another language serialized (PHP serialize/igbinary/JSON/msgpack, Perl
    Storable, Java serialization), as stored: its bytes, and `format` naming which ("php",
    "igbinary", "json", "msgpack", "perl-storable", "java")."""

    def __new__(cls, data, format):
        self = super().__new__(cls, data)
        self.format = format
        return self

    def __repr__(self):
        return f"mnemo.Serialized({bytes(self)!r}, {self.format!r})"


class Client(_NativeClient):
    """A client for one or many memcached-protocol servers, with pymemcache's method names and
    return values. Thread-safe: share one client between threads (connections are pooled).

    servers: a list of "host:port[:weight]" strings or (host, port[, weight]) tuples; a single
        string or tuple is one server.
    connect_timeout, timeout: seconds (None: wait forever); defaults 1 and 5.
    profile: whose flags values are written and read with: "mnemo" (default; the Python
        clients' flags plus zstd), "python", "php" (php-memcached), "php-memcache", "perl"
        (Cache::Memcached, ::Fast) or "java" (spymemcached, xmemcached); also_read: further
        profiles to read with, where their flags do not collide ("mnemo"+"python",
        "perl"+"java"). See docs/client-profiles.md.
    compression: "default" (the profile's: zlib, gzip for perl and java), "zlib", "gzip",
        "zstd" (mnemo's clients only) or None; compress_threshold (bytes, default the profile's:
        1024, 2000 for php, 20000 for php-memcache, 16384 for java) and min_compress_saving (the
        compressed form is kept only if it saves this fraction, default 0.2, php 0.23);
        compress_level.
        Already-compressed data (JPEG, PNG, GIF, gzip, zstd ...) is stored as it is. Values are
        decompressed on read by their flags, whatever these settings.
    hash_tags: route a key with a {tag} by the tag only (related keys on one server).
    failure_limit, retry_interval: consecutive failures that eject a server (None: never), and
        the seconds before an ejected server is tried again.
    pool_size, max_connections: idle connections kept, and connections in use, per server.
    pickle_protocol: for values that are pickled (default pickle.HIGHEST_PROTOCOL).
    default_noreply: noreply for storage commands when a call does not say (default False).
    key_prefix: put before every key on the wire (results are keyed by the caller's keys).
    ignore_exc: reads (get, gets, get_many, gets_many) treat a failure as a miss, as pymemcache's.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"{type(self).__module__}.{type(self).__qualname__}({self.servers!r})"

    # pymemcache's other names for the same calls.
    get_multi = _NativeClient.get_many
    set_multi = _NativeClient.set_many
    delete_multi = _NativeClient.delete_many
    gets_multi = _NativeClient.gets_many
    quit = _NativeClient.close
    disconnect_all = _NativeClient.close
