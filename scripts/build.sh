#!/usr/bin/env bash
# Builds every binary and artifact in release mode: the scalpel toolkit, the QR ladder
# (CLI, server, wasm modules, napi addon) and the payments services (Rust and Go).
# Honors CARGO_TARGET_DIR. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

bash scripts/setup.sh
# One cargo invocation for every host artifact (binaries, the napi addon's cdylib, the
# examples such as qr-core's percall): cargo unifies features over what one invocation
# builds, so per-package builds (-p qr-server, -p qr-core --example) compiled tokio, hyper,
# clap, serde and criterion again with other features. `cargo test --release` then reuses
# all of it (docs/CI.md).
echo "==> cargo build --release (workspace: binaries, libraries, examples)"
# pyo3 configured as maturin configures it, so the Python wheel reuses this build
# shellcheck source=lib/pyo3-env.sh
source scripts/lib/pyo3-env.sh
cargo build --release --workspace --bins --lib --examples
SCALPEL_HOST_BUILT=1 bash scripts/build-qr.sh
# The workspace build above made payments-ffi's static library for the Go service's cgo
# engine; a `-p payments-ffi` build would compile syn and the proc macros above it again
# with fewer features.
SCALPEL_HOST_BUILT=1 bash scripts/build-go.sh
