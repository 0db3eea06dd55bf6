#!/usr/bin/env bash
# `make run`: the server on its embedded Postgres with the demo fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
server="${CARGO_TARGET_DIR:-target}/debug/holdfast-server"
listen="${HOLDFAST_LISTEN:-127.0.0.1:8080}"

desktop="${CARGO_TARGET_DIR:-target}/debug/holdfast-desktop"

if [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
    echo "run: no display here, so no desktop window; the server keeps running (Ctrl-C stops it)."
    echo "run: sign in as dana@acme.test / holdfast-demo (tenant acme) at http://$listen"
    exec "$server" serve --demo --listen "$listen"
fi

# A display: the server in the background, the desktop app in front; closing
# the window stops the server too.
# Always (re)build: a stale binary would embed an old UI. Both are quick when
# nothing changed.
echo "run: building the UI and the desktop app"
(cd ui && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run build)
cargo build --locked -p holdfast-desktop
"$server" serve --demo --listen "$listen" &
server_pid=$!
trap 'kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true' EXIT
echo "run: the desktop app; sign in as dana@acme.test / holdfast-demo (tenant acme) at http://$listen"
"$desktop"
