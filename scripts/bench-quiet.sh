#!/usr/bin/env bash
# Every target figure the open issues need (#12, #13, #14, #16), in one run on a QUIET machine:
#
#   ./run bench quiet                 # ~40 min of measuring after the build (the build is not counted)
#   SMOKE=1 ./run bench quiet         # every part with tiny durations: proves it runs, figures meaningless
#   PARTS="direct shards" ./run bench quiet   # some parts, in the order given
#   PREPARE_ONLY=1 ./run bench quiet  # only the build and the payments ledger (do it before the quiet window)
#
# Parts, in order of priority (each one the project's own bench script, old and new
# alternating in one run where the issue asks for it):
#   direct    #14  serve mode = "direct" vs pm2 cluster vs serve proxy, 2 Node hello workers:
#                  req/s and CPU per request            (SCENARIOS=direct scripts/bench-serve.sh)
#   direct-fixed #14  the same at a fixed 10,000 req/s: CPU per request, paired median ratio
#                  over alternating pairs with its interval   (scripts/bench-direct-fixed.sh)
#   frozen    #14  a direct-mode worker frozen under new-connection load: failed requests,
#                  the frozen worker's share of new connections (SCENARIOS=frozen-direct bench-serve)
#   shards    #16  two shards vs one process, rate error and merged p99   (bench-shards.sh rate)
#   tls       #12  https h1 vs wrk and h2 4x16 vs h2load: 9 alternating pairs of 4 s each, the
#                  paired median ratio with its ~96% interval, nginx's CPU per request and each
#                  side's busy share; --no-reuse handshakes vs h2load --h1; nginx's
#                  instructions per request under each client (bench-tls.sh, ~5 min;
#                  TLS_PARTS="h1 h2 hs ngxcost cost h2cost" adds the clients' own counts)
#   serve-tls #12  serve TLS+h2 vs nginx TLS/h2, 2 Node hello workers: req/s, CPU per request
#                  (SCENARIOS=tls bench-serve.sh)
#   ladder    #13  the QR ladder served: tier 4 vs tier 3 and tier 0   (scripts/demo --only ladder)
#   payments  #13  Go vs Rust stats ramped to the SLO                  (scripts/demo --only payments)
#   runtime   #27  nginx -> pm2 (BEFORE) vs serve on the uneven mix     (scripts/demo --only runtime;
#                  serve with max_in_flight_per_worker = 1, and the 4 + 1 split as serve-split)
#
# Writes target/bench-quiet/RESULTS.md: one markdown section per target (figure, ratio,
# spread over repeats, target met / NOT met, the command, nproc, CPU model, load average
# before and after), ready for docs/BENCHMARKS.md; every part's full output in
# target/bench-quiet/logs/. A part that fails is reported as failed; the others still run.
# Builds first (scripts/build.sh, idempotent; SKIP_BUILD=1 skips it); the bench's own wall
# time is printed apart from the build's. Honors CARGO_TARGET_DIR.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
TGT="$CARGO_TARGET_DIR"
OUT="$TGT/bench-quiet"
LOGS="$OUT/logs"
RESULTS="$OUT/RESULTS.md"
PARTS="${PARTS:-direct direct-fixed frozen shards tls serve-tls ladder payments runtime}"
SMOKE="${SMOKE:-0}"

# Durations: the default run fits ~40 min on 2 cores (five repeats of every verdict); SMOKE=1 only proves each part works.
# Any of these can be set from the environment.
if [ "$SMOKE" = 1 ]; then
    : "${DIRECT_DUR:=2}" "${DIRECT_REPEATS:=1}" "${FIXED_DUR:=2}" "${FIXED_REPEATS:=1}" "${FROZEN_DUR:=6}" "${FROZEN_REPEATS:=1}"
    : "${SHARDS_DUR:=2s}" "${SHARDS_REPEATS:=1}" "${TLS_DUR:=2s}" "${TLS_PAIRS:=1}" "${TLS_REPEATS:=1}" "${TLS_NGX_WINDOW:=2}"
    : "${SERVE_TLS_DUR:=2}" "${SERVE_TLS_REPEATS:=1}"
    DEMO_LADDER=(--set ladder_closed=1s --set ladder_rounds=1 --set ladder_repeats=2 --set ladder_step=1s
                 --set ladder_ramp_rounds=1 --set 'ladder_ramp=[0.5,0.5,1.5]')
    DEMO_PAYMENTS=(--set pay_step=1s --set 'pay_ramp=[2000,4000,30000]' --set pay_fixed=2s --set pay_repeats=2
                   --set pay_fixed_repeats=1)
    DEMO_RUNTIME=(--set rt_probe=1s --set rt_step=1s --set 'rt_ramp=[0.5,0.5,1.5]' --set rt_fixed=2s
                  --set rt_repeats=2 --set rt_fixed_repeats=1 --set 'rt_workloads=["uneven"]' --set rt_ab=false --set rt_serve_slots=1
                  --set rt_split=true)
else
    : "${DIRECT_DUR:=8}" "${DIRECT_REPEATS:=3}" "${FIXED_DUR:=8}" "${FIXED_REPEATS:=9}" "${FROZEN_DUR:=10}" "${FROZEN_REPEATS:=3}"
    : "${SHARDS_DUR:=8s}" "${SHARDS_REPEATS:=3}" "${TLS_DUR:=4s}" "${TLS_PAIRS:=9}" "${TLS_REPEATS:=3}" "${TLS_NGX_WINDOW:=4}"
    : "${SERVE_TLS_DUR:=8}" "${SERVE_TLS_REPEATS:=3}"
    # Five repeats of each verdict-bearing measurement: fewer cannot decide (common.verdict).
    DEMO_LADDER=(--set ladder_closed=3s --set ladder_rounds=2 --set ladder_repeats=5 --set ladder_step=2s
                 --set ladder_ramp_rounds=1 --set 'ladder_ramp=[0.3,0.1,1.5]')
    DEMO_PAYMENTS=(--set pay_step=2s --set 'pay_ramp=[1000,1500,120000]' --set pay_fixed=10s --set pay_repeats=5
                   --set pay_fixed_repeats=3)
    DEMO_RUNTIME=(--set rt_probe=3s --set rt_step=3s --set 'rt_ramp=[0.4,0.03,1.6]' --set rt_fixed=10s
                  --set rt_repeats=5 --set rt_fixed_repeats=3 --set 'rt_workloads=["uneven"]' --set rt_ab=false
                  --set rt_serve_slots=1 --set rt_split=true)
fi

mkdir -p "$LOGS"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    b0=$(date +%s)
    echo "==> build (scripts/build.sh; not counted in the bench time)"
    bash scripts/build.sh >"$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log" >&2; echo "bench-quiet: the build failed (log: $LOGS/build.log)" >&2; exit 1; }
    echo "==> built in $(( $(date +%s) - b0 )) s"
fi
for f in "$TGT/release/scalpel" "$TGT/release/qr-server" "$TGT/release/payments" "$TGT/payments-go" \
         "$ROOT/scripts/demo/pm2/node_modules/.bin/pm2"; do
    [ -e "$f" ] || { echo "bench-quiet: $f is missing: run without SKIP_BUILD=1 (scripts/build.sh)" >&2; exit 1; }
done
# The payments ledger (16,000 users, seed 1: the demo's and bench-payments' file) is made
# once, off the clock: two minutes on a loaded machine.
LEDGER="$TGT/bench/payments"
if [ ! -s "$LEDGER/ledger-16000-1.db" ] || [ ! -s "$LEDGER/ids-16000-1.txt" ]; then
    echo "==> generating the payments ledger (not counted in the bench time)"
    mkdir -p "$LEDGER"
    "$TGT/release/payments" generate --users 16000 --seed 1 --db "$LEDGER/ledger-16000-1.db" \
        --ids-out "$LEDGER/ids-16000-1.txt" --force >"$LOGS/ledger.log" 2>&1 ||
        { echo "bench-quiet: payments generate failed (log: $LOGS/ledger.log)" >&2; exit 1; }
fi
if [ "${PREPARE_ONLY:-0}" = 1 ]; then
    echo "==> prepared (build, pm2, payments ledger); the measuring run: ./run bench quiet"
    exit 0
fi

CPU_MODEL="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
load3() { cut -d' ' -f1-3 /proc/loadavg; }
start_all=$(date +%s)
{
    echo "# Quiet-machine run: every open target (\`./run bench quiet\`$([ "$SMOKE" = 1 ] && echo ', SMOKE=1: figures meaningless'))"
    echo
    echo "- started $(date -u +%Y-%m-%dT%H:%MZ); nproc $(nproc); CPU $CPU_MODEL; kernel $(uname -r); $(free -g | awk '/^Mem:/ {print $2}') GiB"
    echo "- load average at the start: $(load3); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "- node $(node --version), $(go version | cut -d' ' -f3), $(rustc --version | cut -d' ' -f1-2), $(nginx -v 2>&1 | cut -d' ' -f3), $(h2load --version 2>&1 | head -1), $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)"
    echo
} >"$RESULTS"

# part NAME ISSUE COMMAND...: runs one part, its output in logs/NAME.log, and appends its section.
part() {
    local name=$1 issue=$2; shift 2
    local before after t0 secs rc cmd
    cmd=$(printf '%q ' "$@")
    before=$(load3)
    t0=$(date +%s)
    echo "==> [$(date -u +%H:%M:%S)] $name (#$issue): $cmd  (load $before)"
    "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    after=$(load3)
    echo "    $name: exit $rc in ${secs} s (load after $after); log $LOGS/$name.log"
    python3 "$ROOT/scripts/bench-quiet-summary.py" "$name" "$issue" "$LOGS/$name.log" "$rc" "$secs" \
        "$before" "$after" "$(nproc)" "$CPU_MODEL" "${cmd% }" "$OUT" >>"$RESULTS" 2>>"$LOGS/summary-errors.log" ||
        printf '## %s (#%s): the summary could not be written (see %s)\n\n' "$name" "$issue" "$LOGS/summary-errors.log" >>"$RESULTS"
}

for p in $PARTS; do
    case "$p" in
        direct) part direct 14 env SKIP_BUILD=1 OUT="$OUT/serve-direct" SCENARIOS=direct DUR="$DIRECT_DUR" \
                    REPEATS="$DIRECT_REPEATS" bash scripts/bench-serve.sh ;;
        direct-fixed) part direct-fixed 14 env DUR="$FIXED_DUR" REPEATS="$FIXED_REPEATS" bash scripts/bench-direct-fixed.sh ;;
        frozen) part frozen 14 env SKIP_BUILD=1 OUT="$OUT/serve-frozen" SCENARIOS=frozen-direct \
                    FROZEN_DUR="$FROZEN_DUR" REPEATS="$FROZEN_REPEATS" bash scripts/bench-serve.sh ;;
        shards) part shards 16 env SKIP_BUILD=1 DUR="$SHARDS_DUR" REPEATS="$SHARDS_REPEATS" bash scripts/bench-shards.sh rate ;;
        tls) part tls 12 env SKIP_BUILD=1 DUR="$TLS_DUR" PAIRS="$TLS_PAIRS" REPEATS="$TLS_REPEATS" NGX_WINDOW="$TLS_NGX_WINDOW" \
                 TLS_PARTS="${TLS_PARTS:-h1 h2 hs ngxcost}" bash scripts/bench-tls.sh ;;
        serve-tls) part serve-tls 12 env SKIP_BUILD=1 OUT="$OUT/serve-tls" SCENARIOS=tls DUR="$SERVE_TLS_DUR" \
                       REPEATS="$SERVE_TLS_REPEATS" H2_CONNS=8 H2_STREAMS=10 bash scripts/bench-serve.sh ;;
        ladder) part ladder 13 env DEMO_OUT="$OUT/demo-ladder" python3 scripts/demo --only ladder "${DEMO_LADDER[@]}" ;;
        payments) part payments 13 env DEMO_OUT="$OUT/demo-payments" python3 scripts/demo --only payments \
                      "${DEMO_PAYMENTS[@]}" ;;
        runtime) part runtime 27 env DEMO_OUT="$OUT/demo-runtime" python3 scripts/demo --only runtime \
                     "${DEMO_RUNTIME[@]}" ;;
        *) echo "bench-quiet: unknown part '$p' (direct direct-fixed frozen shards tls serve-tls ladder payments runtime)" >&2 ;;
    esac
done
total=$(( $(date +%s) - start_all ))
printf -- '---\nBench wall time (build not counted): %d min %02d s; load average at the end: %s\n' \
    $((total / 60)) $((total % 60)) "$(load3)" >>"$RESULTS"
echo "==> bench wall time (build not counted): $((total / 60)) min $((total % 60)) s"
echo "==> $RESULTS"
