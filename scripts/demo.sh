#!/usr/bin/env bash
# ./run demo: the three stories end to end on this machine, with one report.
#
#   ./run demo                    quick (about 16 minutes after the build on 2 cores)
#   ./run demo --full             the recorded figures: longer steps, repeats
#   ./run demo --only payments    some stages (ladder, payments, runtime); others keep their last figures
#   ./run demo --report-only      rebuild target/demo/index.html from target/demo/report.json
#   ./run demo --skip-build       measure what is built already
#   ./run demo --db postgres      the payments ledger in a throw-away PostgreSQL cluster (scripts/lib/pg.sh)
#
# Builds everything (scripts/build.sh: Rust, wasm, napi, Go, npm ci), installs pm2 into the
# demo's own lock-filed package (scripts/demo/pm2, never globally), then runs scripts/demo
# (Python 3, standard library only): progress lines per stage, each table as it finishes, and
# target/demo/index.html + target/demo/report.json at the end. Re-runnable.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

build=1
for a in "$@"; do
    case "$a" in
        --skip-build|--report-only) build=0 ;;
        # --help answers at once: a new user asking what the demo does must not wait for a build.
        -h|--help) exec python3 scripts/demo --help ;;
    esac
done

command -v python3 >/dev/null || { echo "demo: python3 is needed (standard library only)" >&2; exit 2; }
command -v taskset >/dev/null || echo "demo: no taskset: servers and load generator will not be pinned" >&2

if [ "$build" = 1 ]; then
    start=$(date +%s)
    bash scripts/build.sh
    echo "==> pm2 for the runtime story (npm ci in scripts/demo/pm2)"
    (cd scripts/demo/pm2 && npm ci --no-audit --no-fund --loglevel=error)
    echo "==> built in $(( $(date +%s) - start )) s; the demo starts now"
fi
exec python3 scripts/demo "$@"
