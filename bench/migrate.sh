#!/usr/bin/env bash
# Issue 38: how fast a running memcached's contents move into mnemod. ITEMS items of
# VALUE_SIZE bytes (default 1,000,000 x 100 B; a third with a TTL) are loaded into a fresh
# memcached, then copied into a fresh mnemod, once by each tool:
#   mnemo migrate --from MEMCACHED --to MNEMOD
#   memcached-tool MEMCACHED dump | relay MNEMOD    (Debian's memcached package; the relay
#                                                    writes its stdin to the socket and reads
#                                                    the replies, as `| nc` would)
# Each run's time is the whole command's wall time; after each, mnemo migrate's destination
# must hold as many items as the source (memcached-tool's misses, from memcached's crawler
# passing over items its LRU maintainer moves during the dump, are counted and shown). CPU
# time is counted too, for the tool (its process tree: perl and the relay for memcached-tool)
# and each server (/proc/PID/stat): on a busy machine the wall time says how long the copy
# took there, the CPU time what it costs anywhere. The two tools take turns on fresh servers,
# run after run; the table has each tool's median and the median of the per-run ratios (a run
# of memcached-tool against the migrate run just before it, under much the same load), the
# load average before and after, and the commit measured. Before each timing the loaded
# memcached is left to finish growing its hash table (its assoc thread), which a fresh load of
# a million items starts and a long-running cache finished long ago.
#   bash bench/migrate.sh
#   ITEMS=200000 RUNS=3 bash bench/migrate.sh
#   SKIP_BUILD=1 ...: use target/release's binaries as they are
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ITEMS=${ITEMS:-1000000}
VALUE_SIZE=${VALUE_SIZE:-100}
RUNS=${RUNS:-3}
THREADS=${THREADS:-2}
TOOL=${MEMCACHED_TOOL:-/usr/share/memcached/scripts/memcached-tool}

[ -x "$TOOL" ] || [ -r "$TOOL" ] || { echo "memcached-tool not found at $TOOL (Debian's memcached package)" >&2; exit 1; }
[ "${SKIP_BUILD:-0}" = 1 ] || build_release

root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(-u root)

start() { # memcached|mnemod -> sets STARTED_PORT, STARTED_PID
    local port
    port=$(free_port)
    if [ "$1" = memcached ]; then
        spawn memcached "${root_flag[@]}" -p "$port" -l 127.0.0.1 -U 0 -m 1024 -t "$THREADS"
    else
        spawn "$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m 1024 -t "$THREADS"
    fi
    STARTED_PORT=$port STARTED_PID=$SPAWNED
    wait_port "$port" "$SPAWNED"
}

# Pipelined noreply sets, then a meta no-op to know they are all done.
load() { # port
    python3 - "$1" "$ITEMS" "$VALUE_SIZE" <<'PY'
import socket, sys
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
v = b"v" * size
buf = []
for i in range(n):
    ttl = 3600 + i % 1000 if i % 3 == 0 else 0
    buf.append(b"set key:%d %d %d %d noreply\r\n%s\r\n" % (i, i % 65536, ttl, size, v))
    if len(buf) == 10000:
        s.sendall(b"".join(buf))
        buf = []
s.sendall(b"".join(buf) + b"mn\r\n")
r = b""
while not r.endswith(b"MN\r\n"):
    r += s.recv(1 << 16)
PY
}

stat() { # port name: one `stats` value
    python3 - "$1" "$2" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
r = b""
while not r.endswith(b"END\r\n"):
    r += s.recv(1 << 16)
name = b"STAT " + sys.argv[2].encode() + b" "
print(next(l[len(name):].decode() for l in r.split(b"\r\n") if l.startswith(name)))
PY
}
curr_items() { stat "$1" curr_items; }

# Until memcached's hash table has finished growing (a poll of its stats, at most 60 s).
settled() { # port
    local i
    for i in $(seq 600); do
        [ "$(stat "$1" hash_is_expanding)" = 0 ] && return 0
        sleep 0.1
    done
    note "hash table still expanding after 60 s"
}

# stdin to 127.0.0.1:PORT, the replies read (and counted) as they come: `| nc` without nc.
cat > "$BENCH_TMP/relay.py" <<'PY'
import socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
got = []
def drain():
    n = 0
    while True:
        d = s.recv(1 << 16)
        if not d:
            break
        n += d.count(b"\r\n")
    got.append(n)
t = threading.Thread(target=drain)
t.start()
while True:
    d = sys.stdin.buffer.read1(1 << 16)
    if not d:
        break
    s.sendall(d)
s.shutdown(socket.SHUT_WR)
t.join()
PY

# CPU seconds (user + system) a process has used so far.
cpu_secs() { # pid
    awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# The same as user and system seconds, for the per-run note (a server's kernel time is most
# of what its event loop costs).
cpu_split() { # pid
    awk -v hz="$(getconf CLK_TCK)" '{ print $14 / hz, $15 / hz }' "/proc/$1/stat"
}

declare -A SECS CPU MISSED
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq "$RUNS"); do
    for tool in migrate memcached-tool; do
        start memcached; src=$STARTED_PORT src_pid=$STARTED_PID
        start mnemod; dst=$STARTED_PORT dst_pid=$STARTED_PID
        load "$src"
        settled "$src"
        have=$(curr_items "$src")
        c0="$(cpu_secs "$src_pid") $(cpu_secs "$dst_pid")"
        s0="$(cpu_split "$src_pid") $(cpu_split "$dst_pid")"
        t0=$(date +%s.%N)
        if [ "$tool" = migrate ]; then
            /usr/bin/time -f "%U %S" -o "$BENCH_TMP/cpu" \
                "$MNEMO" migrate --quiet --from "127.0.0.1:$src" --to "127.0.0.1:$dst" >"$BENCH_TMP/summary"
        else
            /usr/bin/time -f "%U %S" -o "$BENCH_TMP/cpu" bash -c \
                'perl "$1" "127.0.0.1:$2" dump 2>/dev/null | python3 "$3" "$4"' _ \
                "$TOOL" "$src" "$BENCH_TMP/relay.py" "$dst"
        fi
        t1=$(date +%s.%N)
        c1="$(cpu_secs "$src_pid") $(cpu_secs "$dst_pid")"
        s1="$(cpu_split "$src_pid") $(cpu_split "$dst_pid")"
        cpu=$(python3 -c "import sys; a, b, c = sys.argv[1:4]; x0, y0 = map(float, b.split()); x1, y1 = map(float, c.split()); t = sum(map(float, a.split())); print(f'{t:.2f} {x1 - x0:.2f} {y1 - y0:.2f}')" \
            "$(cat "$BENCH_TMP/cpu")" "$c0" "$c1")
        moved=$(curr_items "$dst")
        if [ "$moved" != "$have" ]; then
            note "$tool run $run: the destination holds $moved items, the source $have"
            [ "$tool" = migrate ] && exit 1
        fi
        MISSED[$tool]="${MISSED[$tool]:-} $((have - moved))"
        secs=$(python3 -c "print($t1 - $t0)")
        split=$(python3 -c "import sys; t = sys.argv[1].split(); a = [float(x) for x in sys.argv[2].split()]; b = [float(x) for x in sys.argv[3].split()]; d = [y - x for x, y in zip(a, b)]; print(f'{float(t[0]):.2f}/{float(t[1]):.2f}, {d[0]:.2f}/{d[1]:.2f}, {d[2]:.2f}/{d[3]:.2f}')" \
            "$(cat "$BENCH_TMP/cpu")" "$s0" "$s1")
        note "$tool run $run: $have items in $secs s; CPU s (tool, memcached, mnemod): $cpu (user/system: $split)"
        SECS[$tool]="${SECS[$tool]:-} $secs"
        CPU[$tool]="${CPU[$tool]:-},$cpu"
        stop_pid "$src_pid"; stop_pid "$dst_pid"
    done
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git -C "$ROOT" rev-parse --short HEAD)
git -C "$ROOT" diff --quiet HEAD -- crates || commit="$commit+changes"
python3 - "$have" "$VALUE_SIZE" "$RUNS" "$THREADS" "$load_before" "$load_after" "$commit" \
    "${SECS[migrate]}" "${SECS[memcached-tool]}" "${CPU[migrate]}" "${CPU[memcached-tool]}" \
    "${MISSED[migrate]}" "${MISSED[memcached-tool]}" <<'PY'
import statistics, sys
n, size, runs, threads = (int(x) for x in sys.argv[1:5])
load_before, load_after, commit = sys.argv[5:8]
secs = {t: [float(x) for x in sys.argv[i].split()] for t, i in (("migrate", 8), ("memcached-tool", 9))}
cpu = {t: [[float(x) for x in r.split()] for r in sys.argv[i].split(",") if r] for t, i in (("migrate", 10), ("memcached-tool", 11))}
missed = {t: [int(x) for x in sys.argv[i].split()] for t, i in (("migrate", 12), ("memcached-tool", 13))}
med = {t: statistics.median(v) for t, v in secs.items()}
paired = [b / a for a, b in zip(secs["migrate"], secs["memcached-tool"])]
print(f"{n:,} items of {size} B, memcached -> mnemod (each -t {threads}), median of {runs} runs; "
      f"load average {load_before} before, {load_after} after; commit {commit}")
print()
print("| tool | wall s (min-max) | items/s | vs memcached-tool: of the medians; per run, median (min-max) | CPU s: tool + memcached + mnemod | CPU us/item | items not copied, per run |")
print("|---|---|---|---|---|---|---|")
for t, name in (("migrate", "mnemo migrate"), ("memcached-tool", "memcached-tool dump \\| relay")):
    c = [statistics.median(r[i] for r in cpu[t]) for i in range(3)]
    ratio = f"{med['memcached-tool'] / med[t]:.1f}x"
    if t == "migrate":
        ratio += f"; {statistics.median(paired):.1f}x ({min(paired):.1f}-{max(paired):.1f})"
    print(f"| {name} | {med[t]:.2f} ({min(secs[t]):.2f}-{max(secs[t]):.2f}) | {n / med[t]:,.0f} | "
          f"{ratio} | {c[0]:.2f} + {c[1]:.2f} + {c[2]:.2f} | {sum(c) / n * 1e6:.2f} | "
          f"{', '.join(map(str, missed[t]))} |")
PY
