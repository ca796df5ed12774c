#!/usr/bin/env bash
# Seed 001's experiment: a user's feed (the 10 newest records of 100 friends, 30 records each)
# ranked in the client over a 100-key get, or in the server by an fget filter that sends back
# only the 10 records.
#
# Four servers, each -t 1 and loaded once with the same data (bench/feed's `load`):
#   memcached  client-side over Debian's memcached
#   mnemod     client-side over mnemod
#   wasm       fget over mnemod --filter topk=topk.wasm          (filter-sdk's example, sandboxed)
#   native     fget over mnemod --native-filter topk=libtopk.so  (the same filter, native)
# The modes alternate within each repetition (forward in odd repetitions, reversed in even
# ones), so a slow phase of this shared host hits them alike; each run first checks its
# answers both ways (mnemo-feedbench run --check). Two links: the plain loopback, and a 1 Gbit/s
# link, a tbf qdisc on the loopback of a private network namespace (unshare -n; needs root), as
# in bench/compression.sh. The data is loaded before the qdisc goes on. Both directions share
# the one qdisc there, so requests and replies share the 1 Gbit/s.
#
# Server CPU per query is the server's utime+stime from /proc/PID/stat over the timed part of
# the run (the generator reads it at start and end; 10 ms ticks); client CPU is the
# generator's getrusage over the same part. Bytes per query are what the client's sockets
# moved (payload, without TCP/IP headers). On the 1gbit link both ends share one host, so the
# kernel's per-packet work for either end (a 74 KB reply is about 50 segments at MTU 1500, each
# a wake-up of the reader) is charged to whichever process runs: compare CPU columns within a
# link, not across links.
#
#   bash bench/filter.sh                          # USERS=1000000 when memory allows, REPS=3, DUR=5
#   USERS=20000 DUR=2 REPS=1 bash bench/filter.sh # quick
#   MODES="memcached mnemod" LINKS=loopback bash bench/filter.sh
#
# Knobs: USERS, FRIENDS (100), K (10), DUR (seconds per run, 5), WARMUP (0.5), REPS (3),
# CONNS (connections, one query in flight on each; 4: a server under load, as in the seed's
# many clients; with 1 the fget modes measure one round trip per query, not throughput), RATE (1gbit), MODES, LINKS, SEED (1),
# PIN (1: servers on core SERVER_CPU=0, the generator on LOAD_CPU=1).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

FRIENDS=${FRIENDS:-100}
K=${K:-10}
DUR=${DUR:-5}
WARMUP=${WARMUP:-0.5}
REPS=${REPS:-3}
CONNS=${CONNS:-4}
RATE=${RATE:-1gbit}
MODES=${MODES:-memcached mnemod wasm native}
LINKS=${LINKS:-loopback 1gbit}
SEED=${SEED:-1}
PIN=${PIN:-1}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
RECORDS=30
FEED=$ROOT/target/release/mnemo-feedbench
WASM=$ROOT/target/wasm32-unknown-unknown/release/examples/topk.wasm
NATIVE=$ROOT/target/release/examples/libtopk.so

# Bytes per user in a server, generously: memcached puts a 720-byte value with its item header
# in a 944-byte slab chunk; mnemod needs less. The rest is slack for slab pages and the index.
BYTES_PER_USER=1200
if [ -z "${USERS:-}" ]; then
    # A million users (seed 001) when every server of a link fits in half the free memory.
    avail_mb=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
    per_server_mb=$((1000000 * BYTES_PER_USER / 1000000 + 64))
    nservers=$(echo "$MODES" | wc -w)
    if [ $((per_server_mb * nservers * 2)) -le "$avail_mb" ]; then USERS=1000000; else USERS=100000; fi
fi
MEM_MB=$((USERS * BYTES_PER_USER / 1000000 + 64))

# PID/PORT of each mode's server.
declare -A PID PORT

start_server() { # mode
    local mode=$1 port argv
    port=$(free_port)
    case $mode in
        memcached)
            argv=(memcached -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -c 1024 -t 1)
            [ "$(id -u)" -eq 0 ] && argv+=(-u root)
            ;;
        mnemod) argv=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -c 1024 -t 1) ;;
        wasm) argv=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -c 1024 -t 1 --filter "topk=$WASM") ;;
        native) argv=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m "$MEM_MB" -c 1024 -t 1 --native-filter "topk=$NATIVE") ;;
        *) echo "unknown mode $mode" >&2; return 1 ;;
    esac
    # taskset execs the server, so the pid is the server's own (read for its CPU time).
    [ "$PIN" = 1 ] && argv=(taskset -c "$SERVER_CPU" "${argv[@]}")
    spawn "${argv[@]}"
    PID[$mode]=$SPAWNED PORT[$mode]=$port
    wait_port "$port" "$SPAWNED"
}

ordered_modes() { # rep -> the modes in this repetition's order
    if [ $(($1 % 2)) -eq 1 ]; then echo "$MODES"; else echo "$MODES" | awk '{for (i = NF; i > 0; i--) printf "%s ", $i}'; fi
}

# Starts every mode's server, loads it, (for 1gbit: shapes the link,) runs the repetitions
# into $out/$link.$mode.$rep, stops the servers.
measure() { # link out
    local link=$1 out=$2 mode rep fmode prefix=()
    [ "$PIN" = 1 ] && prefix=(taskset -c "$LOAD_CPU")
    for mode in $MODES; do
        start_server "$mode"
        note "$link: loading $USERS users into $mode (port ${PORT[$mode]})"
        "${prefix[@]}" "$FEED" load --server "127.0.0.1:${PORT[$mode]}" --users "$USERS" --records "$RECORDS" --seed "$SEED" >"$out/$link.$mode.load"
    done
    if [ "$link" = 1gbit ]; then
        tc qdisc add dev lo root tbf rate "$RATE" burst 32kb latency 20ms
    fi
    for rep in $(seq 1 "$REPS"); do
        for mode in $(ordered_modes "$rep"); do
            case $mode in memcached | mnemod) fmode=client ;; *) fmode=fget ;; esac
            note "$link: $mode, run $rep/$REPS"
            timeout $((DUR + 300)) "${prefix[@]}" "$FEED" run --server "127.0.0.1:${PORT[$mode]}" --mode "$fmode" \
                --filter topk --users "$USERS" --friends "$FRIENDS" --k "$K" --duration "$DUR" --warmup "$WARMUP" \
                --conns "$CONNS" --seed "$((SEED + rep))" --data-seed "$SEED" --records "$RECORDS" \
                --server-pid "${PID[$mode]}" >"$out/$link.$mode.$rep" 2>"$out/$link.$mode.$rep.err" ||
                { cat "$out/$link.$mode.$rep.err" >&2; return 1; }
        done
    done
    for mode in $MODES; do stop_pid "${PID[$mode]}"; done
}

# The 1gbit link, run again inside the private network namespace (see the end of the script).
if [ "${1:-}" = --in-netns ]; then
    ip link set lo up
    ip link set lo mtu 1500
    measure 1gbit "$2"
    exit 0
fi

need_tools memcached:memcached taskset:util-linux python3:python3
note "building mnemod and mnemo-feedbench (release)"
(cd "$ROOT" && cargo build --release -q -p mnemo-server -p mnemo-feedbench)
case " $MODES " in *" wasm "*)
    if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
        rustup target add wasm32-unknown-unknown
    fi
    note "building the example filters for wasm32"
    (cd "$ROOT" && cargo build --release -q -p mnemo-filter-examples --examples --target wasm32-unknown-unknown)
    [ -f "$WASM" ] || { echo "no $WASM after the build" >&2; exit 1; }
    ;;
esac
case " $MODES " in *" native "*)
    note "building the native topk filter"
    (cd "$ROOT" && cargo build --release -q -p mnemo-filter-examples --example topk)
    [ -f "$NATIVE" ] || { echo "no $NATIVE after the build" >&2; exit 1; }
    ;;
esac

RES=$BENCH_TMP/results
mkdir -p "$RES"
RAN_LINKS=""
SKIPPED=""
for link in $LINKS; do
    case $link in
        loopback)
            measure loopback "$RES"
            RAN_LINKS+=" loopback"
            ;;
        1gbit)
            if [ "$(id -u)" -ne 0 ] || ! unshare -n true 2>/dev/null; then
                note "no $RATE table: needs root for a private network namespace"
                SKIPPED="(no $RATE table: needs root for a private network namespace)"
                continue
            fi
            need_tools tc:iproute2 ip:iproute2
            export USERS FRIENDS K DUR WARMUP REPS CONNS RATE MODES SEED PIN SERVER_CPU LOAD_CPU
            unshare -n bash "$0" --in-netns "$RES"
            RAN_LINKS+=" 1gbit"
            ;;
        *) echo "unknown link $link" >&2; exit 1 ;;
    esac
done

echo
echo "## Seed 001 feed: $USERS users x $RECORDS records, $FRIENDS friends per query, top $K; $(nproc) cores"
echo
echo "Servers -t 1 -m $MEM_MB$([ "$PIN" = 1 ] && echo ", on core $SERVER_CPU, generator on core $LOAD_CPU");" \
    "$CONNS connection(s), one query in flight each; REPS=$REPS runs of ${DUR}s (+${WARMUP}s warm-up), modes alternating."
echo "Every run first computed its first 20 queries per connection both ways and compared them"
echo "(client-side top-k = full sort = fget output; every value read = the loaded one)."
[ -n "$SKIPPED" ] && printf '\n%s\n' "$SKIPPED"
python3 - "$RES" "$REPS" "$MODES" "$RAN_LINKS" "$RATE" <<'PY'
import os, statistics, sys
res, reps, modes, links, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
label = {
    "memcached": "client-side, memcached",
    "mnemod": "client-side, mnemod",
    "wasm": "fget, wasm filter (mnemod)",
    "native": "fget, native filter (mnemod)",
}
clients = [m for m in modes if m in ("memcached", "mnemod")]

def runs(link, mode):
    out = []
    for rep in range(1, reps + 1):
        with open(os.path.join(res, f"{link}.{mode}.{rep}")) as f:
            out.append(dict(kv.split("=", 1) for kv in f.read().split()))
    return out

def med(xs):
    return statistics.median(xs) if xs else float("nan")

def col(rs, key):
    return [float(r[key]) for r in rs]

def paired(a, b, key):
    """Median over repetitions of a[rep][key] / b[rep][key]: adjacent runs, so a slow phase of
    the host cancels out."""
    return med([float(x[key]) / float(y[key]) for x, y in zip(a, b) if float(y[key])])

summary = {}
for link in links:
    data = {m: runs(link, m) for m in modes}
    best = max(clients, key=lambda m: med(col(data[m], "qps"))) if clients else None
    title = "loopback" if link == "loopback" else f"{rate} link (tbf on the loopback of a private network namespace, MTU 1500)"
    print(f"\n### {title}\n")
    head = ["mode", "qps (median, range)", "p50 / p99 µs", "bytes/query sent / received",
            "server CPU µs/query", "client CPU µs/query", f"x best client-side ({best})"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for m in modes:
        rs = data[m]
        q = col(rs, "qps")
        x = f"**{paired(rs, data[best], 'qps'):.2f}**" if best else "n/a"
        print(f"| {label[m]} | {med(q):,.0f} ({min(q):,.0f}-{max(q):,.0f}) "
              f"| {med(col(rs, 'p50_us')):,.0f} / {med(col(rs, 'p99_us')):,.0f} "
              f"| {med(col(rs, 'sent_per_query')):,.0f} / {med(col(rs, 'recv_per_query')):,.0f} "
              f"| {med(col(rs, 'server_cpu_us_per_query')):,.1f} | {med(col(rs, 'client_cpu_us_per_query')):,.1f} | {x} |")
    if best and "wasm" in data:
        summary[link] = paired(data["wasm"], data[best], "qps")
    if link == "loopback" and "wasm" in data and "native" in data:
        summary["cpu"] = paired(data["wasm"], data["native"], "server_cpu_us_per_query")
    loads = []
    for m in modes:
        with open(os.path.join(res, f"{link}.{m}.load")) as f:
            kv = dict(x.split("=", 1) for x in f.read().split()[1:])
        loads.append(f"{m} {float(kv['secs']):.2f}s")
    print(f"\nLoad (before any shaping): {', '.join(loads)}.")

fmt = lambda key: f"{summary[key]:.2f}" if key in summary else "n/a"
print()
print(f"fget speedup vs best client-side: loopback {fmt('loopback')}, 1gbit {fmt('1gbit')}, wasm/native cpu {fmt('cpu')}")
PY
