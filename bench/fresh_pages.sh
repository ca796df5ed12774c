#!/usr/bin/env bash
# What fresh anonymous memory costs this host, per 100 KB (bench/fresh_pages/main.c says why):
# pinned to the servers' core as in bench/throughput.sh, run twice (the second run shows the
# price once the host backs the guest's pages).
#   bash bench/fresh_pages.sh            # 5000 buffers (500 MB) per way
#   N=2000 bash bench/fresh_pages.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_tools cc:build-essential taskset:util-linux
cc -O2 -o "$BENCH_TMP/fresh_pages" "$ROOT/bench/fresh_pages/main.c"
for run in 1 2; do
    echo "run $run"
    taskset -c "${SERVER_CPU:-0}" "$BENCH_TMP/fresh_pages" "${N:-5000}"
done
