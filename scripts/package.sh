#!/usr/bin/env bash
# Build the Debian package of mnemo into target/debian/: mnemod, mnemo, their man pages
# (from their --help), the systemd unit, the wrapper that reads /etc/memcached.conf, and the
# maintainer scripts (packaging/). dpkg-deb builds it directly; nothing is fetched.
#   bash scripts/package.sh            -> target/debian/mnemo_<version>-1_<arch>.deb
# Prints the package's path on the last line. MNEMO_PACKAGE_PROFILE=debug packages the debug
# binaries (the test run does: it checks the packaging, and a release build of mnemod from
# nothing is 13 minutes on 2 cores); SKIP_BUILD=1 packages the binaries as they are.
# MNEMO_PACKAGE_FAST=1 compresses with gzip -1 instead of xz (the test run: xz takes 28 s
# over the debug binaries, gzip -1 one; the package's contents are the same).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
profile=${MNEMO_PACKAGE_PROFILE:-release}
case $profile in
    release) build=(--release) ;;
    debug) build=() ;;
    *) echo "MNEMO_PACKAGE_PROFILE: release or debug, not $profile" >&2; exit 2 ;;
esac
[ "${SKIP_BUILD:-0}" = 1 ] || cargo build "${build[@]}" --locked -p mnemo-server -p mnemo-cli >&2

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)-1
arch=$(dpkg --print-architecture)
out=$TARGET/debian
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/DEBIAN" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/usr/lib/mnemo" \
    "$stage/usr/lib/tmpfiles.d" "$stage/usr/share/mnemo" "$stage/usr/share/man/man1" \
    "$stage/usr/share/doc/mnemo"

for bin in mnemod mnemo; do
    # Without the debug info the release profile keeps for profiling (a tenth of the size).
    objcopy --strip-debug "$TARGET/$profile/$bin" "$stage/usr/bin/$bin"
    chmod 0755 "$stage/usr/bin/$bin"
done
install -m 0644 packaging/mnemo.service "$stage/lib/systemd/system/mnemo.service"
install -m 0755 packaging/mnemod-wrapper "$stage/usr/lib/mnemo/mnemod-wrapper"
install -m 0644 packaging/tmpfiles.conf "$stage/usr/lib/tmpfiles.d/mnemo.conf"
install -m 0644 packaging/memcached.conf.default "$stage/usr/share/mnemo/memcached.conf.default"
install -m 0644 docs/operators-switching.md "$stage/usr/share/doc/mnemo/operators-switching.md"
for s in postinst prerm postrm; do
    install -m 0755 "packaging/debian/$s" "$stage/DEBIAN/$s"
done
cat >"$stage/usr/share/doc/mnemo/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: mnemo

Files: *
Copyright: the mnemo developers
License: BSD-3-Clause
 On Debian systems the full text of the license is in
 /usr/share/common-licenses/BSD.
COPYRIGHT

# A man page from a program's --help: the text as it is, in a no-fill block, with roff's
# control characters escaped.
roff_text() {
    sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
}
man_page() { # name summary commands... (each one's --help is a section)
    local name=$1 summary=$2
    shift 2
    {
        printf '.TH %s 1 "" "mnemo %s" "User Commands"\n' "${name^^}" "${version%-1}"
        printf '.SH NAME\n%s \\- %s\n' "$name" "$summary"
        local cmd
        for cmd in "$@"; do
            printf '.SH "%s"\n.nf\n' "$cmd"
            # shellcheck disable=SC2086 # the command's words
            "$stage/usr/bin/"$cmd --help | roff_text
            printf '.fi\n'
        done
        printf '.SH FILES\n.nf\n/etc/memcached.conf\n/usr/lib/mnemo/mnemod-wrapper\n/lib/systemd/system/mnemo.service\n.fi\n'
        printf '.SH SEE ALSO\nmemcached(1), /usr/share/doc/mnemo/operators-switching.md\n'
    } | gzip -9n >"$stage/usr/share/man/man1/$name.1.gz"
}
man_page mnemod "memcached-compatible memory cache server" mnemod
subs=$("$stage/usr/bin/mnemo" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z]\+\) .*/\1/p' | grep -vx help)
mnemo_cmds=(mnemo)
for s in $subs; do mnemo_cmds+=("mnemo $s"); done
man_page mnemo "tools for memcached-protocol servers: operator commands, migrate, bench" "${mnemo_cmds[@]}"

# The shared libraries the binaries need, as package dependencies.
shlibs=libc6
if command -v dpkg-shlibdeps >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    mkdir "$tmp/debian"
    printf 'Source: mnemo\n\nPackage: mnemo\nArchitecture: any\n' >"$tmp/debian/control"
    found=$(cd "$tmp" && dpkg-shlibdeps -O "$stage/usr/bin/mnemod" "$stage/usr/bin/mnemo" 2>/dev/null |
        sed -n 's/^shlibs:Depends=//p') || true
    rm -rf "$tmp"
    [ -n "$found" ] && shlibs=$found
fi
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SHLIBS@/$shlibs/" \
    packaging/debian/control.in >"$stage/DEBIAN/control"
echo "Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)" >>"$stage/DEBIAN/control"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
    >"$stage/DEBIAN/md5sums"

deb=$out/mnemo_${version}_${arch}.deb
compress=(-Zxz)
[ "${MNEMO_PACKAGE_FAST:-0}" = 1 ] && compress=(-Zgzip -z1)
dpkg-deb --root-owner-group "${compress[@]}" --build "$stage" "$deb" >&2
echo "$deb"
