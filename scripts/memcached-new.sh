#!/usr/bin/env bash
# Build the memcached that Debian 13 (trixie) ships, 1.6.38, from Debian's source package: the
# reference for what users install today (issue 48), beside the installed 1.6.18 (Debian 12).
# Prints the source tree's path on the last line; the binary is "$tree/memcached" (and
# "$tree/memcached-debug", "$tree/timedrun" for its own t/ suite).
#
#   bash scripts/memcached-new.sh            -> target/memcached-new/memcached-1.6.38
#
# The apt list, its downloaded indexes and the tree are private to target/memcached-new/ (the
# machine's own apt configuration is not touched). Built with its own ./configure, TLS and SASL
# on, as Debian builds it. Nothing of it is committed. A machine that cannot reach Debian 13's
# archive gets a clear message and a non-zero exit, never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
version=1.6.38
cache="$root/target/memcached-new"
tree="$cache/memcached-$version"
mkdir -p "$cache"

if [ ! -x "$tree/memcached" ] || [ ! -x "$tree/memcached-debug" ] || [ ! -x "$tree/timedrun" ]; then
    # What the build needs (Debian's build-depends for the options used here).
    need=()
    for p in dpkg-dev build-essential libevent-dev libsasl2-dev libssl-dev pkg-config; do
        dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
    if [ ${#need[@]} -gt 0 ]; then
        sudo_cmd=""
        [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
        $sudo_cmd apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
    fi
    apt_dir="$cache/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
    cat >"$apt_dir/trixie.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir"
              -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache::Archives=$apt_dir/archives"
              -o "Dir::State::Status=/var/lib/dpkg/status" -o "APT::Get::Only-Source=true")
    if ! apt-get "${apt_opts[@]}" update -q >"$cache/apt.log" 2>&1; then
        cat "$cache/apt.log" >&2
        echo "memcached-new: cannot reach Debian 13 (trixie)'s archive at deb.debian.org: the reference memcached $version cannot be built here" >&2
        exit 1
    fi
    work=$(mktemp -d "$cache/fetch.XXXXXX")
    if ! (cd "$work" && apt-get "${apt_opts[@]}" source -q "memcached=$version-1") >>"$cache/apt.log" 2>&1; then
        cat "$cache/apt.log" >&2
        echo "memcached-new: apt-get source memcached=$version-1 from trixie failed" >&2
        exit 1
    fi
    unpacked=$(find "$work" -maxdepth 1 -type d -name "memcached-$version" | head -n 1)
    [ -n "$unpacked" ] || { echo "memcached-new: nothing unpacked in $work" >&2; exit 1; }
    rm -rf "$tree"
    mv "$unpacked" "$tree"
    rm -rf "$work"
    (
        cd "$tree"
        # Debian's own configure flags for these features (debian/rules): TLS and SASL.
        ./configure -q --enable-tls --enable-sasl --enable-sasl-pwdb >"$cache/build.log" 2>&1
        make -j"$(nproc)" memcached memcached-debug timedrun >>"$cache/build.log" 2>&1
    ) || { tail -n 40 "$cache/build.log" >&2; echo "memcached-new: the build failed (log: $cache/build.log)" >&2; exit 1; }
fi
"$tree/memcached" -V >/dev/null
echo "$tree"
