#!/usr/bin/env bash
# The QR ladder's per-call benchmark: every tier as the Node process sees it, in one run,
# alternating, with repeats (median and min-max). Writes nothing unless --json FILE.
#
#   bash scripts/bench-qr.sh            # the recorded run (~1 min)
#   bash scripts/bench-qr.sh --quick    # a few seconds, used by ./run demo
#   bash scripts/bench-qr.sh --napi-load  # the napi sync/async choice under HTTP load (wrk, ~2 min)
#
# Other flags go to qr/node/bench/percall.js (--repeats N, --ms-per-text MS, --json FILE).
# Builds the Rust artifacts and installs the Node packages when they are missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
T="$CARGO_TARGET_DIR"

missing=0
for f in "$T/release/qr-cli" "$T/release/qr-server" "$T/qr/wasm-bindgen/qr_wasm.js" "$T/qr/qr_raw.wasm" "$T/qr/qr_napi.node"; do
    [ -e "$f" ] || missing=1
done
if [ "$missing" = 1 ]; then
    echo "==> building the QR artifacts (scripts/build-qr.sh)" >&2
    bash scripts/build-qr.sh >&2
fi
if [ ! -d qr/node/node_modules ]; then
    (cd qr/node && npm ci --no-audit --no-fund --loglevel=error) >&2
fi

if [ "${1:-}" = "--napi-load" ]; then
    shift
    exec node qr/node/bench/napi-mode.js "$@"
fi
exec node qr/node/bench/percall.js "$@"
