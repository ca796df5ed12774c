#!/usr/bin/env python3
"""Trace replayer for bench/hitratio.sh: hit ratio of one server on a cache trace.

  hitratio.py PORT WORKLOAD [--requests N] [--keys N] [--seed S] [--rate R]
  hitratio.py PORT trace --trace FILE.trace.xz [--requests N]   (N: the first N requests, 0 = all)
  hitratio.py 0 footprint --trace FILE.trace.xz [--requests N]  (prints the trace's footprint)

The trace is a pure function of the seed and the sizes, so every server sees the same one:
  * key popularity Zipf(0.99) over KEYS keys (ranks scattered over the key ids by a seeded
    shuffle), value size of each key uniform in 200..1000 bytes (fixed per key);
  * every request is a get; a miss is followed by a set of that key (set-on-miss, the
    look-aside cache pattern);
  * the first WARMUP (20%) of the requests fill the cache and are not counted.

Workloads:
  trace      a real trace of key ids (bench/traces: big-endian u32 ids, xz), replayed in its
             order. Key id i is the key "t:<i>" and its value has `trace_value_size(i)` bytes, a
             pure function of the id (below): heavy-tailed, median 230 B, 10% above 1 KB, at
             most 16 KB. The first 20% of the requests are not counted.
  zipf       no TTLs.
  zipf-shift the popular keys change all at once: the first half of the trace draws from one
             KEYS keys, the second half from KEYS others (same Zipf, new ranks), and only the
             second half is counted. The first half's hot keys are never read again: how soon
             a policy lets them go is what this measures (LRU at once; a read count that decays
             by one per eviction pass keeps them for as many passes as it counted reads).
  zipf-mixed as zipf, but value sizes log-uniform from 10 B to 500 KB (MIXED_MIN, MIXED_MAX):
             where a size-blind policy gives away object hit ratio (the byte hit ratio is
             reported too).
  zipf-ttl   40% of the keys (chosen per key) are set with a TTL of 2, 3, 5 or 8 seconds, the
             rest without. Requests are paced at --rate per second on a fixed schedule, so
             "seconds" mean the same thing for every server (and the trace spans tens of seconds,
             many TTLs long); the script reports how far the replay fell behind that schedule.

Replay: requests go out in pipelined batches of distinct keys (a batch ends before a key
repeats, or at 256 requests): the sets for the previous batch's misses (noreply) and then the
batch's gets, in one write. Within a batch no key repeats, so the outcome of every get is what
a one-at-a-time replay would see, except for evictions caused by the batch's own sets.

Prints one line: hits counted_requests hit_ratio max_lag_seconds data_bytes held_bytes
hit_bytes counted_bytes (value bytes of the hits and of all counted requests: byte hit ratio)
where held_bytes is the memory the server held at the end by its own stats: memcached's
total_malloced + hash_bytes (its slab pages and hash table; what bench/hitratio.sh gives mnemod
as -m), or mnemod's limit_maxbytes (its -m, which bounds everything its store owns).
"""
import argparse
import bisect
import itertools
import lzma
import random
import socket
import struct
import sys
import time

MIN_VALUE, MAX_VALUE = 200, 1000
ZIPF_S = 0.99
TTL_SHARE = 0.4
TTLS = (2, 3, 5, 8)
BATCH_MAX = 256
# zipf-mixed: value sizes log-uniform over this range (object vs byte hit ratio).
MIXED_MIN, MIXED_MAX = 10, 500_000
# The value-size quantile function of trace keys: (u, bytes) knots, log-linear between them, so
# each piece is log-uniform: half the keys 32..230 B, 40% 230 B..1 KiB, 10% 1..16 KiB.
SIZE_KNOTS = ((0.0, 32), (0.5, 230), (0.9, 1024), (1.0, 16384))
MASK64 = (1 << 64) - 1


def splitmix64(x):
    """The splitmix64 finaliser: a fixed bijection of 64-bit ints that scatters nearby ids."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def trace_value_size(key_id):
    """Value bytes of trace key `key_id`: u = the top 53 bits of splitmix64(id) as a fraction,
    mapped through SIZE_KNOTS (median 230 B, 10% above 1 KiB, at most 16 KiB). The same
    function is in crates/store/examples/replay.rs, so the simulator stores the same bytes."""
    u = (splitmix64(key_id) >> 11) / float(1 << 53)
    for (u0, s0), (u1, s1) in zip(SIZE_KNOTS, SIZE_KNOTS[1:]):
        if u < u1:
            return int(round(s0 * (s1 / s0) ** ((u - u0) / (u1 - u0))))
    return SIZE_KNOTS[-1][1]


def read_trace(path, limit):
    """Key ids of a trace file, in request order (the first `limit`, 0 = all)."""
    with lzma.open(path) as f:
        b = f.read(4 * limit) if limit else f.read()
    b = b[: len(b) - len(b) % 4]
    return list(struct.unpack(">%dI" % (len(b) // 4), b))


def build_keys(n, seed, ttl, mixed=False):
    rng = random.Random(seed)
    if mixed:
        sizes = [int(MIXED_MIN * (MIXED_MAX / MIXED_MIN) ** rng.random()) for _ in range(n)]
    else:
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

    def stats(self, group=b""):
        self.s.sendall(b"stats %s\r\n" % group if group else b"stats\r\n")
        out = {}
        while (ln := self.line()) != b"END":
            parts = ln.split()
            if len(parts) == 3 and parts[0] == b"STAT":
                out[parts[1].decode()] = parts[2].decode()
        return out


def held_bytes(c, server):
    """What the server's memory held at the end, by its own account (module doc)."""
    st = c.stats()
    if server == "memcached":
        # memcached: its slab pages (total_malloced is in `stats slabs`) and its hash table.
        return int(c.stats(b"slabs")["total_malloced"]) + int(st["hash_bytes"])
    # mnemod: -m bounds everything its store owns.
    return int(st["limit_maxbytes"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("workload", choices=["zipf", "zipf-shift", "zipf-ttl", "zipf-mixed", "trace", "footprint"])
    ap.add_argument("--trace", help="trace file (workloads trace and footprint)")
    ap.add_argument("--server", choices=["memcached", "mnemod"], default="mnemod",
                    help="whose stats say what it held at the end (module doc)")
    ap.add_argument("--keys", type=int, default=440_000)
    ap.add_argument("--requests", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--rate", type=float, default=80_000.0)
    ap.add_argument("--warmup", type=float, default=0.2)
    a = ap.parse_args()

    ttl = a.workload == "zipf-ttl"
    shift = a.workload == "zipf-shift"
    if a.workload in ("trace", "footprint"):
        trace = read_trace(a.trace, a.requests)
        ids = sorted(set(trace))
        sizes = {i: trace_value_size(i) for i in ids}
        key = {i: b"t:%d" % i for i in ids}
        ttls = dict.fromkeys(ids, 0)
        warm = int(len(trace) * a.warmup)
        if a.workload == "footprint":
            # key + value bytes of every key the trace names, and how many keys that is
            print(sum(len(key[i]) + sizes[i] for i in ids), len(ids))
            return
    else:
        sizes, ttls, ids = build_keys(2 * a.keys if shift else a.keys, a.seed, ttl, a.workload == "zipf-mixed")
    if a.workload in ("trace", "footprint"):
        pass
    elif shift:
        half = a.requests // 2
        trace = build_trace(a.keys, half, a.seed, ids[: a.keys])
        trace += build_trace(a.keys, a.requests - half, a.seed + 1, ids[a.keys :])
        warm = half
    else:
        trace = build_trace(a.keys, a.requests, a.seed, ids)
        warm = int(a.requests * a.warmup)
    if a.workload != "trace":
        key = [b"k:%d" % i for i in range(len(sizes))]

    c = Conn(a.port)
    hits = counted = hit_bytes = counted_bytes = 0
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
                    hit_bytes += n
            else:
                v = b"v" * sizes[k]
                pending.append(b"set %s 0 %d %d noreply\r\n%s\r\n" % (key[k], ttls[k], len(v), v))
            if start + j >= warm:
                counted += 1
                counted_bytes += sizes[k]
    # Drain: a final round trip proves the server consumed everything.
    c.s.sendall(b"".join(pending) + b"version\r\n")
    c.line()
    held = held_bytes(c, a.server)
    population = ids if a.workload == "trace" else ids[: a.keys]  # zipf-shift: one population's
    data = sum(len(key[i]) + sizes[i] for i in population)
    print(hits, counted, f"{hits / counted:.4f}", f"{max_lag:.2f}", data, held, hit_bytes, counted_bytes)
    print(f"# {a.workload}: {time.monotonic() - t0:.1f}s replay", file=sys.stderr)


if __name__ == "__main__":
    main()
