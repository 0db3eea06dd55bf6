#!/usr/bin/env bash
# `make server-package`: the server's .deb (release build) for operators:
# /usr/bin/holdfast-server, the systemd unit, /etc/holdfast/server.toml and
# /etc/default/holdfast-server (conffiles), and the maintainer scripts that
# make the `holdfast` user. Prints the package's path last.
#
#   scripts/server-package.sh                  release build, into $target/debian/
#   scripts/server-package.sh --test-build DIR package the debug build already
#                                              made (no compile) into DIR, for
#                                              the installed-layout test (make test)
#
# cargo-deb is pinned and installed once into the cache, as tauri-cli is.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
cache="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}"
cargo_deb="$cache/bin/cargo-deb"
if ! "$cargo_deb" --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION"; then
    echo "server-package: installing cargo-deb $CARGO_DEB_VERSION into $cache" >&2
    cargo install cargo-deb --locked --version "=$CARGO_DEB_VERSION" --root "$cache" >&2
fi
command -v dpkg-deb >/dev/null || { echo "server-package: dpkg-deb is missing (Debian's dpkg package)" >&2; exit 1; }

target="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac

case "${1:-}" in
--test-build)
    out="${2:?usage: $0 --test-build DIR}"
    mkdir -p "$out"
    [ -x "$target/debug/holdfast-server" ] || cargo build --locked -p holdfast-server >&2
    # The debug binary, stripped: the package is the release layout with a
    # faster build inside. cargo-deb 3.8 warns that dev profiles are not for
    # releases; this one never is.
    "$cargo_deb" -p holdfast-server --no-build --profile dev --fast --quiet -o "$out" >&2
    ls "$out"/holdfast-server_*.deb
    ;;
"")
    # Locked, as CI builds; the binary is stripped (no debug info in release).
    "$cargo_deb" -p holdfast-server --locked -o "$target/debian" >&2
    deb=$(ls -t "$target"/debian/holdfast-server_*.deb | head -1)
    echo "server-package: contents of $deb" >&2
    dpkg-deb -c "$deb" >&2
    echo "$deb"
    ;;
*)
    echo "usage: $0 [--test-build DIR]" >&2
    exit 2
    ;;
esac
