#!/usr/bin/env bash
# Builds every Rust artifact of the QR tier ladder (docs/qr.md), idempotently:
#   $T/release/qr-cli, $T/release/qr-server       tiers 1 and 4
#   $T/qr/wasm-bindgen/qr_wasm.js (+ _bg.wasm)     tier 2   (wasm-bindgen --target nodejs)
#   $T/qr/qr_raw.wasm                              tier 2-raw (hand-written ABI)
#   $T/qr/qr_napi.node                             tier 3   (napi-rs addon)
#   $T/release/examples/percall                    the bare qr_core::png, timed (bench/percall.js)
#   $T/qr/venv                                     the Python host's virtual environment
#                                                  (qr/python/requirements.txt, exact versions)
#   $T/qr/wheels/qr_pyo3-*-abi3-*.whl              Python tier 3 (PyO3, maturin), installed in it
# where T = ${CARGO_TARGET_DIR:-<repo>/target}. Installs the wasm32 target and the
# wasm-bindgen CLI matching the pinned crate version when they are missing, and npm
# `binaryen` (its wasm-opt, a JS/wasm build) under $T/qr/binaryen.
#
# Wasm flags (measured, docs/qr-node.md "Wasm build flags"): both wasm artifacts get the
# same flags, `-C target-feature=+simd128` (wasm's SIMD, on in Node >= 16; the wasm
# counterpart of the SSE2 baseline every x86-64 build has; no target-cpu=native on any
# tier) and `-C strip=debuginfo` (the workspace's line tables made qr_raw.wasm 2.3 MB),
# then `wasm-opt -O3`. opt-level stays the workspace's 3 (`s` measured slower).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
T="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TARGET_DIR="$T"
WASM_TARGET=wasm32-unknown-unknown
BINARYEN_VERSION=132.0.0
# rustc's default wasm32 features (Rust 1.95) plus simd128, spelled for wasm-opt.
WASM_OPT_FEATURES=(--enable-bulk-memory --enable-multivalue --enable-mutable-globals
  --enable-nontrapping-float-to-int --enable-reference-types --enable-sign-ext --enable-simd)

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

WASM_OPT="$T/qr/binaryen/node_modules/.bin/wasm-opt"
if [[ ! -x "$WASM_OPT" ]] || ! grep -qs "\"version\": \"$BINARYEN_VERSION\"" "$T/qr/binaryen/node_modules/binaryen/package.json"; then
  echo "build-qr: installing npm binaryen@$BINARYEN_VERSION (wasm-opt) under $T/qr/binaryen"
  mkdir -p "$T/qr/binaryen"
  npm install --prefix "$T/qr/binaryen" --no-save --no-audit --no-fund --loglevel=error \
    "binaryen@$BINARYEN_VERSION" >&2 || echo "build-qr: WARNING: npm binaryen unavailable" >&2
fi

# The Python the pyo3 build script configures against, as maturin spells it (no rebuild).
# shellcheck source=lib/pyo3-env.sh
source scripts/lib/pyo3-env.sh

# build.sh builds these in its one workspace-wide invocation (features unified with the
# rest of the workspace, so nothing is compiled twice) and says so with SCALPEL_HOST_BUILT
if [[ "${SCALPEL_HOST_BUILT:-}" != 1 ]]; then
  cargo build --release -p qr-cli -p qr-server -p qr-napi -p qr-pyo3
  # The bare function, timed in the same run as the Node tiers (qr/node/bench/percall.js).
  cargo build --release -p qr-core --example percall
fi

# Same flags for both wasm artifacts (see the header).
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128 -C strip=debuginfo"
# wasm-opt -O3 in place, or the file as rustc left it (and a warning) without binaryen;
# $T/qr/wasm-opt.txt says which, for the bench's header.
wasm_opt() {
  if [[ -x "$WASM_OPT" ]]; then
    "$WASM_OPT" -O3 "${WASM_OPT_FEATURES[@]}" "$1" -o "$1.opt" && mv "$1.opt" "$1"
  else
    echo "build-qr: WARNING: no wasm-opt; $1 is not post-optimized (tier 2 ~1.1x slower)" >&2
    return 1
  fi
}
mkdir -p "$T/qr/wasm-bindgen"
# Tier 2: wasm-bindgen build (default feature `bindgen`), then the JS glue.
cargo build --release -p qr-wasm --target "$WASM_TARGET"
wasm-bindgen --target nodejs --out-dir "$T/qr/wasm-bindgen" \
  "$T/$WASM_TARGET/release/qr_wasm.wasm"
# Tier 2-raw: same crate, raw ABI only (no wasm-bindgen), copied under its own name.
cargo build --release -p qr-wasm --target "$WASM_TARGET" --no-default-features --features raw
cp "$T/$WASM_TARGET/release/qr_wasm.wasm" "$T/qr/qr_raw.wasm"
if wasm_opt "$T/qr/wasm-bindgen/qr_wasm_bg.wasm" && wasm_opt "$T/qr/qr_raw.wasm"; then
  echo "simd128, strip=debuginfo, wasm-opt -O3 (npm binaryen $BINARYEN_VERSION)" > "$T/qr/wasm-opt.txt"
else
  echo "simd128, strip=debuginfo, NO wasm-opt" > "$T/qr/wasm-opt.txt"
fi

# Tier 3: the cdylib is the addon; node loads it by the .node name.
cp "$T/release/libqr_napi.so" "$T/qr/qr_napi.node"

# The Python host (qr/python): its virtual environment, pinned packages installed only when
# requirements.txt changed, and tier 3's abi3 wheel (maturin reuses the cargo build above).
VENV="$T/qr/venv"
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
ensure_venv "$VENV" qr/python/requirements.txt "the Python host's"
rm -f "$T"/qr/wheels/qr_pyo3-*.whl
"$VENV/bin/maturin" build --quiet --release --manifest-path qr/pyo3/Cargo.toml --out "$T/qr/wheels" \
  --interpreter "${PYO3_PYTHON:-python3}"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$T"/qr/wheels/qr_pyo3-*.whl

echo "build-qr: built"
for f in "$T/release/qr-cli" "$T/release/qr-server" "$T/qr/wasm-bindgen/qr_wasm.js" \
         "$T/qr/wasm-bindgen/qr_wasm_bg.wasm" "$T/qr/qr_raw.wasm" "$T/qr/qr_napi.node" \
         "$T/release/examples/percall" "$T"/qr/wheels/qr_pyo3-*.whl; do
  printf '  %8d  %s\n' "$(stat -c %s "$f")" "$f"
done
