#!/usr/bin/env bash
# Build mnemod (release) and start it on its defaults: 127.0.0.1:11211, 64 MB, 4 threads.
# Extra arguments are passed to mnemod (memcached's flags), e.g. `bash scripts/run.sh -m 1024`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
    sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    if ! command -v curl >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then
        $sudo_cmd apt-get update -q && $sudo_cmd apt-get install -y -q --no-install-recommends curl ca-certificates build-essential
    fi
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
fi
cargo build --release --locked -p mnemo-server
exec target/release/mnemod "$@"
