#!/usr/bin/env bash
# Builds every Rust artifact of the QR tier ladder (docs/qr.md), idempotently:
#   $T/release/qr-cli, $T/release/qr-server       tiers 1 and 4
#   $T/qr/wasm-bindgen/qr_wasm.js (+ _bg.wasm)     tier 2   (wasm-bindgen --target nodejs)
#   $T/qr/qr_raw.wasm                              tier 2-raw (hand-written ABI)
#   $T/qr/qr_napi.node                             tier 3   (napi-rs addon)
# where T = ${CARGO_TARGET_DIR:-<repo>/target}. Installs the wasm32 target and the
# wasm-bindgen CLI matching the pinned crate version when they are missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
T="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TARGET_DIR="$T"
WASM_TARGET=wasm32-unknown-unknown

# The CLI must be the exact version of the `wasm-bindgen = "=X"` pin in Cargo.toml.
WB_VERSION="$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' Cargo.toml)"
[[ -n "$WB_VERSION" ]] || { echo "build-qr: no exact wasm-bindgen pin in Cargo.toml" >&2; exit 1; }

echo "build-qr: target dir $T"
rustup target add "$WASM_TARGET" >/dev/null

if [[ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $WB_VERSION" ]]; then
  echo "build-qr: installing wasm-bindgen-cli $WB_VERSION"
  # --locked first (reproducible); some registry mirrors lack a crate its lockfile
  # pins, then resolve afresh within the CLI's own semver ranges.
  cargo install wasm-bindgen-cli --version "$WB_VERSION" --locked \
    || cargo install wasm-bindgen-cli --version "$WB_VERSION"
fi

cargo build --release -p qr-cli -p qr-server -p qr-napi

mkdir -p "$T/qr/wasm-bindgen"
# Tier 2: wasm-bindgen build (default feature `bindgen`), then the JS glue.
cargo build --release -p qr-wasm --target "$WASM_TARGET"
wasm-bindgen --target nodejs --out-dir "$T/qr/wasm-bindgen" \
  "$T/$WASM_TARGET/release/qr_wasm.wasm"
# Tier 2-raw: same crate, raw ABI only (no wasm-bindgen), copied under its own name.
cargo build --release -p qr-wasm --target "$WASM_TARGET" --no-default-features --features raw
cp "$T/$WASM_TARGET/release/qr_wasm.wasm" "$T/qr/qr_raw.wasm"

# Tier 3: the cdylib is the addon; node loads it by the .node name.
cp "$T/release/libqr_napi.so" "$T/qr/qr_napi.node"

echo "build-qr: built"
for f in "$T/release/qr-cli" "$T/release/qr-server" "$T/qr/wasm-bindgen/qr_wasm.js" \
         "$T/qr/wasm-bindgen/qr_wasm_bg.wasm" "$T/qr/qr_raw.wasm" "$T/qr/qr_napi.node"; do
  printf '  %8d  %s\n' "$(stat -c %s "$f")" "$f"
done
