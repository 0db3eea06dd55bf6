#!/usr/bin/env bash
# Runs a command against a real Secret Service, the desk's keychain on Linux:
# a private session bus (dbus-run-session) with gnome-keyring on it, unlocked
# with a throwaway password, its keyrings in a throwaway dir that is removed
# afterwards. Never the user's own bus or keyring.
#
#   scripts/with-keyring.sh CMD [ARGS...]
#
# CMD gets DBUS_SESSION_BUS_ADDRESS and HOLDFAST_TEST_SECRET_SERVICE=1: the
# keychain tests run instead of skipping, and fail if the keyring does not
# work. CMD keeps the caller's HOME (cargo, rustup); only the keyring daemon
# gets the throwaway HOME and XDG dirs.
set -euo pipefail

if [ -z "${HOLDFAST_WITH_KEYRING_BUS:-}" ]; then
    for bin in dbus-run-session dbus-send gnome-keyring-daemon; do
        command -v "$bin" >/dev/null 2>&1 || {
            echo "with-keyring: $bin is missing (scripts/deps.sh installs dbus-daemon, dbus-bin and gnome-keyring)" >&2
            exit 1
        }
    done
    # Inside the new session this script runs again, marked by the bus var.
    exec dbus-run-session -- env HOLDFAST_WITH_KEYRING_BUS=1 "$0" "$@"
fi
unset HOLDFAST_WITH_KEYRING_BUS
[ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ] || { echo "with-keyring: dbus-run-session gave no session bus" >&2; exit 1; }

home=$(mktemp -d /tmp/holdfast-keyring.XXXXXX)
keyring_pid=""
cleanup() {
    if [ -n "$keyring_pid" ]; then
        kill "$keyring_pid" 2>/dev/null || true
    fi
    rm -rf "$home"
}
trap cleanup EXIT
mkdir -p -m 700 "$home/data" "$home/config" "$home/cache" "$home/run"

bus() {
    dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
        "org.freedesktop.DBus.$1" "string:org.freedesktop.secrets" 2>/dev/null
}

# --unlock reads the password on stdin and creates the login keyring with it
# (the default collection); the daemon then takes org.freedesktop.secrets.
head -c 18 /dev/urandom | base64 |
    HOME="$home" XDG_DATA_HOME="$home/data" XDG_CONFIG_HOME="$home/config" \
        XDG_CACHE_HOME="$home/cache" XDG_RUNTIME_DIR="$home/run" \
        gnome-keyring-daemon --unlock --components=secrets >/dev/null
# Wait for our daemon to own the name: a client asking earlier would make the
# bus activate a second, locked daemon instead.
for _ in $(seq 100); do
    bus NameHasOwner | grep -q 'boolean true' && break
    sleep 0.1
done
bus NameHasOwner | grep -q 'boolean true' || {
    echo "with-keyring: gnome-keyring did not take org.freedesktop.secrets on the session bus within 10 s" >&2
    exit 1
}
keyring_pid=$(bus GetConnectionUnixProcessID | awk '/uint32/ {print $2}')
echo "with-keyring: Secret Service up (gnome-keyring-daemon pid $keyring_pid, unlocked, keyrings in $home, private bus $DBUS_SESSION_BUS_ADDRESS)" >&2

export HOLDFAST_TEST_SECRET_SERVICE=1
"$@"
