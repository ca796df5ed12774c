#!/usr/bin/env python3
"""Python clients side by side: mnemo (the package in python/) vs pymemcache vs pylibmc, against
one mnemod and against three, in one run.

  bench/python_client.py [--ops N] [--mnemod PATH]

Needs a release mnemod (cargo build --release -p mnemo-server) and, in the Python running this,
a release build of the package (pip install ./python; `maturin develop` builds a debug one, which
is refused) plus pymemcache and pylibmc (tests/requirements.txt,
crates/client/tests/interop/requirements.txt).

Cases, each with 32 B and 10 KB values (the 10 KB ones are text that compresses to ~40%),
compression off and on (zlib, stored compressed when it saves 20%: 1 KB threshold for all three):
  get, set            one key per call, against one server and against three
  get_many x3         100 keys per call over three servers (all hits)
Clients: mnemo.Client; pymemcache Client (one server) or HashClient (three), pickle_serde, and
CompressedSerde when compression is on; pylibmc (libmemcached, ketama_weighted, TCP_NODELAY).
Each case runs --ops calls per client, timed one by one, in --rounds rounds: in each round every
client runs its share in turn (the first client rotating), so that the machine's moods (on a VM,
whether client and server threads share a CPU moves a round trip between ~20 and ~60 us) fall
on all clients alike. Printed: ops/s (median over rounds), p50/p99 per call (over all calls),
and mnemo's paired ratio (median over rounds of mnemo's ops/s over the client's, same round).

`taskset -c 0 bench/python_client.py` puts the client and its servers on one CPU: every
round trip then costs what the code costs, without the placement effect (what the note quotes
as "one CPU" next to the default run). Two things mnemo does gain most from a second CPU: its
reads poll for a reply before sleeping (`reply_spin`, yielding between polls, so on one CPU the
server runs meanwhile), and a large compressed get_many is inflated on two threads (not at all
when the process may use only one CPU).

The last line compares get_many over three servers (geometric mean over the four value
size/compression cases of the paired ratios):
  python get_many x3 vs pymemcache X.XX, vs pylibmc Y.YY
"""
import argparse
import math
import os
import pathlib
import random
import statistics
import sys
import time
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from servers import Server  # noqa: E402  (the test suite's server starter)

import mnemo  # noqa: E402
import mnemo._mnemo  # noqa: E402
import pylibmc  # noqa: E402
from pymemcache.client.base import Client as PymemcacheClient  # noqa: E402
from pymemcache.client.hash import HashClient  # noqa: E402
from pymemcache.serde import CompressedSerde, pickle_serde  # noqa: E402

SMALL, LARGE = 32, 10 * 1024
THRESHOLD = 1024


def value_of(size, rng):
    """A str of `size` bytes: random letters for small values; for large ones words drawn from
    a small vocabulary (compresses to about 40%, like text or JSON)."""
    if size < 100:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(size))
    words = ["user", "id", "name", "created", "mnemo", "cache", "value", "true", "false", "null"]
    out = []
    while sum(map(len, out)) < size:
        out.append(rng.choice(words) + str(rng.randrange(1000)))
    return " ".join(out)[:size]


def clients(addrs, compress):
    """name -> client for these servers ("host:port" strings)."""
    out = {"mnemo": mnemo.Client(addrs, compression="zlib" if compress else None,
                                 compress_threshold=THRESHOLD)}
    serde = pickle_serde
    if compress:
        serde = CompressedSerde(compress=zlib.compress, decompress=zlib.decompress,
                                serde=pickle_serde, min_compress_len=THRESHOLD)
    hostports = [(a.split(":")[0], int(a.split(":")[1])) for a in addrs]
    if len(addrs) == 1:
        out["pymemcache"] = PymemcacheClient(hostports[0], serde=serde, no_delay=True,
                                             default_noreply=False)
    else:
        out["pymemcache"] = HashClient(hostports, serde=serde, no_delay=True,
                                       default_noreply=False)
    lib = pylibmc.Client(addrs, behaviors={"ketama_weighted": True, "tcp_nodelay": True})
    if compress:
        # pylibmc takes its threshold per call; bind it so every set compresses like the others.
        lib_set = lib.set
        lib = _PylibmcCompressed(lib, lambda k, v: lib_set(k, v, min_compress_len=THRESHOLD))
    out["pylibmc"] = lib
    return out


class _PylibmcCompressed:
    def __init__(self, client, set_):
        self._c, self.set = client, set_
        self.get, self.get_multi = client.get, client.get_multi


def fill(c, name, items, compress):
    if name == "pylibmc":
        lib = getattr(c, "_c", c)
        failed = lib.set_multi(items, min_compress_len=THRESHOLD if compress else 0)
    else:
        failed = c.set_many(items)
    assert not failed, f"{name} could not store {len(failed)} keys"


def time_calls(fn, args_list):
    """Call fn(*args) for each args; per-call nanoseconds."""
    lat = []
    perf = time.perf_counter_ns
    for args in args_list:
        t0 = perf()
        fn(*args)
        lat.append(perf() - t0)
    return lat


def ops_per_s(lat):
    return len(lat) / (sum(lat) / 1e9)


def percentiles(lat):
    lat = sorted(lat)
    return lat[len(lat) // 2] / 1e3, lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1e3


def run_case(c, name, op, keys, val, ops, rng):
    if op == "set":
        return time_calls(c.set, [(rng.choice(keys), val) for _ in range(ops)])
    if op == "get":
        return time_calls(c.get, [(rng.choice(keys),) for _ in range(ops)])
    # get_many of 100 keys; pylibmc names it get_multi.
    many = c.get_multi if name == "pylibmc" else c.get_many
    batches = [(rng.sample(keys, 100),) for _ in range(ops)]
    got = many(*batches[0])
    assert len(got) == 100, f"{name}: {len(got)} of 100 keys found"
    return time_calls(many, batches)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000, help="calls per get/set case (get_many: 1/4)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the calls are split into")
    ap.add_argument("--mnemod", default=os.environ.get("MNEMOD_BIN",
                                                       str(ROOT / "target/release/mnemod")))
    a = ap.parse_args()
    if mnemo._mnemo.DEBUG_BUILD:
        sys.exit("mnemo is a debug build here: pip install ./python (release) first")
    if not os.path.exists(a.mnemod):
        sys.exit(f"no mnemod at {a.mnemod}: cargo build --release -p mnemo-server")
    import servers
    servers.MNEMOD = a.mnemod
    started = [Server("mnemod") for _ in range(4)]
    try:
        one = [f"127.0.0.1:{started[0].port}"]
        three = [f"127.0.0.1:{s.port}" for s in started[1:]]
        rng = random.Random(15)
        keys = [f"bench:{i}" for i in range(1000)]
        results = []  # (servers, op, size, compress, client, ops, p50, p99)
        print(f"# {a.ops} calls per get/set case, {a.ops // 4} per get_many, in {a.rounds} "
              f"rounds; mnemod {a.mnemod}")
        print(f"{'servers':>7} {'op':<11} {'value':>6} {'zlib':<4} {'client':<10} "
              f"{'ops/s':>9} {'p50 us':>8} {'p99 us':>8} {'mnemo/it':>8}")
        for addrs in (one, three):
            for size in (SMALL, LARGE):
                for compress in (False, True):
                    cs = clients(addrs, compress)
                    val = value_of(size, rng)
                    # Each client fills the keys itself: pymemcache's HashClient does not place
                    # keys by ketama, so it would miss the others' keys on three servers.
                    for name, c in cs.items():
                        fill(c, name, {k: val for k in keys}, compress)
                    op_list = ["get", "set"] + (["get_many"] if len(addrs) == 3 else [])
                    for op in op_list:
                        n = a.ops // 4 if op == "get_many" else a.ops
                        names = list(cs)
                        for name in names:
                            run_case(cs[name], name, op, keys, val, max(20, n // 10), rng)  # warm-up
                        lat = {name: [] for name in names}
                        per_round = {name: [] for name in names}
                        for r in range(a.rounds):
                            for name in names[r % len(names):] + names[:r % len(names)]:
                                got = run_case(cs[name], name, op, keys, val,
                                               max(1, n // a.rounds), rng)
                                lat[name] += got
                                per_round[name].append(ops_per_s(got))
                        for name in names:
                            paired = statistics.median(
                                m / o for m, o in zip(per_round["mnemo"], per_round[name]))
                            ops = statistics.median(per_round[name])
                            p50, p99 = percentiles(lat[name])
                            results.append((len(addrs), op, size, compress, name, paired))
                            label = "get_many x3" if op == "get_many" else op
                            print(f"{len(addrs):>7} {label:<11} {size:>6} "
                                  f"{'on' if compress else 'off':<4} {name:<10} "
                                  f"{ops:>9.0f} {p50:>8.1f} {p99:>8.1f} {paired:>8.2f}",
                                  flush=True)
        ratio = {}
        for other in ("pymemcache", "pylibmc"):
            rs = [r[5] for r in results if r[1] == "get_many" and r[4] == other]
            ratio[other] = math.exp(statistics.fmean(math.log(r) for r in rs))
        print(f"python get_many x3 vs pymemcache {ratio['pymemcache']:.2f}, "
              f"vs pylibmc {ratio['pylibmc']:.2f}")
    finally:
        for s in started:
            s.stop()


if __name__ == "__main__":
    main()
