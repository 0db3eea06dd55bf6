#!/usr/bin/env bash
# `make test-held-fence`: the Rust tests (as `make test` runs them) while
# another session keeps a transaction open at all times, so the change feed's
# fence (`server/src/feed/pull.rs`) is always a few seconds behind. A busy
# neighbour does that now and then on a shared cluster, and a test that
# assumes a pull sees a commit at once, or that a poke comes within a second,
# fails under it. Every test must pass here too.
# Uses DATABASE_URL when given, else a private throwaway Postgres.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:${HOLDFAST_CACHE:-$HOME/.cache/holdfast}/bin"

psql=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1)
[ -x "$psql" ] || { echo "held-fence: no psql found (Debian: apt-get install postgresql-client)" >&2; exit 1; }

cargo build --locked --workspace --all-targets
server="${CARGO_TARGET_DIR:-target}/debug/holdfast-server"
holder=""
pgtmp=""
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null || true
    if [ -n "$pgtmp" ]; then
        "$server" postgres stop --data-dir "$pgtmp/pg" >/dev/null 2>&1 || true
        rm -rf "$pgtmp"
    fi
}
trap cleanup EXIT
if [ -z "${DATABASE_URL:-}" ]; then
    pgtmp=$(mktemp -d /tmp/holdfast-held-fence.XXXXXX)
    # When we are root the cluster runs as `postgres`, which must reach it.
    chmod 755 "$pgtmp"
    line=$("$server" postgres start --data-dir "$pgtmp/pg" | grep '^DATABASE_URL=')
    export DATABASE_URL="${line#DATABASE_URL=}"
fi

# Every 1.5 s a transaction takes an xid and holds it for 3 s: one is always
# in flight, and the fence trails the newest commit by up to 3 s.
(
    while true; do
        "$psql" "$DATABASE_URL" -qc \
            "begin; select pg_current_xact_id(); select pg_sleep(3); commit;" >/dev/null 2>&1 &
        sleep 1.5
    done
) &
holder=$!
echo "== tests with the feed's fence held back (a transaction always in flight)"
cargo nextest run --locked --workspace --no-tests=warn
