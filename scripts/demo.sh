#!/usr/bin/env bash
# The main job: build everything, then print the QR ladder's quick per-call table
# (every tier as the Node host sees it, measured in one run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

bash scripts/build.sh
echo
echo "==> the QR tier ladder, per call (quick run; ./run bench qr for the recorded one)"
bash scripts/bench-qr.sh --quick
