#!/usr/bin/env bash
# `make run`: the server on its embedded Postgres with the demo fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
server="${CARGO_TARGET_DIR:-target}/debug/holdfast-server"
listen="${HOLDFAST_LISTEN:-127.0.0.1:8080}"

if [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
    echo "run: no display here, so no desktop window; the server keeps running (Ctrl-C stops it)."
fi
echo "run: sign in as dana@acme.test / holdfast-demo (tenant acme) at http://$listen"
exec "$server" serve --demo --listen "$listen"
