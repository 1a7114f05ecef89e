#!/usr/bin/env bash
# The QR ladder's per-call benchmark: every tier as the Node process sees it, in one run,
# alternating, with repeats (median and min-max). Writes nothing unless --json FILE.
#
#   bash scripts/bench-qr.sh            # the recorded run (~1 min Node, ~2 min Python)
#   bash scripts/bench-qr.sh --quick    # a few seconds each (the per-call tables of the README)
#   bash scripts/bench-qr.sh --python [--quick]  # the Python host's table only (qr/python/bench/percall.py)
#   bash scripts/bench-qr.sh --pyo3-load  # Python tier 3 sync vs thread pool, served (~1 min)
#   bash scripts/bench-qr.sh --napi-load  # the napi sync/async choice under HTTP load (wrk, ~2 min)
#   bash scripts/bench-qr.sh --wasm-flags # wasm build flags (opt-level, simd128, wasm-opt), ~3 min
#
# Other flags go to qr/node/bench/percall.js (--repeats N, --ms-per-text MS, --json FILE), then
# to the Python host's per-call bench, run after it in the host's venv (--json FILE.python.json):
# the bare Rust call, PyO3, wasmtime and the CLI as a Python process sees them.
# Builds the Rust artifacts and installs the Node packages when they are missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
T="$CARGO_TARGET_DIR"

missing=0
for f in "$T/release/qr-cli" "$T/release/qr-server" "$T/qr/wasm-bindgen/qr_wasm.js" "$T/qr/qr_raw.wasm" \
         "$T/qr/qr_napi.node" "$T/release/examples/percall" "$T/qr/venv/bin/python"; do
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
if [ "${1:-}" = "--wasm-flags" ]; then
    shift
    # Raw-ABI builds of qr-wasm, one target dir per flag set (no rebuild when flipping),
    # each also passed through wasm-opt -O3 (npm binaryen, installed by build-qr.sh).
    out="$T/qr/wasm-flags"
    rm -rf "$out" && mkdir -p "$out"
    WASM_OPT="$T/qr/binaryen/node_modules/.bin/wasm-opt"
    for cfg in "o3:3:" "o3-simd128:3:-C target-feature=+simd128" "os:s:" "os-simd128:s:-C target-feature=+simd128"; do
        IFS=: read -r name opt flags <<<"$cfg"
        echo "==> building $name (opt-level=$opt, rustflags: ${flags:-none})" >&2
        CARGO_TARGET_DIR="$T/wasm-flags/$name" CARGO_PROFILE_RELEASE_OPT_LEVEL="$opt" \
            CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$flags -C strip=debuginfo" \
            cargo build --quiet --release -p qr-wasm --target wasm32-unknown-unknown \
            --no-default-features --features raw >&2
        cp "$T/wasm-flags/$name/wasm32-unknown-unknown/release/qr_wasm.wasm" "$out/$name.wasm"
        if [ -x "$WASM_OPT" ]; then
            "$WASM_OPT" -O3 --enable-bulk-memory --enable-multivalue --enable-mutable-globals \
                --enable-nontrapping-float-to-int --enable-reference-types --enable-sign-ext \
                --enable-simd "$out/$name.wasm" -o "$out/$name+wasm-opt.wasm"
        fi
    done
    exec node qr/node/bench/wasm-flags.js "$out" "$@"
fi
python_args=()
prev=""
for a in "$@"; do
    if [ "$prev" = "--json" ]; then python_args+=("$a.python.json"); else python_args+=("$a"); fi
    prev="$a"
done
if [ "${1:-}" = "--pyo3-load" ]; then
    exec "$T/qr/venv/bin/python" qr/python/bench/native_mode.py "${python_args[@]:1}"
fi
if [ "${1:-}" = "--python" ]; then
    exec "$T/qr/venv/bin/python" qr/python/bench/percall.py "${python_args[@]:1}"
fi
node qr/node/bench/percall.js "$@"
echo
exec "$T/qr/venv/bin/python" qr/python/bench/percall.py "${python_args[@]}"
