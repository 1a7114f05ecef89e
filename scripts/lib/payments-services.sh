# Shared by bench-payments.sh and profile-payments.sh (sourced, not run): build the two
# payments services and scalpel, make the ledger, start the services pinned to one CPU,
# and check they answer byte for byte before anything is measured.
#
# Expects: ROOT, TGT, USERS, SEED, SERVER_CPU, LEDGER_DIR (ledger and ids), OUT (process
# output). Sets: PAY GO SCALPEL DB IDS, and per started service NAME_URL and NAME_PID.

# RUST_PROFILE=profiling (scripts/profile-payments.sh): release code plus line tables.
RUST_PROFILE="${RUST_PROFILE:-release}"

payments_build() {
  echo "== build"
  cargo build --profile "$RUST_PROFILE" -p payments-service -p scalpel
  bash "$ROOT/scripts/build-go.sh"
}

payments_binaries() {
  PAY="$TGT/$RUST_PROFILE/payments"
  GO="$TGT/payments-go"
  SCALPEL="$TGT/$RUST_PROFILE/scalpel"
}

# The ledger is kept between runs: the same seed gives the same rows.
payments_ledger() {
  DB="$LEDGER_DIR/ledger-$USERS-$SEED.db"
  IDS="$LEDGER_DIR/ids-$USERS-$SEED.txt"
  if [[ ! -f "$DB" || ! -f "$IDS" ]]; then
    echo "== generate"
    "$PAY" generate --users "$USERS" --seed "$SEED" --db "$DB" --ids-out "$IDS" --force
  fi
}

PIDS=()
payments_cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# start NAME CMD... : runs CMD pinned to SERVER_CPU, waits for its listening line.
start() {
  local name="$1"; shift
  # A previous run's output would be read as this run's "listening" line.
  rm -f "$OUT/$name.stdout" "$OUT/$name.stderr"
  taskset -c "$SERVER_CPU" "$@" >"$OUT/$name.stdout" 2>"$OUT/$name.stderr" &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1200); do
    if grep -q 'listening on http://' "$OUT/$name.stdout" 2>/dev/null; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then cat "$OUT/$name.stderr" >&2; exit 1; fi
    sleep 0.1
  done
  local url
  url="$(grep -o 'listening on http://[0-9.:]*' "$OUT/$name.stdout" | head -1 | cut -d' ' -f3)"
  [[ -n "$url" ]] || { echo "$name did not start" >&2; exit 1; }
  eval "${name^^}_URL=$url; ${name^^}_PID=$pid"
  echo "$name: pid $pid, $url, pinned to cpu $SERVER_CPU"
}

# payments_parity USERS_TO_CHECK RANDOM_SEED QUERY... : same status and bytes from both.
payments_parity() {
  echo "== parity check"
  python3 - "$GO_URL" "$RUST_URL" "$IDS" "$@" <<'PY'
import sys, urllib.request, urllib.error, random
go, rust, ids = sys.argv[1], sys.argv[2], [l.strip() for l in open(sys.argv[3]) if l.strip()]
count, seed, queries = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
def get(u):
    try:
        r = urllib.request.urlopen(u, timeout=30); return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
random.seed(seed)
n = 0
for i in random.sample(ids, min(count, len(ids))):
    for q in queries:
        a, b = get(go + "/v1/users/" + i + q), get(rust + "/v1/users/" + i + q)
        if a != b:
            sys.exit(f"DIFFERENT answers for {i}{q}:\n go:   {a}\n rust: {b}")
        n += 1
print(f"identical status and bytes for {n} requests")
PY
}
