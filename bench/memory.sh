#!/usr/bin/env bash
# Memory efficiency, issue 3: load the same workloads into memcached and mnemod and compare
# RSS per item. overhead/item = (RSS after load - RSS of the empty server - key+value bytes) / items.
# "After load" is once RSS has held still for SETTLE_S seconds (at most 20 s): mnemod gives its
# io_uring receive buffers back after a quiet clock tick (1-2 s after the load ends), which is
# what a server at rest holds; both servers are read the same way.
#   bash bench/memory.sh                # both workloads at full size (10M and 2M items)
#   SCALE=10 bash bench/memory.sh       # a tenth of the items (quick look)
#   SKIP_BUILD=1 bash bench/memory.sh   # use target/release/mnemod as it is
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-1}
MEM_MB=${MEM_MB:-4096}
SETTLE_S=${SETTLE_S:-3}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p mnemo-server
MNEMOD=target/release/mnemod
user_flag=(); [ "$(id -u)" -eq 0 ] && user_flag=(-u root)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 500); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.02; done; echo "server on $1 did not start" >&2; return 1; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# RSS of $1 once it has not changed for SETTLE_S seconds (polled every 0.5 s), or after 20 s.
settled_rss_kb() {
    local last now still=0 need=$((SETTLE_S * 2))
    last=$(rss_kb "$1")
    for _ in $(seq 1 40); do
        sleep 0.5
        now=$(rss_kb "$1")
        if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; last=$now; fi
        [ "$still" -ge "$need" ] && break
    done
    echo "$last"
}
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

run_one() { # server workload items
    local server=$1 wl=$2 n=$3 port pid
    port=$(free_port)
    if [ "$server" = memcached ]; then
        memcached "${user_flag[@]}" -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -t 4 & pid=$!
    else
        "$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -t 4 & pid=$!
    fi
    pids+=("$pid")
    wait_port "$port"
    local empty; empty=$(rss_kb "$pid")
    local out; out=$(python3 bench/memload.py "$port" "$wl" "$n")
    local full; full=$(settled_rss_kb "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    read -r items data <<<"$out"
    python3 - "$server" "$wl" "$items" "$data" "$empty" "$full" <<'PY'
import sys
server, wl, items, data, empty, full = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
rss = full * 1024
per = rss / items
over = (full - empty) * 1024 / items - data / items
print(f"{server} {wl} {items} {rss/2**20:.1f} {per:.1f} {over:.1f}")
PY
}

results=()
for wl in small mixed; do
    if [ "$wl" = small ]; then n=$((10000000 / SCALE)); else n=$((2000000 / SCALE)); fi
    for server in memcached mnemod; do
        results+=("$(run_one "$server" "$wl" "$n")")
    done
done

python3 - "${results[@]}" <<'PY'
import sys
rows = [r.split() for r in sys.argv[1:]]
by = {(r[0], r[1]): r for r in rows}
print("| workload | server | items | RSS MiB | bytes/item | overhead/item | mnemod/memcached (overhead) |")
print("|---|---|---|---|---|---|---|")
for wl in ("small", "mixed"):
    mc = by[("memcached", wl)]
    for server in ("memcached", "mnemod"):
        r = by[(server, wl)]
        ratio = float(r[5]) / float(mc[5]) if float(mc[5]) else float("nan")
        print(f"| {wl} | {server} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {ratio:.2f} |")
PY
