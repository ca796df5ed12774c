#!/usr/bin/env bash
# Run every test: Rust unit and black-box tests, memccapable, and the Python suites against
# the real binary (and the real memcached, for the differential tables).
# Installs what it needs on a fresh Debian machine: apt packages, Rust (rustup), a venv.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Each step's heading carries the seconds since the start, so a run's log shows where the time
# went (the whole run's budget is 20 minutes on 2 cores).
step() { printf '== [%ds] %s\n' "$SECONDS" "$*"; }

sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

# --- system packages -------------------------------------------------------------------------
need=()
command -v memcached >/dev/null 2>&1 || need+=(memcached)
command -v memccapable >/dev/null 2>&1 || need+=(libmemcached-tools)
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v curl >/dev/null 2>&1 || need+=(curl ca-certificates)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
dpkg -s libmemcached-dev >/dev/null 2>&1 || need+=(libmemcached-dev)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need+=(zlib1g-dev)
dpkg -s pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v saslpasswd2 >/dev/null 2>&1 || need+=(sasl2-bin)
command -v nutcracker >/dev/null 2>&1 || need+=(nutcracker)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
dpkg -s libsasl2-modules >/dev/null 2>&1 || need+=(libsasl2-modules)
# The PHP and Perl memcached clients of crates/client/tests/profiles.rs (flag profiles); Perl's TLS
# sockets and dpkg-source for memcached's own suite (tests/memcached_suite.py).
for p in php-cli php-memcached php-memcache libcache-memcached-perl libcache-memcached-fast-perl \
         libio-socket-ssl-perl dpkg-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    step "installing: ${need[*]}"
    $sudo_cmd apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# The Debian package starts a memcached on 11211; the tests use their own ports.

# --- Rust ----------------------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
    step "installing Rust"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
fi

# rustfmt and clippy for the style gate below (a minimal rustup profile has neither).
for comp in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$comp"; then
        step "installing the $comp component"
        rustup component add "$comp"
    fi
done

# WebAssembly filters (fget): the example filters are built for wasm32 by the tests.
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    step "installing the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
fi

# --- Python venv -------------------------------------------------------------------------------
reqs=()
for f in tests/requirements.txt tests/*/requirements.txt crates/client/tests/interop/requirements.txt python/requirements.txt; do
    [ -f "$f" ] && reqs+=(-r "$f")
done
# A venv left by another Python (or half made) is made anew.
if ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
    rm -rf .venv
    python3 -m venv .venv
fi
if [ ${#reqs[@]} -gt 0 ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "${reqs[@]}"
fi
export MNEMO_PYTHON="$root/.venv/bin/python"
# Java's xmemcached for crates/client/tests/profiles.rs, where a JDK and Maven are here (the test
# prints why it skipped the Java side otherwise).
if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
    mvn -q -B dependency:get -Dartifact=com.googlecode.xmemcached:xmemcached:2.4.8 \
        || echo "   xmemcached not fetched: the profiles test skips its Java side"
fi

# --- build and test ------------------------------------------------------------------------------
step "cargo build"
cargo build --locked --workspace --all-targets
# The habits a Rust project is held to: rustfmt's default style and no clippy warning (an
# allowed lint says why on its line).
step "cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
step "cargo test"
cargo test --locked --workspace

# --- fuzz, part 1: cargo-fuzz and the instrumented build, in the background ----------------------
# Needs nightly and cargo-fuzz (installed here only when nightly exists). Without them the fuzz
# step is skipped: `cargo test` above already ran the same checkers on seeded inputs
# (fuzz_replay). The build starts now, at the lowest priority, so that it overlaps the black-box
# suites below, which leave a core mostly idle: run after them it was about 300 s of the fuzz
# step's 467 s, and the whole run 1,146 s on 2 cores (the aim is under 20 minutes).
# --dev: fuzz/Cargo.toml's dev profile optimizes mnemo's crates, the checkers and libFuzzer,
# not wasmtime and cranelift: 13 minutes from nothing in release on 2 cores, about 4.5 in this.
fuzz_seconds=${FUZZ_SECONDS:-20}
fuzz_skip=""
fuzz_pid=""
# The background job's exit status when cargo-fuzz is missing and cannot be installed.
no_cargo_fuzz=3
if ! cargo +nightly --version >/dev/null 2>&1; then
    fuzz_skip="no nightly toolchain (rustup toolchain install nightly)"
else
    step "fuzz, part 1: the instrumented build starts in the background"
    fuzz_log=$(mktemp)
    # Its own session (setsid), so that an early exit stops cargo and its children with it.
    setsid nice -n 19 bash -c '
        if ! cargo fuzz --version >/dev/null 2>&1; then
            echo "installing cargo-fuzz"
            cargo install --locked --quiet cargo-fuzz || true
            cargo fuzz --version >/dev/null 2>&1 || exit '"$no_cargo_fuzz"'
        fi
        cd fuzz && exec cargo +nightly fuzz build --dev' >"$fuzz_log" 2>&1 &
    fuzz_pid=$!
fi
# Whatever exits early stops the background build.
stop_background() {
    [ -n "$fuzz_pid" ] && kill -- "-$fuzz_pid" 2>/dev/null
    return 0
}
trap stop_background EXIT

export MNEMOD_BIN="$root/target/debug/mnemod"
# The memcached users install today (Debian 13's 1.6.38), built from its source package, for
# the differential tests that follow it (tests/servers.py kind "memcached-new"). Without Debian
# 13's archive the script says so and the run fails.
step "memcached 1.6.38 (Debian 13) from its source package"
MEMCACHED_NEW_BIN="$(bash scripts/memcached-new.sh | tail -n 1)/memcached"
export MEMCACHED_NEW_BIN
# The black-box suites (pytest, memccapable among them) run once per worker event loop; mnemod reads
# MNEMO_IO_LOOP (docs/operations.md, "Event loops"). The Rust black-box tests ran above on the default loop
# (uring) and run again here on the other one (epoll). The epoll run leaves out the Python tests
# that run memcached alone as the reference (tests/conftest.py): they passed in the first run.
# The fault model (tests/test_fault_model.py) runs in both, 20 s each (its default is 40; the
# 30-minute run is bench/faults.sh).
export MNEMO_FAULT_SECONDS=${MNEMO_FAULT_SECONDS:-20}
for io_loop in uring epoll; do
    export MNEMO_IO_LOOP=$io_loop
    if [ "$io_loop" = epoll ]; then
        step "cargo test: mnemo-server's black-box tests, io loop $io_loop"
        # Named by --test within the workspace: `-p mnemo-server` alone resolves features for
        # that one package, which rebuilt tokio, clap and the crates on them (2 minutes of a
        # fresh run) instead of reusing the build above.
        server_tests=()
        for f in crates/server/tests/*.rs; do server_tests+=(--test "$(basename "$f" .rs)"); done
        cargo test --locked --workspace "${server_tests[@]}"
    fi

    if [ -d tests ] && ls tests/test_*.py tests/*/test_*.py >/dev/null 2>&1; then
        step "pytest, io loop $io_loop"
        # -rfE: a summary line per failure and error at the end.
        .venv/bin/python -m pytest -q -rfE -p no:cacheprovider tests
    fi
done
unset MNEMO_IO_LOOP

step "memcached's own test suite (t/*.t of Debian 13's 1.6.38) against mnemod"
# Once, not per io loop: it checks protocol behaviour; the suites above cover both loops.
# 1.6.38's tree only: 1.6.18's suite tests the replies and option units (slab_chunk_max in
# bytes, the pre-1.6.40 parser) mnemod no longer follows since the reference moved (issue 48).
MEMCACHED_NEW_SRC="$(dirname "$MEMCACHED_NEW_BIN")" .venv/bin/python -m pytest -q -rfE -s -p no:cacheprovider \
    tests/memcached_suite.py || { echo "memcached's t/ suite failed against mnemod"; exit 1; }

step "Debian package: build (debug binaries), install with dpkg, run the unit's command line"
deb=$(MNEMO_PACKAGE_PROFILE=debug MNEMO_PACKAGE_FAST=1 SKIP_BUILD=1 bash scripts/package.sh | tail -n 1)
$sudo_cmd env MNEMO_DEB="$deb" .venv/bin/python -m pytest -q -rfE -p no:cacheprovider tests/package_check.py

step "python package (python/): build, install into .venv, pytest"
# pip builds the PyO3 extension with the maturin pinned in python/requirements.txt (no build
# isolation: nothing is fetched here), in the dev profile so the crates cargo just built are
# reused; MATURIN_NO_INSTALL_RUST: use the toolchain above, never download one. The build
# backend runs `maturin` from PATH: the venv's.
py_start=$SECONDS
PATH="$root/.venv/bin:$PATH" MATURIN_NO_INSTALL_RUST=1 MATURIN_PEP517_ARGS="--profile dev --locked" \
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
    --no-deps --force-reinstall ./python
.venv/bin/python -m pytest -q -rfE -p no:cacheprovider python/tests
echo "   python package step took $((SECONDS - py_start))s"

# --- fuzz, part 2: every cargo-fuzz target for a bounded time -------------------------------------
# Each run starts from fuzz/corpus/<target> (kept between runs, gitignored) and fuzz/seeds/.
if [ -z "$fuzz_skip" ]; then
    fuzz_start=$SECONDS
    fuzz_rc=0
    wait "$fuzz_pid" || fuzz_rc=$?
    fuzz_pid=""
    if [ "$fuzz_rc" -eq "$no_cargo_fuzz" ]; then
        fuzz_skip="cargo-fuzz is missing and 'cargo install cargo-fuzz' failed"
        rm -f "$fuzz_log"
    elif [ "$fuzz_rc" -ne 0 ]; then
        tail -n 40 "$fuzz_log"; echo "fuzz: build failed"; exit 1
    fi
fi
if [ -n "$fuzz_skip" ]; then
    step "fuzz: NOT RUN: $fuzz_skip; the stable fuzz_replay tests ran the same checkers"
else
    step "fuzz: every target for ${fuzz_seconds}s (FUZZ_SECONDS), two at a time"
    echo "   waited $((SECONDS - fuzz_start))s for the instrumented build (part 1)"
    # A libFuzzer run uses one core: two at once on this 2-core budget halve the step (it was
    # 173 s of a 20-minute run one at a time) and keep each target's fuzzing time. Pairs never
    # share a corpus directory (store_model's exact and evict regimes run in different pairs;
    # a regime with seeds of its own, fuzz/seeds/TARGET_REGIME, has its own corpus too:
    # store_model's flash regime, whose inputs carry a settings byte more).
    # "target[:STORE_MODEL_REGIME]"
    fuzz_one() { # RUN LOG: one bounded fuzz run; its status
        local run=$1 target=${1%%:*} regime="" seeds=() corpus
        [ "$run" != "$target" ] && regime=${run#*:}
        corpus=$target
        [ -n "$regime" ] && [ -d "fuzz/seeds/${target}_$regime" ] && corpus=${target}_$regime
        mkdir -p "fuzz/corpus/$corpus"
        [ -d "fuzz/seeds/$corpus" ] && seeds=("seeds/$corpus")
        (cd fuzz && STORE_MODEL_REGIME=$regime cargo +nightly fuzz run --dev "$target" "corpus/$corpus" "${seeds[@]}" \
            -- -max_total_time="$fuzz_seconds" -timeout=20) >"$2" 2>&1
    }
    # The last round has one run (nine in all): 20 s more than eight would take.
    for pair in "store_model:exact text_parse" "store_model:evict binary_parse" \
                "client_reply filter_result" "snapshot_restore flash_read" "store_model:flash"; do
        read -r run_a run_b <<<"$pair"
        fuzz_one "$run_a" "$fuzz_log" & pid_a=$!
        runs=("$run_a"); logs=("$fuzz_log")
        [ -n "$run_b" ] && { fuzz_one "$run_b" "$fuzz_log.b" & pid_b=$!; runs+=("$run_b"); logs+=("$fuzz_log.b"); }
        rc_a=0; rc_b=0
        wait "$pid_a" || rc_a=$?
        [ -n "$run_b" ] && { wait "$pid_b" || rc_b=$?; }
        rcs=("$rc_a" "$rc_b")
        for i in "${!runs[@]}"; do
            run=${runs[$i]}; rc=${rcs[$i]}; log=${logs[$i]}; target=${run%%:*}
            if [ "$rc" -eq 0 ]; then
                echo "   $run: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1)"
            else
                tail -n 60 "$log"
                echo "fuzz: $run failed; the crashing input is in fuzz/artifacts/$target/ (reproduce with"
                regime=${run#"$target"}
                echo "  cd fuzz && STORE_MODEL_REGIME=${regime#:} cargo +nightly fuzz run --dev $target <file>;"
                echo "  keep it in fuzz/regressions/$target/, a flash-regime one in fuzz/regressions/store_model/flash/)"
                exit 1
            fi
        done
    done
    rm -f "$fuzz_log.b"
    rm -f "$fuzz_log"
    echo "   fuzz step took $((SECONDS - fuzz_start))s"
fi
step "all tests passed"
