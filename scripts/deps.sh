#!/usr/bin/env bash
# Installs what Holdfast needs that a fresh Debian machine may lack, and only
# that: checks first, so a machine that has everything changes nothing.
set -euo pipefail

have_postgres() {
    command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

missing=()
have_postgres || missing+=(postgresql)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
# The desktop app (src-tauri) and its headless end-to-end tests (e2e/).
# xauth is only a Recommends of xvfb, and we install without those.
# The keychain tests (scripts/with-keyring.sh): a private session bus from
# dbus-run-session (Debian's dbus-daemon package; it pulls dbus-bin, whose
# dbus-send checks the bus) and gnome-keyring as its Secret Service;
# secret-tool (libsecret-tools) lets the e2e look into the keyring.
# The operator's page is tested in headless Chromium over WebDriver
# (e2e/tests/admin.rs): chromium and chromium-driver.
for pkg in libwebkit2gtk-4.1-dev xvfb xauth webkit2gtk-driver \
    dbus-daemon gnome-keyring libsecret-tools chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
# scripts/schemathesis.sh: a venv for schemathesis, psql for its database.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3 python3-venv)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)

if ((${#missing[@]})); then
    echo "deps: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# promtool (Debian's prometheus package) lints /metrics in make test
# (scripts/schemathesis.sh). Extracted into the cache, never installed: the
# package would start a Prometheus service.
promtool="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}/prometheus/usr/bin/promtool"
if [ ! -x "$promtool" ]; then
    echo "deps: extracting promtool from Debian's prometheus package"
    dl=$(mktemp -d)
    chmod 755 "$dl"   # apt's _apt user downloads into it when we are root
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    (cd "$dl" && { apt-get download prometheus >/dev/null 2>&1 \
        || { $sudo apt-get update -qq && apt-get download prometheus; }; })
    mkdir -p "$(dirname "$(dirname "$(dirname "$promtool")")")"
    dpkg -x "$dl"/prometheus_*.deb "$(dirname "$(dirname "$(dirname "$promtool")")")"
    rm -rf "$dl"
    "$promtool" --version >/dev/null
fi

# cargo-nextest runs the workspace's tests in make test: each test in its own
# process, so one that hangs is killed and named (.config/nextest.toml).
# Machines of this kind usually have it; otherwise a pinned one, once, into
# the cache (scripts/test.sh puts the cache's bin/ on PATH).
cache="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}"
if ! cargo nextest --version >/dev/null 2>&1 && [ ! -x "$cache/bin/cargo-nextest" ]; then
    echo "deps: installing cargo-nextest 0.9.143 into $cache"
    cargo install cargo-nextest --locked --version 0.9.143 --root "$cache"
fi

# The UI's Node dependencies, exactly as package-lock.json pins them.
if [ ! -d ui/node_modules ] || [ ui/package-lock.json -nt ui/node_modules ]; then
    echo "deps: npm ci in ui/"
    (cd "$(dirname "$0")/../ui" && npm ci --no-audit --no-fund)
fi
