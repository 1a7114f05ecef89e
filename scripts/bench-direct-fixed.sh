#!/usr/bin/env bash
# Issue 14: CPU per request of `scalpel serve` direct mode vs pm2 cluster at a FIXED open-model
# rate, below saturation (bench-serve.sh's direct scenario measures at wrk's saturation, where
# the CPU split between generator and workers decides the figure). Two Node hello workers each
# (examples/serve/app.js); the generator (`scalpel load --rate`) pinned to cpu 0.
#
# REPEATS pairs of runs, the order alternating (direct first in odd pairs, pm2 first in even
# ones: a drift of the machine falls on both); each run starts its setup afresh, warms it for
# WARM s at the rate (not counted), then measures DUR s. CPU = utime+stime of every process of
# the setup (serve and its workers; pm2's God daemon and its workers) ÷ requests answered (from
# `scalpel load --json`), split into the supervisor's own share and the workers'. Each pair gives
# a ratio direct/pm2; the result is the median ratio with a distribution-free ~95% confidence
# interval (order statistics of the pairs): "≤ shown" only when the whole interval is ≤ 1.00,
# "> shown" when it is all above, else a tie. Also printed per run: how the 64 connections were
# split between the two workers (a shared socket is not round robin; pm2's primary is).
# The generator keeps to CONNS connections (--max-in-flight): the same work for both.
# Needs the release build and pm2 (scripts/setup.sh). Quiet machine only.
#
#   ./run bench direct-fixed                       # RATE=10000 DUR=8 WARM=2 REPEATS=9 (~5 min)
#   RATE=5000 REPEATS=5 ./run bench direct-fixed
#   SERVE=/other/build/scalpel ./run bench direct-fixed   # another build's serve (same generator)
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
S=$TGT/release/scalpel; SV=${SERVE:-$S}; PM2=$ROOT/scripts/demo/pm2/node_modules/.bin/pm2
export PM2_HOME=$TGT/tmp/pm2-direct-fixed; mkdir -p "$PM2_HOME"
RATE=${RATE:-10000} DUR=${DUR:-8} WARM=${WARM:-2} REPEATS=${REPEATS:-9} CONNS=${CONNS:-64}
PORT=18999 APP=$ROOT/examples/serve/app.js
[ -x "$S" ] || { echo "bench-direct-fixed: $S missing (./run build)" >&2; exit 1; }
[ -x "$PM2" ] || (cd "$ROOT/scripts/demo/pm2" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
RUNS=$PM2_HOME/runs.tsv; : >"$RUNS"
echo "rate $RATE req/s, $DUR s measured after $WARM s of warm-up, $REPEATS alternating pairs, $(nproc) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg)"
ticks() { awk '{print $14+$15}' /proc/"$1"/stat 2>/dev/null || echo 0; }
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
wait_up() { for _ in $(seq 100); do curl -sf -m 1 "http://127.0.0.1:$PORT/" >/dev/null && return 0; sleep 0.1; done; echo "not up" >&2; return 1; }
load() { # seconds json-file
  # --max-in-flight = the connections: a setup that falls behind gets no extra connections
  # (the open model would open up to 1,000, and the deeper batches per event-loop turn would
  # make its CPU per request look lower at 100x the latency); its shortfall shows as
  # requests not sent, and the achieved rate is printed.
  taskset -c 0 "$S" load --rate "$RATE" -d "${1}s" --threads 1 -c "$CONNS" --max-in-flight "$CONNS" \
    --json "$2" "http://127.0.0.1:$PORT/" >/dev/null 2>&1
}
conns() { # how many established connections each pid holds on the port: "pid:n pid:n"
  ss -tnpH state established "( sport = :$PORT )" 2>/dev/null | grep -o 'pid=[0-9]*' | sort | uniq -c | awk '{sub("pid=","",$2); printf "%s:%s ", $2, $1}'
}
cat >"$PM2_HOME/direct-fixed.toml" <<T
[server]
listen = "127.0.0.1:18997"
admin = "127.0.0.1:18996"
[[app]]
name = "hello"
command = ["node", "$APP"]
workers = 2
port_base = 18930
mode = "direct"
listen = "127.0.0.1:$PORT"
T
# measure SETUP PAIR SUPERVISOR-PID WORKER-PIDS...: warm-up, then one counted run; a row of RUNS.
measure() {
  local setup=$1 pair=$2 sup=$3; shift 3
  local w t0 t1 sup0 sup1 split json=$PM2_HOME/load.json
  load "$WARM" "$json"
  sup0=$(ticks "$sup"); t0=0; for w in "$@"; do t0=$((t0 + $(ticks "$w"))); done
  load "$DUR" "$json" & local lp=$!
  sleep $(( DUR / 2 )); split=$(conns)
  wait $lp
  sup1=$(ticks "$sup"); t1=0; for w in "$@"; do t1=$((t1 + $(ticks "$w"))); done
  # A process that left during the run (pm2 or serve replaced a worker) took its CPU time
  # with it: such a run would look cheap, so it is reported and not counted.
  for w in "$sup" "$@"; do
    [ -r /proc/"$w"/stat ] || { echo "$setup pair $pair: NOT COUNTED: process $w of the setup exited during the run"; return 0; }
  done
  python3 - "$json" "$setup" "$pair" $((sup1 - sup0)) $((t1 - t0)) "$split" "$RUNS" <<'PY'
import json, sys, os
path, setup, pair, sup, work, split, runs = sys.argv[1:8]
st = json.load(open(path))["targets"][0]["steps"][0]
n, errors = st["answered"], st["errors"] + st["failed"]
not_sent = st.get("not_sent", 0) + st.get("late", 0)
hz = os.sysconf("SC_CLK_TCK")
us = lambda t: int(t) / hz * 1e6 / max(n, 1)
total = us(int(sup) + int(work))
with open(runs, "a") as f:
    f.write(f"{setup}\t{pair}\t{total:.2f}\t{us(sup):.2f}\t{us(work):.2f}\t{n}\t{errors}\n")
print(f"{setup:6} pair {pair}: {total:5.1f} us/req (supervisor {us(sup):4.1f}, workers {us(work):5.1f}) | "
      f"{n} answered, {errors} errors, {not_sent} late or not sent, achieved {st['achieved_rps']:.0f} req/s, p99 {st['latency_ms']['p99']} ms | "
      f"connections per pid: {split}")
PY
}
run_direct() {
  "$SV" serve --config "$PM2_HOME/direct-fixed.toml" >"$PM2_HOME/direct-fixed.log" 2>&1 & local sp=$!
  wait_up
  for _ in $(seq 100); do [ "$(pgrep -c -P "$sp")" = 2 ] && break; sleep 0.1; done; sleep 0.5
  # serve's own process, and every process under it (the workers and anything they start).
  measure direct "$1" "$sp" $(tree "$sp" | tail -n +2)
  kill -TERM "$sp"; wait "$sp" 2>/dev/null
}
run_pm2() {
  PORT=$PORT "$PM2" start "$APP" -i 2 --name hello >/dev/null
  wait_up && sleep 0.5
  # Both workers running (`pm2 pid` says 0 for one still starting: its CPU would be missed).
  for _ in $(seq 100); do
    [ "$("$PM2" pid hello | awk '$1 > 0' | wc -l)" = 2 ] && break; sleep 0.1
  done
  # The God daemon of this PM2_HOME (the cluster primary: it accepts and hands connections
  # over) and its workers.
  measure pm2 "$1" "$(cat "$PM2_HOME/pm2.pid")" $("$PM2" pid hello | xargs)
  "$PM2" kill >/dev/null
}
for r in $(seq "$REPEATS"); do
  if [ $((r % 2)) = 1 ]; then run_direct "$r"; run_pm2 "$r"; else run_pm2 "$r"; run_direct "$r"; fi
done
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$RUNS" "$ROOT/scripts/lib" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[2])
from paired import describe, interval  # the one paired-interval helper (bench-tls.sh uses it too)
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {}
for setup, pair, total, sup, work, n, err in rows:
    by.setdefault(setup, {})[int(pair)] = (float(total), float(sup), float(work), int(err))
def med(xs): return statistics.median(xs)
print()
print("| setup | CPU µs/request, median (min–max) | supervisor's own | workers | errors |")
print("|---|---|---|---|---|")
for s in ("direct", "pm2"):
    v = list(by.get(s, {}).values())
    col = lambda i: [x[i] for x in v]
    print(f"| {s} | {med(col(0)):.1f} ({min(col(0)):.1f}–{max(col(0)):.1f}) | {med(col(1)):.2f} | "
          f"{med(col(2)):.1f} | {sum(col(3))} |")
pairs = sorted(set(by.get("direct", {})) & set(by.get("pm2", {})))
dropped = len(set(by.get("direct", {})) | set(by.get("pm2", {}))) - len(pairs)
if dropped:
    print(f"\n{dropped} pair(s) left out: one of its runs was not counted")
r = sorted(by["direct"][p][0] / by["pm2"][p][0] for p in pairs)
_, lo, hi, cover = interval(r)
n = len(r)
verdict = "le-shown" if hi <= 1.0 else ("gt-shown" if lo > 1.0 else "tie")
words = {"le-shown": "direct ≤ pm2 shown (the whole interval ≤ 1.00)",
         "gt-shown": "direct > pm2 shown (the whole interval > 1.00)",
         "tie": "a tie: the interval holds 1.00, neither ≤ nor > is shown"}[verdict]
print()
what = describe(cover)
print(f"paired direct/pm2 over {n} pairs: median {med(r):.3f}x, {what} "
      f"{lo:.3f}–{hi:.3f}x (all pairs {r[0]:.3f}–{r[-1]:.3f}x): {words}")
print(f"RESULT direct-fixed ratio={med(r):.3f} lo={lo:.3f} hi={hi:.3f} min={r[0]:.3f} max={r[-1]:.3f} "
      f"pairs={n} verdict={verdict} direct_us={med([by['direct'][p][0] for p in pairs]):.2f} "
      f"pm2_us={med([by['pm2'][p][0] for p in pairs]):.2f}")
PY
