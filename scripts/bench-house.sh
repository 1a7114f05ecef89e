#!/usr/bin/env bash
# Old binary vs new binary, one run, alternating: the "behaviour unchanged, speed within
# noise" check of a redesign (#24). OLD is the scalpel binary built from the commit before
# the change (e.g. `git worktree add /tmp/old 9491f26 && cargo build --release` there).
#
#   OLD=/path/to/old/scalpel scripts/bench-house.sh            # load, then shadow and serve
#   OLD=… PARTS="load" scripts/bench-house.sh                   # some parts
#
# Parts:
#   load    scalpel load (closed model, -c 50, --threads 1) against nginx hello, old and new
#           alternating PAIRS times: req/s per pair, the paired median new/old ratio and its
#           interval (scripts/lib/paired.py), plus the generator's CPU µs per request from
#           its own result file (its `self` resource usage, when present)
#   shadow  scripts/bench-shadow.sh with OLD_BIN (its own alternation of old and new proxy)
#   serve   scripts/bench-serve-cost.py with OLD (instructions, CPU and req/s per request,
#           old serve, new serve and nginx alternating)
# Every figure line carries the 1-minute load average. Honors CARGO_TARGET_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/lib/bench-basics.sh
source scripts/lib/nginx-hello.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
NEW="${NEW:-$CARGO_TARGET_DIR/release/scalpel}"
OLD="${OLD:?OLD=path to the old scalpel binary}"
PARTS="${PARTS:-load shadow serve}"
PAIRS="${PAIRS:-9}"
LOAD_DUR="${LOAD_DUR:-5s}"
CONNS="${CONNS:-50}"
[ -x "$NEW" ] || { echo "bench-house: no new binary at $NEW (./run build first)" >&2; exit 2; }
[ -x "$OLD" ] || { echo "bench-house: OLD=$OLD is not an executable" >&2; exit 2; }
OUT="$(mktemp -d /tmp/bench-house.XXXXXX)"
trap 'kill ${NGINX_PID:-} 2>/dev/null || true' EXIT
machine_line

load_part() {
  nginx_hello_start "$OUT" || exit 1
  local url="http://127.0.0.1:$PORT/" i which
  echo "## load: closed model, -c $CONNS --threads 1, $LOAD_DUR per run, $PAIRS pairs (old, new alternating; the order flips each pair)"
  for i in $(seq "$PAIRS"); do
    for which in $([ $((i % 2)) = 1 ] && echo "old new" || echo "new old"); do
      local bin="$OLD"; [ "$which" = new ] && bin="$NEW"
      "$bin" load --no-progress --json "$OUT/load-$which-$i.json" -c "$CONNS" --threads 1 -d "$LOAD_DUR" "$url" >/dev/null 2>"$OUT/load-$which-$i.err" ||
        { echo "load ($which, pair $i) failed: $(tail -1 "$OUT/load-$which-$i.err")" >&2; exit 1; }
    done
  done
  python3 - "$OUT" "$PAIRS" <<'PY'
import json, os, sys
sys.path.insert(0, "scripts/lib")
from paired import interval, describe
out, pairs = sys.argv[1], int(sys.argv[2])
def figures(which, i):
    r = json.load(open(f"{out}/load-{which}-{i}.json"))
    s = r["targets"][0]["steps"][0]
    return s["achieved_rps"], s.get("answered", 0), s.get("failed", 0)
rows, ratios = [], []
for i in range(1, pairs + 1):
    (o, oa, of), (n, na, nf) = figures("old", i), figures("new", i)
    if of or nf:
        print(f"pair {i}: failures old {of} new {nf}: the run is not like for like")
    rows.append((i, o, n)); ratios.append(n / o)
for i, o, n in rows:
    print(f"pair {i}: old {o:,.0f} req/s  new {n:,.0f} req/s  new/old {n / o:.3f}")
med, lo, hi, cover = interval(ratios)
print(f"load new/old req/s: median {med:.3f}, {describe(cover)} {lo:.3f}–{hi:.3f}, load average {os.getloadavg()[0]:.2f}")
PY
  kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; NGINX_PID=
}

for part in $PARTS; do
  case "$part" in
    load) load_part ;;
    shadow) echo "## shadow: bench-shadow.sh with OLD_BIN"; OLD_BIN="$OLD" bash scripts/bench-shadow.sh ;;
    serve) echo "## serve: bench-serve-cost.py with OLD"; OLD="$OLD" python3 scripts/bench-serve-cost.py ;;
    *) echo "bench-house: unknown part '$part' (load shadow serve)" >&2; exit 2 ;;
  esac
done
