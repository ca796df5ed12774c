#!/usr/bin/env bash
# Hit ratio of mnemod's segment eviction against memcached's LRU at the same memory.
#
# Both servers get the same -m and -t and, one after the other (a fresh server per workload),
# the same seeded trace from bench/hitratio.py: Zipf(0.99) gets over ~440k keys of 200-1000 byte
# values (~256 MiB of data, 4x the 64 MiB), set-on-miss, the first 20% not counted; zipf-shift
# moves the popularity to 440k other keys halfway and counts the second half (hitratio.py).
#   bash bench/hitratio.sh                        # all three workloads
#   MEM_MB=64 THREADS=4 REQUESTS=2000000 TTL_REQUESTS=1000000 TTL_RATE=20000 bash bench/hitratio.sh
#   WORKLOADS=zipf bash bench/hitratio.sh
#   SKIP_BUILD=1 bash bench/hitratio.sh           # use target/release/mnemod as it is
# Note: memcached's -m counts its slab pages only; mnemod's -m bounds everything its store owns,
# hash index included, so the comparison is, if anything, tilted towards memcached.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

MEM_MB=${MEM_MB:-64}
THREADS=${THREADS:-4}
KEYS=${KEYS:-440000}
REQUESTS=${REQUESTS:-2000000}
TTL_REQUESTS=${TTL_REQUESTS:-1000000}
# Requests per second in the TTL workload: below what the replayer reaches on either server, so
# both see the same schedule (the lag column shows if it did not).
TTL_RATE=${TTL_RATE:-20000}
SEED=${SEED:-42}
WORKLOADS=${WORKLOADS:-zipf zipf-shift zipf-ttl}

# SKIP_BUILD=1: use the mnemod already in target/release (e.g. while the tree does not build).
if [ -z "${SKIP_BUILD:-}" ]; then
    note "building mnemod (release)"
    cargo build --release -q -p mnemo-server
fi

run_one() { # server workload -> "hits counted ratio lag data"
    local server=$1 wl=$2 port argv n
    port=$(free_port)
    if [ "$server" = memcached ]; then
        argv=(memcached -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -t "$THREADS")
        [ "$(id -u)" -eq 0 ] && argv+=(-u root)
    else
        argv=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -t "$THREADS")
    fi
    spawn "${argv[@]}"
    local pid=$SPAWNED
    wait_port "$port" "$pid"
    n=$REQUESTS
    [ "$wl" = zipf-ttl ] && n=$TTL_REQUESTS
    note "$server $wl: $n requests"
    python3 bench/hitratio.py "$port" "$wl" --keys "$KEYS" --requests "$n" --seed "$SEED" --rate "$TTL_RATE"
    stop_pid "$pid"
}

rows=()
for wl in $WORKLOADS; do
    for server in memcached mnemod; do
        rows+=("$wl $server $(run_one "$server" "$wl")")
    done
done

python3 - "$MEM_MB" "$THREADS" "${rows[@]}" <<'PY'
import sys
mem, threads, rows = sys.argv[1], sys.argv[2], [r.split() for r in sys.argv[3:]]
by = {(r[0], r[1]): r for r in rows}
data = int(rows[0][6])
print(f"-m {mem} -t {threads}; data set {data / 2**20:.0f} MiB ({data / (int(mem) << 20):.1f}x memory); "
      f"Zipf 0.99, set-on-miss, first 20% of each trace not counted (zipf-shift: the first half, "
      f"before the popular keys change); lag = worst delay behind the TTL workload's schedule")
print()
print("| workload | requests counted | memcached hit ratio | mnemod hit ratio | mnemod/memcached | lag memcached/mnemod (s) |")
print("|---|---|---|---|---|---|")
for wl in dict.fromkeys(r[0] for r in rows):
    mc, mn = by[(wl, "memcached")], by[(wl, "mnemod")]
    a, b = float(mc[4]), float(mn[4])
    print(f"| {wl} | {mc[3]} | {a:.4f} | {b:.4f} | {b / a:.3f} | {mc[5]} / {mn[5]} |")
PY
