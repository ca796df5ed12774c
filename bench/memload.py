#!/usr/bin/env python3
"""Pipelined loader and verifier for bench/memory.sh.

Loads one of the issue-3 workloads into a memcached-protocol server with `noreply` sets in
large pipelined batches, then checks the item count (stats curr_items) and a sample of values.

  memload.py PORT small   # 10M items, key = value = "%08d"
  memload.py PORT mixed   # 2M items, key "user:%010d", value 50-300 random bytes (seeded)

Prints one line: items data_bytes (key+value bytes loaded).
"""
import random
import socket
import sys

BATCH = 20000


def workload(name, n=None):
    if name == "small":
        n = n or 10_000_000
        for i in range(n):
            k = b"%08d" % i
            yield k, k
    elif name == "mixed":
        n = n or 2_000_000
        rng = random.Random(42)
        alphabet = bytes(range(33, 127))
        for i in range(n):
            ln = rng.randint(50, 300)
            # Printable bytes so the same value can be compared on any server.
            v = bytes(alphabet[(i * 7 + j * 13) % len(alphabet)] for j in range(ln)) if i % 1000 == 0 else rng.randbytes(ln)
            yield b"user:%010d" % i, v
    else:
        raise SystemExit(f"unknown workload {name}")


def read_until(s, marker):
    buf = b""
    while not buf.endswith(marker):
        d = s.recv(1 << 20)
        if not d:
            raise SystemExit("server closed the connection")
        buf += d
    return buf


def main():
    port, name = int(sys.argv[1]), sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else None
    s = socket.create_connection(("127.0.0.1", port))
    items = 0
    data = 0
    batch = []
    samples = {}
    for k, v in workload(name, n):
        batch.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(v), v))
        items += 1
        data += len(k) + len(v)
        if items % 99991 == 1:
            samples[k] = v
        if len(batch) == BATCH:
            s.sendall(b"".join(batch))
            batch.clear()
    batch.append(b"version\r\n")
    s.sendall(b"".join(batch))
    read_until(s, b"\r\n")
    s.sendall(b"stats\r\n")
    stats = read_until(s, b"END\r\n").decode()
    curr = int([l.split()[2] for l in stats.splitlines() if l.startswith("STAT curr_items ")][0])
    if curr != items:
        raise SystemExit(f"curr_items {curr} != loaded {items}")
    for k, v in samples.items():
        s.sendall(b"get %s\r\n" % k)
        want = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)
        got = read_until(s, b"END\r\n")
        if got != want:
            raise SystemExit(f"value of {k!r} differs")
    print(items, data)


if __name__ == "__main__":
    main()
