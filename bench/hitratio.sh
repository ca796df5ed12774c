#!/usr/bin/env bash
# Miss ratio of mnemod's eviction against memcached's at equal memory, on real traces and on Zipf.
#
# Workloads (bench/hitratio.py has the details), each replayed look-aside (get; set on a miss),
# the first 20% not counted, against a fresh server per workload and size:
#   orm-night, web12   the real traces in $TRACES (bench/traces, with their licence: big-endian u32 key ids, xz);
#                      each key's value size is a pure function of its id (hitratio.py
#                      trace_value_size: median 230 B, 10% above 1 KiB, at most 16 KiB). Cache
#                      sizes: TRACE_FRACTIONS of the trace's footprint (key + value bytes of every
#                      key it names). QUICK=1 replays only the first QUICK_REQUESTS of
#                      orm-night (5M requests in full, 68 MiB; its first 1M name 33 MiB).
#   zipf, zipf-shift, zipf-ttl   Zipf(0.99) over KEYS keys of 200-1000 B, at ZIPF_FRACTIONS of the
#                      key space's bytes (small caches: where policies differ most).
#   zipf-mixed         Zipf(0.99) over MIXED_KEYS keys of 10 B..500 KB (log-uniform), at
#                      MIXED_FRACTIONS of its bytes: object and byte miss ratio.
#
# Equal memory, honestly: memcached's -m counts only its slab pages, and it takes a whole 1 MiB
# page for every slab class in use, so it holds more than a small -m says. So memcached runs
# first at `-m M` (M = the fraction of the footprint, in MiB, at least 2); at the end of its
# replay its stats give total_malloced + hash_bytes, and mnemod runs with that as -m (MiB,
# rounded down: mnemod never gets more than memcached held). mnemod's -m bounds everything its
# store owns, index included. Both servers' RSS at the end of the replay is reported too.
# On the traces' value sizes memcached uses ~23 slab classes, so it holds at least ~24 MiB
# whatever -m says: web12 (11 MiB) fits whole at every size, and a size whose memcached held
# what a smaller size's did is measured once (the row of the smaller fraction stands for it).
#
# Prints a markdown table (workload x size x server: miss ratio, mnemod/memcached miss ratio,
# the -m each ran with, RSS) and writes it with one miss-ratio curve per workload as PNG into
# OUT (default $TMPDIR/mnemo-hitratio; never the repository). The PNGs need matplotlib, pinned in
# bench/requirements.txt and installed into .venv (created if missing).
#   bash bench/hitratio.sh                              # everything
#   WORKLOADS="web12 zipf" bash bench/hitratio.sh
#   QUICK=0 TRACE_FRACTIONS="0.01 0.1 0.5" bash bench/hitratio.sh
#   THREADS=4 KEYS=440000 REQUESTS=2000000 TTL_REQUESTS=1000000 TTL_RATE=20000 bash bench/hitratio.sh
#   SKIP_BUILD=1 bash bench/hitratio.sh                 # use target/release/mnemod as it is
#   MNEMOD_ARGS="--eviction=fifo" bash bench/hitratio.sh   # the previous policy
# How low any policy could go on the Zipf rows (cold floor, lower bound, Belady at a size):
#   python3 bench/hitratio_bound.py zipf-shift 7,25 --requests 1000000
set -euo pipefail
shopt -s inherit_errexit # a failed server start or replay inside $(...) stops the run
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
# MNEMOD_BIN: another mnemod binary (e.g. a debug build, with SKIP_BUILD=1).
MNEMOD=${MNEMOD_BIN:-$MNEMOD}

THREADS=${THREADS:-4}
KEYS=${KEYS:-440000}
REQUESTS=${REQUESTS:-2000000}
TTL_REQUESTS=${TTL_REQUESTS:-1000000}
# Requests per second in the TTL workload: below what the replayer reaches on either server, so
# both see the same schedule (the lag column shows if it did not).
TTL_RATE=${TTL_RATE:-20000}
SEED=${SEED:-42}
WORKLOADS=${WORKLOADS:-orm-night web12 zipf zipf-shift zipf-ttl zipf-mixed}
MIXED_KEYS=${MIXED_KEYS:-100000}
MIXED_REQUESTS=${MIXED_REQUESTS:-500000}
MIXED_FRACTIONS=${MIXED_FRACTIONS:-0.01 0.02}
TRACES=${TRACES:-$ROOT/bench/traces}
TRACE_FRACTIONS=${TRACE_FRACTIONS:-0.01 0.02 0.05 0.1 0.2 0.3 0.4 0.5}
ZIPF_FRACTIONS=${ZIPF_FRACTIONS:-0.01 0.1}
QUICK=${QUICK:-0}
QUICK_REQUESTS=${QUICK_REQUESTS:-1000000}
MNEMOD_ARGS=${MNEMOD_ARGS:-}
OUT=${OUT:-${TMPDIR:-/tmp}/mnemo-hitratio}
mkdir -p "$OUT"

# SKIP_BUILD=1: use the mnemod already in target/release (e.g. while the tree does not build).
if [ -z "${SKIP_BUILD:-}" ]; then
    note "building mnemod (release)"
    cargo build --release -q -p mnemo-server
fi

# Python for the plots: the project venv with bench/requirements.txt (matplotlib).
PY=$ROOT/.venv/bin/python
if ! "$PY" -c 'import matplotlib' 2>/dev/null; then
    note "installing bench/requirements.txt into .venv"
    [ -x "$PY" ] || python3 -m venv "$ROOT/.venv"
    "$PY" -m pip install -q -r bench/requirements.txt
fi

replay_args() { # workload -> the replayer's arguments after PORT
    case $1 in
        orm-night | web12)
            local n=0
            [ "$1" = orm-night ] && [ "$QUICK" = 1 ] && n=$QUICK_REQUESTS
            echo "trace --trace $TRACES/$1.trace.xz --requests $n"
            ;;
        zipf-ttl) echo "$1 --keys $KEYS --requests $TTL_REQUESTS --seed $SEED --rate $TTL_RATE" ;;
        zipf-mixed) echo "$1 --keys $MIXED_KEYS --requests $MIXED_REQUESTS --seed $SEED" ;;
        *) echo "$1 --keys $KEYS --requests $REQUESTS --seed $SEED --rate $TTL_RATE" ;;
    esac
}

footprint() { # workload -> bytes of key + value of the keys it names
    case $1 in
        orm-night | web12)
            # shellcheck disable=SC2046
            python3 bench/hitratio.py 0 footprint $(replay_args "$1" | cut -d' ' -f2-) | cut -d' ' -f1
            ;;
        *)
            local keys=$KEYS
            [ "$1" = zipf-mixed ] && keys=$MIXED_KEYS
            python3 - "$keys" "$SEED" "$1" <<'PY'
import sys
sys.path.insert(0, "bench")
import hitratio
keys, seed = int(sys.argv[1]), int(sys.argv[2])
sizes, _, ids = hitratio.build_keys(keys, seed, False, sys.argv[3] == "zipf-mixed")
print(sum(len(b"k:%d" % i) + sizes[i] for i in ids))
PY
            ;;
    esac
}

run_one() { # server mem_mb workload -> "hits counted ratio lag data held hit_bytes counted_bytes rss_kb"
    local server=$1 mem=$2 wl=$3 port argv out rss
    port=$(free_port)
    if [ "$server" = memcached ]; then
        argv=(memcached -p "$port" -l 127.0.0.1 -U 0 -m "$mem" -t "$THREADS")
        [ "$(id -u)" -eq 0 ] && argv+=(-u root)
    else
        # shellcheck disable=SC2206
        argv=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m "$mem" -t "$THREADS" $MNEMOD_ARGS)
    fi
    spawn "${argv[@]}"
    local pid=$SPAWNED
    wait_port "$port" "$pid"
    note "$server $wl -m $mem"
    # shellcheck disable=SC2046
    out=$(python3 bench/hitratio.py "$port" $(replay_args "$wl") --server "$server")
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    stop_pid "$pid"
    echo "$out $rss"
}

rows=()
for wl in $WORKLOADS; do
    fp=$(footprint "$wl")
    fractions=$ZIPF_FRACTIONS
    case $wl in
        orm-night | web12) fractions=$TRACE_FRACTIONS ;;
        zipf-mixed) fractions=$MIXED_FRACTIONS ;;
    esac
    seen=" " held_seen=" "
    for f in $fractions; do
        # memcached refuses -m below 2 with its default -I (1 MiB: at most half of -m).
        mem=$(python3 -c "print(max(2, round($fp * $f / 2**20)))")
        case $seen in *" $mem "*) continue ;; esac # two fractions that round to one size
        seen+="$mem "
        mc=$(run_one memcached "$mem" "$wl")
        held=$(echo "$mc" | cut -d' ' -f6)
        mn_mem=$(( held >> 20 ))
        [ "$mn_mem" -ge 1 ] || mn_mem=1
        case $held_seen in *" $mn_mem "*) note "memcached -m $mem held what a smaller -m did"; continue ;; esac
        held_seen+="$mn_mem "
        mn=$(run_one mnemod "$mn_mem" "$wl")
        rows+=("$wl $f $fp memcached $mem $mc" "$wl $f $fp mnemod $mn_mem $mn")
    done
done

printf '%s\n' "${rows[@]}" > "$OUT/rows.txt"
"$PY" bench/hitratio_report.py "$OUT" "$THREADS" "$QUICK" "$QUICK_REQUESTS" < "$OUT/rows.txt" | tee "$OUT/hitratio.md"
note "table and curves in $OUT"
