#!/usr/bin/env bash
# End-to-end tests of the built desktop app: tauri-driver (installed once into
# a cache outside the clone) with Debian's WebKitWebDriver, inside xvfb-run,
# against a real holdfast-server that the tests start and stop themselves.
# All of it on a private D-Bus session with an unlocked gnome-keyring
# (scripts/with-keyring.sh): the app keeps its token in the keychain.
# Also the operator's page in headless Chromium (e2e/tests/admin.rs,
# through chromedriver). Expects the workspace build (holdfast-server,
# holdfast, holdfast-desktop).
# Screenshots land in target/e2e-artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
if [ ! -x "$cache/bin/tauri-driver" ]; then
    echo "e2e: installing tauri-driver 2.1.0 into $cache"
    cargo install tauri-driver --locked --version 2.1.0 --root "$cache"
fi
for bin in holdfast-server holdfast holdfast-desktop; do
    [ -x "$target/debug/$bin" ] || { echo "e2e: $target/debug/$bin is missing: build the workspace first" >&2; exit 1; }
done
rm -rf "$target/e2e-artifacts"

# The e2e crate is its own workspace; its build dir sits beside the main one.
export HOLDFAST_TARGET_DIR="$target"
export TAURI_DRIVER="$cache/bin/tauri-driver"
# The tests start their own embedded Postgres (server --data-dir), whatever
# DATABASE_URL the unit tests used.
unset DATABASE_URL
cd e2e
# Bounded: a stuck WebDriver session fails the run after 25 minutes
# (the build and the run take about 5) instead of holding CI to its limit.
CARGO_TARGET_DIR="$target/e2e-build" ../scripts/with-keyring.sh xvfb-run -a \
    timeout --kill-after=30s 25m cargo test --locked --no-fail-fast -- --ignored --nocapture --test-threads 1
