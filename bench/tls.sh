#!/usr/bin/env bash
# TLS throughput (issue 16): get/set over TLS against memcached -Z and mnemod -Z, side by side.
#
# Both servers -t 1 on core SERVER_CPU, the same certificate (made here with openssl: a CA and
# a server certificate for localhost); the client is bench/tls (mnemo-tlsbench: one blocking
# rustls connection per thread, closed loop, 1 set per RATIO gets) on core LOAD_CPU. The two
# servers alternate within each repetition; the table gives medians, the ratio of medians and
# the median of the per-repetition (paired) ratios.
#
#   bash bench/tls.sh                      # REPS=5 DUR=5 CONNS=8 KEYS=10000 VALUE=32
#   VALUE=4096 bash bench/tls.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

REPS=${REPS:-5}
DUR=${DUR:-5}
CONNS=${CONNS:-8}
KEYS=${KEYS:-10000}
VALUE=${VALUE:-32}
RATIO=${RATIO:-10}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BENCH=$ROOT/target/release/mnemo-tlsbench

need_tools memcached:memcached openssl:openssl taskset:util-linux
note "building mnemod and mnemo-tlsbench (release)"
(cd "$ROOT" && cargo build --release -q -p mnemo-server -p mnemo-tlsbench)

certs=$BENCH_TMP/certs
mkdir -p "$certs"
(
    cd "$certs"
    echo "subjectAltName=DNS:localhost,IP:127.0.0.1" >san.cnf
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=bench CA" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out server.crt \
        -extfile san.cnf 2>/dev/null
    chmod 644 ./*
)
tls_opts="ssl_chain_cert=$certs/server.crt,ssl_key=$certs/server.key"

declare -A PORT
for s in memcached mnemod; do
    port=$(free_port)
    server_argv "$s" "$port" -Z -o "$tls_opts"
    spawn taskset -c "$SERVER_CPU" "${SERVER_ARGV[@]}"
    wait_port "$port" "$SPAWNED"
    PORT[$s]=$port
done

RES=$BENCH_TMP/results
mkdir -p "$RES"
for rep in $(seq 1 "$REPS"); do
    order="memcached mnemod"
    [ $((rep % 2)) -eq 0 ] && order="mnemod memcached"
    for s in $order; do
        note "$s, run $rep/$REPS"
        taskset -c "$LOAD_CPU" "$BENCH" --server "127.0.0.1:${PORT[$s]}" --ca "$certs/ca.crt" --conns "$CONNS" \
            --keys "$KEYS" --value-size "$VALUE" --ratio "$RATIO" --duration "$DUR" >"$RES/$s.$rep"
    done
done

echo
echo "## TLS get/set: $CONNS connections, $KEYS keys, ${VALUE}-byte values, 1 set per $RATIO gets; REPS=$REPS x ${DUR}s"
echo
python3 - "$RES" "$REPS" <<'PY'
import os, statistics, sys
res, reps = sys.argv[1], int(sys.argv[2])
def runs(s):
    out = []
    for r in range(1, reps + 1):
        with open(os.path.join(res, f"{s}.{r}")) as f:
            out.append({k: float(v) for k, v in (kv.split("=") for kv in f.read().split())})
    return out
d = {s: runs(s) for s in ("memcached", "mnemod")}
for s in d:
    assert all(r["errors"] == 0 for r in d[s]), f"{s}: unexpected replies"
med = lambda xs: statistics.median(xs)
print("| server | ops/s (median, range) | p50 / p99 µs | x memcached (medians) | x memcached (paired) |")
print("|---|---|---|---|---|")
base = med([r["ops_per_sec"] for r in d["memcached"]])
for s in ("memcached", "mnemod"):
    q = [r["ops_per_sec"] for r in d[s]]
    paired = med([a["ops_per_sec"] / b["ops_per_sec"] for a, b in zip(d[s], d["memcached"])])
    print(f"| {s} -Z | {med(q):,.0f} ({min(q):,.0f}-{max(q):,.0f}) | {med([r['p50_us'] for r in d[s]]):,.0f} / "
          f"{med([r['p99_us'] for r in d[s]]):,.0f} | {med(q) / base:.2f} | {paired:.2f} |")
PY
