#!/usr/bin/env python3
"""Trace replayer for bench/hitratio.sh: hit ratio of one server on a seeded cache trace.

  hitratio.py PORT WORKLOAD [--requests N] [--keys N] [--seed S] [--rate R]

The trace is a pure function of the seed and the sizes, so every server sees the same one:
  * key popularity Zipf(0.99) over KEYS keys (ranks scattered over the key ids by a seeded
    shuffle), value size of each key uniform in 200..1000 bytes (fixed per key);
  * every request is a get; a miss is followed by a set of that key (set-on-miss, the
    look-aside cache pattern);
  * the first WARMUP (20%) of the requests fill the cache and are not counted.

Workloads:
  zipf       no TTLs.
  zipf-shift the popular keys change all at once: the first half of the trace draws from one
             KEYS keys, the second half from KEYS others (same Zipf, new ranks), and only the
             second half is counted. The first half's hot keys are never read again: how soon
             a policy lets them go is what this measures (LRU at once; a read count that decays
             by one per eviction pass keeps them for as many passes as it counted reads).
  zipf-ttl   40% of the keys (chosen per key) are set with a TTL of 2, 3, 5 or 8 seconds, the
             rest without. Requests are paced at --rate per second on a fixed schedule, so
             "seconds" mean the same thing for every server (and the trace spans tens of seconds,
             many TTLs long); the script reports how far the replay fell behind that schedule.

Replay: requests go out in pipelined batches of distinct keys (a batch ends before a key
repeats, or at 256 requests): the sets for the previous batch's misses (noreply) and then the
batch's gets, in one write. Within a batch no key repeats, so the outcome of every get is what
a one-at-a-time replay would see, except for evictions caused by the batch's own sets.

Prints one line: hits counted_requests hit_ratio max_lag_seconds data_bytes
"""
import argparse
import bisect
import itertools
import random
import socket
import sys
import time

MIN_VALUE, MAX_VALUE = 200, 1000
ZIPF_S = 0.99
TTL_SHARE = 0.4
TTLS = (2, 3, 5, 8)
BATCH_MAX = 256


def build_keys(n, seed, ttl):
    rng = random.Random(seed)
    sizes = [rng.randint(MIN_VALUE, MAX_VALUE) for _ in range(n)]
    ttls = [0] * n
    if ttl:
        for i in range(n):
            if rng.random() < TTL_SHARE:
                ttls[i] = rng.choice(TTLS)
    ids = list(range(n))
    rng.shuffle(ids)  # rank -> key id
    return sizes, ttls, ids


def build_trace(n_keys, n_req, seed, ids):
    rng = random.Random(seed * 7919 + 1)
    cdf = list(itertools.accumulate(1.0 / (i + 1) ** ZIPF_S for i in range(n_keys)))
    total = cdf[-1]
    r = rng.random
    bis = bisect.bisect_left
    last = n_keys - 1
    return [ids[min(bis(cdf, r() * total), last)] for _ in range(n_req)]


def batches(trace):
    """Splits the trace into runs of distinct keys: (start index, keys)."""
    start, cur, seen = 0, [], set()
    for i, k in enumerate(trace):
        if k in seen or len(cur) == BATCH_MAX:
            yield start, cur
            start, cur, seen = i, [], set()
        cur.append(k)
        seen.add(k)
    if cur:
        yield start, cur


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.pos = 0

    def fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise SystemExit("server closed the connection")
        self.buf = self.buf[self.pos:] + d
        self.pos = 0

    def line(self):
        while True:
            e = self.buf.find(b"\r\n", self.pos)
            if e >= 0:
                ln = self.buf[self.pos:e]
                self.pos = e + 2
                return ln
            self.fill()

    def skip(self, n):
        while len(self.buf) - self.pos < n:
            self.fill()
        self.pos += n

    def get_reply(self):
        """Length of the value if the next reply is a hit, else None."""
        ln = self.line()
        if ln == b"END":
            return None
        if not ln.startswith(b"VALUE "):
            raise SystemExit(f"unexpected reply {ln[:80]!r}")
        n = int(ln.rsplit(b" ", 1)[1])
        self.skip(n + 2)
        if self.line() != b"END":
            raise SystemExit("missing END")
        return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("workload", choices=["zipf", "zipf-shift", "zipf-ttl"])
    ap.add_argument("--keys", type=int, default=440_000)
    ap.add_argument("--requests", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--rate", type=float, default=80_000.0)
    ap.add_argument("--warmup", type=float, default=0.2)
    a = ap.parse_args()

    ttl = a.workload == "zipf-ttl"
    shift = a.workload == "zipf-shift"
    sizes, ttls, ids = build_keys(2 * a.keys if shift else a.keys, a.seed, ttl)
    if shift:
        half = a.requests // 2
        trace = build_trace(a.keys, half, a.seed, ids[: a.keys])
        trace += build_trace(a.keys, a.requests - half, a.seed + 1, ids[a.keys :])
        warm = half
    else:
        trace = build_trace(a.keys, a.requests, a.seed, ids)
        warm = int(a.requests * a.warmup)
    key = [b"k:%d" % i for i in range(len(sizes))]

    c = Conn(a.port)
    hits = counted = 0
    max_lag = 0.0
    pending = []  # sets for the previous batch's misses
    t0 = time.monotonic()
    for start, ks in batches(trace):
        if ttl:
            due = t0 + start / a.rate
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            else:
                max_lag = max(max_lag, now - due)
        pending.extend(b"get %s\r\n" % key[k] for k in ks)
        c.s.sendall(b"".join(pending))
        pending = []
        for j, k in enumerate(ks):
            n = c.get_reply()
            if n is not None:
                if n != sizes[k]:
                    raise SystemExit(f"{key[k]!r}: value of {n} bytes, stored {sizes[k]}")
                if start + j >= warm:
                    hits += 1
            else:
                v = b"v" * sizes[k]
                pending.append(b"set %s 0 %d %d noreply\r\n%s\r\n" % (key[k], ttls[k], len(v), v))
            if start + j >= warm:
                counted += 1
    # Drain: a final round trip proves the server consumed everything.
    c.s.sendall(b"".join(pending) + b"version\r\n")
    c.line()
    data = sum(len(key[i]) + sizes[i] for i in ids[: a.keys])  # one population's
    print(hits, counted, f"{hits / counted:.4f}", f"{max_lag:.2f}", data)
    print(f"# {a.workload}: {time.monotonic() - t0:.1f}s replay", file=sys.stderr)


if __name__ == "__main__":
    main()
