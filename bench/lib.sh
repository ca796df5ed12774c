# Shared helpers for bench/throughput.sh, bench/syscalls.sh and bench/instructions.sh (sourced).
#
# Gives: ROOT, MNEMOD, MNEMO, BENCH_TMP (removed on exit), free_port, wait_port,
# server_argv NAME PORT (sets SERVER_ARGV), spawn (background + remember for the exit trap),
# stop_pid, build_release, note. Every server started through spawn is killed on exit.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MNEMOD=$ROOT/target/release/mnemod
MNEMO=$ROOT/target/release/mnemo
BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/mnemo-bench.XXXXXX")
BENCH_PIDS=()

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

bench_cleanup() {
    local p
    for p in "${BENCH_PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${BENCH_PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$BENCH_TMP"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

note() { echo "# $*" >&2; }

# A TCP port free on 127.0.0.1 right now (the kernel picks it).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits until something accepts on 127.0.0.1:PORT; fails at once if PID (optional) has died,
# or after TIMEOUT seconds (default 30; valgrind needs more).
wait_port() {
    local port=$1 pid=${2:-} timeout=${3:-30} start=$SECONDS
    while ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "server for port $port (pid $pid) exited before accepting" >&2
            return 1
        fi
        if [ $((SECONDS - start)) -ge "$timeout" ]; then
            echo "nothing accepted on port $port within ${timeout}s" >&2
            return 1
        fi
        sleep 0.02
    done
}

# SERVER_ARGV := the command line of server NAME (memcached | mnemod | mnemod-epoll | mnemod-uring | mnemod-base) on PORT, one worker
# thread, the same flags for both (connection limit $CONN_LIMIT, default 4096). Extra arguments
# are appended. null-epoll and null-uring are the ceiling servers of bench/ceiling (built by
# build_ceiling), which take only the port.
server_argv() {
    local name=$1 port=$2
    shift 2
    case $name in
        memcached)
            SERVER_ARGV=(memcached -p "$port" -l 127.0.0.1 -U 0 -m 1024 -c "${CONN_LIMIT:-4096}" -t 1)
            [ "$(id -u)" -eq 0 ] && SERVER_ARGV+=(-u root)
            ;;
        null-epoll | null-uring) SERVER_ARGV=("${CEILING_DIR:-$BENCH_TMP}/$name" "$port") ;;
        mnemod) SERVER_ARGV=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m 1024 -c "${CONN_LIMIT:-4096}" -t 1) ;;
        # The same, with its event loop named (--io-loop): both loops side by side in one run.
        mnemod-epoll | mnemod-uring)
            SERVER_ARGV=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m 1024 -c "${CONN_LIMIT:-4096}" -t 1 --io-loop="${name#mnemod-}")
            ;;
        # The same, with --zero-copy named: large values lent always (on) or never (off).
        mnemod-zc-on | mnemod-zc-off)
            SERVER_ARGV=("$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m 1024 -c "${CONN_LIMIT:-4096}" -t 1 --zero-copy="${name#mnemod-zc-}")
            ;;
        # Another build of mnemod (MNEMOD_BASE=path, e.g. a copy of an earlier commit's
        # target/release/mnemod) with mnemod's flags: before and after a change in one run.
        mnemod-base)
            SERVER_ARGV=("${MNEMOD_BASE:?MNEMOD_BASE names the other mnemod binary}" -p "$port" -l 127.0.0.1 -U 0 -m 1024 -c "${CONN_LIMIT:-4096}" -t 1)
            ;;
        *)
            echo "unknown server $name" >&2
            return 1
            ;;
    esac
    SERVER_ARGV+=("$@")
}

# Runs "$@" in the background, remembers it for the exit trap; its pid is in SPAWNED.
spawn() {
    "$@" &
    SPAWNED=$!
    BENCH_PIDS+=("$SPAWNED")
}

stop_pid() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# Release build of the load generator and, when wanted, the server.
build_release() {
    local pkgs=(-p mnemo-cli)
    case " ${SERVERS:-memcached mnemod} " in *" mnemod"*) pkgs=(-p mnemo-server "${pkgs[@]}") ;; esac
    (cd "$ROOT" && cargo build --release -q "${pkgs[@]}")
}

# Builds bench/ceiling's servers into $BENCH_TMP (null-uring needs liburing-dev).
build_ceiling() {
    local dir=$ROOT/bench/ceiling
    if [ ! -e /usr/include/liburing.h ]; then
        local sudo_cmd=""
        [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
        note "installing liburing-dev"
        $sudo_cmd apt-get update -q >/dev/null
        $sudo_cmd apt-get install -y -q --no-install-recommends liburing-dev >/dev/null
    fi
    cc -O2 -Wall -o "$BENCH_TMP/null-epoll" "$dir/null_epoll.c"
    cc -O2 -Wall -o "$BENCH_TMP/null-uring" "$dir/null_uring.c" -luring
}

# Installs Debian packages providing the given commands when missing: "cmd:package ...".
need_tools() {
    local pair cmd pkg missing=()
    for pair in "$@"; do
        cmd=${pair%%:*} pkg=${pair#*:}
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
    note "installing ${missing[*]}"
    $sudo_cmd apt-get update -q >/dev/null
    $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# Median, min and max of numbers on stdin, as "median min max".
stats3() {
    python3 -c '
import sys, statistics
v = [float(x) for x in sys.stdin.read().split()]
print(statistics.median(v), min(v), max(v)) if v else print("nan nan nan")'
}

# The load generator's flags for workload a, b, c or d (bench/throughput.sh's header); the
# generator busy-polls unless BUSY_POLL=0.
workload_args() {
    local common=(--connections 50 --key-size 16 --prefill)
    [ "${BUSY_POLL:-1}" = 1 ] && common+=(--busy-poll)
    case $1 in
        a) echo "${common[*]} --keys ${A_KEYS:-100000} --value-size 32 --ratio 1:10" ;;
        b) echo "${common[*]} --keys 100000 --value-size 32 --ratio 1:10 --pipeline 16" ;;
        c) echo "${common[*]} --keys 100000 --value-size 32 --ratio 0:1 --multiget 100" ;;
        d) echo "${common[*]} --keys 5000 --value-size 100k --ratio 1:10" ;;
        *) echo "unknown workload $1" >&2; return 1 ;;
    esac
}

# Sets LOAD_PREFIX and CASLAP_PREFIX: the load on core LOAD_CPU (default 1), under SCHED_FIFO
# when this user may ask for it. memcaslap gets SCHED_RR instead: its timer thread shares the
# core with a worker that never blocks, and under FIFO at equal priority it would never run
# again to end the test.
pin_load() {
    LOAD_PREFIX=(taskset -c "${LOAD_CPU:-1}")
    CASLAP_PREFIX=(taskset -c "${LOAD_CPU:-1}")
    if chrt -f 1 true 2>/dev/null; then
        LOAD_PREFIX+=(chrt -f 1)
        CASLAP_PREFIX+=(chrt -r 1)
    else
        note "warning: chrt -f refused (no privilege): the load runs SCHED_OTHER"
    fi
}

# Starts each named server (server_argv) pinned to core SERVER_CPU (default 0) under
# SCHED_FIFO for all its threads; PORT[name] and PID[name] say where and which.
declare -A PORT PID
start_servers() { # servers...
    local s port
    for s in "$@"; do
        port=$(free_port)
        server_argv "$s" "$port"
        spawn taskset -c "${SERVER_CPU:-0}" "${SERVER_ARGV[@]}"
        PORT[$s]=$port PID[$s]=$SPAWNED
        wait_port "$port" "$SPAWNED"
        # After the server accepts, so every thread it starts at boot exists and is covered.
        if ! chrt -a -f -p 1 "$SPAWNED" 2>/dev/null; then
            note "warning: chrt -a -f -p 1 $s failed (no privilege?): it runs SCHED_OTHER"
        fi
    done
}
stop_servers() { # servers...
    local s
    for s in "$@"; do stop_pid "${PID[$s]}"; done
}
