# Sourced by the bench scripts: `stats SUBCOMMAND …`, the one implementation of their
# arithmetic — medians, min–max, ratios of medians, CPU per request, fields of result
# files (scripts/lib/stats.py lists the subcommands; its selftest runs in ./run test).
STATS_PY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/stats.py"
stats() { python3 "$STATS_PY" "$@"; }
