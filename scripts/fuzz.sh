#!/usr/bin/env bash
# The long fuzz run: every property test of the parsers that face the network or the user
# (HTTP/1 heads and chunked bodies, URLs, SLO expressions, durations and sizes, templates,
# data files, mix files, access logs, HAR, capture files, JSON paths, ignore and redaction
# rules, route patterns, Content-Encoding decoding) with many more cases than `./run test`
# gives them (256–512 each there).
#
#   ./run fuzz              PROPTEST_CASES=100000 (about 15–30 minutes on 2 cores)
#   CASES=1000000 ./run fuzz
#
# A failure prints the shrunk input that broke the property; add it as a unit test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export PROPTEST_CASES="${CASES:-100000}"
start=$SECONDS
run() {
    printf '==> [%5ss] %s\n' "$((SECONDS - start))" "$*"
    cargo test --release --quiet "$@"
}
run -p scalpel-units --lib
run -p scalpel-http --lib fuzz_
run -p scalpel-load --lib -- slo:: request::
run -p scalpel-diff --test props
run -p scalpel-shadow --test props
run -p scalpel-requests --test props
echo "fuzz: all properties held at $PROPTEST_CASES cases each in $((SECONDS - start))s"
