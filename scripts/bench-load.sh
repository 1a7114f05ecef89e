#!/usr/bin/env bash
# Benchmark of `scalpel load` against wrk on nginx (loopback), one command:
#
#   scripts/bench-load.sh                # closed + open, both layouts (~10 min)
#   scripts/bench-load.sh --long         # the same, then the 10-minute generator-memory run
#   scripts/bench-load.sh --memory-only  # only the 10-minute generator-memory run
#
# Two CPU layouts, each measured on its own:
#   pinned:   nginx (1 worker) on cpu 1; wrk -t1 / scalpel --threads 1 on cpu 0 (taskset)
#   unpinned: nginx (1 worker), wrk -t2 / scalpel --threads 2, the scheduler places them
# In each layout:
# 1. closed model: wrk and scalpel alternately (wrk, scalpel, scalpel, wrk, …), same
#    connections and threads, REPEATS times each; medians, min–max and the ratio;
# 2. open model: achieved rate vs asked at 20/40/60/80% of scalpel's closed median,
#    OPEN_REPEATS runs each; median error and min–max, late and not_sent;
# 3. hyper's client::conn::http1 vs the lean client (crates/load/examples/hyper_vs_lean.rs),
#    same closed loop, alternately, REPEATS times each.
# Every figure is printed with the 1-minute load average just before it (shared machine).
#
# Installs wrk and nginx with apt-get if missing. Honors CARGO_TARGET_DIR.
# Environment: CONNS (50), DUR (10s), REPEATS (5), OPEN_REPEATS (3), MAX_IN_FLIGHT (open
# model, 1000 = the CLI default), LAYOUTS ("pinned
# unpinned"), MEM_RATE (memory run's rate, default half the last closed median or 25000).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
CONNS="${CONNS:-50}"
DUR="${DUR:-10s}"
REPEATS="${REPEATS:-5}"
OPEN_REPEATS="${OPEN_REPEATS:-3}"
MAX_IN_FLIGHT="${MAX_IN_FLIGHT:-1000}"
LAYOUTS="${LAYOUTS:-pinned unpinned}"
MODE="${1:-short}"

need() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]; }
if ! need wrk || ! need nginx; then
  echo "installing wrk and nginx" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx) >&2
fi

(cd "$ROOT" && cargo build --release -q -p scalpel && cargo build --release -q -p scalpel-load --example hyper_vs_lean)
SCALPEL="$TARGET_DIR/release/scalpel"
HYPER_VS_LEAN="$TARGET_DIR/release/examples/hyper_vs_lean"

WORK="$(mktemp -d)"
# shellcheck source=scripts/lib/bench-basics.sh
source "$ROOT/scripts/lib/bench-basics.sh"   # load1, machine_line, free_port
# shellcheck source=scripts/lib/nginx-hello.sh
source "$ROOT/scripts/lib/nginx-hello.sh"    # nginx_hello_start: sets PORT, NGINX_PID
# shellcheck source=scripts/lib/stats.sh
source "$ROOT/scripts/lib/stats.sh"          # stats: medians, min–max, ratios, result fields
# shellcheck source=scripts/lib/procstat.sh
source "$ROOT/scripts/lib/procstat.sh"       # rss_kib: scalpel procstat
nginx_hello_start "$WORK"
trap 'kill $NGINX_PID 2>/dev/null; rm -rf "$WORK"' EXIT
NGINX_WORKER="$(pgrep -P "$NGINX_PID" | head -1)"
URL="http://127.0.0.1:$PORT/"

machine_line
echo "# nginx worker_processes 1, body 14 bytes; -c $CONNS, $DUR per run"

# PIN: command prefix for the generator; THREADS: generator threads.
layout() {
  case "$1" in
    pinned) taskset -p -c 1 "$NGINX_WORKER" >/dev/null; PIN=(taskset -c 0); THREADS=1 ;;
    unpinned) taskset -p -c "0-$(($(nproc) - 1))" "$NGINX_WORKER" >/dev/null; PIN=(); THREADS=2 ;;
  esac
}

run_wrk() {
  local la; la=$(load1)
  local r; r=$("${PIN[@]}" wrk -c "$CONNS" -t "$THREADS" -d "$DUR" "$URL" | awk '/Requests\/sec/ {print $2}')
  echo "$r" >>"$WORK/wrk.txt"; echo "    wrk      $r req/s  (load $la)"
}
run_scalpel() {
  local la; la=$(load1)
  "${PIN[@]}" "$SCALPEL" load --no-progress -c "$CONNS" --threads "$THREADS" -d "$DUR" --json "$WORK/s.json" "$URL" >/dev/null
  local r; r=$(stats step "$WORK/s.json" "round(s['achieved_rps'])")
  echo "$r" >>"$WORK/scalpel.txt"; echo "    scalpel  $r req/s  (load $la)"
}

closed() {
  : >"$WORK/wrk.txt"; : >"$WORK/scalpel.txt"
  echo "## [$L] closed model, -c $CONNS, $THREADS thread(s), req/s, $REPEATS runs each, alternating"
  for i in $(seq "$REPEATS"); do
    if (( i % 2 )); then run_wrk; run_scalpel; else run_scalpel; run_wrk; fi
  done
  W_MED=$(stats median -d 0 <"$WORK/wrk.txt"); S_MED=$(stats median -d 0 <"$WORK/scalpel.txt")
  echo "[$L] wrk      median $W_MED  (min–max $(stats minmax -d 0 <"$WORK/wrk.txt"))"
  echo "[$L] scalpel  median $S_MED  (min–max $(stats minmax -d 0 <"$WORK/scalpel.txt"))"
  echo "[$L] ratio scalpel/wrk (medians): $(stats ratio -d 3 "$S_MED" "$W_MED")"
}

open_model() {
  echo "## [$L] open model (--max-in-flight $MAX_IN_FLIGHT): asked vs achieved at % of scalpel's closed median ($S_MED req/s), $OPEN_REPEATS runs each"
  for pct in 20 40 60 80; do
    RATE=$(stats scale -d 0 "${pct}e-2" "$S_MED")
    : >"$WORK/err.txt"
    for _ in $(seq "$OPEN_REPEATS"); do
      local la; la=$(load1)
      "${PIN[@]}" "$SCALPEL" load --no-progress --rate "$RATE" -c "$CONNS" --max-in-flight "$MAX_IN_FLIGHT" --threads "$THREADS" -d "$DUR" --json "$WORK/o.json" "$URL" >/dev/null
      python3 - "$WORK/o.json" "$RATE" "$la" "$WORK/err.txt" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))['targets'][0]['steps'][0]
rate = float(sys.argv[2])
err = 100 * (s['achieved_rps'] - rate) / rate
open(sys.argv[4], 'a').write(f"{err}\n")
print(f"    asked {rate:.0f}  achieved {s['achieved_rps']:.1f}  ({err:+.2f}%)  requests {s['requests']}  "
      f"late {s['late']}  not_sent {s['not_sent']}  p50 {s['latency_ms']['p50']} ms  "
      f"p99 {s['latency_ms']['p99']} ms  (load {sys.argv[3]})")
PY
    done
    echo "[$L] ${pct}%: asked $RATE, error median $(stats median -s -d 2 <"$WORK/err.txt")% (min–max $(stats minmax -s -d 2 <"$WORK/err.txt")%)"
  done
}

hyper_vs_lean() {
  : >"$WORK/lean.txt"; : >"$WORK/hyper.txt"
  echo "## [$L] lean client vs hyper client::conn::http1, closed, -c $CONNS, $THREADS thread(s), $REPEATS runs each, alternating"
  for i in $(seq "$REPEATS"); do
    for client in $( (( i % 2 )) && echo "lean hyper" || echo "hyper lean"); do
      local la; la=$(load1)
      local r; r=$("${PIN[@]}" "$HYPER_VS_LEAN" "$client" "$URL" "$CONNS" "$THREADS" "$DUR")
      echo "$r" >>"$WORK/$client.txt"; echo "    $client  $r req/s  (load $la)"
    done
  done
  local l h; l=$(stats median -d 0 <"$WORK/lean.txt"); h=$(stats median -d 0 <"$WORK/hyper.txt")
  echo "[$L] lean   median $l  (min–max $(stats minmax -d 0 <"$WORK/lean.txt"))"
  echo "[$L] hyper  median $h  (min–max $(stats minmax -d 0 <"$WORK/hyper.txt"))"
  echo "[$L] ratio hyper/lean (medians): $(stats ratio -d 3 "$h" "$l")"
}

S_MED=""
if [[ "$MODE" != "--memory-only" ]]; then
  for L in $LAYOUTS; do
    layout "$L"
    echo
    closed
    open_model
    hyper_vs_lean
  done
fi

if [[ "$MODE" == "--long" || "$MODE" == "--memory-only" ]]; then
  layout unpinned
  MEM_RATE="${MEM_RATE:-$(if [[ -n "$S_MED" ]]; then stats scale -d 0 0.5 "$S_MED"; else echo 25000; fi)}"
  echo
  echo "## generator memory: scalpel --rate $MEM_RATE --threads 2 for 600 s, RSS every 30 s (MiB) (load $(load1))"
  "$SCALPEL" load --no-progress --rate "$MEM_RATE" -c "$CONNS" --threads 2 -d 600s --json "$WORK/m.json" "$URL" >/dev/null &
  GEN=$!
  SAMPLES=()
  while kill -0 "$GEN" 2>/dev/null; do
    RSS=$(rss_kib "$GEN")
    [[ "$RSS" -gt 0 ]] && SAMPLES+=("$(stats scale -d 1 0.0009765625 "$RSS")") # KiB -> MiB
    sleep 30
  done
  wait "$GEN" || true
  echo "rss: ${SAMPLES[*]}"
  stats step "$WORK/m.json" "f\"memory run: requests {s['requests']} achieved {round(s['achieved_rps'], 1)} late {s['late']} not_sent {s['not_sent']} p99 ms {s['latency_ms']['p99']}\""
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
