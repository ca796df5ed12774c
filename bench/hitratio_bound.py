#!/usr/bin/env python3
"""How low any eviction policy could go on hitratio.py's Zipf workloads: the floors that bound
the miss-ratio targets of bench/hitratio.sh (issue 35).

  hitratio_bound.py WORKLOAD MIB[,MIB...] [--keys N] [--requests N] [--seed S] [--rate R]
                    [--overhead B]

WORKLOAD: zipf, zipf-shift or zipf-ttl, built by hitratio.py's own build_keys / build_trace
(same seed, same keys, same sizes, same counted part), so the figures are about the very
requests the server bench replays. For each MIB (a cache of MIB * 2^20 bytes, each item
charged its key + value + B bytes; B = 0 gives the cache every byte of -m) it prints:

  cold     the miss ratio of an infinite cache: a key's first read in the trace, and under
           zipf-ttl a read at or after the TTL of the key's last set ran out (look-aside: the
           set follows the miss, so the TTL runs from the last miss). No policy goes below it.
  lower    a strict lower bound at that memory (the interval relaxation of the offline
           optimum, "PFOO-L"): a read hits only if its key stayed cached since the key's
           previous read, which holds size x (requests in between) of the cache's
           bytes x requests; the budget is MIB x the counted requests (intervals clipped to the
           counted part). The most hits within that budget take the cheapest intervals first.
           Under zipf-ttl an interval as long as the TTL or longer cannot hit (the copy was set
           at the previous read at the latest).
  belady   an offline near-optimal policy at that memory: on each miss the item is admitted
           unless its next read is further away than that of every item it would displace;
           the victim is the item read furthest in the future (items whose copy expires before
           their next read go first). Sizes are 200..1000 B here, so it sits close to the
           optimum; an achievable figure, not a bound.

Time under zipf-ttl is the request index / --rate (hitratio.py paces batches on that schedule).
"""
import argparse
import heapq
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0] if "/" in __file__ else ".")
import hitratio  # noqa: E402

INF = 1 << 62


def build(a):
    """(trace of key ids, warm, bytes per id, ttl per id) exactly as hitratio.py main() has them."""
    shift = a.workload == "zipf-shift"
    ttl = a.workload == "zipf-ttl"
    sizes, ttls, ids = hitratio.build_keys(2 * a.keys if shift else a.keys, a.seed, ttl)
    if shift:
        half = a.requests // 2
        trace = hitratio.build_trace(a.keys, half, a.seed, ids[: a.keys])
        trace += hitratio.build_trace(a.keys, a.requests - half, a.seed + 1, ids[a.keys:])
        warm = half
    else:
        trace = hitratio.build_trace(a.keys, a.requests, a.seed, ids)
        warm = int(a.requests * a.warmup)
    nbytes = [len(b"k:%d" % i) + sizes[i] for i in range(len(sizes))]
    return trace, warm, nbytes, ttls


def next_uses(trace):
    nx = [INF] * len(trace)
    last = {}
    for i in range(len(trace) - 1, -1, -1):
        k = trace[i]
        nx[i] = last.get(k, INF)
        last[k] = i
    return nx


def cold(trace, warm, ttls, rate):
    """Misses of an infinite cache in the counted part (module doc)."""
    exp = {}  # key -> request time its copy expires (INF: no TTL)
    miss = 0
    for i, k in enumerate(trace):
        e = exp.get(k)
        if e is None or i / rate >= e:
            if i >= warm:
                miss += 1
            exp[k] = i / rate + ttls[k] if ttls[k] else INF
    return miss


def lower(trace, warm, nbytes, ttls, rate, cap, nx):
    """Strict lower bound on counted misses with `cap` bytes (module doc)."""
    costs = []
    for i, k in enumerate(trace):
        j = nx[i]
        if j == INF or j < warm:
            continue
        if ttls[k] and (j - i) / rate >= ttls[k]:
            continue  # a miss whatever the cache holds
        costs.append(nbytes[k] * (j - max(i, warm)))
    costs.sort()
    budget = cap * (len(trace) - warm)
    hits = 0
    for c in costs:
        if budget < c:
            break
        budget -= c
        hits += 1
    return len(trace) - warm - hits


def belady(trace, warm, nbytes, ttls, rate, cap, nx):
    """Counted misses of furthest-next-use with bypass (module doc)."""
    cached = {}  # key -> the next read it is kept for (INF: none before it expires)
    exp = {}  # key -> expiry time of its copy
    heap = []  # (-next read, key), stale entries skipped
    used = miss = 0
    for i, k in enumerate(trace):
        t = i / rate
        if k in cached and t < exp[k]:
            nu = nx[i] if nx[i] / rate < exp[k] else INF
            cached[k] = nu
            heapq.heappush(heap, (-nu, k))
            continue
        if i >= warm:
            miss += 1
        if k in cached:  # expired
            del cached[k]
            used -= nbytes[k]
        e = t + ttls[k] if ttls[k] else INF
        nu = nx[i] if nx[i] / rate < e else INF
        if nu == INF:
            continue
        s = nbytes[k]
        admit = True
        while used + s > cap:
            while heap and cached.get(heap[0][1]) != -heap[0][0]:
                heapq.heappop(heap)
            if not heap or -heap[0][0] <= nu:
                admit = False
                break
            _, v = heapq.heappop(heap)
            del cached[v]
            used -= nbytes[v]
        if admit:
            cached[k] = nu
            exp[k] = e
            used += s
            heapq.heappush(heap, (-nu, k))
    return miss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["zipf", "zipf-shift", "zipf-ttl"])
    ap.add_argument("mib")
    ap.add_argument("--keys", type=int, default=440_000)
    ap.add_argument("--requests", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--rate", type=float, default=20_000.0)
    ap.add_argument("--warmup", type=float, default=0.2)
    ap.add_argument("--overhead", type=int, default=0, help="bytes charged per item beyond key + value")
    a = ap.parse_args()
    trace, warm, nbytes, ttls = build(a)
    if a.overhead:
        nbytes = [n + a.overhead for n in nbytes]
    counted = len(trace) - warm
    nx = next_uses(trace)
    c = cold(trace, warm, ttls, a.rate)
    print(f"# {a.workload}: {len(trace)} requests, {counted} counted, keys {a.keys}, "
          f"seed {a.seed}, overhead {a.overhead} B/item; cold {c / counted:.4f}")
    for m in a.mib.split(","):
        cap = int(float(m) * (1 << 20))
        lo = lower(trace, warm, nbytes, ttls, a.rate, cap, nx)
        be = belady(trace, warm, nbytes, ttls, a.rate, cap, nx)
        print(f"{float(m):>7.2f} MiB cold {c / counted:.4f} lower {lo / counted:.4f} "
              f"belady {be / counted:.4f}", flush=True)


if __name__ == "__main__":
    main()
