#!/usr/bin/env bash
# Fetch and unpack the source of the installed Debian memcached package (its own Perl test suite,
# t/*.t, is what tests/memcached_suite.py runs against mnemod), build the suite's `timedrun`
# helper, and print the tree's path on the last line.
#
#   bash scripts/memcached-src.sh            -> target/memcached-src/memcached-<version>
#
# The tree is cached under target/ (gitignored). Nothing of it is committed: the suite is read
# and run, never copied. Needs apt with a deb-src entry for the archive the binary package came
# from; when there is none, one is added beside the existing entry (same URIs, suites and key).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

cache="$root/target/memcached-src"
mkdir -p "$cache"
tree=$(find "$cache" -maxdepth 1 -type d -name 'memcached-*' | head -n 1)
if [ -z "$tree" ] || [ ! -f "$tree/t/lib/MemcachedTest.pm" ]; then
    # dpkg-source unpacks and applies Debian's patches, so the suite matches the binary package.
    command -v dpkg-source >/dev/null 2>&1 || { $sudo_cmd apt-get update -q; \
        DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends dpkg-dev; }
    work=$(mktemp -d "$cache/fetch.XXXXXX")
    if ! (cd "$work" && apt-get source -q memcached) >"$work/apt.log" 2>&1; then
        # No deb-src entry: derive one from the deb822 entry the binary package was installed from.
        src_list=/etc/apt/sources.list.d/mnemo-deb-src.sources
        if [ -f /etc/apt/sources.list.d/debian.sources ]; then
            sed -e 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
                | $sudo_cmd tee "$src_list" >/dev/null
        elif [ -f /etc/apt/sources.list ]; then
            grep -E '^deb ' /etc/apt/sources.list | sed -e 's/^deb /deb-src /' \
                | $sudo_cmd tee /etc/apt/sources.list.d/mnemo-deb-src.list >/dev/null
        fi
        $sudo_cmd apt-get update -q >/dev/null
        (cd "$work" && apt-get source -q memcached) >"$work/apt.log" 2>&1 \
            || { cat "$work/apt.log"; echo "memcached-src: apt-get source memcached failed" >&2; exit 1; }
    fi
    unpacked=$(find "$work" -maxdepth 1 -type d -name 'memcached-*' | head -n 1)
    [ -n "$unpacked" ] || { cat "$work/apt.log"; echo "memcached-src: nothing unpacked" >&2; exit 1; }
    rm -rf "$cache/$(basename "$unpacked")"
    mv "$unpacked" "$cache/"
    rm -rf "$work"
    tree="$cache/$(basename "$unpacked")"
fi

# The suite starts "$builddir/timedrun 600 $builddir/memcached-debug ARGS"; timedrun is a small C
# program of the suite's own (a time limit around the server).
[ -x "$tree/timedrun" ] || cc -O2 -o "$tree/timedrun" "$tree/timedrun.c"
echo "$tree"
