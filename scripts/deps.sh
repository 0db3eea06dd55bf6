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

if ((${#missing[@]})); then
    echo "deps: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
