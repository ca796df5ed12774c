#!/usr/bin/env bash
# Instructions per request, issue 5: memcached -t 1 and mnemod -t 1 under
# `valgrind --tool=callgrind --separate-threads=yes`, driven through the same fixed request
# sequence on one connection; only the worker thread (the thread with the most instructions over
# the measured phases) is counted.
#
#   warm-up: set 2,000 keys (32 B), get each, a miss, a pipeline and a multi-get, then
#            `callgrind_control -z` (counters to zero)
#   phases, each followed by `callgrind_control -d PHASE` (a dump; counters restart from zero):
#     get_hit   2,000 gets of stored keys, one at a time
#     get_miss  2,000 gets of absent keys, one at a time
#     pipeline  125 batches of 16 gets (hits), each batch in one write   -> per get
#     set       2,000 sets of 32 B values over the stored keys, one at a time
#     multiget  20 gets of 100 stored keys                              -> per key
#
#   bash bench/instructions.sh
#   SERVERS=memcached bash bench/instructions.sh
#   MNEMOD_BASE=path/to/older/mnemod SERVERS="mnemod-base mnemod" bash bench/instructions.sh
#   SKIP_BUILD=1 MNEMOD_BASE=path/to/mnemod SERVERS=mnemod-base bash bench/instructions.sh
#   KEEP=/tmp/cg SERVERS=mnemod bash bench/instructions.sh   # keep the dumps, then e.g.
#       callgrind_annotate /tmp/cg/cg.mnemod/callgrind.out.*.2-02   # (phase 2: get_hit)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SERVERS=${SERVERS:-memcached mnemod}

need_tools memcached:memcached valgrind:valgrind callgrind_control:valgrind python3:python3
# SKIP_BUILD=1: measure the binaries as they are (e.g. only mnemod-base, while the tree is
# being edited).
[ -n "${SKIP_BUILD:-}" ] || build_release

CLIENT=$BENCH_TMP/client.py
cat >"$CLIENT" <<'PY'
"""Warm-up, then the measured phases, dumping callgrind's counters after each."""
import socket, subprocess, sys

port, pid = int(sys.argv[1]), sys.argv[2]
N = 2000
keys = [b"key:%012d" % i for i in range(N)]
missing = [b"nokey:%010d" % i for i in range(N)]
value = b"v" * 32
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""

def until(marker, count):
    global buf
    while buf.count(marker) < count:
        chunk = s.recv(1 << 20)
        if not chunk:
            sys.exit("server closed the connection")
        buf += chunk
    idx = -1
    for _ in range(count):
        idx = buf.index(marker, idx + 1)
    buf = buf[idx + len(marker):]

def get(ks):
    s.sendall(b"get " + b" ".join(ks) + b"\r\n")
    until(b"END\r\n", 1)

def set_(k):
    s.sendall(b"set " + k + b" 0 0 32\r\n" + value + b"\r\n")
    until(b"\r\n", 1)

def pipeline(batch):
    s.sendall(b"".join(b"get " + k + b"\r\n" for k in batch))
    until(b"END\r\n", len(batch))

def ctl(*args):
    r = subprocess.run(["callgrind_control", *args, pid], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("callgrind_control %s failed: %s%s" % (" ".join(args), r.stdout, r.stderr))

# Warm-up: every code path once, buffers grown, the keys stored.
for k in keys:
    set_(k)
for k in keys:
    get([k])
get([missing[0]])
pipeline(keys[:16])
get(keys[:100])
ctl("-z")

phases = []
for k in keys:
    get([k])
phases.append(("get_hit", N))
ctl("--dump=get_hit")
for k in missing:
    get([k])
phases.append(("get_miss", N))
ctl("--dump=get_miss")
for b in range(N // 16):
    pipeline(keys[b * 16:(b + 1) * 16])
phases.append(("pipeline", N // 16 * 16))
ctl("--dump=pipeline")
for k in keys:
    set_(k)
phases.append(("set", N))
ctl("--dump=set")
for b in range(20):
    get(keys[b * 100:(b + 1) * 100])
phases.append(("multiget", 20 * 100))
ctl("--dump=multiget")
s.close()
for name, n in phases:
    print(name, n)
PY

for s in $SERVERS; do
    port=$(free_port)
    # memcached sizes its connection table from -c and valgrind wants 19988; both get it.
    CONN_LIMIT=19988 server_argv "$s" "$port"
    # valgrind does not follow io_uring (the kernel fills its buffers behind valgrind's back):
    # mnemod is measured on its epoll loop, which runs the same connection code.
    # mnemod-base (MNEMOD_BASE=an earlier build) too: before and after in one sitting.
    case $s in mnemod | mnemod-base) SERVER_ARGV+=(--io-loop=epoll) ;; esac
    out=$BENCH_TMP/cg.$s
    mkdir -p "$out"
    spawn valgrind -q --tool=callgrind --separate-threads=yes --dump-instr=no \
        --callgrind-out-file="$out/callgrind.out.%p" "${SERVER_ARGV[@]}"
    pid=$SPAWNED
    wait_port "$port" "$pid" 120
    note "$s under callgrind (pid $pid): running the sequence"
    python3 "$CLIENT" "$port" "$pid" >"$out/ops"
    stop_pid "$pid"
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp -r "$out" "$KEEP/"; fi
done

echo
echo "## Instructions per request (callgrind, worker thread only; valgrind $(valgrind --version | sed 's/valgrind-//'))"
echo
python3 - "$BENCH_TMP" "$SERVERS" <<'PY'
import glob, os, re, sys
tmp, servers = sys.argv[1], sys.argv[2].split()
target = {"get_hit": 0.7, "set": 0.7}
label = {
    "get_hit": "get, hit",
    "get_miss": "get, miss",
    "pipeline": "get in a 16-deep pipeline (per get)",
    "set": "set, 32 B",
    "multiget": "100-key multi-get (per key)",
}

def per_op(server):
    d = os.path.join(tmp, "cg." + server)
    ops = dict((l.split()[0], int(l.split()[1])) for l in open(os.path.join(d, "ops")))
    # ir[thread][phase]: instructions of that thread in that phase's dump.
    ir = {}
    for path in glob.glob(os.path.join(d, "callgrind.out.*")):
        m = re.search(r"-(\d+)$", path)
        if not m:
            continue
        text = open(path, errors="replace").read()
        trig = re.search(r"^desc: Trigger: .*?(\w+)\s*$", text, re.M)
        total = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
        if trig and total and trig.group(1) in ops:
            ir.setdefault(m.group(1), {})[trig.group(1)] = int(total.group(1))
    if not ir:
        sys.exit(f"no callgrind dumps for {server} in {d}")
    worker = max(ir, key=lambda t: sum(ir[t].values()))
    all_ir = sum(sum(v.values()) for v in ir.values()) or 1
    shares = ", ".join(f"{t}: {sum(ir[t].values()) / all_ir:.1%}" for t in sorted(ir))
    return {p: ir[worker].get(p, 0) / n for p, n in ops.items()}, f"{worker} (instructions by thread: {shares})"

res = {s: per_op(s) for s in servers}
head = ["request"] + [f"{s} instr/op" for s in servers]
if len(servers) == 2:
    head += [f"{servers[1]}/{servers[0]}", "target"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for p in label:
    row = [label[p]] + [f"{res[s][0][p]:,.0f}" for s in servers]
    if len(servers) == 2:
        a, b = res[servers[0]][0][p], res[servers[1]][0][p]
        r = b / a if a else float("nan")
        t = target.get(p)
        row += [f"**{r:.2f}**", (f"≤ {t}: " + ("met" if r <= t else "not met")) if t else ""]
    print("| " + " | ".join(row) + " |")
print()
for s in servers:
    print(f"- {s}: worker thread {res[s][1]}")
PY
