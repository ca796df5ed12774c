#!/usr/bin/env python3
"""Driver for bench/flash.sh: look-aside Zipf over a key space, against one server.

  flashload.py PORT load|run|restart-check [options from the environment]

  KEYS        key space (default 240000: ~2 GiB of 1-16 KiB values)
  REQUESTS    look-aside requests in `run` (default 600000)
  ZIPF        skew (default 0.99)
  BATCH       keys per multi-get (default 32)
  SAMPLES     single gets timed at the end of `run` (default 3000)

Values: key i's length is a pure function of i (1-16 KiB, log-uniform), its bytes a pattern of
i, so any server's reply can be checked. `load` stores every key once in key order (a cold
start that fills RAM and flash); `run` replays Zipf look-aside (multi-get; set what missed),
then times SAMPLES single gets and tells flash hits by the server's get_extstore counter;
`restart-check` reads every key and counts the ones served. Prints one JSON line.
"""
import bisect
import json
import os
import random
import socket
import sys
import time

KEYS = int(os.environ.get("KEYS", 240_000))
REQUESTS = int(os.environ.get("REQUESTS", 600_000))
ZIPF = float(os.environ.get("ZIPF", 0.99))
BATCH = int(os.environ.get("BATCH", 32))
SAMPLES = int(os.environ.get("SAMPLES", 3000))


def vlen(i):
    r = random.Random(i * 7919 + 1)
    return int(1024 * 16 ** r.random())


def value(i):
    pat = b"%010d|" % i
    n = vlen(i)
    return (pat * (n // len(pat) + 1))[:n]


def key(i):
    return b"fb:%d" % i


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, b):
        self.s.sendall(b)

    def until(self, marker):
        while True:
            i = self.buf.find(marker)
            if i >= 0:
                out, self.buf = self.buf[:i + len(marker)], self.buf[i + len(marker):]
                return out
            d = self.s.recv(1 << 20)
            if not d:
                raise SystemExit("server closed")
            self.buf += d

    def stats(self):
        self.send(b"stats\r\n")
        out = {}
        for line in self.until(b"END\r\n").decode().splitlines():
            p = line.split(" ")
            if p[0] == "STAT":
                out[p[1]] = p[2]
        return out

    def get_many(self, ids):
        self.send(b"get " + b" ".join(key(i) for i in ids) + b"\r\n")
        reply = self.until(b"END\r\n")
        got, pos = {}, 0
        while not reply.startswith(b"END\r\n", pos):
            eol = reply.index(b"\r\n", pos)
            head = reply[pos:eol].split()
            n = int(head[3])
            # A large reply may not be complete yet when END of an earlier line matched.
            while eol + 2 + n + 2 > len(reply) - 5:
                reply += self.until(b"END\r\n")
            got[int(head[1].split(b":")[1])] = reply[eol + 2:eol + 2 + n]
            pos = eol + 2 + n + 2
        return got

    def set_many(self, ids):
        if not ids:
            return 0
        req = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key(i), vlen(i), value(i)) for i in ids)
        self.send(req)
        for _ in ids:
            r = self.until(b"\r\n")
            if r not in (b"STORED\r\n", b"SERVER_ERROR out of memory storing object\r\n"):
                raise SystemExit(f"set: {r!r}")
        return sum(vlen(i) for i in ids)


def zipf_sampler(n, s, rng):
    weights = [1.0 / (k ** s) for k in range(1, n + 1)]
    cdf, acc = [], 0.0
    for w in weights:
        acc += w
        cdf.append(acc)
    perm = list(range(n))
    rng.shuffle(perm)  # popularity independent of key order (and of load order)
    return lambda: perm[bisect.bisect_left(cdf, rng.random() * acc)]


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    c = Conn(port)
    if mode == "load":
        stored = 0
        for b in range(0, KEYS, 100):
            stored += c.set_many(list(range(b, min(KEYS, b + 100))))
        print(json.dumps({"stored_bytes": stored}))
        return
    if mode == "restart-check":
        served = wrong = 0
        for b in range(0, KEYS, 100):
            got = c.get_many(list(range(b, min(KEYS, b + 100))))
            served += len(got)
            wrong += sum(v != value(i) for i, v in got.items())
        print(json.dumps({"served": served, "wrong": wrong}))
        return
    rng = random.Random(42)
    pick = zipf_sampler(KEYS, ZIPF, rng)
    hits = misses = wrong = 0
    stored = 0
    t0 = time.monotonic()
    done = 0
    while done < REQUESTS:
        ids = list(dict.fromkeys(pick() for _ in range(BATCH)))
        got = c.get_many(ids)
        wrong += sum(v != value(i) for i, v in got.items())
        hits += len(got)
        miss = [i for i in ids if i not in got]
        misses += len(miss)
        stored += c.set_many(miss)
        done += len(ids)
    secs = time.monotonic() - t0
    # Latency of single gets; a flash hit is one that raised get_extstore.
    lat_all, lat_flash = [], []
    before = int(c.stats().get("get_extstore", 0))
    for _ in range(SAMPLES):
        i = pick()
        t = time.perf_counter()
        c.send(b"get %s\r\n" % key(i))
        c.until(b"END\r\n")
        dt = (time.perf_counter() - t) * 1e6
        lat_all.append(dt)
        now = int(c.stats().get("get_extstore", 0))
        if now > before:
            lat_flash.append(dt)
        before = now

    def pct(v, p):
        v = sorted(v)
        return round(v[min(len(v) - 1, int(len(v) * p))], 1) if v else None

    st = c.stats()
    print(json.dumps({
        "requests": done, "hits": hits, "misses": misses, "wrong": wrong, "seconds": round(secs, 2),
        "ops": round(done / secs), "hit_ratio": round(hits / done, 4), "stored_bytes": stored,
        "p50_us": pct(lat_all, 0.5), "p99_us": pct(lat_all, 0.99),
        "flash_p50_us": pct(lat_flash, 0.5), "flash_p99_us": pct(lat_flash, 0.99), "flash_samples": len(lat_flash),
        "curr_items": int(st["curr_items"]), "extstore_bytes_written": int(st.get("extstore_bytes_written", 0)),
        "extstore_objects_used": int(st.get("extstore_objects_used", 0)),
    }))


if __name__ == "__main__":
    main()
