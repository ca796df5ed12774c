#!/usr/bin/env bash
# Syscalls per request, issue 5 / seed 004: the server's writes (write, writev, sendmsg, sendto)
# per request, one request at a time and in a 16-deep pipeline, memcached -t 1 against mnemod -t 1.
#
# Seed 004's sequence on one TCP_NODELAY connection: 2,500 deletes, 2,500 sets (32 B) and 2,500
# gets, each sent and answered before the next; then one get_multi of the 2,500 keys; then 500
# batches of 16 gets, each batch in one write. For every phase, `strace -c -f` is attached to the
# server (all threads) and detached after, so each phase is counted alone. A last phase sets one
# 100 KB value and gets it 500 times, one at a time. mnemod's `--zero-copy auto` (docs/operations.md) probes
# both ways of sending a large value and keeps the faster: copied, a get is one write; lent, it
# is vmsplice + splice, two (the reply's head goes with the value). One request at a time, the
# two modes serve at about the same rate and the cheaper one for the worker is kept, so this
# phase may show either, or a mix. `--zero-copy on` (server mnemod-zc-on) always lends.
#
# Under the io_uring loop (mnemod's default; mnemod-epoll names the other) a reply leaves as a
# SEND submission, not a write system call: `perf stat` counts each mnemod server's SEND
# submissions (tracepoint io_uring:io_uring_submit_req, opcode 26) as its writes, beside the
# write system calls it makes (a large value with nothing queued before it goes straight to
# the socket), and io_uring_enter calls appear in the enter column (the one system call that
# carries all of an iteration's sends and receives).
#
#   bash bench/syscalls.sh
#   SERVERS=memcached bash bench/syscalls.sh
#   SERVERS="memcached mnemod mnemod-epoll" bash bench/syscalls.sh
#   SERVERS="memcached mnemod mnemod-zc-on" bash bench/syscalls.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SERVERS=${SERVERS:-memcached mnemod}
TRACE=write,writev,sendmsg,sendto,sendmmsg,vmsplice,splice,read,recvfrom,readv,recvmsg,epoll_wait,epoll_pwait,epoll_pwait2,io_uring_enter

need_tools memcached:memcached strace:strace python3:python3 perf:linux-perf
build_release

CLIENT=$BENCH_TMP/client.py
cat >"$CLIENT" <<'PY'
"""One phase of seed 004's sequence; prints the number of requests it sent."""
import socket, sys

port, phase = int(sys.argv[1]), sys.argv[2]
N, DEPTH, BATCHES = 2500, 16, 500
keys = [b"seed004:%d" % i for i in range(N)]
value = b"v" * 32
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""

def until(marker, count):
    """Reads until `count` more occurrences of `marker` have arrived."""
    global buf
    while buf.count(marker) < count:
        chunk = s.recv(1 << 20)
        if not chunk:
            sys.exit("server closed the connection")
        buf += chunk
    # Keep what follows the count-th marker (nothing, in this strictly request-reply use).
    idx = -1
    for _ in range(count):
        idx = buf.index(marker, idx + 1)
    buf = buf[idx + len(marker):]

if phase == "delete":
    for k in keys:
        s.sendall(b"delete " + k + b"\r\n")
        until(b"\r\n", 1)
    n = N
elif phase == "set":
    for k in keys:
        s.sendall(b"set " + k + b" 0 0 32\r\n" + value + b"\r\n")
        until(b"\r\n", 1)
    n = N
elif phase == "get":
    for k in keys:
        s.sendall(b"get " + k + b"\r\n")
        until(b"END\r\n", 1)
    n = N
elif phase == "get_multi":
    s.sendall(b"get " + b" ".join(keys) + b"\r\n")
    until(b"END\r\n", 1)
    n = 1
elif phase == "pipeline":
    for b in range(BATCHES):
        batch = b"".join(b"get " + keys[(b * DEPTH + i) % N] + b"\r\n" for i in range(DEPTH))
        s.sendall(batch)
        until(b"END\r\n", DEPTH)
    n = BATCHES
elif phase == "large":
    big = b"L" * 102400
    s.sendall(b"set seed004:large 0 0 %d\r\n" % len(big) + big + b"\r\n")
    until(b"\r\n", 1)
    for _ in range(BATCHES):
        s.sendall(b"get seed004:large\r\n")
        until(b"\r\nEND\r\n", 1)
    n = BATCHES + 1
else:
    sys.exit("unknown phase " + phase)
s.close()
print(n)
PY

# Runs phase $3 against server pid $1 on port $2 with strace attached (and, for a mnemod server
# $4, perf counting its io_uring SEND submissions); prints "requests writes reads epolls enters".
traced_phase() {
    local pid=$1 port=$2 phase=$3 name=$4 out=$BENCH_TMP/strace.$1.$3 n pf=""
    case $name in mnemod*)
        pf=$BENCH_TMP/perf.$1.$3
        spawn perf stat -x, -e io_uring:io_uring_submit_req --filter 'opcode == 26' -p "$pid" -o "$pf"
        local perf_pid=$SPAWNED
        ;;
    esac
    spawn strace -c -f -e trace="$TRACE" -o "$out" -p "$pid" 2>"$out.err"
    local st=$SPAWNED start=$SECONDS
    # strace says "Process N attached [with M threads]" once it holds every thread.
    until grep -q attached "$out.err" 2>/dev/null; do
        kill -0 "$st" 2>/dev/null || { cat "$out.err" >&2; return 1; }
        [ $((SECONDS - start)) -lt 30 ] || { echo "strace did not attach" >&2; return 1; }
        sleep 0.02
    done
    n=$(python3 "$CLIENT" "$port" "$phase")
    kill -INT "$st"
    wait "$st" 2>/dev/null || true
    if [ -n "$pf" ]; then
        kill -INT "$perf_pid"
        wait "$perf_pid" 2>/dev/null || true
    fi
    python3 - "$out" "$n" "$pf" <<'PY'
import sys
calls = {}
for line in open(sys.argv[1]):
    f = line.split()
    # % time, seconds, usecs/call, calls, [errors], syscall
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        calls[f[-1]] = int(f[3])
w = sum(calls.get(c, 0) for c in ("write", "writev", "sendmsg", "sendto", "sendmmsg", "vmsplice", "splice"))
r = sum(calls.get(c, 0) for c in ("read", "readv", "recvfrom", "recvmsg"))
e = sum(calls.get(c, 0) for c in ("epoll_wait", "epoll_pwait", "epoll_pwait2"))
if sys.argv[3]:
    # perf -x, lines: count,unit,event,...
    for line in open(sys.argv[3]):
        f = line.split(",")
        if len(f) > 2 and "io_uring_submit_req" in f[2]:
            w += int(f[0])
print(sys.argv[2], w, r, e, calls.get("io_uring_enter", 0))
PY
}

PHASES="delete set get get_multi pipeline large"
for s in $SERVERS; do
    port=$(free_port)
    server_argv "$s" "$port"
    spawn "${SERVER_ARGV[@]}"
    pid=$SPAWNED
    wait_port "$port" "$pid"
    for phase in $PHASES; do
        note "$s: $phase"
        echo "$s $phase $(traced_phase "$pid" "$port" "$phase" "$s")" >>"$BENCH_TMP/rows"
    done
    stop_pid "$pid"
done

echo
echo "## Server syscalls per request (strace -c -f, trace=$TRACE)"
echo
python3 - "$BENCH_TMP/rows" "$SERVERS" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    s, phase, n, w, r, e, u = line.split()
    rows[(s, phase)] = (int(n), int(w), int(r), int(e), int(u))
servers = sys.argv[2].split()
label = {
    "delete": "delete, one at a time",
    "set": "set 32 B, one at a time",
    "get": "get (hit), one at a time",
    "get_multi": "get_multi of 2,500 keys",
    "pipeline": "16-deep get pipeline (per batch)",
    "large": "one set of 100 KB, then 500 gets of it, one at a time",
}
head = ["phase", "requests"]
for s in servers:
    head += [f"{s} writes/req", f"{s} reads/req", f"{s} epoll/req"]
    if s.startswith("mnemod"):
        head += [f"{s} io_uring_enter/req"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for phase in label:
    n = rows[(servers[0], phase)][0]
    row = [label[phase], f"{n:,}"]
    for s in servers:
        _, w, r, e, u = rows[(s, phase)]
        row += [f"{w / n:.2f}" + (f" ({w:,})" if n == 1 or phase == "pipeline" else ""), f"{r / n:.2f}", f"{e / n:.2f}"]
        if s.startswith("mnemod"):
            row += [f"{u / n:.2f}"]
    print("| " + " | ".join(row) + " |")
PY
