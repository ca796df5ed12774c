#!/usr/bin/env bash
# Where a server's core goes under one of bench/throughput.sh's workloads: memcached -t 1 and
# mnemod -t 1 side by side, each pinned and under SCHED_FIFO as in throughput.sh, while
# `mnemo bench` drives it from the other core; `perf record -g` samples the server for PROF
# seconds in the middle of each run.
#
#   bash bench/profile.sh                                  # workload d, memcached and mnemod
#   WORKLOAD=a SERVERS="mnemod mnemod-epoll" bash bench/profile.sh
#   REPS=3 KEEP=/tmp/prof bash bench/profile.sh           # keep the perf.data files there
#
# One table, a column per server: ops/s (from a run without perf beside the sampled one, since
# perf slows the server), and the share of the server's on-CPU samples spent under each system
# call (callers included: splice counts the TCP stack and the loopback delivery it runs), in
# user space, and in a few kernel functions that name a cost (copies, page allocation and
# zeroing, pinning pages for vmsplice). On a VM, samples taken while interrupts are off land
# where they are turned back on, so single kernel functions are approximate. The server's CPU
# time from /proc is not shown: on this VM the io_uring worker's schedstat and tick counts
# read above 100% of its one core.
#
# Why this exists: bench/throughput.sh says how fast; this says what mnemod pays for it next
# to memcached, so that a change can be aimed (issue 14, workload d).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

WORKLOAD=${WORKLOAD:-d}
SERVERS=${SERVERS:-memcached mnemod}
REPS=${REPS:-1}
DUR=${DUR:-6}
PROF=${PROF:-3}
WARMUP=${WARMUP:-0.5}
KEEP=${KEEP:-}

need_tools memcached:memcached perf:linux-perf taskset:util-linux chrt:util-linux python3:python3
build_release
pin_load
args=$(workload_args "$WORKLOAD")
OUT=$BENCH_TMP/profile
mkdir -p "$OUT"
[ -n "$KEEP" ] && mkdir -p "$KEEP"

# Samples start once the prefill and the warm-up are over (1.5 s is plenty for both).
mid=$(python3 -c "print(max(1.5, ($DUR - $PROF) / 2))")

for rep in $(seq 1 "$REPS"); do
    for s in $SERVERS; do
        start_servers "$s"
        pid=${PID[$s]}
        for mode in plain perf; do
            note "workload $WORKLOAD, $s, $mode run $rep/$REPS"
            perf_pid=""
            if [ "$mode" = perf ]; then
                (sleep "$mid" &&
                    perf record -q -g -p "$pid" -o "$OUT/$s.$rep.data" -- sleep "$PROF" >/dev/null 2>&1) &
                perf_pid=$!
            fi
            # shellcheck disable=SC2086 # args is a list of flags
            "${LOAD_PREFIX[@]}" "$MNEMO" bench --server "127.0.0.1:${PORT[$s]}" $args \
                --duration "$DUR" --warmup "$WARMUP" --json >"$OUT/$s.$rep.$mode.json" 2>"$OUT/$s.$rep.$mode.err" ||
                { cat "$OUT/$s.$rep.$mode.err" >&2; exit 1; }
            [ -n "$perf_pid" ] && wait "$perf_pid"
        done
        stop_servers "$s"
        perf report -i "$OUT/$s.$rep.data" --children --sort symbol --stdio -g none 2>/dev/null >"$OUT/$s.$rep.children"
        perf report -i "$OUT/$s.$rep.data" --no-children --sort dso --stdio -g none 2>/dev/null >"$OUT/$s.$rep.dso"
        [ -n "$KEEP" ] && cp "$OUT/$s.$rep.data" "$KEEP/"
    done
done

echo
echo "## Profile: workload $WORKLOAD (\`mnemo bench $args --duration $DUR\`), servers -t 1 on core ${SERVER_CPU:-0}, REPS=$REPS"
echo
python3 - "$OUT" "$REPS" "$SERVERS" "$PROF" <<'PY'
import json, os, re, statistics, sys
out, reps, servers, prof_s = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), float(sys.argv[4])

# (row label, symbols whose "children" share is summed: callers included, so nested entries
# must not both be listed; a list inside stands for one system call)
# A system call is named by the largest share of its entry points (they nest, and which of
# them a kernel build keeps as a frame varies).
def syscall(name):
    return [f"__x64_sys_{name}", f"__do_sys_{name}", f"__sys_{name}"]

ROWS = [
    ("splice (pipe -> socket, with the TCP stack)", [syscall("splice")]),
    ("vmsplice (pins the value's pages)", [syscall("vmsplice")]),
    ("madvise (lent buffers: fresh pages)", [syscall("madvise")]),
    ("sendmsg / sendto / write / writev", [syscall(c) for c in ("sendmsg", "sendto", "write", "writev")]),
    ("recvfrom / read / readv", [syscall(c) for c in ("recvfrom", "read", "readv", "recvmsg")]),
    ("io_uring_enter (receives, sends, waits)", [syscall("io_uring_enter")]),
    ("epoll_wait", [syscall("epoll_wait"), syscall("epoll_pwait")]),
    ("page faults (user)", ["asm_exc_page_fault"]),
    ("  of all: kernel copies to/from user", ["_copy_to_iter", "_copy_from_iter", "copy_user_enhanced_fast_string", "rep_movs_alternative"]),
    ("  of all: page allocation and zeroing", ["do_anonymous_page"]),
    ("  of all: page pinning (gup)", ["__iov_iter_get_pages_alloc"]),
]

def shares(path):
    got = {}
    for line in open(path):
        m = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+\[[.k]\]\s+(\S+)", line)
        if m:
            got.setdefault(m.group(3), float(m.group(1)))
    return got

def user_share(path):
    total = 0.0
    for line in open(path):
        m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if m and m.group(2) not in ("[kernel.kallsyms]", "[unknown]") and not m.group(2).startswith("[k"):
            total += float(m.group(1))
    return total

def med(xs):
    return statistics.median(xs) if xs else float("nan")

cols = {}
for s in servers:
    ops = [json.load(open(os.path.join(out, f"{s}.{r}.plain.json")))["ops_per_sec"] for r in range(1, reps + 1)]
    prof = [shares(os.path.join(out, f"{s}.{r}.children")) for r in range(1, reps + 1)]
    user = [user_share(os.path.join(out, f"{s}.{r}.dso")) for r in range(1, reps + 1)]
    col = {"ops": med(ops), "user": med(user)}
    for label, syms in ROWS:
        col[label] = med([sum(max(p.get(y, 0.0) for y in x) if isinstance(x, list) else p.get(x, 0.0)
                              for x in syms) for p in prof])
    cols[s] = col

head = ["server's core"] + servers
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
print("| ops/s (run without perf) | " + " | ".join(f"{cols[s]['ops'] / 1000:,.1f}k" for s in servers) + " |")
print("| user space (self) | " + " | ".join(f"{cols[s]['user']:.1f}%" for s in servers) + " |")
for label, _ in ROWS:
    if all(cols[s][label] == 0 for s in servers):
        continue
    print(f"| {label} | " + " | ".join(f"{cols[s][label]:.1f}%" for s in servers) + " |")
PY
