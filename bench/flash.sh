#!/usr/bin/env bash
# The flash tier against memcached's extstore, in one run (issue 37's benchmark).
#
# Each server in turn (memcached first, then mnemod), with the same flags:
#   -m $MEM -t 4 -o ext_path=$FLASH_DIR/flash-NAME:$FLASH_SIZE
# on this machine's disk (FLASH_DIR defaults to target/flash-bench under the work tree, not
# tmpfs), then bench/flashload.py:
#   load      every key once (KEYS keys of 1-16 KiB: about 8x a -m of 256 by default)
#   run       REQUESTS look-aside requests, Zipf(ZIPF) (multi-get of BATCH keys, set what
#             missed), then SAMPLES single gets timed; a flash hit is one that raised the
#             server's get_extstore
#   restart   a graceful restart (SIGTERM; mnemod with -e, memcached has nothing that keeps
#             extstore), then every key read: served after the restart, none wrong
# Prints a markdown table: hit ratio, ops/s (one Python client: both servers see the same
# client, so the ratio is what compares; the absolute figures are the client's), p50/p99 of
# all gets and of flash hits (microseconds, one request at a time), RSS per item, bytes written
# to the file per byte stored (write amplification), items served after the restart.
#   bash bench/flash.sh
#   KEYS=60000 REQUESTS=200000 MEM=64 FLASH_SIZE=1G bash bench/flash.sh    # a quick one
#   SKIP_BUILD=1 bash bench/flash.sh                                       # target/release/mnemod as it is
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

MEM=${MEM:-256}
FLASH_SIZE=${FLASH_SIZE:-4G}
FLASH_DIR=${FLASH_DIR:-$ROOT/target/flash-bench}
SERVERS=${SERVERS:-memcached mnemod}
export KEYS=${KEYS:-240000} REQUESTS=${REQUESTS:-600000} ZIPF=${ZIPF:-0.99} BATCH=${BATCH:-32} SAMPLES=${SAMPLES:-3000}
PY=${PYTHON:-python3}

[ "${SKIP_BUILD:-0}" = 1 ] || (note "building target/release/mnemod"; cargo build --release -q -p mnemo-server)
mkdir -p "$FLASH_DIR"

argv() { # NAME PORT -> ARGV
    local name=$1 port=$2 file=$FLASH_DIR/flash-$1
    case $name in
        memcached)
            ARGV=(memcached -p "$port" -l 127.0.0.1 -U 0 -m "$MEM" -t 4 -o "ext_path=$file:$FLASH_SIZE")
            [ "$(id -u)" -eq 0 ] && ARGV+=(-u root)
            ;;
        mnemod) ARGV=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m "$MEM" -t 4 -e "$FLASH_DIR/snap-mnemod" -o "ext_path=$file:$FLASH_SIZE") ;;
    esac
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

echo "| server | hit ratio | ops/s | get p50 / p99 (µs) | flash hit p50 / p99 (µs) | RSS per item (B) | write amplification | served after restart |"
echo "|---|---|---|---|---|---|---|---|"
for name in $SERVERS; do
    rm -f "$FLASH_DIR/flash-$name" "$FLASH_DIR/snap-mnemod"
    port=$(free_port)
    argv "$name" "$port"
    spawn "${ARGV[@]}"
    pid=$SPAWNED
    wait_port "$port" "$pid" 120
    note "$name: loading $KEYS keys"
    load=$($PY bench/flashload.py "$port" load)
    note "$name: $REQUESTS look-aside requests"
    run=$($PY bench/flashload.py "$port" run)
    rss=$(rss_kb "$pid")
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    # memcached keeps nothing of extstore across a restart; mnemod reads its -e snapshot.
    port=$(free_port)
    argv "$name" "$port"
    spawn "${ARGV[@]}"
    pid=$SPAWNED
    wait_port "$port" "$pid" 600
    after=$($PY bench/flashload.py "$port" restart-check)
    stop_pid "$pid"
    rm -f "$FLASH_DIR/flash-$name" "$FLASH_DIR/snap-mnemod"
    $PY - "$name" "$load" "$run" "$rss" "$after" <<'PYEOF'
import json, sys
name, load, run, rss, after = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
stored = load["stored_bytes"] + run["stored_bytes"]
wa = run["extstore_bytes_written"] / stored if stored else 0
per_item = rss * 1024 / max(run["curr_items"], 1)
assert run["wrong"] == 0 and after["wrong"] == 0, (run, after)
print(f"| {name} | {run['hit_ratio']:.4f} | {run['ops']:,} | {run['p50_us']} / {run['p99_us']} | "
      f"{run['flash_p50_us']} / {run['flash_p99_us']} ({run['flash_samples']}) | {per_item:.0f} | {wa:.3f} | "
      f"{after['served']:,} of {run['curr_items']:,} |")
PYEOF
done
