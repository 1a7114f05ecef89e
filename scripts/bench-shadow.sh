#!/usr/bin/env bash
# Benchmarks of `scalpel shadow` (docs/shadow.md, "Performance"):
#  1. proxy overhead: the primary called directly vs through the mirroring proxy (candidate
#     mirrored), at a constant RATE (default 5000 req/s), side by side in one `scalpel load` run;
#  2. the diff alone on ~2 KB JSON bodies (criterion);
#  3. end-to-end replay of N (default 16000) requests, pairs compared per second.
# Usage: scripts/bench-shadow.sh   (env: RATE, DURATION, REPEATS, N)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
RATE=${RATE:-5000}
DURATION=${DURATION:-20s}
REPEATS=${REPEATS:-3}
N=${N:-16000}
OUT=$ROOT/bench-out/shadow
mkdir -p "$OUT"
cd "$ROOT"

cargo build --release -q -p scalpel --bin scalpel
cargo build --release -q -p scalpel-shadow --example bench_target
BIN=$TGT/release/scalpel
SRV=$TGT/release/examples/bench_target

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P_PRIMARY=$(free_port); P_CAND=$(free_port); P_PROXY=$(free_port); P_ADMIN=$(free_port)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
"$SRV" "$P_PRIMARY" & PIDS+=($!)
"$SRV" "$P_CAND" & PIDS+=($!)
"$BIN" shadow proxy --listen 127.0.0.1:"$P_PROXY" --admin 127.0.0.1:"$P_ADMIN" \
  --primary http://127.0.0.1:"$P_PRIMARY" --candidate http://127.0.0.1:"$P_CAND" 2>"$OUT/proxy.log" & PIDS+=($!)
seq 1 "$N" > "$OUT/ids.txt"
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$P_ADMIN/metrics" >/dev/null 2>&1 && break; sleep 0.1
done

echo "== machine"
echo "nproc: $(nproc); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); kernel: $(uname -r); date: $(date -u +%FT%TZ)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== 1. proxy overhead at $RATE req/s ($REPEATS runs of $DURATION; direct and proxied side by side)"
for i in $(seq "$REPEATS"); do
  "$BIN" load --rate "$RATE" -d "$DURATION" \
    --target direct=http://127.0.0.1:"$P_PRIMARY" --target proxied=http://127.0.0.1:"$P_PROXY" \
    '/v1/users/{id}/stats' --data "$OUT/ids.txt" --json "$OUT/proxy-load-$i.json" | tee "$OUT/proxy-load-$i.txt"
done
echo "mirror counters after the load runs:"
curl -fsS "http://127.0.0.1:$P_ADMIN/metrics" | grep -E '^scalpel_shadow_(requests|mirrored|compared|mismatched|skipped)_total' || true

echo "== 2. diff alone, ~2 KB JSON (criterion)"
cargo bench -q -p scalpel-diff --bench compare 2>&1 | grep -E 'compare_2kb|time:|thrpt:'

echo "== 3. replay: $N requests, 2 KB JSON, concurrency 64 ($REPEATS runs)"
for i in $(seq "$REPEATS"); do
  "$BIN" shadow replay --primary http://127.0.0.1:"$P_PRIMARY" --candidate http://127.0.0.1:"$P_CAND" \
    --template '/v1/users/{id}/stats' --data "$OUT/ids.txt" -c 64 --json "$OUT/replay-$i.json" 2>/dev/null \
    | grep -E 'pairs/s|PASS|FAIL'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
