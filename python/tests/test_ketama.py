"""mnemo puts every key on the server real pylibmc (libmemcached, ketama_weighted) puts it on:
10,000 keys over 3 and over 5 memcached servers with mixed weights."""
import socket

import pylibmc
import pytest

import mnemo
from conftest import Server

KEYS = [
    (f"key:{i}", f"user/{i * 7919}/profile#{i % 13}", f"{i}", "x" * (1 + i % 200) + f"-{i}")[i % 4]
    for i in range(10_000)
]


def held(port, keys):
    """The keys a server holds, asked with plain pipelined gets (values are all "v")."""
    out = set()
    with socket.create_connection(("127.0.0.1", port)) as s:
        for i in range(0, len(keys), 200):
            s.sendall(b"get " + " ".join(keys[i:i + 200]).encode() + b"\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                buf += s.recv(1 << 16)
            out.update(line.split(b" ")[1].decode() for line in buf.split(b"\r\n")
                       if line.startswith(b"VALUE "))
    return out


@pytest.mark.parametrize("weights", [(1, 3, 2), (2, 1, 1, 5, 3)])
def test_same_server_as_pylibmc(weights):
    servers = Server.many(len(weights), "memcached")
    try:
        specs = [f"127.0.0.1:{s.port}:{w}" for s, w in zip(servers, weights)]
        lib = pylibmc.Client(specs, behaviors={"ketama_weighted": True})
        assert not lib.set_multi({k: b"v" for k in KEYS})
        owner = {}
        for s in servers:
            for k in held(s.port, KEYS):
                assert k not in owner
                owner[k] = s.addr
        assert len(owner) == len(KEYS)
        c = mnemo.Client(specs)
        wrong = [k for k in KEYS if c.route(k) != owner[k]]
        assert not wrong, f"{len(wrong)} keys differ, e.g. {wrong[:5]}"
        # And reading pylibmc's keys through mnemo finds all of them.
        assert len(c.get_many(KEYS)) == len(KEYS)
        assert len({owner[k] for k in KEYS}) == len(weights)
    finally:
        for s in servers:
            s.stop()
