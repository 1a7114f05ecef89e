#!/usr/bin/env bash
# Benchmarks of sharded load runs (issue #16), one command:
#
#   scripts/bench-shards.sh            # both parts below
#   scripts/bench-shards.sh merge      # `scalpel report merge` of SHARDS files × STEPS steps
#   scripts/bench-shards.sh rate       # two shards vs one process against nginx
#
# merge: writes one sharded run's result files (crates/report/examples/shard_files.rs: real
#   HdrHistograms of a simulated service, a ramp of STEPS steps per shard), then times the
#   release binary's `report merge FILES -o merged.json` (reading, checking the set, adding
#   histograms, judging the SLO, writing) REPEATS times: median, min–max.
# rate: nginx (1 worker, 14-byte body) on a free loopback port; alternately (single, sharded,
#   sharded, single, …) REPEATS times each: one process `--rate RATE -d DUR --threads 2`, and
#   two processes `--shard 1/2` and `--shard 2/2 --threads 1` with a common --start-at, merged
#   by `report merge`. Prints, per run, the achieved rate's error against RATE and p99; then
#   medians and the sharded/single p99 ratio.
# Every figure is printed with the 1-minute load average beside it (shared machine).
#
# Installs nginx with apt-get if missing. Honors CARGO_TARGET_DIR and SKIP_BUILD=1.
# Environment: SHARDS (100), STEPS (60), REPEATS (5 merge / 3 rate), RATE (20000), DUR (10s).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
MODE="${1:-all}"
SHARDS="${SHARDS:-100}"
STEPS="${STEPS:-60}"
RATE="${RATE:-20000}"
DUR="${DUR:-10s}"

# SKIP_BUILD=1: the binaries already built (./run bench quiet builds the workspace first; a
# `-p scalpel` build unifies features apart from `--workspace` and recompiles for minutes).
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    (cd "$ROOT" && cargo build --release -q -p scalpel)
    [ "$MODE" = rate ] || (cd "$ROOT" && cargo build --release -q -p scalpel-report --example shard_files)
fi
SCALPEL="$TARGET_DIR/release/scalpel"
WORK="$(mktemp -d)"
NGINX_PID=""
cleanup() {
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=scripts/lib/bench-basics.sh
source "$ROOT/scripts/lib/bench-basics.sh"   # load1, machine_line, free_port
# shellcheck source=scripts/lib/nginx-hello.sh
source "$ROOT/scripts/lib/nginx-hello.sh"    # nginx_hello_start: sets PORT, NGINX_PID
# shellcheck source=scripts/lib/stats.sh
source "$ROOT/scripts/lib/stats.sh"          # stats: medians, min–max, ratios
machine_line

bench_merge() {
    local repeats="${REPEATS:-5}"
    "$TARGET_DIR/release/examples/shard_files" "$WORK/set" "$SHARDS" "$STEPS"
    local bytes
    bytes=$(du -sb "$WORK/set" | cut -f1)
    echo "# report merge: $SHARDS shard files × $STEPS steps ($((bytes / 1024 / 1024)) MiB), $repeats runs"
    local times=()
    for i in $(seq "$repeats"); do
        local l t0 t1 code
        l=$(load1)
        t0=$(date +%s.%N)
        code=0
        "$SCALPEL" report merge "$WORK"/set/shard-*.json -o "$WORK/merged.json" 2>/dev/null || code=$?
        t1=$(date +%s.%N)
        # Exit 1: the simulated ramp breaks its SLO, as a real one would.
        [ "$code" -le 1 ] || { echo "merge failed ($code)" >&2; exit 1; }
        local s
        s=$(stats diff -d 3 "$t1" "$t0")
        times+=("$s")
        echo "run $i: ${s} s (load $l)"
    done
    echo "merge: median (min–max) $(stats summary -d 3 "${times[*]}") s (target < 2 s)"
    echo "peak RSS of one merge: $( { /usr/bin/time -f %M "$SCALPEL" report merge "$WORK"/set/shard-*.json -o "$WORK/merged.json" 2>&1 >/dev/null || true; } | tail -1) KiB"
}

start_nginx() {
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || {
        echo "installing nginx" >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx) >&2
    }
    nginx_hello_start "$WORK"
}

# Error of the achieved rate against RATE in %, and p99 in ms, of a result file.
figures() {
    python3 - "$1" "$RATE" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["targets"][0]["steps"][0]
rate = float(sys.argv[2])
err = (s["achieved_rps"] - rate) / rate * 100
print(f'{err:+.2f} {s["latency_ms"]["p99"]:.3f} {s["late"]} {s["not_sent"]}')
EOF
}

bench_rate() {
    local repeats="${REPEATS:-3}"
    start_nginx
    local url="http://127.0.0.1:$PORT/"
    echo "# rate: nginx 1 worker; --rate $RATE -d $DUR; single --threads 2 vs 2 shards --threads 1 each; $repeats each, alternating"
    echo "run     kind     error%   p99_ms   late  not_sent  load"
    : >"$WORK/single.txt"
    : >"$WORK/sharded.txt"
    for i in $(seq "$repeats"); do
        local order=(single sharded)
        [ $((i % 2)) -eq 0 ] && order=(sharded single)
        for kind in "${order[@]}"; do
            local l
            l=$(load1)
            if [ "$kind" = single ]; then
                "$SCALPEL" load --rate "$RATE" -d "$DUR" --threads 2 --no-progress \
                    --json "$WORK/single.json" "$url" >/dev/null 2>&1
                f=$(figures "$WORK/single.json")
                echo "$f" >>"$WORK/single.txt"
            else
                local at
                at=$(python3 -c 'import time; print(f"{time.time() + 3:.3f}")')
                local shard_pids=()
                for s in 1 2; do
                    "$SCALPEL" load --shard "$s/2" --start-at "$at" --rate "$RATE" -d "$DUR" \
                        --threads 1 --no-progress --json "$WORK/shard-$s.json" "$url" \
                        >/dev/null 2>&1 &
                    shard_pids+=($!)
                done
                # The shards only: a bare `wait` would wait for nginx too, forever.
                wait "${shard_pids[@]}" || true
                "$SCALPEL" report merge "$WORK/shard-1.json" "$WORK/shard-2.json" \
                    -o "$WORK/sharded.json" 2>/dev/null
                f=$(figures "$WORK/sharded.json")
                echo "$f" >>"$WORK/sharded.txt"
            fi
            read -r err p99 late ns <<<"$f"
            printf '%-7s %-8s %7s %8s %6s %9s  %s\n' "$i" "$kind" "$err" "$p99" "$late" "$ns" "$l"
        done
    done
    # Rows of $WORK/KIND.txt: rate error %, p99 ms, late, not sent (figures above).
    local kind errs=() p99s=()
    for kind in single sharded; do
        errs+=("$(cut -d' ' -f1 "$WORK/$kind.txt")"); p99s+=("$(cut -d' ' -f2 "$WORK/$kind.txt")")
        printf '%-8s rate error median (min–max) %s%%, p99 median (min–max) %s ms\n' "$kind:" \
            "$(stats summary -s -d 2 "${errs[-1]}")" "$(stats summary -d 3 "${p99s[-1]}")"
    done
    echo "p99 sharded/single: $(stats ratio -d 3 "${p99s[1]}" "${p99s[0]}") (histogram precision 0.1%; run-to-run spread above)"
}

case "$MODE" in
    merge) bench_merge ;;
    rate) bench_rate ;;
    all) bench_merge; bench_rate ;;
    *) echo "bench-shards: merge | rate | (nothing for both)" >&2; exit 2 ;;
esac
