#!/usr/bin/env bash
# Payments benchmark, three ways to serve the hot endpoints, on each ledger store (SQLite,
# PostgreSQL), one command, one machine: Go (payments/go, tier 0), Go with the Rust core
# linked in by cgo (`payments-go --engine rust`, tier 3) and the separate Rust service
# (payments/service, tier 4).
#
#   scripts/bench-payments.sh                    full run: 5 s ramp steps, 30 s fixed load, 3 repeats
#   QUICK=1 scripts/bench-payments.sh            short run for a busy machine: 2 s steps, 10 s, 1 repeat
#   STORES=postgres scripts/bench-payments.sh    one store only (default: "sqlite postgres")
#
# What it does, in order:
#   1. builds `payments` and `scalpel` (release) and the Go binary (scripts/build-go.sh);
#   2. generates the 16,000-user ledger into ${CARGO_TARGET_DIR:-target}/bench/payments/
#      (kept between runs; same seed, same rows); for PostgreSQL, starts a throw-away cluster
#      (scripts/lib/pg.sh, fsync on, the postmaster tree pinned to the servers' CPU) and
#      generates the same ledger into it (the same rows: see the tests);
#   3. starts the three services pinned to CPU $SERVER_CPU (default 1) with taskset; the load
#      generator (`scalpel load`, one thread) runs pinned to CPU $LOAD_CPU (default 0), so the
#      server never competes with the load for its core;
#   4. checks all three answer byte for byte (status + body) for 300 users on both endpoints
#      before measuring anything;
#   5. per store and endpoint (stats, balance): an open-model ramp on the three targets in
#      alternation until p99 >= 50 ms or errors >= 1% (max rate = the last step that held),
#      then a fixed load at half of Go's max rate on each, with CPU% and RSS/PSS sampled
#      from /proc by `scalpel load --watch-pid`. On PostgreSQL the ramp watches the
#      postmaster tree (the database's own CPU at the last step that held: is the ceiling
#      the database's?) and the fixed load runs twice, once watching the services and once
#      the postmaster tree (the database's CPU while Go, then Rust, is loaded);
#   6. writes every result (JSON with histograms, text tables) and summary.md with medians,
#      min-max over repeats and the ratios to Go, one table per store and endpoint, with the
#      CPU per request of each and what Go's HTTP layer costs (cgo minus the Rust service:
#      both compute with the same Rust code).
#
# Environment knobs: USERS SEED RAMP STEP FIXED REPEATS SERVER_CPU LOAD_CPU ENDPOINTS STORES;
# SUMMARY_ONLY=1 re-writes summary.md from the JSON of the last run without measuring;
# SKIP_BUILD=1 uses the binaries already in the target dir.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TGT="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$TGT"
TGT="$(cd "$TGT" && pwd)"
OUT="$TGT/bench/payments"
mkdir -p "$OUT"

USERS="${USERS:-16000}"
SEED="${SEED:-1}"
if [[ "${QUICK:-0}" == 1 ]]; then
  RAMP="${RAMP:-1000,1500,25000}"; STEP="${STEP:-2s}"; FIXED="${FIXED:-10s}"; REPEATS="${REPEATS:-1}"
else
  RAMP="${RAMP:-1500,1500,60000}"; STEP="${STEP:-5s}"; FIXED="${FIXED:-30s}"; REPEATS="${REPEATS:-3}"
fi
SERVER_CPU="${SERVER_CPU:-1}"
LOAD_CPU="${LOAD_CPU:-0}"
ENDPOINTS="${ENDPOINTS:-stats balance}"

LEDGER_DIR="$OUT"
# shellcheck source=scripts/lib/payments-services.sh
source "$ROOT/scripts/lib/payments-services.sh"
MACHINE="$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), load avg $(cut -d' ' -f1-3 /proc/loadavg)"
STORES="${STORES:-sqlite postgres}"
PG_DIR=""
stop_all() {
  payments_cleanup
  if [[ -n "$PG_DIR" ]]; then bash "$ROOT/scripts/lib/pg.sh" stop "$PG_DIR"; PG_DIR=""; fi
}

# postgres_ledger: a cluster of this run's own, with the same ledger as $DB. Sets PG_URL, PG_PID.
postgres_ledger() {
  echo "== postgres: cluster and ledger"
  local out
  out="$(PG_FSYNC=on bash "$ROOT/scripts/lib/pg.sh" start --watch $$)"
  PG_DIR="$(head -1 <<<"$out")"
  PG_URL="$(tail -1 <<<"$out")"
  PG_PID="$(bash "$ROOT/scripts/lib/pg.sh" pid "$PG_DIR")"
  # The database shares the servers' core: children forked later inherit the affinity.
  taskset -a -p -c "$SERVER_CPU" "$PG_PID" >/dev/null
  "$PAY" generate --users "$USERS" --seed "$SEED" --db "$PG_URL" --force
  echo "postgres: postmaster pid $PG_PID, pinned to cpu $SERVER_CPU"
}

load() {
  taskset -c "$LOAD_CPU" "$SCALPEL" load --threads 1 --no-progress \
    --target "go=$GO_URL" --target "cgo=$CGO_URL" --target "rust=$RUST_URL" \
    --data "$IDS" --shuffle 1 "$@"
}
watch_services() { echo --watch-pid "go=$GO_PID" --watch-pid "cgo=$CGO_PID" --watch-pid "rust=$RUST_PID"; }
watch_database() { echo --watch-pid "go=$PG_PID" --watch-pid "cgo=$PG_PID" --watch-pid "rust=$PG_PID"; }

if [[ "${SUMMARY_ONLY:-0}" != 1 ]]; then
[[ "${SKIP_BUILD:-0}" == 1 ]] || payments_build
payments_binaries
payments_ledger
trap stop_all EXIT
echo "machine: $MACHINE"

for store in $STORES; do
  case "$store" in
    sqlite) db="$DB"; ramp_watch=watch_services ;;
    postgres) postgres_ledger; db="$PG_URL"; ramp_watch=watch_database ;;
    *) echo "bench-payments: STORES takes sqlite and postgres, not $store" >&2; exit 2 ;;
  esac
  echo "== $store: start (servers on cpu $SERVER_CPU, load on cpu $LOAD_CPU)"
  start go "$GO" --db "$db" --port 0
  start cgo "$GO" --db "$db" --port 0 --engine rust
  start rust "$PAY" serve --db "$db" --port 0
  payments_parity 300 7 /balance /stats '/stats?days=7' '/stats?days=365'
  # The same users and queries, Go against the cgo engine.
  RUST_URL="$CGO_URL" payments_parity 300 7 /balance /stats '/stats?days=7' '/stats?days=365'

  for ep in $ENDPOINTS; do
    path="/v1/users/{id}/$ep"
    for r in $(seq "$REPEATS"); do
      echo "== $store $ep: ramp $RAMP, steps of $STEP, repeat $r"
      # shellcheck disable=SC2046 # the watch flags are words
      load $($ramp_watch) --ramp "$RAMP" --step-duration "$STEP" --slo 'p99<50ms,errors<1%' \
        --json "$OUT/ramp-$store-$ep-$r.json" "$path" >"$OUT/ramp-$store-$ep-$r.txt" || true
      sed -n '/breaking point/,$p' "$OUT/ramp-$store-$ep-$r.txt"
    done
    # Half of Go's max rate. When Go held the SLO at every step of a repeat, its max is
    # only known to be at least the ramp's top: say so, and use that top.
    read -r half basis < <(python3 - "$OUT" "$store-$ep" "$REPEATS" <<'PY'
import json, statistics, sys
out, ep, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rates, held = [], []
for r in range(1, n + 1):
    d = json.load(open(f"{out}/ramp-{ep}-{r}.json"))
    for t in d["targets"]:
        if t["name"] != "go":
            continue
        bp = t["breaking_point"]
        if bp is not None:
            rates.append(bp["rps"])
            continue
        offered = [s["offered_rps"] for s in t["steps"] if s.get("offered_rps") is not None]
        top = max(offered, default=0.0)
        held.append(top)
        print(f"go did not break up to {top:,.0f} rps in repeat {r}: its max is at least that",
              file=sys.stderr)
if not rates and not held:
    sys.exit(f"no ramp result for go in {out}/ramp-{ep}-*.json")
basis = "Go's max" if not held else ("the ramp's top, which Go held" if not rates
                                     else "Go's max, a lower bound in some repeats")
print(max(100, int(statistics.median(rates + held) / 2)), basis)
PY
)
    for r in $(seq "$REPEATS"); do
      echo "== $store $ep: fixed $half rps (half of $basis) for $FIXED, repeat $r"
      # shellcheck disable=SC2046
      load $(watch_services) --rate "$half" -d "$FIXED" --json "$OUT/fixed-$store-$ep-$r.json" "$path" \
        >"$OUT/fixed-$store-$ep-$r.txt" || true
      if [[ "$store" == postgres ]]; then
        echo "== $store $ep: the same fixed load, the database's CPU watched, repeat $r"
        # shellcheck disable=SC2046
        load $(watch_database) --rate "$half" -d "$FIXED" --json "$OUT/fixeddb-$store-$ep-$r.json" "$path" \
          >"$OUT/fixeddb-$store-$ep-$r.txt" || true
      fi
    done
  done
  payments_cleanup
  PIDS=()
done
stop_all
echo "$MACHINE" >"$OUT/machine.txt"
echo "$STORES" >"$OUT/stores.txt"
fi

MACHINE="$(cat "$OUT/machine.txt" 2>/dev/null || echo "$MACHINE")"
STORES="$(cat "$OUT/stores.txt" 2>/dev/null || echo "$STORES")"
python3 - "$OUT" "$REPEATS" "$MACHINE" "$ENDPOINTS" "$STORES" <<'PY' | tee "$OUT/summary.md"
import json, os, statistics, sys, datetime
out, n, machine, endpoints, stores = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(), sys.argv[5].split()
def spread(xs, digits=1):
    xs = [x for x in xs if x is not None]
    if not xs: return "-"
    m = statistics.median(xs)
    f = lambda x: f"{x:,.{digits}f}"
    return f(m) if len(xs) == 1 else f"{f(m)} ({f(min(xs))}-{f(max(xs))})"
def ratio(a, b):
    return None if not b or a is None else a / b
print(f"# payments benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
print(f"\nmachine: {machine}; {n} repeat(s); servers (and PostgreSQL) pinned to one CPU, load generator to another\n")
NAMES = ("go", "cgo", "rust")
LABEL = {"go": "Go", "cgo": "Go+Rust (cgo)", "rust": "Rust"}
def per_target():
    return {k: [] for k in NAMES}
for store, ep in [(s, e) for s in stores for e in endpoints]:
    mx = per_target()
    held_all = set()
    held_tops = {}
    fixed = {k: per_target() for k in ("rate", "cpu", "rss", "pss", "p99", "p50", "us")}
    db_at_max = per_target()
    db_fixed = per_target()
    for r in range(1, n + 1):
        for t in json.load(open(f"{out}/ramp-{store}-{ep}-{r}.json"))["targets"]:
            if t["name"] not in mx:
                continue  # a result from before the third target: not mixed in
            bp = t["breaking_point"]
            if bp is None:
                # Held at every step: the ramp's top is only a lower bound of the max.
                held_all.add(t["name"])
                top = max((st["offered_rps"] for st in t["steps"] if st.get("offered_rps") is not None),
                          default=None)
                mx[t["name"]].append(top)
                held_tops.setdefault(t["name"], []).append(top)
            else:
                mx[t["name"]].append(bp["rps"])
            if store == "postgres":
                # This ramp watched the postmaster tree: the database's CPU at the last step held.
                held = mx[t["name"]][-1]
                at = [st.get("cpu_percent") for st in t["steps"] if st.get("offered_rps") == held]
                db_at_max[t["name"]].append(at[0] if at else None)
        dbf = f"{out}/fixeddb-{store}-{ep}-{r}.json"
        if os.path.exists(dbf):
            for t in json.load(open(dbf))["targets"]:
                if t["name"] in db_fixed:
                    db_fixed[t["name"]].append(t["steps"][0]["cpu_percent"])
        for t in json.load(open(f"{out}/fixed-{store}-{ep}-{r}.json"))["targets"]:
            if t["name"] not in mx:
                continue
            s = t["steps"][0]
            cpu, rps = s["cpu_percent"], s["achieved_rps"]
            # CPU µs per request: percent of one core x 10,000 µs per second / requests per second.
            us = cpu * 10_000 / rps if cpu is not None and rps else None
            for k, v in (("rate", rps), ("cpu", cpu), ("rss", s["rss_mb"]), ("us", us),
                         ("pss", s["pss_mb"]), ("p99", s["latency_ms"]["p99"]), ("p50", s["latency_ms"]["p50"])):
                fixed[k][t["name"]].append(v)
    print(f"## {store}: {ep}\n")
    print("| figure | Go | Go+Rust (cgo) | Rust | cgo/Go | Rust/Go |\n|---|---|---|---|---|---|")
    rows = [("max rps at p99 < 50 ms", mx)] + [
        (f"at half Go's max: {label}", fixed[k]) for k, label in
        (("rate", "achieved rps"), ("cpu", "CPU % (of one core)"), ("us", "CPU µs per request"),
         ("rss", "RSS MiB"), ("pss", "PSS MiB"), ("p50", "p50 ms"), ("p99", "p99 ms"))]
    if store == "postgres":
        rows += [("PostgreSQL CPU % at the last ramp step held", db_at_max),
                 ("PostgreSQL CPU % at half Go's max", db_fixed)]
    for label, d in rows:
        cells = []
        if d is mx:
            # ">=" marks a side that never broke the SLO: its max and the ratio are lower bounds.
            for name in NAMES:
                cells.append((">= " if name in held_all else "") + spread(d[name]))
            for name in ("cgo", "rust"):
                ratios = [ratio(a, b) for a, b in zip(d[name], d["go"])]
                if {name, "go"} <= held_all:
                    cells.append("-")  # two lower bounds: no ratio
                else:
                    mark = ">= " if name in held_all else ("<= " if "go" in held_all else "")
                    cells.append(mark + spread(ratios, 2))
        else:
            digits = 3 if label.endswith(" ms") else 1
            cells = [spread(d[name], digits) for name in NAMES]
            cells += [spread([ratio(a, b) for a, b in zip(d[name], d["go"])], 2) for name in ("cgo", "rust")]
        print(f"| {label} | " + " | ".join(cells) + " |")
    # Both cgo and the Rust service compute with the same Rust code, so the difference of
    # their CPU per request is what Go's side costs: net/http, the head check, routing and
    # the cgo crossing, against hyper and tokio.
    layer = [a - b for a, b in zip(fixed["us"]["cgo"], fixed["us"]["rust"]) if a is not None and b is not None]
    print(f"\nGo's HTTP layer (and the cgo crossing), CPU µs per request = cgo - Rust service: {spread(layer)}; "
          f"Go's whole request: {spread(fixed['us']['go'])} µs\n")
    for name, tops in sorted(held_tops.items()):
        known = [x for x in tops if x is not None]
        up_to = f"{max(known):,.0f} rps" if known else "the ramp's top"
        print(f"{LABEL[name]} did not break up to {up_to} in {len(tops)} of {n} repeat(s): "
              f"its max rps is a lower bound; a longer RAMP finds it.\n")
PY
echo "results in $OUT"
