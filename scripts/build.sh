#!/usr/bin/env bash
# Builds every binary and artifact in release mode: the scalpel toolkit, the QR ladder
# (CLI, server, wasm modules, napi addon) and the payments services (Rust and Go).
# Honors CARGO_TARGET_DIR. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

bash scripts/setup.sh
echo "==> cargo build --release (workspace)"
cargo build --release --workspace --bins
bash scripts/build-qr.sh
bash scripts/build-go.sh
