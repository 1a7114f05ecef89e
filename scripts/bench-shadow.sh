#!/usr/bin/env bash
# Benchmarks of `scalpel shadow` (docs/shadow.md, "Performance"):
#  1. proxy overhead at a constant RATE (default 5000 req/s), open model: the primary called
#     directly, through the proxy with mirroring off (--sample 0) and through the proxy with
#     the candidate mirrored, alternating within each `scalpel load` run (A B C C B A …),
#     REPEATS runs; medians and min–max of p50/p99 per target, and the mirror counters.
#     With OLD_BIN=path/to/older/scalpel that binary's two proxies (mirroring off and on) run
#     in the same alternation (old vs new, same run, same core layout).
#  2. the diff alone on ~2 KB JSON bodies (criterion);
#  3. end-to-end replay of N (default 16000) requests, pairs compared per second.
#
# Core layout (LAYOUT=pinned, the default, needs 2+ CPUs): CPU 1 runs the primary and the
# proxy's forwarding threads; CPU 0 runs the load generator, the candidate and the proxy's
# mirror thread (moved there by thread name, `scalpel-mirror`). So the primary's core sees
# exactly what a proxy adds on the request path. LAYOUT=free leaves placement to the kernel.
#
# Usage: scripts/bench-shadow.sh   (env: RATE, DURATION, REPEATS, N, LAYOUT, OLD_BIN, SKIP_23=1)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
RATE=${RATE:-5000}
DURATION=${DURATION:-10s}
REPEATS=${REPEATS:-5}
N=${N:-16000}
LAYOUT=${LAYOUT:-pinned}
OUT=$ROOT/bench-out/shadow
mkdir -p "$OUT"
cd "$ROOT"

cargo build --release -q -p scalpel --bin scalpel
cargo build --release -q -p scalpel-shadow --example bench_target
BIN=$TGT/release/scalpel
SRV=$TGT/release/examples/bench_target

if [ "$LAYOUT" = pinned ] && [ "$(nproc)" -ge 2 ]; then
  ON_LOAD="taskset -c 0"; ON_PRIMARY="taskset -c 1"
else
  LAYOUT=free; ON_LOAD=""; ON_PRIMARY=""
fi

# shellcheck source=scripts/lib/bench-basics.sh
source "$ROOT/scripts/lib/bench-basics.sh"   # free_port (load1, machine_line)
P_PRIMARY=$(free_port); P_CAND=$(free_port)
P_NOMIRROR=$(free_port); P_PROXY=$(free_port); P_ADMIN=$(free_port)
P_OLD=$(free_port); P_OLD_ADMIN=$(free_port); P_OLD_NOMIRROR=$(free_port)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_up() { for _ in $(seq 100); do curl -fsS "$1" >/dev/null 2>&1 && return; sleep 0.1; done; }
# Moves a proxy's mirror thread next to the candidate (pinned layout).
pin_mirror() {
  [ "$LAYOUT" = pinned ] || return 0
  for t in /proc/"$1"/task/*; do
    if [ "$(cat "$t/comm" 2>/dev/null)" = scalpel-mirror ]; then taskset -p -c 0 "${t##*/}" >/dev/null; fi
  done
}

$ON_PRIMARY "$SRV" "$P_PRIMARY" & PIDS+=($!)
$ON_LOAD "$SRV" "$P_CAND" & PIDS+=($!)
UP="--primary http://127.0.0.1:$P_PRIMARY --candidate http://127.0.0.1:$P_CAND"
# shellcheck disable=SC2086
$ON_PRIMARY "$BIN" shadow proxy --listen 127.0.0.1:"$P_NOMIRROR" $UP --sample 0 2>"$OUT/proxy-nomirror.log" & PIDS+=($!)
# shellcheck disable=SC2086
$ON_PRIMARY "$BIN" shadow proxy --listen 127.0.0.1:"$P_PROXY" --admin 127.0.0.1:"$P_ADMIN" $UP 2>"$OUT/proxy.log" & PIDS+=($!)
PROXY_PID=$!
TARGETS=(--target direct=http://127.0.0.1:"$P_PRIMARY" --target proxy_no_mirror=http://127.0.0.1:"$P_NOMIRROR"
         --target proxy_mirror=http://127.0.0.1:"$P_PROXY")
if [ -n "${OLD_BIN:-}" ]; then
  # shellcheck disable=SC2086
  $ON_PRIMARY "$OLD_BIN" shadow proxy --listen 127.0.0.1:"$P_OLD" --admin 127.0.0.1:"$P_OLD_ADMIN" $UP 2>"$OUT/proxy-old.log" & PIDS+=($!)
  OLD_PID=$!
  # shellcheck disable=SC2086
  $ON_PRIMARY "$OLD_BIN" shadow proxy --listen 127.0.0.1:"$P_OLD_NOMIRROR" $UP --sample 0 2>"$OUT/proxy-old-nomirror.log" & PIDS+=($!)
  TARGETS+=(--target old_proxy_no_mirror=http://127.0.0.1:"$P_OLD_NOMIRROR" --target old_proxy_mirror=http://127.0.0.1:"$P_OLD")
  wait_up "http://127.0.0.1:$P_OLD_ADMIN/metrics"
fi
seq 1 "$N" > "$OUT/ids.txt"
wait_up "http://127.0.0.1:$P_ADMIN/metrics"
pin_mirror "$PROXY_PID"
# The older binary's mirror thread goes to the same core as the new one's: same layout.
[ -n "${OLD_BIN:-}" ] && pin_mirror "$OLD_PID"

echo "== machine"
echo "nproc: $(nproc); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); kernel: $(uname -r); date: $(date -u +%FT%TZ)"
echo "layout: $LAYOUT$([ "$LAYOUT" = pinned ] && echo ' (CPU 1: primary + proxy forwarding; CPU 0: load generator, candidate, proxy mirror thread)')"

echo "== 1. proxy overhead at $RATE req/s ($REPEATS runs of $DURATION per target, alternating)"
for i in $(seq "$REPEATS"); do
  echo "run $i: load average before $(cut -d' ' -f1-3 /proc/loadavg)"
  $ON_LOAD "$BIN" load --rate "$RATE" -d "$DURATION" "${TARGETS[@]}" \
    '/v1/users/{id}/stats' --data "$OUT/ids.txt" --json "$OUT/proxy-load-$i.json" > "$OUT/proxy-load-$i.txt"
  grep -E 'p50|p99 |errors  ' "$OUT/proxy-load-$i.txt" | sed 's/^/  /'
done
echo "mirror counters after the load runs (this build):"
curl -fsS "http://127.0.0.1:$P_ADMIN/metrics" | grep -E '^scalpel_shadow_(requests|mirrored|compared|mismatched)_total|queue_full' | sed 's/^/  /' || true
if [ -n "${OLD_BIN:-}" ]; then
  echo "mirror counters ($OLD_BIN):"
  curl -fsS "http://127.0.0.1:$P_OLD_ADMIN/metrics" | grep -E '^scalpel_shadow_(requests|mirrored|compared)_total|queue_full' | sed 's/^/  /' || true
fi
echo "summary over $REPEATS runs: median [min–max] in ms"
python3 - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
per = {}
for i in range(1, n + 1):
    for t in json.load(open(f"{out}/proxy-load-{i}.json"))["targets"]:
        per.setdefault(t["name"], []).append(t["steps"][0]["latency_ms"])
def show(xs):
    return f"{statistics.median(xs):8.2f} [{min(xs):.2f}-{max(xs):.2f}]"
names = list(per)
direct = [l["p99"] for l in per[names[0]]]
print(f"{'target':18} {'p50':>22} {'p99':>24} {'p99.9':>24} {'p99 minus direct, same run':>30}")
for name in names:
    ls = per[name]
    d = [l["p99"] - b for l, b in zip(ls, direct)]
    print(f"{name:18} {show([l['p50'] for l in ls]):>22} {show([l['p99'] for l in ls]):>24} "
          f"{show([l['p999'] for l in ls]):>24} {show(d):>30}")
PY
echo "load average after part 1: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "${SKIP_23:-}" ] && exit 0

echo "== 2. diff alone, ~2 KB JSON (criterion)"
cargo bench -q -p scalpel-diff --bench compare 2>&1 | grep -E 'compare_2kb|time:|thrpt:'

echo "== 3. replay: $N requests, 2 KB JSON, concurrency 64 ($REPEATS runs)"
for i in $(seq "$REPEATS"); do
  "$BIN" shadow replay --primary http://127.0.0.1:"$P_PRIMARY" --candidate http://127.0.0.1:"$P_CAND" \
    --template '/v1/users/{id}/stats' --data "$OUT/ids.txt" -c 64 --json "$OUT/replay-$i.json" 2>/dev/null \
    | grep -E 'pairs/s|PASS|FAIL'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
