#!/usr/bin/env bash
# Benchmark of `scalpel load` against wrk on nginx (loopback), one command:
#
#   scripts/bench-load.sh            # short: ~4 min
#   scripts/bench-load.sh --long     # adds a 10-minute generator-memory run
#
# 1. closed model: wrk and scalpel alternately (wrk, scalpel, scalpel, wrk, …), same
#    connections and threads, REPEATS times each; medians, min–max and the ratio;
# 2. open model: achieved rate vs asked at 20/40/60/80% of scalpel's closed maximum;
# 3. generator memory: RSS of scalpel over a run (60 s, or 600 s with --long).
#
# Installs wrk and nginx with apt-get if missing. Honors CARGO_TARGET_DIR.
# Environment: CONNS (default 50), THREADS (default 2), DUR (default 10s), REPEATS (5).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
CONNS="${CONNS:-50}"
THREADS="${THREADS:-2}"
DUR="${DUR:-10s}"
REPEATS="${REPEATS:-5}"
LONG=0
[[ "${1:-}" == "--long" ]] && LONG=1

need() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]; }
if ! need wrk || ! need nginx; then
  echo "installing wrk and nginx" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx) >&2
fi
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

(cd "$ROOT" && cargo build --release -q -p scalpel)
SCALPEL="$TARGET_DIR/release/scalpel"

WORK="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 75s;
  client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK;
  uwsgi_temp_path $WORK; scgi_temp_path $WORK;
  server {
    listen 127.0.0.1:$PORT;
    location / { default_type text/plain; return 200 "hello scalpel\n"; }
  }
}
EOF
"$NGINX" -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
trap 'kill $NGINX_PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/" >/dev/null && break; sleep 0.1; done
URL="http://127.0.0.1:$PORT/"

echo "# machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# nginx worker_processes 1, body 14 bytes; -c $CONNS, $THREADS threads, $DUR per run"

median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.0f", m}'; }
minmax() { sort -n | awk 'NR==1{mn=$1} {mx=$1} END {printf "%.0f–%.0f", mn, mx}'; }

run_wrk() { wrk -c "$CONNS" -t "$THREADS" -d "$DUR" "$URL" | awk '/Requests\/sec/ {print $2}'; }
run_scalpel() {
  "$SCALPEL" load --no-progress -c "$CONNS" --threads "$THREADS" -d "$DUR" --json "$WORK/s.json" "$URL" >/dev/null
  python3 -c "import json; print(json.load(open('$WORK/s.json'))['targets'][0]['steps'][0]['achieved_rps'])"
}

: >"$WORK/wrk.txt"; : >"$WORK/scalpel.txt"
for i in $(seq "$REPEATS"); do
  if (( i % 2 )); then
    run_wrk >>"$WORK/wrk.txt"; run_scalpel >>"$WORK/scalpel.txt"
  else
    run_scalpel >>"$WORK/scalpel.txt"; run_wrk >>"$WORK/wrk.txt"
  fi
done
W_MED=$(median <"$WORK/wrk.txt"); S_MED=$(median <"$WORK/scalpel.txt")
echo
echo "## closed model, req/s over $REPEATS runs each (alternating)"
echo "wrk      median $W_MED  (min–max $(minmax <"$WORK/wrk.txt"))  runs: $(tr '\n' ' ' <"$WORK/wrk.txt")"
echo "scalpel  median $S_MED  (min–max $(minmax <"$WORK/scalpel.txt"))  runs: $(xargs printf '%.0f ' <"$WORK/scalpel.txt")"
echo "ratio scalpel/wrk: $(awk -v s="$S_MED" -v w="$W_MED" 'BEGIN {printf "%.3f", s/w}')"

echo
echo "## open model: asked vs achieved (scalpel closed median = $S_MED req/s)"
for pct in 20 40 60 80; do
  RATE=$(awk -v m="$S_MED" -v p="$pct" 'BEGIN {printf "%d", m*p/100}')
  "$SCALPEL" load --no-progress --rate "$RATE" -c "$CONNS" --threads "$THREADS" -d "$DUR" --json "$WORK/o.json" "$URL" >/dev/null
  python3 - "$WORK/o.json" "$RATE" "$pct" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))['targets'][0]['steps'][0]
rate = float(sys.argv[2])
print(f"{sys.argv[3]}%: asked {rate:.0f}  achieved {s['achieved_rps']:.1f}  "
      f"({100*(s['achieved_rps']-rate)/rate:+.2f}%)  sent+not_sent {s['requests']+s['not_sent']}  "
      f"late {s['late']}  not_sent {s['not_sent']}  p50 {s['latency_ms']['p50']} ms  p99 {s['latency_ms']['p99']} ms")
PY
done

echo
MEM_DUR=60; (( LONG )) && MEM_DUR=600
RATE=$(awk -v m="$S_MED" 'BEGIN {printf "%d", m/2}')
echo "## generator memory: scalpel --rate $RATE for ${MEM_DUR}s, RSS sampled every 10 s (MiB)"
"$SCALPEL" load --no-progress --rate "$RATE" -c "$CONNS" --threads "$THREADS" -d "${MEM_DUR}s" "$URL" >/dev/null &
GEN=$!
SAMPLES=()
while kill -0 "$GEN" 2>/dev/null; do
  RSS=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$GEN/status" 2>/dev/null || true)
  [[ -n "$RSS" ]] && SAMPLES+=("$RSS")
  sleep 10
done
wait "$GEN" || true
echo "rss: ${SAMPLES[*]}"
