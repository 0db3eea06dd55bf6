#!/usr/bin/env bash
# First openapi-spec-validator (PyPI) checks /openapi.json is valid OpenAPI 3,
# promtool checks /metrics (issue 15 items 15, 16) and the shipped alert
# rules with their unit tests (issue 18).
# Then hostile input (issue 8): schemathesis, from PyPI, generates requests from
# the running server's own /openapi.json and checks every answer:
#   not_a_server_error          no 5xx, ever
#   response_schema_conformance the body matches the documented schema
#   status_code_conformance     the status is one the operation documents
#   content_type_conformance    so is the Content-Type (problem+json on errors)
#   response_headers_conformance documented headers (Retry-After, ...) match
# Any finding fails the script (exit 1). Seeded, so a finding reproduces.
#
#   scripts/schemathesis.sh                      # ~1.5 min on 2 busy cores
#   SCHEMATHESIS_EXAMPLES=200 SCHEMATHESIS_SEED=7 scripts/schemathesis.sh   # longer / other seed
#   SCHEMATHESIS_CHECKS=all scripts/schemathesis.sh                          # other checks
#
# Uses the already-built target/debug/holdfast-server. With DATABASE_URL set
# (scripts/test.sh sets one) it runs on a fresh database created in that
# cluster and dropped afterwards; without, on the server's embedded Postgres in
# a throwaway --data-dir. The venv lives in ${HOLDFAST_CACHE:-~/.cache/holdfast}/venv
# and is (re)installed only when missing or when the pins changed.
#
# Three runs, each with the token the operations are meant for:
#   1. every operation but those below, as account manager dana@acme.test;
#   2. the /v1/admin/* operations, as operator ops@acme.test (as dana they
#      would only ever see 403);
#   3. last, DELETE /v1/sessions/current with a throwaway token of its own:
#      in the other runs it would revoke their token mid-run.
# Excluded: GET /v1/sync/stream, an endless text/event-stream (SSE) response
# a request-response fuzzer cannot finish reading; it is covered by the
# sync-feed tests and the 401 sweep in server/tests/it/hostile.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

examples="${SCHEMATHESIS_EXAMPLES:-50}"
seed="${SCHEMATHESIS_SEED:-20261201}"
checks="${SCHEMATHESIS_CHECKS:-not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance,response_headers_conformance}"
server="${CARGO_TARGET_DIR:-target}/debug/holdfast-server"
requirements="$PWD/scripts/schemathesis-requirements.txt"
venv="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}/venv"

[ -x "$server" ] || { echo "schemathesis: build the server first ($server is missing)" >&2; exit 2; }

# The venv, once; reinstalled only when the pins changed.
stamp="$venv/.holdfast-schemathesis-requirements"
if [ ! -x "$venv/bin/python" ]; then
    echo "== schemathesis: creating $venv"
    python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
    echo "== schemathesis: installing the pinned versions"
    "$venv/bin/pip" install --disable-pip-version-check -q -r "$requirements"
    cp "$requirements" "$stamp"
fi
st="$venv/bin/schemathesis"
py="$venv/bin/python"

tmp=$(mktemp -d /tmp/holdfast-schemathesis.XXXXXX)
# When we are root an embedded cluster runs as `postgres`, which must reach it.
chmod 755 "$tmp"
server_pid=""
dbname=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ -n "$dbname" ]; then
        psql "$DATABASE_URL" -qAtc "drop database if exists $dbname with (force)" >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

if [ -n "${DATABASE_URL:-}" ]; then
    dbname="holdfast_schemathesis_$$"
    psql "$DATABASE_URL" -qAtc "create database $dbname" >/dev/null
    db_url=$("$py" - "$DATABASE_URL" "$dbname" <<'PY'
import sys
from urllib.parse import urlsplit, urlunsplit
u = urlsplit(sys.argv[1])
print(urlunsplit(u._replace(path="/" + sys.argv[2])))
PY
)
    db_args=(--database-url "$db_url")
    echo "== schemathesis: server on a fresh database $dbname"
else
    db_args=(--data-dir "$tmp/pg")
    echo "== schemathesis: server on an embedded Postgres in $tmp/pg"
fi

# Partner URLs here are public addresses that never accept a delivery; a long
# backoff keeps the relay from retrying them all through the run.
"$server" serve --demo --listen 127.0.0.1:0 "${db_args[@]}" \
    --relay-backoff-base-ms 600000 --relay-timeout-ms 2000 >"$tmp/server.log" 2>&1 &
server_pid=$!
base=""
for _ in $(seq 360); do
    base=$(grep -ao 'listening on http://[0-9.:]*' "$tmp/server.log" | head -n1 | sed 's/^listening on //') || true
    [ -n "$base" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "schemathesis: the server exited before listening:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    sleep 0.5
done
[ -n "$base" ] || { echo "schemathesis: the server did not start in 3 minutes" >&2; cat "$tmp/server.log" >&2; exit 1; }

# The document itself, by a standard validator first: duplicate operationIds,
# dangling references or a malformed schema would break every client generator.
"$py" -c 'import sys, urllib.request; open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1]).read())' \
    "$base/openapi.json" "$tmp/openapi.json"
echo "== openapi-spec-validator"
"$venv/bin/openapi-spec-validator" "$tmp/openapi.json"

# /metrics by Prometheus's own linter: first as a fresh server shows it
# (every family with HELP before anything happened), again after the runs.
promtool="${HOLDFAST_CACHE:-$HOME/.cache/holdfast}/prometheus/usr/bin/promtool"
[ -x "$promtool" ] || { echo "schemathesis: promtool is missing (scripts/deps.sh extracts it)" >&2; exit 2; }
check_metrics() {
    echo "== promtool check metrics ($1)"
    "$py" -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1]).read())' \
        "$base/metrics" | "$promtool" check metrics
}
check_metrics "a fresh server"

# The alert rules we ship (deploy/prometheus): valid, and firing when and
# only when their unit tests say (docs/OPERATIONS.md, "Watch it").
echo "== promtool check rules / test rules (deploy/prometheus/holdfast-alerts.yml)"
"$promtool" check rules deploy/prometheus/holdfast-alerts.yml
(cd deploy/prometheus && "$promtool" test rules holdfast-alerts.test.yml)

# Tokens, a few real documents, and the config that feeds their ids to the
# generator (scripts/schemathesis-seed.py).
"$py" scripts/schemathesis-seed.py "$base" "$tmp"

summary=()
failed=0
run() {
    local name="$1" token
    token=$(cat "$tmp/$2.token")
    shift 2
    local started=$SECONDS status=0
    echo "== schemathesis: $name"
    # From the scratch dir: nothing of schemathesis's lands in the clone.
    # One worker: Python 3.11.7's ast.parse is not thread-safe (CPython
    # gh-106905, "AST constructor recursion depth mismatch"), and hypothesis
    # calls it while generating; two workers made a run error at random.
    (cd "$tmp" && timeout 600 "$st" --config-file "$tmp/schemathesis.toml" run "$base/openapi.json" \
        --header "Authorization: Bearer $token" \
        --checks "$checks" --max-examples "$examples" --seed "$seed" \
        --generation-database none --workers 1 --request-timeout 10 \
        --no-color "$@") || status=$?
    summary+=("$(printf '%-56s %-10s %4ds' "$name" "$([ "$status" = 0 ] && echo ok || echo "FAILED ($status)")" $((SECONDS - started)))")
    [ "$status" = 0 ] || failed=1
}

run "API as account manager (all but admin, stream, logout)" dana \
    --exclude-path-regex '^/v1/(admin/|sync/stream$|sessions/current$)'
run "admin API as operator" ops --include-path-regex '^/v1/admin/'
run "logout (last, with its own token)" doomed --include-path /v1/sessions/current

check_metrics "after the runs" || failed=1

if grep -aq 'panicked at' "$tmp/server.log"; then
    echo "schemathesis: the server panicked:" >&2
    grep -a -A5 'panicked at' "$tmp/server.log" >&2
    failed=1
fi

echo "== schemathesis summary (seed $seed, $examples examples per operation, checks $checks)"
printf '   %s\n' "${summary[@]}"
if [ "$failed" != 0 ]; then
    echo "schemathesis: FAILED (replay a case with the curl line above; the server's internal errors follow)" >&2
    grep -a 'internal error' "$tmp/server.log" | tail -n 40 >&2 || true
    exit 1
fi
echo "schemathesis: no findings"
