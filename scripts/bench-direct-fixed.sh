#!/usr/bin/env bash
# Issue 14: CPU per request of `scalpel serve` direct mode vs pm2 cluster at a FIXED open-model
# rate, below saturation (bench-serve.sh's direct scenario measures at wrk's saturation, where
# the CPU split between generator and workers decides the figure). Two Node hello workers each
# (examples/serve/app.js); the generator (`scalpel load --rate`) pinned to cpu 0.
#
# REPEATS rounds of runs, the order rotating (direct first in odd rounds, pm2 first in even
# ones: a drift of the machine falls on both); each run starts its setup afresh, warms it for
# WARM s at the rate (not counted), then measures DUR s. Per request answered (from
# `scalpel load --json`), for the setup's whole process set (serve and its workers; pm2's God
# daemon and its workers), the supervisor's share apart:
#   - CPU time, utime+stime from /proc (the headline figure: what the target is about);
#   - perf stat over the same window, one `perf stat -p` per process: task-clock, context
#     switches, and instructions and cycles where the machine has hardware counters (a VM
#     without a PMU has none: the script says so and the low-noise figure is task-clock);
#   - per worker: its connections (ss, mid-run), its share of the requests (its bytes read,
#     /proc/PID/io rchar, over all the workers'), its time waiting for a CPU (schedstat
#     run_delay), and with SYSCALLS=1 its system calls and epoll waits per request (requests
#     per event-loop wake-up; tracepoints, which cost a little per system call).
# The generator's own CPU is measured too and printed, never counted in a setup.
# Each round gives a ratio direct/pm2 per figure; the result is the median ratio with a
# distribution-free ~95% confidence interval (order statistics of the rounds). The verdict
# fails closed: "≤ shown" only when the whole interval of the CPU-time ratio AND of the
# low-noise one (instructions, or task-clock without a PMU) are ≤ 1.00; "> shown" when the
# CPU-time interval is all above; else a tie.
#
# Sessions: pm2's God daemon puts itself in its own session; with the kernel's autogroup
# scheduling (kernel.sched_autogroup_enabled=1, the default of most distributions) a session is
# one scheduling group, given an equal share of a busy machine against the generator's. serve is
# started the way a service manager starts it (setsid: its own session, as systemd and pm2 do),
# so both setups are scheduled alike. SETUPS may add `direct-nosid`: serve in the generator's
# session, as this script ran before (docs/serve.md, "CPU per request against pm2").
#
#   ./run bench direct-fixed                       # RATE=10000 DUR=8 WARM=2 REPEATS=9 (~5 min)
#   RATE=5000 REPEATS=5 ./run bench direct-fixed
#   LOADGEN=wrk SYSCALLS=1 REPEATS=5 ./run bench direct-fixed   # at saturation: wrk -t2 -cCONNS
#   SETUPS="direct direct-nosid pm2" LOADGEN=wrk ./run bench direct-fixed
#   SERVE=/other/build/scalpel ./run bench direct-fixed   # another build's serve (same generator)
# Needs the release build, perf, and pm2 (scripts/setup.sh). Quiet machine only.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TGT=${CARGO_TARGET_DIR:-$ROOT/target}
S=$TGT/release/scalpel; SV=${SERVE:-$S}; PM2=$ROOT/scripts/demo/pm2/node_modules/.bin/pm2
export PM2_HOME=$TGT/tmp/pm2-direct-fixed; mkdir -p "$PM2_HOME"
export RATE=${RATE:-10000}; DUR=${DUR:-8} WARM=${WARM:-2} REPEATS=${REPEATS:-9} CONNS=${CONNS:-64}
LOADGEN=${LOADGEN:-rate} SYSCALLS=${SYSCALLS:-0}
read -r -a SETUPS <<<"${SETUPS:-direct pm2}"
PORT=18999 APP=$ROOT/examples/serve/app.js
[ -x "$S" ] || { echo "bench-direct-fixed: $S missing (./run build)" >&2; exit 1; }
[ -x "$PM2" ] || (cd "$ROOT/scripts/demo/pm2" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
case " ${SETUPS[*]} " in *" pm2 "*) ;; *) echo "bench-direct-fixed: SETUPS needs pm2 (the reference)" >&2; exit 2 ;; esac
for s in "${SETUPS[@]}"; do
  case "$s" in direct|direct-nosid|pm2) ;; *) echo "bench-direct-fixed: unknown setup '$s' (direct direct-nosid pm2)" >&2; exit 2 ;; esac
done
case "$LOADGEN" in rate|wrk) ;; *) echo "bench-direct-fixed: LOADGEN is rate or wrk" >&2; exit 2 ;; esac
RUNS=$PM2_HOME/runs.tsv; : >"$RUNS"
# A setup left over from an interrupted run would answer in place of the one started here.
if ss -ltnH "( sport = :$PORT or sport = :18997 or sport = :18996 )" | grep -q .; then
  echo "bench-direct-fixed: a port of the bench (18996, 18997, $PORT) is in use: a setup left running?" >&2; exit 1
fi
# Whatever is running when the script stops (an error, ^C) is stopped with it.
SETUP_PID=
cleanup() { [ -n "$SETUP_PID" ] && kill -TERM "$SETUP_PID" 2>/dev/null; "$PM2" kill >/dev/null 2>&1; }
trap cleanup EXIT
# perf: task-clock and context switches always; instructions and cycles only where the
# machine counts them (a VM without a virtual PMU answers <not supported>).
EVENTS=task-clock,context-switches PERF=1 PMU=0
if ! perf stat -x, -e task-clock -- true >/dev/null 2>&1; then
  PERF=0; echo "perf stat does not run here: only the /proc CPU time is measured"
elif perf stat -x, -e instructions -- true 2>&1 >/dev/null | grep -q '^[0-9]'; then
  PMU=1; EVENTS+=,instructions,cycles
else
  echo "no hardware counters on this machine (perf: instructions <not supported>): the low-noise figure is perf's task-clock"
fi
[ "$SYSCALLS" = 1 ] && EVENTS+=,raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait
load_desc="scalpel load --rate $RATE on cpu 0"; [ "$LOADGEN" = wrk ] && load_desc="wrk -t2 -c$CONNS (saturation)"
echo "$load_desc, $DUR s measured after $WARM s of warm-up, $REPEATS rounds of ${SETUPS[*]} (order rotating), $(nproc) cpus, autogroup $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo -), perf events $EVENTS, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck source=scripts/lib/procstat.sh
source "$ROOT/scripts/lib/procstat.sh"     # cpu_ticks_own: scalpel procstat, names with spaces too
ticks() { cpu_ticks_own "$1"; }            # the process alone: supervisor and workers apart
rchar() { awk '/^rchar/ {print $2}' /proc/"$1"/io 2>/dev/null || echo 0; }
# Nanoseconds the process's threads waited on a run queue (schedstat's second field).
rundelay() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $2} END {printf "%.0f\n", s}'; }
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
wait_up() { for _ in $(seq 100); do curl -sf -m 1 "http://127.0.0.1:$PORT/" >/dev/null && return 0; sleep 0.1; done; echo "not up" >&2; return 1; }
# gen SECONDS OUT-FILE PERF-FILE: the generator in the background (GEN = its pid); with a
# PERF-FILE, under `perf stat` (all its threads, counted apart from the setups).
gen() {
  local wrap=()
  [ -n "$3" ] && [ "$PERF" = 1 ] && wrap=(perf stat -x, -e task-clock,context-switches -o "$3" --)
  if [ "$LOADGEN" = wrk ]; then
    "${wrap[@]}" wrk -t2 -c"$CONNS" -d"${1}s" "http://127.0.0.1:$PORT/" >"$2" 2>&1 &
  else
    # --max-in-flight = the connections: a setup that falls behind gets no extra connections
    # (the open model would open up to 1,000, and the deeper batches per event-loop turn would
    # make its CPU per request look lower at 100x the latency); its shortfall shows as
    # requests not sent, and the achieved rate is printed.
    "${wrap[@]}" taskset -c 0 "$S" load --rate "$RATE" -d "${1}s" --threads 1 -c "$CONNS" --max-in-flight "$CONNS" \
      --json "$2" "http://127.0.0.1:$PORT/" >/dev/null 2>&1 &
  fi
  GEN=$!
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
# measure SETUP ROUND SUPERVISOR-PID WORKER-PIDS...: warm-up, then one counted run; a row of RUNS.
measure() {
  local setup=$1 round=$2 sup=$3; shift 3
  local p out=$PM2_HOME/load.out procs=$PM2_HOME/procs.tsv split perfs=()
  gen "$WARM" "$out" ""; wait "$GEN"
  declare -A T0 R0 D0
  for p in "$sup" "$@"; do
    T0[$p]=$(ticks "$p") R0[$p]=$(rchar "$p") D0[$p]=$(rundelay "$p"); rm -f "$PM2_HOME/perf.$p"
    if [ "$PERF" = 1 ]; then perf stat -x, -e "$EVENTS" -p "$p" -o "$PM2_HOME/perf.$p" 2>/dev/null & perfs+=($!); fi
  done
  sleep 0.1 # perf attached
  gen "$DUR" "$out" "$PM2_HOME/perf.gen"; local lp=$GEN
  sleep $(( DUR / 2 )); split=$(conns)
  wait "$lp"
  [ ${#perfs[@]} = 0 ] || { kill -INT "${perfs[@]}"; wait "${perfs[@]}" 2>/dev/null; }
  # A process that left during the run (pm2 or serve replaced a worker) took its CPU time
  # with it: such a run would look cheap, so it is reported and not counted.
  for p in "$sup" "$@"; do
    [ -r /proc/"$p"/stat ] || { echo "$setup round $round: NOT COUNTED: process $p of the setup exited during the run"; return 0; }
  done
  : >"$procs"
  for p in "$sup" "$@"; do
    local role=worker; [ "$p" = "$sup" ] && role=supervisor
    local c; c=$(tr ' ' '\n' <<<"$split" | awk -F: -v p="$p" '$1 == p {print $2}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$role" "$p" $(( $(ticks "$p") - ${T0[$p]} )) $(( $(rchar "$p") - ${R0[$p]} )) \
      $(( $(rundelay "$p") - ${D0[$p]} )) "${c:-0}" >>"$procs"
  done
  python3 - "$out" "$LOADGEN" "$setup" "$round" "$procs" "$PM2_HOME" "$RUNS" <<'PY'
import json, os, re, sys
out, loadgen, setup, rnd, procs, home, runs = sys.argv[1:8]
if loadgen == "wrk":
    t = open(out).read()
    n = int(re.search(r"(\d+) requests in", t).group(1))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    non2xx = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
    sock = sum(int(x) for x in m.groups()) if m else 0
    n, errors = n - non2xx, non2xx + sock
    rps = float(re.search(r"Requests/sec:\s*([\d.]+)", t).group(1))
    extra = f"wrk {rps:.0f} req/s"
else:
    st = json.load(open(out))["targets"][0]["steps"][0]
    n, errors = st["answered"], st["errors"] + st["failed"]
    not_sent = st.get("not_sent", 0) + st.get("late", 0)
    extra = f"{not_sent} late or not sent, achieved {st['achieved_rps']:.0f} req/s, p99 {st['latency_ms']['p99']} ms"
    # Counted all the same (dropping it would drop evidence against the setup that fell behind).
    if st["achieved_rps"] < 0.95 * float(os.environ.get("RATE", "0") or 0):
        extra += " — THE RATE WAS NOT DELIVERED (the machine or the setup fell behind)"
n1 = max(n, 1)
hz = os.sysconf("SC_CLK_TCK")
def perf(path):
    """perf stat -x, output: {event: count} (absent or <not counted>: 0)."""
    ev = {}
    if os.path.exists(path):
        for line in open(path):
            f = line.strip().split(",")
            if len(f) > 2 and not line.startswith("#"):
                try:
                    ev[f[2]] = float(f[0])
                except ValueError:
                    ev[f[2]] = 0.0
    return ev
rows = []
for line in open(procs):
    role, pid, ticks, rch, delay, conns = line.rstrip("\n").split("\t")
    rows.append(dict(role=role, pid=pid, ticks=int(ticks), rchar=int(rch), delay=int(delay), conns=int(conns),
                     ev=perf(os.path.join(home, f"perf.{pid}"))))
gen = perf(os.path.join(home, "perf.gen"))
def tot(rs, key):
    return sum(r["ev"].get(key, 0.0) for r in rs)
sup = [r for r in rows if r["role"] == "supervisor"]
wk = [r for r in rows if r["role"] == "worker"]
us = lambda t: t / hz * 1e6 / n1
cpu_sup, cpu_work = us(sum(r["ticks"] for r in sup)), us(sum(r["ticks"] for r in wk))
tc = lambda rs: tot(rs, "task-clock") * 1e3 / n1  # msec -> µs per request
instr = lambda rs: tot(rs, "instructions") / n1
cyc = lambda rs: tot(rs, "cycles") / n1
has_instr = any("instructions" in r["ev"] and r["ev"]["instructions"] > 0 for r in rows)
total_rchar = sum(r["rchar"] for r in wk) or 1
# RUNS: setup round cpu sup work n errors tc tc_sup tc_work instr instr_sup cycles gen_tc
# ctxsw/req run_delay_us/req syscalls/req req_per_wake
sysc = tot(wk, "raw_syscalls:sys_enter")
wakes = tot(wk, "syscalls:sys_enter_epoll_wait") + tot(wk, "syscalls:sys_enter_epoll_pwait")
fields = [setup, rnd, f"{cpu_sup + cpu_work:.3f}", f"{cpu_sup:.3f}", f"{cpu_work:.3f}", n, errors,
          f"{tc(rows):.3f}", f"{tc(sup):.3f}", f"{tc(wk):.3f}",
          f"{instr(rows):.0f}" if has_instr else "-", f"{instr(sup):.0f}" if has_instr else "-",
          f"{cyc(rows):.0f}" if has_instr else "-", f"{gen.get('task-clock', 0) * 1e3 / n1:.3f}",
          f"{tot(rows, 'context-switches') / n1:.4f}", f"{sum(r['delay'] for r in rows) / 1e3 / n1:.3f}",
          f"{sysc / n1:.3f}" if sysc else "-", f"{n / wakes:.3f}" if wakes else "-"]
with open(runs, "a") as f:
    f.write("\t".join(str(x) for x in fields) + "\n")
ins = f", {instr(rows):,.0f} instructions ({instr(sup):,.0f} supervisor's) and {cyc(rows):,.0f} cycles/req" if has_instr else ""
print(f"{setup:12} round {rnd}: {cpu_sup + cpu_work:5.1f} us/req (supervisor {cpu_sup:4.2f}, workers {cpu_work:5.1f}); "
      f"task-clock {tc(rows):5.1f} (supervisor {tc(sup):4.2f}){ins} | {n} answered, {errors} errors, {extra} | "
      f"generator {gen.get('task-clock', 0) * 1e3 / n1:.1f} us/req (not counted)")
for r in wk:
    share = r["rchar"] / total_rchar
    req = max(share * n, 1)
    e = r["ev"]
    w_wakes = e.get("syscalls:sys_enter_epoll_wait", 0) + e.get("syscalls:sys_enter_epoll_pwait", 0)
    sc = (f", {e.get('raw_syscalls:sys_enter', 0) / req:.2f} syscalls/req, {req / w_wakes:.2f} req per epoll wake"
          if w_wakes else "")
    if share < 0.01:  # an idle worker: per-request figures of its own would be noise
        print(f"    worker {r['pid']}: {r['conns']} connections, {share * 100:4.1f}% of requests, "
              f"task-clock {e.get('task-clock', 0):.1f} ms, {e.get('context-switches', 0):.0f} context switches")
        continue
    print(f"    worker {r['pid']}: {r['conns']} connections, {share * 100:4.1f}% of requests, "
          f"task-clock {e.get('task-clock', 0) * 1e3 / req:5.1f} us/own req, "
          f"{e.get('context-switches', 0) / req:.3f} context switches/req, waited for a cpu {r['delay'] / 1e6:6.1f} ms{sc}")
for r in sup:
    print(f"    supervisor {r['pid']}: task-clock {r['ev'].get('task-clock', 0):.1f} ms, "
          f"{r['ev'].get('context-switches', 0):.0f} context switches")
PY
}
run_direct() { # ROUND SETUP
  # `setsid`: serve in its own session, as a service manager starts it (and as pm2's daemon
  # puts itself); direct-nosid keeps it in this script's session, beside the generator.
  local launch=(setsid); [ "$2" = direct-nosid ] && launch=()
  "${launch[@]}" "$SV" serve --config "$PM2_HOME/direct-fixed.toml" >"$PM2_HOME/direct-fixed.log" 2>&1 & local sp=$!
  SETUP_PID=$sp
  # setsid, not a process-group leader here, execs serve in place: $! must be serve itself.
  sleep 0.1; [ "$(cat /proc/"$sp"/comm 2>/dev/null)" = scalpel ] || { echo "bench-direct-fixed: pid $sp is not serve" >&2; exit 1; }
  wait_up
  for _ in $(seq 100); do [ "$(pgrep -c -P "$sp")" = 2 ] && break; sleep 0.1; done; sleep 0.5
  # serve's own process, and every process under it (the workers and anything they start).
  measure "$2" "$1" "$sp" $(tree "$sp" | tail -n +2)
  kill -TERM "$sp"; wait "$sp" 2>/dev/null; SETUP_PID=
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
n_setups=${#SETUPS[@]}
for r in $(seq "$REPEATS"); do
  for i in $(seq 0 $((n_setups - 1))); do
    s=${SETUPS[$(( (i + r - 1) % n_setups ))]}
    if [ "$s" = pm2 ]; then run_pm2 "$r"; else run_direct "$r" "$s"; fi
  done
done
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$ROOT/scripts/lib" "$RUNS" "$PMU" "$PERF" "${SETUPS[@]}" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[1])
from paired import describe, interval  # the one paired-interval helper (bench-tls.sh uses it too)
path, pmu, perf, *setups = sys.argv[2:]
pmu, perf = pmu == "1", perf == "1"
COLS = ["cpu", "sup", "work", "n", "err", "tc", "tc_sup", "tc_work", "instr", "instr_sup", "cyc", "gen",
        "ctxsw", "delay", "sysc", "rpw"]
by = {}
for line in open(path):
    if not line.strip():
        continue
    f = line.rstrip("\n").split("\t")
    by.setdefault(f[0], {})[int(f[1])] = {k: (None if v == "-" else float(v)) for k, v in zip(COLS, f[2:])}
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def rng(xs):
    xs = [x for x in xs if x is not None]
    return (min(xs), max(xs)) if xs else (None, None)
def fmt(x, d=1):
    return "-" if x is None else f"{x:,.{d}f}"
print()
print("| setup | CPU time µs/request, median (min–max) | supervisor's own | workers | perf task-clock µs/request | "
      "instructions/request | generator µs/request (not counted) | context switches/request | "
      "waited for a cpu, µs/request | requests per epoll wake | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for s in setups:
    v = list(by.get(s, {}).values())
    if not v:
        continue
    col = lambda k: [x[k] for x in v]
    lo, hi = rng(col("cpu"))
    print(f"| {s} | {fmt(med(col('cpu')))} ({fmt(lo)}–{fmt(hi)}) | {fmt(med(col('sup')), 2)} | {fmt(med(col('work')))} | "
          f"{fmt(med(col('tc')))} (supervisor {fmt(med(col('tc_sup')), 2)}) | {fmt(med(col('instr')), 0)} | "
          f"{fmt(med(col('gen')))} | {fmt(med(col('ctxsw')), 3)} | {fmt(med(col('delay')), 2)} | "
          f"{fmt(med(col('rpw')), 2)} | {int(sum(col('err')))} |")

def paired(a, b, key):
    """Median of the per-round ratios a/b and its distribution-free interval."""
    rounds = sorted(set(by.get(a, {})) & set(by.get(b, {})))
    r = sorted(by[a][p][key] / by[b][p][key] for p in rounds
               if by[a][p][key] is not None and by[b][p][key])
    n = len(r)
    if not n:
        return None
    ratio, lo, hi, cover = interval(r)
    return dict(ratio=ratio, lo=lo, hi=hi, min=r[0], max=r[-1], n=n, cover=cover, rounds=rounds)
def say(name, a, b, p):
    what = describe(p["cover"]).replace("pairs", "rounds")
    print(f"{name} {a}/{b} over {p['n']} rounds: median {p['ratio']:.3f}x, {what} {p['lo']:.3f}–{p['hi']:.3f}x "
          f"(all rounds {p['min']:.3f}–{p['max']:.3f}x)")
print()
all_rounds = set().union(*(set(by.get(s, {})) for s in setups)) if by else set()
lowkey, lowname = ("instr", "instructions") if pmu else ("tc", "task-clock")
for s in setups:
    if s == "pm2" or s not in by:
        continue
    for key, name in (("cpu", "CPU time"), ("tc", "task-clock"), ("instr", "instructions"), ("work", "workers' CPU time")):
        if key == "instr" and not pmu or key == "tc" and not perf:
            continue
        p = paired(s, "pm2", key)
        if p:
            say(name, s, "pm2", p)
if "direct" in by and "pm2" in by:
    rounds = set(by["direct"]) & set(by["pm2"])
    if len(all_rounds) > len(rounds):
        print(f"{len(all_rounds) - len(rounds)} round(s) left out: one of its runs was not counted")
    c = paired("direct", "pm2", "cpu")
    low = paired("direct", "pm2", lowkey) if perf else None
    # Fail closed: ≤ is shown only when both the headline (CPU time) and the low-noise interval
    # lie wholly at or below 1.00; without perf there is no corroboration, so no ≤.
    # A verdict needs a ≥95% interval: with too few rounds (< 6) there is none, and no verdict.
    if c["cover"] is None:
        verdict = "tie"
    elif c["hi"] <= 1.0 and low is not None and low["cover"] is not None and low["hi"] <= 1.0:
        verdict = "le-shown"
    elif c["lo"] > 1.0:
        verdict = "gt-shown"
    else:
        verdict = "tie"
    words = {"le-shown": f"direct ≤ pm2 shown (the whole CPU-time and {lowname} intervals ≤ 1.00)",
             "gt-shown": "direct > pm2 shown (the whole CPU-time interval > 1.00)",
             "tie": f"not shown: a tie (an interval, CPU time's or {lowname}'s, reaches above 1.00, fewer than 6 rounds, or no {lowname} figure)"}[verdict]
    print(f"verdict: {words}")
    lw = (f" low={lowname} low_ratio={low['ratio']:.3f} low_lo={low['lo']:.3f} low_hi={low['hi']:.3f}" if low
          else f" low={lowname} low_ratio=- low_lo=- low_hi=-")
    print(f"RESULT direct-fixed ratio={c['ratio']:.3f} lo={c['lo']:.3f} hi={c['hi']:.3f} min={c['min']:.3f} max={c['max']:.3f} "
          f"pairs={c['n']} verdict={verdict} direct_us={med([by['direct'][p]['cpu'] for p in c['rounds']]):.2f} "
          f"pm2_us={med([by['pm2'][p]['cpu'] for p in c['rounds']]):.2f}{lw}")
PY
