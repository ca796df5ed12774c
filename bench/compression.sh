#!/usr/bin/env bash
# Seed 000's experiment, issue 6: mnemo-client stores random text of 5,000 / 50,000 / 500,000
# words from Debian's wamerican list 20 times and reads it back, with compression off, zstd
# (default level 3 and level 1) and zlib; prints time per set and get, stored size, ratios.
#
# Two links: the plain loopback (about 1 GB/s here: sending costs almost nothing, so any
# compression shows as pure client CPU), and a 1 Gbit/s link made with a tbf qdisc on the
# loopback of a private network namespace (unshare -n; needs root), the kind of network
# seed 000's clients and servers talked over.
#   bash bench/compression.sh
#   LOOPS=5 COUNTS=50000 bash bench/compression.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
LOOPS=${LOOPS:-20}
COUNTS=${COUNTS:-5000,50000,500000}
RATE=${RATE:-1gbit}

if [ ! -r /usr/share/dict/words ]; then
    note "installing wamerican (the word list)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q wamerican >/dev/null
fi
cargo build --release -q -p mnemo-server -p mnemo-client --example compression
cargo build --release -q -p mnemo-server
EXAMPLE=$ROOT/target/release/examples/compression

# Runs mnemod and the experiment in the current network namespace.
run_here() {
    local port pid
    port=$(free_port)
    "$MNEMOD" -p "$port" -l 127.0.0.1 -U 0 -m 1024 -I 16m -t 1 &
    pid=$!
    wait_port "$port" "$pid"
    "$EXAMPLE" --server "127.0.0.1:$port" --words /usr/share/dict/words --counts "$COUNTS" --loops "$LOOPS"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

echo "## loopback (mnemod -t 1, $LOOPS loops)"
echo
run_here
echo
if [ "${1:-}" = --in-netns ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ] || ! unshare -n true 2>/dev/null; then
    echo "(no 1 Gbit/s table: needs root for a private network namespace)"
    exit 0
fi
echo "## $RATE link (tbf on the loopback of a private network namespace, MTU 1500)"
echo
export -f run_here free_port wait_port
export MNEMOD EXAMPLE COUNTS LOOPS
unshare -n bash -c "
    set -euo pipefail
    ip link set lo up
    ip link set lo mtu 1500
    tc qdisc add dev lo root tbf rate $RATE burst 32kb latency 20ms
    run_here
"
