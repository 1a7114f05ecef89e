#!/usr/bin/env bash
# Instructions per call of qr_core::png, counted by callgrind (stable under load, unlike
# time): for each text, `percall --calls N` runs under callgrind with N = LOW and N = HIGH;
# (Ir(HIGH) - Ir(LOW)) / (HIGH - LOW) is one call, start-up and warm-up cancelled.
#
#   bash qr/core/benches/callgrind.sh [PERCALL_BINARY]
#
# Default binary: $CARGO_TARGET_DIR/release/examples/percall (build it with
# `cargo build --release -p qr-core --example percall`). Prints a markdown table row per text.
set -euo pipefail
target=${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/../../.." && pwd)/target}
bin=${1:-$target/release/examples/percall}
LOW=${LOW:-5}
HIGH=${HIGH:-55}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

texts=(
  'hello world'
  'https://example.com/orders/12345?ref=qr&x=1'
  'https://example.com/some/fairly/long/path?with=query'
  "$(printf 'k%.0s' $(seq 256))"
  "$(printf 'z%.0s' $(seq 512))"
)

instructions() { # text-file calls
  valgrind --tool=callgrind --callgrind-out-file="$work/out" "$bin" --texts "$1" --calls "$2" \
    2>"$work/log" >/dev/null
  grep -o 'Collected : [0-9]*' "$work/log" | grep -o '[0-9]*'
}

echo "| text | bytes | instructions per call |"
echo "|---|---|---|"
for text in "${texts[@]}"; do
  python3 -c 'import json,sys; print(json.dumps([sys.argv[1]]))' "$text" >"$work/text.json"
  low=$(instructions "$work/text.json" "$LOW")
  high=$(instructions "$work/text.json" "$HIGH")
  label=${text:0:24}
  [ ${#text} -gt 24 ] && label="$label…"
  echo "| \`$label\` | $(printf %s "$text" | wc -c) | $(( (high - low) / (HIGH - LOW) )) |"
done
