#!/usr/bin/env bash
# Payments benchmark, Go (payments/go) vs Rust (payments/service), one command, one machine.
#
#   scripts/bench-payments.sh             full run: 5 s ramp steps, 30 s fixed load, 3 repeats
#   QUICK=1 scripts/bench-payments.sh     short run for a busy machine: 2 s steps, 10 s, 1 repeat
#
# What it does, in order:
#   1. builds `payments` and `scalpel` (release) and the Go binary (scripts/build-go.sh);
#   2. generates the 16,000-user ledger into ${CARGO_TARGET_DIR:-target}/bench/payments/
#      (kept between runs; same seed, same rows);
#   3. starts both services pinned to CPU $SERVER_CPU (default 1) with taskset; the load
#      generator (`scalpel load`, one thread) runs pinned to CPU $LOAD_CPU (default 0), so the
#      server never competes with the load for its core;
#   4. checks both answer byte for byte (status + body) for 300 users on both endpoints
#      before measuring anything;
#   5. per endpoint (stats, balance): an open-model ramp on both targets in alternation until
#      p99 >= 50 ms or errors >= 1% (max rate = the last step that held), then a fixed
#      load at half of Go's max rate on both, with CPU% and RSS/PSS sampled from /proc;
#   6. writes every result (JSON with histograms, text tables) and summary.md with medians,
#      min-max over repeats and Rust/Go ratios.
#
# Environment knobs: USERS SEED RAMP STEP FIXED REPEATS SERVER_CPU LOAD_CPU ENDPOINTS;
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
if [[ "${SUMMARY_ONLY:-0}" != 1 ]]; then
[[ "${SKIP_BUILD:-0}" == 1 ]] || payments_build
payments_binaries
payments_ledger
trap payments_cleanup EXIT

echo "== start (servers on cpu $SERVER_CPU, load on cpu $LOAD_CPU)"
start go "$GO" --db "$DB" --port 0
start rust "$PAY" serve --db "$DB" --port 0
payments_parity 300 7 /balance /stats '/stats?days=7' '/stats?days=365'

echo "machine: $MACHINE"

load() {
  taskset -c "$LOAD_CPU" "$SCALPEL" load --threads 1 --no-progress \
    --target "go=$GO_URL" --target "rust=$RUST_URL" \
    --watch-pid "go=$GO_PID" --watch-pid "rust=$RUST_PID" \
    --data "$IDS" --shuffle 1 "$@"
}

for ep in $ENDPOINTS; do
  path="/v1/users/{id}/$ep"
  for r in $(seq "$REPEATS"); do
    echo "== $ep: ramp $RAMP, steps of $STEP, repeat $r"
    load --ramp "$RAMP" --step-duration "$STEP" --slo 'p99<50ms,errors<1%' \
      --json "$OUT/ramp-$ep-$r.json" "$path" >"$OUT/ramp-$ep-$r.txt" || true
    sed -n '/breaking point/,$p' "$OUT/ramp-$ep-$r.txt"
  done
  # Half of Go's max rate. When Go held the SLO at every step of a repeat, its max is
  # only known to be at least the ramp's top: say so, and use that top.
  read -r half basis < <(python3 - "$OUT" "$ep" "$REPEATS" <<'PY'
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
    echo "== $ep: fixed $half rps (half of $basis) for $FIXED, repeat $r"
    load --rate "$half" -d "$FIXED" --json "$OUT/fixed-$ep-$r.json" "$path" >"$OUT/fixed-$ep-$r.txt" || true
  done
done
echo "$MACHINE" >"$OUT/machine.txt"
fi

MACHINE="$(cat "$OUT/machine.txt" 2>/dev/null || echo "$MACHINE")"
python3 - "$OUT" "$REPEATS" "$MACHINE" "$ENDPOINTS" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys, datetime
out, n, machine, endpoints = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()
def spread(xs, digits=1):
    xs = [x for x in xs if x is not None]
    if not xs: return "-"
    m = statistics.median(xs)
    f = lambda x: f"{x:,.{digits}f}"
    return f(m) if len(xs) == 1 else f"{f(m)} ({f(min(xs))}-{f(max(xs))})"
def ratio(a, b):
    return None if not b or a is None else a / b
print(f"# payments benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
print(f"\nmachine: {machine}; {n} repeat(s); servers pinned to one CPU, load generator to another\n")
for ep in endpoints:
    mx = {"go": [], "rust": []}
    held_all = set()
    held_tops = {}
    fixed = {k: {"go": [], "rust": []} for k in ("rate", "cpu", "rss", "pss", "p99", "p50")}
    for r in range(1, n + 1):
        for t in json.load(open(f"{out}/ramp-{ep}-{r}.json"))["targets"]:
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
        for t in json.load(open(f"{out}/fixed-{ep}-{r}.json"))["targets"]:
            s = t["steps"][0]
            for k, v in (("rate", s["achieved_rps"]), ("cpu", s["cpu_percent"]), ("rss", s["rss_mb"]),
                         ("pss", s["pss_mb"]), ("p99", s["latency_ms"]["p99"]), ("p50", s["latency_ms"]["p50"])):
                fixed[k][t["name"]].append(v)
    print(f"## {ep}\n")
    print("| figure | Go | Rust | Rust/Go |\n|---|---|---|---|")
    rows = [("max rps at p99 < 50 ms", mx)] + [
        (f"at half Go's max: {label}", fixed[k]) for k, label in
        (("rate", "achieved rps"), ("cpu", "CPU % (of one core)"), ("rss", "RSS MiB"), ("pss", "PSS MiB"),
         ("p50", "p50 ms"), ("p99", "p99 ms"))]
    for label, d in rows:
        ratios = [ratio(a, b) for a, b in zip(d["rust"], d["go"])]
        if d is mx:
            # ">=" marks a side that never broke the SLO: its max and the ratio are lower bounds.
            g = (">= " if "go" in held_all else "") + spread(d["go"])
            r = (">= " if "rust" in held_all else "") + spread(d["rust"])
            if {"go", "rust"} <= held_all:
                q = "-"  # two lower bounds: no ratio
            else:
                q = {"rust": ">= ", "go": "<= "}.get(next(iter(held_all), ""), "") + spread(ratios, 2)
            print(f"| {label} | {g} | {r} | {q} |")
            continue
        digits = 3 if label.endswith(" ms") else 1
        print(f"| {label} | {spread(d['go'], digits)} | {spread(d['rust'], digits)} | {spread(ratios, 2)} |")
    print()
    for name, tops in sorted(held_tops.items()):
        known = [x for x in tops if x is not None]
        up_to = f"{max(known):,.0f} rps" if known else "the ramp's top"
        print(f"{name} did not break up to {up_to} in {len(tops)} of {n} repeat(s): "
              f"its max rps is a lower bound; a longer RAMP finds it.\n")
PY
echo "results in $OUT"
