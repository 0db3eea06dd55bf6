#!/usr/bin/env bash
# `make bench` / `make bench QUICK=1`: issue 9's benchmarks. Builds the bench
# in release, starts a private throwaway Postgres (or uses DATABASE_URL when
# given), runs holdfast-bench against it, and stops and removes the cluster.
# The full run rewrites the generated section of docs/BENCHMARKS.md; the quick
# one writes target/bench/BENCHMARKS-quick.md instead.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== release build (holdfast-bench, holdfast-server, the holdfast CLI)"
cargo build --release --locked -p holdfast-bench -p holdfast-server -p holdfast-client --bins
if [ -z "${QUICK:-}" ]; then
    # Items 9f–9h launch the desktop app; the quick run uses it only if an
    # earlier build left it in target/release.
    echo "== the UI and the desktop app (release)"
    (cd ui && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run build)
    cargo build --release --locked -p holdfast-desktop
fi

target="${CARGO_TARGET_DIR:-target}"
server="$target/release/holdfast-server"
bench="$target/release/holdfast-bench"
mkdir -p "$target/bench"

if [ -z "${DATABASE_URL:-}" ]; then
    pgtmp=$(mktemp -d /tmp/holdfast-bench.XXXXXX)
    # When we are root the cluster runs as `postgres`, which must reach it.
    chmod 755 "$pgtmp"
    cleanup() {
        "$server" postgres stop --data-dir "$pgtmp/pg" >/dev/null 2>&1 || true
        rm -rf "$pgtmp"
    }
    trap cleanup EXIT
    echo "== private Postgres in $pgtmp"
    line=$("$server" postgres start --data-dir "$pgtmp/pg" | grep '^DATABASE_URL=')
    export DATABASE_URL="${line#DATABASE_URL=}"
fi

if [ -n "${QUICK:-}" ]; then
    "$bench" --quick --write "$target/bench/BENCHMARKS-quick.md" --server-log "$target/bench/server.log"
else
    "$bench" --write docs/BENCHMARKS.md --server-log "$target/bench/server.log"
fi
