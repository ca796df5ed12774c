"""Store keys with real pylibmc (libmemcached, ketama_weighted) over several servers, then ask
each server directly which of the keys it holds. Prints one line per key: `key<TAB>host:port`.

usage: ketama_pylibmc.py HOST:PORT:WEIGHT,... KEYFILE
KEYFILE holds one key per line (the Rust test writes it, so both sides route the same keys).
"""
import socket
import sys

import pylibmc


def held_keys(host, port, keys):
    """The subset of `keys` the server at host:port holds, by plain `get` batches."""
    held = set()
    s = socket.create_connection((host, port))
    try:
        for i in range(0, len(keys), 100):
            batch = keys[i:i + 100]
            s.sendall(b"get " + b" ".join(k.encode() for k in batch) + b"\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):  # values are all "v"
                chunk = s.recv(1 << 16)
                if not chunk:
                    raise RuntimeError("server closed")
                buf += chunk
            for line in buf.split(b"\r\n"):
                if line.startswith(b"VALUE "):
                    held.add(line.split(b" ")[1].decode())
    finally:
        s.close()
    return held


def main():
    specs = sys.argv[1].split(",")
    keys = [k for k in open(sys.argv[2]).read().split("\n") if k]
    mc = pylibmc.Client(specs, behaviors={"ketama_weighted": True})
    assert mc.behaviors["ketama_weighted"], mc.behaviors
    failed = mc.set_multi({k: b"v" for k in keys})
    assert not failed, failed[:5]
    owner = {}
    for spec in specs:
        host, port, _weight = spec.split(":")
        for k in held_keys(host, int(port), keys):
            assert k not in owner, f"{k} on two servers"
            owner[k] = f"{host}:{port}"
    missing = [k for k in keys if k not in owner]
    assert not missing, f"{len(missing)} keys on no server, e.g. {missing[:3]}"
    out = sys.stdout
    for k in keys:
        out.write(f"{k}\t{owner[k]}\n")


if __name__ == "__main__":
    main()
