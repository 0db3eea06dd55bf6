#!/usr/bin/env bash
# `make test`: lint, then every test against a private throwaway Postgres
# (or DATABASE_URL when given), which is stopped and removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says when it started and how long the one before it took, so a
# slow or stuck step is named in the log (CI stops the run at 90 minutes).
# Tools installed into the cache by scripts/deps.sh (cargo-nextest when the
# machine has none).
export PATH="$PATH:${HOLDFAST_CACHE:-$HOME/.cache/holdfast}/bin"
started=$SECONDS
step_started=$SECONDS
step() {
    echo "== $1   [$(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s in; previous step $(( SECONDS - step_started ))s]"
    step_started=$SECONDS
}

# The UI first: generate_context! embeds ui/dist when src-tauri compiles.
step "ui"
(cd ui && npm ci --no-audit --no-fund && npm test && npm run check && npm run build)

step "fmt"
cargo fmt --all --check
step "clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings
# The e2e crate is its own workspace: lint it in the build dir scripts/e2e.sh
# uses, so it is not compiled twice.
step "fmt + clippy (e2e)"
e2e_target="${CARGO_TARGET_DIR:-$PWD/target}"
case "$e2e_target" in /*) ;; *) e2e_target="$PWD/$e2e_target" ;; esac
(cd e2e && cargo fmt --check && CARGO_TARGET_DIR="$e2e_target/e2e-build" cargo clippy --locked --all-targets -- -D warnings)
step "build"
cargo build --locked --workspace --all-targets

if [ -z "${DATABASE_URL:-}" ]; then
    pgtmp=$(mktemp -d /tmp/holdfast-test.XXXXXX)
    # When we are root the cluster runs as `postgres`, which must reach it.
    chmod 755 "$pgtmp"
    server="${CARGO_TARGET_DIR:-target}/debug/holdfast-server"
    cleanup() {
        "$server" postgres stop --data-dir "$pgtmp/pg" >/dev/null 2>&1 || true
        rm -rf "$pgtmp"
    }
    trap cleanup EXIT
    step "private Postgres in $pgtmp"
    line=$("$server" postgres start --data-dir "$pgtmp/pg" | grep '^DATABASE_URL=')
    export DATABASE_URL="${line#DATABASE_URL=}"
fi

step "tests (cargo nextest: each test in its own process, killed and named after 5 minutes; .config/nextest.toml)"
cargo nextest run --locked --workspace --no-tests=warn
cargo test --locked --workspace --doc

# The server's .deb, from the debug build above (a release build would cost
# minutes), extracted and started the way its systemd unit starts it:
# server/tests/it/installed_package.rs, #[ignore]d in the run above.
step "server package (installed layout)"
target="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
rm -rf "$target/debian-test"
deb=$(scripts/server-package.sh --test-build "$target/debian-test")
HOLDFAST_TEST_DEB="$deb" cargo test --locked --workspace installed_package -- --ignored

# The keychain for real: the tests named *keychain* again, now on a private
# D-Bus session with an unlocked gnome-keyring (scripts/with-keyring.sh sets
# HOLDFAST_TEST_SECRET_SERVICE, so they run, and fail if the keyring fails).
# Each prints `keychain-ran: ...` when it got through; count them.
step "keychain (Secret Service: gnome-keyring under dbus-run-session)"
# `--workspace` with a name filter reuses the build above (selecting packages
# would unify features differently and rebuild half the tree); the copy to
# stderr goes through an inherited descriptor, never by reopening
# /dev/stderr (which truncates a log file).
keychain_out=$(scripts/with-keyring.sh cargo test --locked --workspace \
    keychain -- --nocapture 2>&1 | tee >(cat >&2))
ran=$(grep -o 'keychain-ran: ' <<<"$keychain_out" | wc -l)
if [ "$ran" -ne 3 ]; then
    echo "keychain: expected 3 Secret Service tests to run (client, CLI, desktop), $ran did" >&2
    exit 1
fi
echo "keychain: Secret Service round trip ran (gnome-keyring under dbus-run-session): KeyringTokens, the holdfast CLI's login/logout, the desktop's token_store()"

# Hostile input: schemathesis against the server's own /openapi.json (issue 8).
step "schemathesis"
scripts/schemathesis.sh

# The built desktop app, headless, over WebDriver (scripts/e2e.sh).
step "e2e (desktop app under Xvfb)"
scripts/e2e.sh
step "done"
