#!/usr/bin/env bash
# Throughput, issue 5: memcached -t 1 and mnemod -t 1 side by side under the same load.
#
# Each server is pinned to core $SERVER_CPU (taskset) and runs SCHED_FIFO (chrt -a -f -p 1);
# the load (`mnemo bench`) is pinned to core $LOAD_CPU under chrt -f 1. The servers alternate
# in adjacent runs (memcached first in odd repetitions, mnemod first in even ones), each cell
# is repeated REPS times, and the table gives medians with the min-max spread. Workloads a and d
# are also run with memcaslap (libmemcached-tools) as a cross-check of the generator.
#
#   bash bench/throughput.sh                      # all workloads, REPS=3, DUR=5 (seconds)
#   REPS=9 DUR=10 bash bench/throughput.sh        # the issue's medians of 9
#   WORKLOADS="a b" SERVERS=memcached bash bench/throughput.sh
#   MEMCASLAP=0 bash bench/throughput.sh          # skip the memcaslap cross-check
#   CEILING=1 bash bench/throughput.sh            # also run bench/ceiling's null servers on a
#   BUSY_POLL=0 bash bench/throughput.sh          # the generator sleeps in epoll_wait
#   CASLAP_FRESH=1 bash bench/throughput.sh       # each memcaslap run against a server started afresh
#   A_KEYS=1000 WORKLOADS=a CEILING=1 MEMCASLAP=0 bash bench/throughput.sh
#                                                 # a over 1,000 keys (every lookup's lines in cache):
#                                                 # how much of the gap to the null servers is the
#                                                 # store's memory, which a null server does not have
#
# The generator busy-polls (`mnemo bench --busy-poll`): with both sides sleeping in epoll_wait,
# every request and every reply is a wake-up (an IPI and a halt exit on a VM) that costs the
# load core as much as the server. Spinning takes that cost off both servers alike.
#
# With values of 16 KB and more the generator reads each reply's line and drops the body
# unread inside the kernel (recv MSG_TRUNC): copying 100 KB per reply out of the kernel cost the
# load core as much as the server's whole reply, so on d the generator, not the server, set the
# pace for memcached and mnemod alike. memcaslap (below) still reads every byte.
#
# Workloads (50 connections each, keys of 16 bytes, every key set before the run):
#   a  32 B values, 100k keys (A_KEYS), 1:10 set:get
#   b  as a, pipeline depth 16 (a batch of 16 in one write, the next when all 16 are answered)
#   c  multi-get of 100 keys (gets only; ops/s counts requests, keys/s = 100 x ops/s)
#   d  100 KB values, 5k keys (500 MB: fits -m 1024 on both servers), 1:10 set:get
set -euo pipefail
source "$(dirname "$0")/lib.sh"

REPS=${REPS:-3}
DUR=${DUR:-5}
WARMUP=${WARMUP:-0.5}
WORKLOADS=${WORKLOADS:-a b c d}
SERVERS=${SERVERS:-memcached mnemod}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
MEMCASLAP=${MEMCASLAP:-1}
CEILING=${CEILING:-0}
BUSY_POLL=${BUSY_POLL:-1}
CEILING_SERVERS=${CEILING_SERVERS:-null-epoll null-uring}
CASLAP_FRESH=${CASLAP_FRESH:-0}

need_tools memcached:memcached memcaslap:libmemcached-tools taskset:util-linux chrt:util-linux python3:python3
build_release
[ "$CEILING" = 1 ] && build_ceiling


# memcaslap's matching configuration: key and value sizes, then set (0) and get (1) shares.
# Its key space is concurrency x window and the window takes only a k/m suffix: 100k keys for
# a as in ours, but 50k (not 5k) for d, so memcached and mnemod evict there (both alike).
# A get that misses is one transaction like a hit but moves no value, so on d TPS follows the
# hit ratio, and memcached's falls with each run against a full cache (99% on a fresh one,
# 73-97% later). CASLAP_FRESH=1 starts each server afresh before each memcaslap run, so both
# are measured from the same state.
memcaslap_args() {
    local cfg=$BENCH_TMP/memcaslap.$1.cfg value window
    case $1 in
        a) value=32 window=2k ;;
        d) value=102400 window=1k ;;
        *) return 1 ;;
    esac
    printf 'key\n16 16 1\nvalue\n%s %s 1\ncmd\n0 0.090909\n1 0.909091\n' "$value" "$value" >"$cfg"
    echo "-F $cfg -T 1 -c 50 -w $window -t ${DUR}s"
}

pin_load
ordered_servers() { # rep servers... -> the servers in this repetition's order
    local rep=$1
    shift
    if [ $((rep % 2)) -eq 1 ]; then echo "$*"; else echo "$*" | awk '{for (i = NF; i > 0; i--) printf "%s ", $i}'; fi
}

RES=$BENCH_TMP/results
mkdir -p "$RES"
for wl in $WORKLOADS; do
    args=$(workload_args "$wl")
    # shellcheck disable=SC2206 # word lists
    run=($SERVERS)
    # shellcheck disable=SC2206
    [ "$CEILING" = 1 ] && [ "$wl" = a ] && run+=($CEILING_SERVERS)
    start_servers "${run[@]}"
    for rep in $(seq 1 "$REPS"); do
        for s in $(ordered_servers "$rep" "${run[@]}"); do
            note "workload $wl, $s, run $rep/$REPS"
            # shellcheck disable=SC2086 # args is a list of flags
            "${LOAD_PREFIX[@]}" "$MNEMO" bench --server "127.0.0.1:${PORT[$s]}" $args \
                --duration "$DUR" --warmup "$WARMUP" --json >"$RES/$wl.$s.$rep.json" 2>"$RES/$wl.$s.$rep.err" ||
                { cat "$RES/$wl.$s.$rep.err" >&2; exit 1; }
        done
    done
    if [ "$MEMCASLAP" = 1 ] && { [ "$wl" = a ] || [ "$wl" = d ]; }; then
        margs=$(memcaslap_args "$wl")
        for rep in $(seq 1 "$REPS"); do
            for s in $(ordered_servers "$rep" $SERVERS); do
                note "workload $wl, $s, memcaslap run $rep/$REPS"
                if [ "$CASLAP_FRESH" = 1 ]; then stop_servers "$s" && start_servers "$s"; fi
                # shellcheck disable=SC2086
                timeout $((DUR + 30)) "${CASLAP_PREFIX[@]}" memcaslap -s "127.0.0.1:${PORT[$s]}" $margs >"$RES/$wl.$s.$rep.memcaslap" 2>&1 ||
                    { cat "$RES/$wl.$s.$rep.memcaslap" >&2; exit 1; }
            done
        done
    fi
    stop_servers "${run[@]}"
done

echo
echo "## Throughput: $(nproc) cores, servers on core $SERVER_CPU, load on core $LOAD_CPU; REPS=$REPS, DUR=${DUR}s (+${WARMUP}s warm-up)"
echo
for wl in $WORKLOADS; do echo "- $wl: \`mnemo bench $(workload_args "$wl") --duration $DUR --warmup $WARMUP\`"; done
echo
python3 - "$RES" "$REPS" "$SERVERS" "$WORKLOADS" "$CEILING_SERVERS" <<'PY'
import json, os, re, statistics, sys
res, reps, servers, workloads = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
ceiling = sys.argv[5].split()
target = {"a": 1.3, "b": 3.5, "c": 1.5, "d": 1.1}
# The server the ratio columns and the ceiling table are about: mnemod when it runs, else the
# second (or only) one; compared with the first.
mine = "mnemod" if "mnemod" in servers[1:] else servers[min(1, len(servers) - 1)]

def load(wl, s):
    runs = []
    for rep in range(1, reps + 1):
        with open(os.path.join(res, f"{wl}.{s}.{rep}.json")) as f:
            runs.append(json.load(f))
    return runs

def med(xs):
    return statistics.median(xs) if xs else float("nan")

def k(x):
    return f"{x / 1000:,.1f}k"

head = ["workload"]
for s in servers:
    head += [f"{s} ops/s", f"{s} p50 / p99 µs", f"{s} spread"]
if len(servers) >= 2:
    # Paired: each repetition's runs are adjacent, so their ratio cancels host-wide slow
    # phases (memory bandwidth on a shared host) that a ratio of medians can catch on one
    # side only.
    head += [f"{mine}/{servers[0]}", "paired ratios: median (range)", "target"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for wl in workloads:
    row, medians, p99s = [wl], [], []
    for s in servers:
        runs = load(wl, s)
        ops = [r["ops_per_sec"] for r in runs]
        p50 = med([r["latency_us"]["all"]["p50"] for r in runs])
        p99 = med([r["latency_us"]["all"]["p99"] for r in runs])
        m = med(ops)
        medians.append(m)
        p99s.append(p99)
        extra = f" ({k(med([r['keys_per_sec'] for r in runs]))} keys/s)" if wl == "c" else ""
        hit = med([r["hit_ratio"] or 0 for r in runs])
        row += [f"{k(m)}{extra}", f"{p50:,.0f} / {p99:,.0f}", f"{k(min(ops))}-{k(max(ops))}"]
        if hit < 0.99:
            row[-3] += f" (hit {hit:.0%})"
    if len(servers) >= 2:
        j = servers.index(mine)
        ratio = medians[j] / medians[0] if medians[0] else float("nan")
        ok = ratio >= target.get(wl, 0) and p99s[j] <= p99s[0]
        pairs = [b["ops_per_sec"] / a["ops_per_sec"] for a, b in zip(load(wl, servers[0]), load(wl, mine)) if a["ops_per_sec"]]
        row += [f"**{ratio:.2f}**", f"{med(pairs):.2f} ({min(pairs):.2f}-{max(pairs):.2f})", f"ratio ≥ {target.get(wl, '-')} and p99 ≤ {servers[0]}'s: {'met' if ok else 'not met'}"]
    print("| " + " | ".join(row) + " |")

if "a" in workloads and os.path.exists(os.path.join(res, f"a.{ceiling[0]}.1.json")):
    print()
    print("Ceiling on workload a: bench/ceiling's servers answer every request and do nothing else;")
    print("x/memcached is the most any server with that syscall pattern could show here.")
    print()
    # mnemod/x paired: each repetition runs every server back to back, so the ratio within a
    # repetition cancels the host's slow phases, which on a shared VM move single runs by 20-30%.
    paired_to = mine
    print(f"| server | ops/s | p50 / p99 µs | spread | x/memcached | {paired_to}/x, paired: median (range) |")
    print("|---|---|---|---|---|---|")
    base = med([r["ops_per_sec"] for r in load("a", "memcached")]) if "memcached" in servers else float("nan")
    mine_ops = [r["ops_per_sec"] for r in load("a", paired_to)]
    for s in servers + ceiling:
        runs = load("a", s)
        ops = [r["ops_per_sec"] for r in runs]
        p50 = med([r["latency_us"]["all"]["p50"] for r in runs])
        p99 = med([r["latency_us"]["all"]["p99"] for r in runs])
        pairs = [m / o for m, o in zip(mine_ops, ops) if o]
        paired = f"{med(pairs):.2f} ({min(pairs):.2f}-{max(pairs):.2f})" if s != paired_to and pairs else "-"
        print(f"| {s} | {k(med(ops))} | {p50:,.0f} / {p99:,.0f} | {k(min(ops))}-{k(max(ops))} | {med(ops) / base:.2f} | {paired} |")
    best = [max(r["ops_per_sec"] for r in rs) for rs in zip(*(load("a", c) for c in ceiling))]
    pairs = [m / b for m, b in zip(mine_ops, best) if b]
    print()
    print(f"{paired_to} against the best null server of each repetition: {med(pairs):.2f} (range {min(pairs):.2f}-{max(pairs):.2f});")
    print(f"against the best median ({k(max(med([r['ops_per_sec'] for r in load('a', c)]) for c in ceiling))}): "
          f"{med(mine_ops) / max(med([r['ops_per_sec'] for r in load('a', c)]) for c in ceiling):.2f}.")

caslap = [wl for wl in workloads if os.path.exists(os.path.join(res, f"{wl}.{servers[0]}.1.memcaslap"))]
if caslap:
    print()
    print("memcaslap cross-check (`memcaslap -T 1 -c 50`, same key/value sizes and set:get share): TPS counts")
    print("a get that misses as one transaction, like a hit. Where the servers evict (d), the one that keeps")
    print("more of the data answers more gets with a value, and each such get moves 100 KB more than a miss:")
    print("hits/s and memcaslap's Net_rate (bytes both ways) measure the same work on both servers.")
    print()

    def caslap_runs(wl, s):
        runs = []
        for rep in range(1, reps + 1):
            text = open(os.path.join(res, f"{wl}.{s}.{rep}.memcaslap")).read()
            tps = re.findall(r"TPS:\s*(\d+)", text)
            net = re.findall(r"Net_rate:\s*([\d.]+)M", text)
            gets = re.findall(r"cmd_get:\s*(\d+)", text)
            misses = re.findall(r"get_misses:\s*(\d+)", text)
            secs = re.findall(r"Run time:\s*([\d.]+)s", text)
            if not tps:
                continue
            r = {"tps": float(tps[-1]), "net": float(net[-1]) if net else float("nan")}
            if gets and misses and secs and int(gets[-1]):
                g, m = int(gets[-1]), int(misses[-1])
                r["hit"], r["hits"] = 1 - m / g, (g - m) / float(secs[-1])
            runs.append(r)
        return runs

    head = ["workload"]
    for s in servers:
        head += [f"{s} TPS", f"{s} hit ratio", f"{s} hits/s", f"{s} Net_rate"]
    if len(servers) >= 2:
        head += [f"{mine}/{servers[0]}: TPS", "hits/s", "Net_rate"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for wl in caslap:
        row, cols = [wl], []
        for s in servers:
            runs = caslap_runs(wl, s)
            col = {key: med([r[key] for r in runs if key in r]) for key in ("tps", "net", "hit", "hits")}
            cols.append(col)
            tps = [r["tps"] for r in runs]
            row.append(f"{k(col['tps'])} ({k(min(tps))}-{k(max(tps))})" if tps else "n/a")
            row += [f"{col['hit']:.0%}", k(col["hits"]), f"{col['net']:,.0f} MB/s"]
        if len(servers) >= 2:
            j = servers.index(mine)
            row += [f"**{cols[j][key] / cols[0][key]:.2f}**" if cols[0][key] else "n/a" for key in ("tps", "hits", "net")]
        print("| " + " | ".join(row) + " |")
PY
