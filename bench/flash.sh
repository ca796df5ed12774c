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
#   PHASES=throughput REPS=5 bash bench/flash.sh                           # only the fixed-mix table
#   PHASES="throughput lookaside" bash bench/flash.sh                      # both throughput tables
#   FLASH_MNEMOD=/tmp/mnemod-x SKIP_BUILD=1 SERVERS=mnemod PHASES=throughput bash bench/flash.sh
#                                                       # another mnemod binary (a variant, a base)
#
# Throughput (PHASES=throughput; both phases by default): the Python client cannot load a
# server, so ops/s and latency come from the project's load generator, `mnemo bench` (Rust,
# one event-loop thread, pinned to core $LOAD_CPU; each server pinned to core $SERVER_CPU,
# -t 4 on that core as a like-for-like share of the machine). Per repetition, each server
# (alternating which goes first) starts afresh with the flags above, `mnemo bench --prefill`
# sets every key once (KEYS keys of 1-16 KiB, the same 8x-the-RAM data set), then DUR seconds
# (after WARMUP) of 1:10 set:get over Zipf(ZIPF) keys, 50 connections: ops/s, p50/p99 of the
# gets, hit ratio, hits/s (gets answered with a value), value bytes/s served, and the flash
# reads per second from the server's get_extstore. The table gives the median of REPS
# repetitions and the min-max of ops/s, then the paired ratios (each repetition's second server
# over its first, e.g. mnemod / memcached; the median of the REPS ratios).
#
# Look-aside (PHASES=lookaside): the same, with `mnemo bench --look-aside`: a get that misses
# is followed on its connection by a set of that key (the backend's value coming back), as the
# issue's "look-aside Zipf" says. The fixed mix sends no set after a miss, so a server that
# misses sends fewer bytes per get and is never charged for the refill; look-aside charges
# each server for its own misses, as a real cache user's backend would.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

MEM=${MEM:-256}
FLASH_SIZE=${FLASH_SIZE:-4G}
FLASH_DIR=${FLASH_DIR:-$ROOT/target/flash-bench}
SERVERS=${SERVERS:-memcached mnemod}
export KEYS=${KEYS:-240000} REQUESTS=${REQUESTS:-600000} ZIPF=${ZIPF:-0.99} BATCH=${BATCH:-32} SAMPLES=${SAMPLES:-3000}
PY=${PYTHON:-python3}

PHASES=${PHASES:-table throughput lookaside}
REPS=${REPS:-3} DUR=${DUR:-10} WARMUP=${WARMUP:-1} SERVER_CPU=${SERVER_CPU:-0} LOAD_CPU=${LOAD_CPU:-1}

MNEMOD=${FLASH_MNEMOD:-$MNEMOD}
[ "${SKIP_BUILD:-0}" = 1 ] || (note "building target/release/mnemod and mnemo"; cargo build --release -q -p mnemo-server -p mnemo-cli)
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

# STAT NAME of the server on PORT.
stat_of() { # PORT NAME
    python3 - "$1" "$2" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
for line in buf.decode().splitlines():
    p = line.split()
    if len(p) == 3 and p[1] == sys.argv[2]:
        print(p[2])
PYEOF
}

throughput() { # [--look-aside]
    local rep name order port pid before after out mode=("$@")
    local results=$BENCH_TMP/throughput.jsonl
    : >"$results"
    for rep in $(seq 1 "$REPS"); do
        order=$SERVERS
        [ $((rep % 2)) = 0 ] && order=$(echo "$SERVERS" | tr ' ' '\n' | tac | tr '\n' ' ')
        for name in $order; do
            rm -f "$FLASH_DIR/flash-$name" "$FLASH_DIR/snap-mnemod"
            port=$(free_port)
            argv "$name" "$port"
            spawn taskset -c "$SERVER_CPU" "${ARGV[@]}"
            pid=$SPAWNED
            wait_port "$port" "$pid" 120
            note "throughput${1:+ $1} $rep/$REPS: $name"
            taskset -c "$LOAD_CPU" "$MNEMO" bench --server "127.0.0.1:$port" --keys "$KEYS" --value-size 1k-16k \
                --prefill --requests 1 --connections 50 --json >/dev/null
            before=$(stat_of "$port" get_extstore)
            out=$(taskset -c "$LOAD_CPU" "$MNEMO" bench --server "127.0.0.1:$port" --keys "$KEYS" --value-size 1k-16k \
                --zipf "$ZIPF" --ratio 1:10 ${mode[@]+"${mode[@]}"} --connections 50 --duration "$DUR" --warmup "$WARMUP" --json)
            after=$(stat_of "$port" get_extstore)
            # Nothing to keep: no graceful stop (mnemod's -e would write every flashed value).
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["name"]=sys.argv[2]; r["rep"]=int(sys.argv[5]); r["flash_reads"]=int(sys.argv[4])-int(sys.argv[3]); print(json.dumps(r))' \
                "$out" "$name" "$before" "$after" "$rep" >>"$results"
        done
    done
    rm -f "$FLASH_DIR"/flash-* "$FLASH_DIR/snap-mnemod"
    echo
    echo "Throughput${1:+ (look-aside)}: \`mnemo bench --keys $KEYS --value-size 1k-16k --zipf $ZIPF --ratio 1:10${1:+ $1} --connections 50 --duration $DUR --warmup $WARMUP\` after \`--prefill\`; server on core $SERVER_CPU, load on core $LOAD_CPU; median of $REPS (loadavg $(cut -d' ' -f1-3 /proc/loadavg), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo
    python3 - "$results" $SERVERS <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = sys.argv[2:]
print("| server | ops/s (min-max) | get p50 / p99 (µs) | hit ratio | hits/s | value MB/s | sets after a miss /s | flash reads/s |")
print("|---|---|---|---|---|---|---|---|")
for name in names:
    rs = [r for r in rows if r["name"] == name]
    med = lambda f: statistics.median(f(r) for r in rs)
    ops = [r["ops_per_sec"] for r in rs]
    print(f"| {name} | {med(lambda r: r['ops_per_sec']):,.0f} ({min(ops):,.0f}-{max(ops):,.0f}) | "
          f"{med(lambda r: r['latency_us']['get']['p50']):.0f} / {med(lambda r: r['latency_us']['get']['p99']):.0f} | "
          f"{med(lambda r: r['hit_ratio'] or 0):.4f} | {med(lambda r: r['hits_per_sec']):,.0f} | "
          f"{med(lambda r: r['value_bytes_per_sec']) / 1e6:,.1f} | {med(lambda r: r['refills'] / r['seconds']):,.0f} | "
          f"{med(lambda r: r['flash_reads'] / r['seconds']):,.0f} |")
if len(names) == 2:
    # Paired: each repetition's two servers ran back to back on the same machine state.
    a, b = names
    by = {(r["name"], r["rep"]): r for r in rows}
    reps = sorted({r["rep"] for r in rows if (a, r["rep"]) in by and (b, r["rep"]) in by})
    def ratio(f):
        rs = [f(by[(b, k)]) / f(by[(a, k)]) for k in reps if f(by[(a, k)])]
        return f"{statistics.median(rs):.2f} ({', '.join(f'{x:.2f}' for x in rs)})" if rs else "-"
    print()
    print(f"Paired ratios {b} / {a}, median (each repetition): ops/s {ratio(lambda r: r['ops_per_sec'])}; "
          f"hits/s {ratio(lambda r: r['hits_per_sec'])}; value bytes/s {ratio(lambda r: r['value_bytes_per_sec'])}; "
          f"get p99 {ratio(lambda r: r['latency_us']['get']['p99'])}")
PYEOF
}

phases_after_table() {
    case " $PHASES " in *" throughput "*) throughput ;; esac
    case " $PHASES " in *" lookaside "*) throughput --look-aside ;; esac
}
case " $PHASES " in *" table "*) ;; *) phases_after_table; exit 0 ;; esac

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

phases_after_table
