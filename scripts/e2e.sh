#!/usr/bin/env bash
# End-to-end checks that join the toolkit and the examples through processes only (they
# never import each other): the real `scalpel` binary against the real payments services.
#
#   1. `scalpel shadow replay` over the whole id list of a generated ledger, Go as primary
#      and Rust as candidate, stats (several windows) and balance: 100% consistent, every
#      id compared, exit 0.
#   2. The same replay against a candidate that answers from a different ledger (another
#      seed): it must find the differences and exit 1.
#   3. `scalpel load` against both services side by side with their CPU and memory watched:
#      every step reports both targets, JSON keys present, exit 0.
#   4. The same seed generated into PostgreSQL (a throw-away cluster, scripts/lib/pg.sh):
#      `scalpel shadow replay` over all ids, Go on PostgreSQL vs Rust on PostgreSQL, and Rust
#      on SQLite vs Rust on PostgreSQL: 100% consistent.
#   5. The Go service with the Rust engine linked in by cgo (`payments-go --engine rust`, tier
#      3) against the pure-Go engine and against the separate Rust service, on both stores:
#      every id on the hot endpoints and windows and on bad input (days out of range or not
#      a number, a malformed id, unknown users): the same status and bytes, 100%.
#
# Needs the release binaries (./run build). Honors CARGO_TARGET_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
T="${CARGO_TARGET_DIR:-$ROOT/target}"
SCALPEL="$T/release/scalpel"
PAYMENTS="$T/release/payments"
GO="$T/payments-go"
for bin in "$SCALPEL" "$PAYMENTS" "$GO"; do
    [ -x "$bin" ] || { echo "e2e: missing $bin (run ./run build)" >&2; exit 2; }
done

WORK="$(mktemp -d)"
PIDS=()
PG_DIR=""
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$PG_DIR" ]; then bash "$ROOT/scripts/lib/pg.sh" stop "$PG_DIR"; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

passed=0
failed=0
check() { # name, then a command that must succeed
    local name="$1"; shift
    if "$@"; then
        passed=$((passed + 1)); echo "ok - $name"
    else
        failed=$((failed + 1)); echo "not ok - $name"
    fi
}

# Starts a service on port 0 and sets URL and PID from its "listening on http://…" line.
start() {
    local name="$1"; shift
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PID=$!
    PIDS+=("$PID")
    for _ in $(seq 600); do
        if URL="$(grep -o 'http://[0-9.]*:[0-9]*' "$WORK/$name.out" 2>/dev/null | head -1)" && [ -n "$URL" ]; then
            return 0
        fi
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/$name.err" >&2; return 1; }
        sleep 0.1
    done
    echo "e2e: $name did not start within 60 s" >&2
    return 1
}

json_field() { # file, python expression over `d` (scripts/lib/stats.py json)
    python3 "$ROOT/scripts/lib/stats.py" json "$2" <"$1"
}

"$PAYMENTS" generate --users 1500 --seed 11 --db "$WORK/ledger.db" --ids-out "$WORK/ids.txt" >/dev/null
"$PAYMENTS" generate --users 1500 --seed 12 --db "$WORK/other.db" >/dev/null
ids=$(wc -l <"$WORK/ids.txt")

start go "$GO" --db "$WORK/ledger.db" --port 0
GO_URL="$URL"; GO_PID="$PID"
start rust "$PAYMENTS" serve --db "$WORK/ledger.db" --port 0
RUST_URL="$URL"; RUST_PID="$PID"
start other "$PAYMENTS" serve --db "$WORK/other.db" --port 0
OTHER_URL="$URL"
start go-cgo "$GO" --db "$WORK/ledger.db" --port 0 --engine rust
CGO_URL="$URL"

# Every id on the hot endpoints and on bad input, and ids nobody has (404): one CSV, the
# endpoint raw after the id, so a malformed id is the real id with a suffix.
python3 - "$WORK/ids.txt" "$WORK/engines.csv" <<'PY'
import random, sys
ids = [l.strip() for l in open(sys.argv[1]) if l.strip()]
known = set(ids)
endpoints = ["/balance", "/stats", "/stats?days=1", "/stats?days=365", "/stats?days=0",
             "/stats?days=abc&days=7", "/stats?days=%37", "X/balance"]
rng = random.Random(30)
strangers = []
while len(strangers) < 100:
    s = "u%012x" % rng.getrandbits(48)
    if s not in known:
        strangers.append(s)
with open(sys.argv[2], "w") as f:
    f.write("id,endpoint\n")
    for i in ids:
        for e in endpoints:
            f.write(f"{i},{e}\n")
    for i in strangers:
        for e in ("/balance", "/stats?days=7"):
            f.write(f"{i},{e}\n")
PY
engine_rows=$(($(wc -l <"$WORK/engines.csv") - 1))

# The cgo engine against a primary: every row of engines.csv, the same status and bytes.
cgo_consistent() { # primary url, candidate url
    local out="$WORK/replay-cgo-$RANDOM.json"
    timeout 300 "$SCALPEL" shadow replay --primary "$1" --candidate "$2" \
        --template '/v1/users/{id}{endpoint:raw}' --data "$WORK/engines.csv" --concurrency 8 \
        --json "$out" >"$out.txt" 2>&1 || { cat "$out.txt" >&2; return 1; }
    [ "$(json_field "$out" 'd["compared"]')" = "$engine_rows" ] &&
        [ "$(json_field "$out" 'd["mismatched"]')" = "0" ] &&
        [ "$(json_field "$out" 'd["consistency_percent"]')" = "100.0" ]
}

replay() { # template, json out, candidate url [, primary url]
    timeout 300 "$SCALPEL" shadow replay --primary "${4:-$GO_URL}" --candidate "$3" \
        --template "$1" --data "$WORK/ids.txt" --concurrency 8 --json "$2" >"$2.txt" 2>&1
}

consistent_over_all_ids() { # template [, candidate url, primary url]
    local out="$WORK/replay-$RANDOM.json"
    replay "$1" "$out" "${2:-$RUST_URL}" "${3:-$GO_URL}" || { cat "$out.txt" >&2; return 1; }
    [ "$(json_field "$out" 'd["compared"]')" = "$ids" ] &&
        [ "$(json_field "$out" 'd["mismatched"]')" = "0" ] &&
        [ "$(json_field "$out" 'd["consistency_percent"]')" = "100.0" ]
}

for template in '/v1/users/{id}/stats?days=30' '/v1/users/{id}/stats?days=365' \
    '/v1/users/{id}/stats?days=1' '/v1/users/{id}/balance'; do
    check "shadow replay Go vs Rust over all $ids ids: $template" consistent_over_all_ids "$template"
done

finds_differences() {
    local out="$WORK/replay-other.json" code=0
    replay '/v1/users/{id}/balance' "$out" "$OTHER_URL" || code=$?
    [ "$code" = 1 ] && [ "$(json_field "$out" 'd["mismatched"] > 0')" = "True" ]
}
check "shadow replay against a different ledger finds differences and exits 1" finds_differences

check "shadow replay Go vs Go+Rust (cgo engine), $engine_rows hot and bad-input requests" cgo_consistent "$GO_URL" "$CGO_URL"
check "shadow replay Rust service vs Go+Rust (cgo engine), $engine_rows hot and bad-input requests" cgo_consistent "$RUST_URL" "$CGO_URL"

load_side_by_side() {
    local out="$WORK/load.json"
    timeout 120 "$SCALPEL" load --rate 200 -d 2s --data "$WORK/ids.txt" --no-progress \
        --target go="$GO_URL" --target rust="$RUST_URL" \
        --watch-pid go="$GO_PID" --watch-pid rust="$RUST_PID" \
        --json "$out" '/v1/users/{id}/stats?days=30' >"$WORK/load.txt" 2>&1 || { cat "$WORK/load.txt" >&2; return 1; }
    [ "$(json_field "$out" '[t["name"] for t in d["targets"]]')" = "['go', 'rust']" ] &&
        [ "$(json_field "$out" 'all(s["errors"] == 0 and s["requests"] > 0 and s["cpu_percent"] is not None and s["rss_mb"] > 1 for t in d["targets"] for s in t["steps"])')" = "True" ]
}
check "scalpel load runs Go and Rust side by side with their CPU and memory" load_side_by_side

# 4. PostgreSQL: the same seed, the same answers.
if PG_OUT="$(bash "$ROOT/scripts/lib/pg.sh" start --watch $$)"; then
    PG_DIR="$(head -1 <<<"$PG_OUT")"
    PG_URL="$(tail -1 <<<"$PG_OUT")"
    "$PAYMENTS" generate --users 1500 --seed 11 --db "$PG_URL" >/dev/null
    start go-pg "$GO" --db "$PG_URL" --port 0
    GO_PG_URL="$URL"
    start rust-pg "$PAYMENTS" serve --db "$PG_URL" --port 0
    RUST_PG_URL="$URL"
    start go-cgo-pg "$GO" --db "$PG_URL" --port 0 --engine rust
    CGO_PG_URL="$URL"
    check "shadow replay on PostgreSQL, Go vs Go+Rust (cgo engine), $engine_rows requests" cgo_consistent "$GO_PG_URL" "$CGO_PG_URL"
    check "shadow replay on PostgreSQL, Rust service vs Go+Rust (cgo engine), $engine_rows requests" cgo_consistent "$RUST_PG_URL" "$CGO_PG_URL"
    for template in '/v1/users/{id}/stats?days=30' '/v1/users/{id}/stats?days=365' '/v1/users/{id}/balance'; do
        check "shadow replay on PostgreSQL, Go vs Rust, over all $ids ids: $template" \
            consistent_over_all_ids "$template" "$RUST_PG_URL" "$GO_PG_URL"
        check "shadow replay Rust on SQLite vs Rust on PostgreSQL, same seed, all $ids ids: $template" \
            consistent_over_all_ids "$template" "$RUST_PG_URL" "$RUST_URL"
    done
else
    check "a PostgreSQL cluster starts (scripts/lib/pg.sh; ./run setup installs it)" false
fi

echo "e2e: $passed passed, $failed failed"
[ "$failed" = 0 ]
