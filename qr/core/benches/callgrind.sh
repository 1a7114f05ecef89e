#!/usr/bin/env bash
# Instructions per call of qr_core::png, counted by callgrind (stable under load, unlike
# time): for each text, `percall --calls N` runs under callgrind with N = LOW and N = HIGH;
# (Ir(HIGH) - Ir(LOW)) / (HIGH - LOW) is one call, start-up and warm-up cancelled.
#
#   bash qr/core/benches/callgrind.sh                  # this tree's build
#   bash qr/core/benches/callgrind.sh --before REV     # REV's render beside this tree's
#
# This tree's binary: $CARGO_TARGET_DIR/release/examples/percall, built first. With
# --before, REV (e.g. 9491f26, main before issue #27) is checked out in a temporary git
# worktree, given this tree's examples/percall.rs (REV's may lack --calls; the function
# timed is REV's), and built in $CARGO_TARGET_DIR/qr-before; the table gets both columns and
# their ratio. Needs valgrind. Prints a markdown table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
LOW=${LOW:-5}
HIGH=${HIGH:-55}
before_rev=
if [[ "${1:-}" == --before ]]; then
  before_rev=${2:?--before needs a revision}
fi
work=$(mktemp -d)
cleanup() {
  if [[ -n "$before_rev" && -d "$work/tree" ]]; then
    git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

(cd "$root" && CARGO_TARGET_DIR="$target" cargo build --release -q -p qr-core --example percall)
after_bin=$target/release/examples/percall
before_bin=
if [[ -n "$before_rev" ]]; then
  git -C "$root" worktree add --detach "$work/tree" "$before_rev" >/dev/null 2>&1
  cp "$root/qr/core/examples/percall.rs" "$work/tree/qr/core/examples/percall.rs"
  (cd "$work/tree" && CARGO_TARGET_DIR="$target/qr-before" \
    cargo build --release -q -p qr-core --example percall)
  before_bin=$target/qr-before/release/examples/percall
fi

texts=(
  'hello world'
  'https://example.com/orders/12345?ref=qr&x=1'
  'https://example.com/some/fairly/long/path?with=query'
  "$(printf 'k%.0s' $(seq 256))"
  "$(printf 'z%.0s' $(seq 512))"
)

instructions() { # binary text-file calls
  valgrind --tool=callgrind --callgrind-out-file="$work/out" "$1" --texts "$2" --calls "$3" \
    2>"$work/log" >/dev/null
  grep -o 'Collected : [0-9]*' "$work/log" | grep -o '[0-9]*'
}

per_call() { # binary text-file
  local low high
  low=$(instructions "$1" "$2" "$LOW")
  high=$(instructions "$1" "$2" "$HIGH")
  echo $(((high - low) / (HIGH - LOW)))
}

if [[ -n "$before_bin" ]]; then
  echo "| text | bytes | before ($before_rev) | after | before / after |"
  echo "|---|---|---|---|---|"
else
  echo "| text | bytes | instructions per call |"
  echo "|---|---|---|"
fi
for text in "${texts[@]}"; do
  python3 -c 'import json,sys; print(json.dumps([sys.argv[1]]))' "$text" >"$work/text.json"
  label=${text:0:24}
  [ ${#text} -gt 24 ] && label="$label…"
  bytes=$(printf %s "$text" | wc -c)
  after=$(per_call "$after_bin" "$work/text.json")
  if [[ -n "$before_bin" ]]; then
    before=$(per_call "$before_bin" "$work/text.json")
    ratio=$(python3 -c "print(f'{$before / $after:.2f}x')")
    echo "| \`$label\` | $bytes | $before | $after | $ratio |"
  else
    echo "| \`$label\` | $bytes | $after |"
  fi
done
