#!/usr/bin/env bash
# TLS and HTTP/2 benchmark of `scalpel load` (issue #12) against nginx with TLS and http2 on
# loopback, one command:
#
#   scripts/bench-tls.sh          # all three comparisons (~4 min with the defaults)
#   ./run bench tls               # the same
#
# 1. https HTTP/1.1, closed model, one thread each: scalpel load vs wrk (-c CONNS);
# 2. HTTP/2 over TLS, H2_CONNS connections x H2_STREAMS streams, one thread each:
#    scalpel load --http2 --streams vs h2load -m;
# 3. TLS handshakes per second, a new connection per request, one thread each:
#    scalpel load --no-reuse vs h2load --h1 -n -H 'Connection: close' (h2load reconnects
#    after each answer; both resume TLS 1.3 sessions, which the script checks in nginx's
#    log: the fairest peer found — wrk -H 'Connection: close' resumes too but opens its
#    connections in the same loop as its requests).
# Each pair runs alternately (A, B, B, A, ...) REPEATS times; medians, min-max, the ratio,
# and the 1-minute load average beside every run (the machine may be shared).
#
# Layout: nginx (1 worker) pinned to cpu 1, every generator to cpu 0 (taskset) with one
# thread. nginx speaks TLS 1.3 only (so every client negotiates the same protocol),
# ECDSA P-256 certificate made here with openssl, `return 200` with a 14-byte body,
# keepalive_requests high enough that no connection is ended during a run.
#
# TLS_PARTS picks the comparisons (not PARTS: bench-quiet.sh uses that name) (default "h1 h2 hs"); three more can be added:
#   cost  the https HTTP/1.1 comparison in figures a loaded machine does not blur: for
#         scalpel and wrk against the same nginx, system calls per request (strace -c -f),
#         user-space instructions per request (callgrind, 2 connections: under valgrind
#         wrk's 50 handshakes time out; two request counts and their difference, so
#         start-up and handshakes drop out) and the nginx worker's CPU
#         ticks per request (its /proc/PID/stat during an ordinary run: which side is the
#         bottleneck), and the TLS 1.3 cipher suite nginx chose with each;
#   h2cost  the same figures for the HTTP/2 comparison (H2_CONNS x H2_STREAMS): user-space
#         instructions per request of scalpel --http2 (and of OLD_SCALPEL when given) and of
#         h2load (callgrind, (2n - n) requests with n = COST_N / 2), and nginx's CPU per
#         request during an ordinary DUR run of each;
#   old   OLD_SCALPEL=PATH (another build, e.g. main's) joins the h1 alternation, so old
#         and new are compared in one run: `TLS_PARTS="h1 old" OLD_SCALPEL=... ./run bench tls`.
#
# Installs wrk, h2load (nghttp2-client) and nginx with apt-get if missing. Honors
# CARGO_TARGET_DIR and SKIP_BUILD=1. Environment: DUR (10s), REPEATS (5), CONNS (50), H2_CONNS (4),
# H2_STREAMS (16), HS_CONNS (16), TLS_PARTS ("h1 h2 hs"), COST_N (20000: requests of the cost runs).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
DUR="${DUR:-10s}"
REPEATS="${REPEATS:-5}"
CONNS="${CONNS:-50}"
H2_CONNS="${H2_CONNS:-4}"
H2_STREAMS="${H2_STREAMS:-16}"
HS_CONNS="${HS_CONNS:-16}"
TLS_PARTS="${TLS_PARTS:-h1 h2 hs}"
COST_N="${COST_N:-20000}"
OLD_SCALPEL="${OLD_SCALPEL:-}"
SECS="${DUR%s}"
has() { [[ " $TLS_PARTS " == *" $1 "* ]]; }

need() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]; }
if ! need wrk || ! need nginx || ! need h2load; then
  echo "installing wrk, nginx and nghttp2-client" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx nghttp2-client) >&2
fi
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

# SKIP_BUILD=1: the binary already built (./run bench quiet builds the workspace first; a
# `-p scalpel` build unifies features apart from `--workspace` and recompiles for minutes).
[[ "${SKIP_BUILD:-0}" == 1 ]] || (cd "$ROOT" && cargo build --release -q -p scalpel)
SCALPEL="${SCALPEL:-$TARGET_DIR/release/scalpel}"

WORK="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -keyout "$WORK/ca.key" -out "$WORK/ca.pem" -subj "/CN=scalpel bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$WORK/key.pem" -out "$WORK/leaf.csr" -subj "/CN=localhost" 2>/dev/null
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n" >"$WORK/ext.cnf"
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
  -CAcreateserial -days 2 -out "$WORK/cert.pem" -extfile "$WORK/ext.cnf" 2>/dev/null
cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
  log_format conn "\$connection \$ssl_session_reused \$ssl_protocol \$ssl_cipher";
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 75s;
  client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK;
  uwsgi_temp_path $WORK; scgi_temp_path $WORK;
  server {
    listen 127.0.0.1:$PORT ssl http2;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.3;
    location / { default_type text/plain; return 200 "hello scalpel\n"; }
    location = /logged { access_log $WORK/conn.log conn; default_type text/plain; return 200 "hello scalpel\n"; }
  }
}
EOF
"$NGINX" -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
trap 'kill $NGINX_PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do curl -sf --cacert "$WORK/ca.pem" "https://127.0.0.1:$PORT/" >/dev/null && break; sleep 0.1; done
NGINX_WORKER="$(pgrep -P "$NGINX_PID" | head -1)"
taskset -p -c 1 "$NGINX_WORKER" >/dev/null
PIN=(taskset -c 0)
URL="https://127.0.0.1:$PORT/"
TLS=(--cacert "$WORK/ca.pem")

echo "# machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# nginx $("$NGINX" -v 2>&1 | cut -d/ -f2), 1 worker on cpu 1, TLS 1.3 only, ECDSA P-256; generators on cpu 0, one thread; $DUR per run, $REPEATS runs each"
echo "# $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2); $(h2load --version 2>&1 | head -1); $("$SCALPEL" --version 2>&1 | head -1)"

load1() { cut -d' ' -f1 /proc/loadavg; }
median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.0f", m}'; }
minmax() { sort -g | awk 'NR==1{mn=$1} {mx=$1} END {printf "%.0f–%.0f", mn, mx}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a/b}'; }
json() { python3 -c "import json,sys; s=json.load(open('$WORK/s.json'))['targets'][0]['steps'][0]; print($1)"; }

# Each function runs one measurement, appends req/s to $WORK/NAME.txt and prints a line.
wrk_h1() {
  local la; la=$(load1)
  local r; r=$("${PIN[@]}" wrk -t1 -c "$CONNS" -d "$DUR" "$URL" | awk '/Requests\/sec/ {print $2}')
  echo "$r" >>"$WORK/wrk.txt"; echo "    wrk              $r req/s  (load $la)"
}
scalpel_h1() { scalpel_h1_with "$SCALPEL" scalpel-h1 "scalpel         "; }
old_h1() { scalpel_h1_with "$OLD_SCALPEL" old-h1 "scalpel (old)   "; }
scalpel_h1_with() { # BINARY FILE LABEL
  local bin=$1 file=$2 label=$3
  local la; la=$(load1)
  "${PIN[@]}" "$bin" load --no-progress --threads 1 -c "$CONNS" -d "$DUR" "${TLS[@]}" --json "$WORK/s.json" "$URL" >/dev/null
  local r; r=$(json "round(s['achieved_rps'])")
  echo "$r" >>"$WORK/$file.txt"; echo "    $label $r req/s  errors $(json "s['errors']")  (load $la)"
}
h2load_h2() {
  local la; la=$(load1)
  local r; r=$("${PIN[@]}" h2load -t1 -c "$H2_CONNS" -m "$H2_STREAMS" -D "$SECS" "$URL" 2>/dev/null | awk '/^finished in/ {print $4}')
  echo "$r" >>"$WORK/h2load.txt"; echo "    h2load           $r req/s  (load $la)"
}
scalpel_h2() {
  local la; la=$(load1)
  "${PIN[@]}" "$SCALPEL" load --no-progress --threads 1 --http2 -c "$H2_CONNS" --streams "$H2_STREAMS" -d "$DUR" "${TLS[@]}" --json "$WORK/s.json" "$URL" >/dev/null
  local r; r=$(json "round(s['achieved_rps'])")
  echo "$r" >>"$WORK/scalpel-h2.txt"; echo "    scalpel --http2  $r req/s  errors $(json "s['errors']")  stalls $(json "s['h2']['stalled_on_streams']")  (load $la)"
}
h2load_hs() {
  # A request count, not -D: h2load 1.52's duration mode spins without end once the server
  # closes its connections. The count is the last scalpel run's, so both run about DUR.
  local la; la=$(load1)
  local n; n=$(awk -v r="$(tail -1 "$WORK/scalpel-hs.txt")" -v s="$SECS" 'BEGIN {n = int(r * s); print (n < 1000 ? 1000 : n)}')
  local r; r=$("${PIN[@]}" timeout $((SECS * 10 + 30)) h2load --h1 -t1 -c "$HS_CONNS" -n "$n" -H "Connection: close" "$URL" 2>/dev/null | awk '/^finished in/ {print $4}')
  echo "$r" >>"$WORK/h2load-hs.txt"; echo "    h2load --h1      $r handshakes/s  ($n requests)  (load $la)"
}
scalpel_hs() {
  local la; la=$(load1)
  "${PIN[@]}" "$SCALPEL" load --no-progress --threads 1 --no-reuse -c "$HS_CONNS" -d "$DUR" "${TLS[@]}" --json "$WORK/s.json" "$URL" >/dev/null
  local r; r=$(json "round(s['achieved_rps'])")
  echo "$r" >>"$WORK/scalpel-hs.txt"
  echo "    scalpel --no-reuse $r handshakes/s  (connections $(json "s['connections_opened']") for $(json "s['sent']") requests, handshake p50 $(json "s['handshake_ms']['p50']") ms)  (load $la)"
}

pair() { # NAME A B [C...]: alternate them (A B C, C B A, ...), REPEATS rounds
  local name=$1; shift
  local fns=("$@") rev=() f
  for ((f = ${#fns[@]} - 1; f >= 0; f--)); do rev+=("${fns[f]}"); done
  for i in $(seq "$REPEATS"); do
    if (( i % 2 )); then for f in "${fns[@]}"; do "$f"; done; else for f in "${rev[@]}"; do "$f"; done; fi
  done
}
report() { # TITLE FILE_A FILE_B
  local ma mb; ma=$(median <"$WORK/$2.txt"); mb=$(median <"$WORK/$3.txt")
  echo "[$1] $2 median $ma (min–max $(minmax <"$WORK/$2.txt")); $3 median $mb (min–max $(minmax <"$WORK/$3.txt")); ratio $2/$3 $(ratio "$ma" "$mb")"
}

# --- cost: figures of the https HTTP/1.1 comparison that a loaded machine does not blur ---
# shellcheck source=scripts/lib/proc-ticks.sh
source "$ROOT/scripts/lib/proc-ticks.sh"
ticks() { proc_ticks "$NGINX_WORKER"; }
HZ="$(getconf CLK_TCK)"
wrk_count() { awk '/requests in/ {print $1}'; }
nginx_cpu() { # LABEL TICKS REQUESTS SECONDS
  awk -v l="$1" -v t="$2" -v n="$3" -v s="$4" -v hz="$HZ" 'BEGIN {
    printf "[cost] nginx worker CPU per request with %s: %.2f us (%d requests, nginx busy %.0f%% of the run)\n",
      l, t * 1e6 / hz / n, n, 100 * t / hz / s }'
}
# strace -c -f's table as "total T (name calls[ errors], ...)" per request
syscalls() { # LABEL STRACE_FILE REQUESTS
  python3 - "$1" "$2" "$3" <<'PY'
import sys
label, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for line in open(path):
    f = line.split()
    if len(f) >= 5 and f[0][0].isdigit() and not line.startswith("-"):
        calls = int(f[3]); errors = int(f[4]) if len(f) == 6 else 0; name = f[-1]
        if name != "total":
            rows.append((calls, errors, name))
total = sum(r[0] for r in rows)
rows.sort(reverse=True)
parts = [f"{name} {calls / n:.2f}" + (f" (errors {errors / n:.2f})" if errors else "") for calls, errors, name in rows if calls / n >= 0.01]
print(f"[cost] {label} system calls per request: {total / n:.2f} = " + ", ".join(parts) + f"  ({n} requests)")
PY
}
callgrind_ir() { # COMMAND...: prints the user-space instructions valgrind counted
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >"$WORK/cg.stdout" | awk '/Collected :/ {print $NF}'
}
ir_per_request() { # LABEL IR1 N1 IR2 N2
  awk -v l="$1" -v a="$2" -v n="$3" -v b="$4" -v m="$5" 'BEGIN {
    printf "[cost] %s user-space instructions per request: %.0f (callgrind, (%d - %d) / (%d - %d) requests)\n", l, (b - a) / (m - n), b, a, m, n }'
}
nginx_strace_start() { strace -c -o "$WORK/nginx-strace.txt" -p "$NGINX_WORKER" 2>/dev/null & STRACE_PID=$!; sleep 0.5; }
nginx_strace_stop() { kill -INT "$STRACE_PID"; wait "$STRACE_PID" 2>/dev/null || true; }
cost() { # LABEL BINARY
  local label=$1 bin=$2 t0 n
  t0=$(ticks); "${PIN[@]}" "$bin" load --no-progress --threads 1 -c "$CONNS" -d "$DUR" "${TLS[@]}" --json "$WORK/s.json" "$URL" >/dev/null
  nginx_cpu "$label" $(( $(ticks) - t0 )) "$(json "s['answered']")" "$SECS"
  "${PIN[@]}" strace -f -c -o "$WORK/strace.txt" "$bin" load --no-progress --threads 1 -c "$CONNS" -n "$COST_N" "${TLS[@]}" --json "$WORK/s.json" "$URL" >/dev/null
  syscalls "$label" "$WORK/strace.txt" "$(json "s['answered']")"
  nginx_strace_start
  "${PIN[@]}" "$bin" load --no-progress --threads 1 -c "$CONNS" -n "$COST_N" "${TLS[@]}" --json "$WORK/s.json" "$URL" >/dev/null
  nginx_strace_stop
  syscalls "nginx with $label" "$WORK/nginx-strace.txt" "$(json "s['answered']")"
  local n1=$((COST_N / 10)) n2=$((COST_N / 2)) a b
  a=$(callgrind_ir "$bin" load --no-progress --threads 1 -c 2 -n "$n1" "${TLS[@]}" "$URL")
  b=$(callgrind_ir "$bin" load --no-progress --threads 1 -c 2 -n "$n2" "${TLS[@]}" "$URL")
  ir_per_request "$label" "$a" "$n1" "$b" "$n2"
}
cost_wrk() {
  local t0 out n
  t0=$(ticks); out=$("${PIN[@]}" wrk -t1 -c "$CONNS" -d "$DUR" "$URL")
  nginx_cpu wrk $(( $(ticks) - t0 )) "$(wrk_count <<<"$out")" "$SECS"
  out=$("${PIN[@]}" strace -f -c -o "$WORK/strace.txt" wrk -t1 -c "$CONNS" -d 3s "$URL")
  syscalls wrk "$WORK/strace.txt" "$(wrk_count <<<"$out")"
  nginx_strace_start
  out=$("${PIN[@]}" wrk -t1 -c "$CONNS" -d 3s "$URL")
  nginx_strace_stop
  syscalls "nginx with wrk" "$WORK/nginx-strace.txt" "$(wrk_count <<<"$out")"
  local a b na nb
  a=$(callgrind_ir wrk -t1 -c 2 --timeout 5s -d 3s "$URL"); na=$(wrk_count <"$WORK/cg.stdout")
  b=$(callgrind_ir wrk -t1 -c 2 --timeout 5s -d 9s "$URL"); nb=$(wrk_count <"$WORK/cg.stdout")
  ir_per_request wrk "$a" "$na" "$b" "$nb"
}
cipher_of() { # LABEL COMMAND...: the suite nginx chose for this client's connections
  : >"$WORK/conn.log"
  "${@:2}" >/dev/null 2>&1
  sleep 0.3
  echo "[cost] $1: nginx's log (count, protocol, cipher): $(awk '{print $3, $4}' "$WORK/conn.log" | sort | uniq -c | sort -rn | head -3 | xargs)"
}

if has h1; then
  echo
  echo "## 1. https HTTP/1.1 closed model, -c $CONNS, one thread each"
  if has old && [[ -n "$OLD_SCALPEL" ]]; then
    echo "# old: $OLD_SCALPEL"
    pair h1 scalpel_h1 old_h1 wrk_h1
    report h1-old scalpel-h1 old-h1
  else
    pair h1 scalpel_h1 wrk_h1
  fi
  report h1 scalpel-h1 wrk
fi

if has cost; then
  echo
  echo "## cost of https HTTP/1.1 per request, -c $CONNS, one thread (pinned to cpu 0)"
  cost scalpel "$SCALPEL"
  [[ -n "$OLD_SCALPEL" ]] && cost "scalpel (old)" "$OLD_SCALPEL"
  cost_wrk
  cipher_of scalpel "${PIN[@]}" "$SCALPEL" load --no-progress --threads 1 -c 2 -n 20 "${TLS[@]}" "${URL}logged"
  cipher_of wrk "${PIN[@]}" wrk -t1 -c 2 -d 1s "${URL}logged"
fi

# --- h2cost: the HTTP/2 comparison in instructions per request and nginx's CPU per request ---
h2cost() { # LABEL BINARY
  local label=$1 bin=$2 t0 n1=$((COST_N / 2)) n2=$COST_N a b
  t0=$(ticks); "${PIN[@]}" "$bin" load --no-progress --threads 1 --http2 -c "$H2_CONNS" --streams "$H2_STREAMS" -d "$DUR" "${TLS[@]}" --json "$WORK/s.json" "$URL" >/dev/null
  nginx_cpu "$label --http2" $(( $(ticks) - t0 )) "$(json "s['answered']")" "$SECS"
  a=$(callgrind_ir "$bin" load --no-progress --threads 1 --http2 -c "$H2_CONNS" --streams "$H2_STREAMS" -n "$n1" "${TLS[@]}" "$URL")
  b=$(callgrind_ir "$bin" load --no-progress --threads 1 --http2 -c "$H2_CONNS" --streams "$H2_STREAMS" -n "$n2" "${TLS[@]}" "$URL")
  ir_per_request "$label --http2" "$a" "$n1" "$b" "$n2"
}
h2cost_h2load() {
  local t0 out n n1=$((COST_N / 2)) n2=$COST_N a b
  t0=$(ticks); out=$("${PIN[@]}" h2load -t1 -c "$H2_CONNS" -m "$H2_STREAMS" -D "$SECS" "$URL" 2>/dev/null)
  n=$(awk '/^requests:/ {print $8}' <<<"$out")
  nginx_cpu h2load $(( $(ticks) - t0 )) "$n" "$SECS"
  a=$(callgrind_ir h2load -t1 -c "$H2_CONNS" -m "$H2_STREAMS" -n "$n1" "$URL")
  b=$(callgrind_ir h2load -t1 -c "$H2_CONNS" -m "$H2_STREAMS" -n "$n2" "$URL")
  ir_per_request h2load "$a" "$n1" "$b" "$n2"
}
if has h2cost; then
  echo
  echo "## cost of HTTP/2 per request, $H2_CONNS connections x $H2_STREAMS streams, one thread (pinned to cpu 0)"
  h2cost scalpel "$SCALPEL"
  [[ -n "$OLD_SCALPEL" ]] && h2cost "scalpel (old)" "$OLD_SCALPEL"
  h2cost_h2load
fi

if has h2; then
  echo
  echo "## 2. HTTP/2 over TLS, $H2_CONNS connections x $H2_STREAMS streams, one thread each"
  pair h2 scalpel_h2 h2load_h2
  report h2 scalpel-h2 h2load
fi

if has hs; then
  echo
  echo "## 3. TLS handshakes per second, a new connection per request, -c $HS_CONNS, one thread each"
  pair hs scalpel_hs h2load_hs
  report hs scalpel-hs h2load-hs

  # Both resume sessions? One short run of each against a logged location.
  : >"$WORK/conn.log"
  "${PIN[@]}" "$SCALPEL" load --no-progress --threads 1 --no-reuse -c 2 -n 50 "${TLS[@]}" "${URL}logged" >/dev/null
  sleep 0.3
  echo "[hs] scalpel session resumption (count, reused, protocol): $(awk '{print $2, $3}' "$WORK/conn.log" | sort | uniq -c | xargs)"
  : >"$WORK/conn.log"
  "${PIN[@]}" h2load --h1 -t1 -c 2 -n 50 -H "Connection: close" "${URL}logged" >/dev/null 2>&1
  sleep 0.3
  echo "[hs] h2load session resumption (count, reused, protocol): $(awk '{print $2, $3}' "$WORK/conn.log" | sort | uniq -c | xargs)"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
