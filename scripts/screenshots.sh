#!/usr/bin/env bash
# Regenerates the screenshots of the live pages in docs/img: builds the release binary,
# then runs the browser tests (tests/browser), which save each page at its telling moment
# when SCALPEL_SCREENSHOTS names a folder. Never edit these images by hand.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
[ -d tests/browser/node_modules ] || (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
cargo build --release -p scalpel
mkdir -p docs/img
(cd tests/browser && SCALPEL_SCREENSHOTS="$ROOT/docs/img" node --test)
ls -l docs/img/live-*.png
