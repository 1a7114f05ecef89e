#!/usr/bin/env bash
# Runs one sharded load test on the current kubectl context and merges the results:
#
#   deploy/kubernetes/run.sh [OUT_DIR]
#
# 1. applies the data ConfigMap and the Indexed Job with a common start time (now + LEAD
#    seconds, so every pod is scheduled and pulled before the clock starts) and a run id;
# 2. waits for the Job to complete (or fail);
# 3. reads each shard's JSON result from its pod's log, one file per index: `--json -`
#    prints it as one line starting with {"format_version" (kubectl logs interleaves the
#    table and any warnings from stderr, so the line is picked out by that prefix);
# 4. runs `scalpel report merge`, which checks that all N shards of this run are there,
#    none twice, same settings, re-judges the SLO on the whole run and shows each shard's
#    own figures (exit 1 if the SLO broke, 2 if the set is incomplete or mixed).
#
# Exit status: that of the merge.
#
# Needs: kubectl pointed at the cluster, the image `scalpel:latest` reachable by its
# nodes (deploy/Containerfile), and a local `scalpel` binary for the merge.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-scalpel-run}"
LEAD="${LEAD:-60}"
TIMEOUT="${TIMEOUT:-3600s}"
SCALPEL="${SCALPEL:-scalpel}"
mkdir -p "$OUT"

start_at=$(( $(date +%s) + LEAD ))
run_id="k8s-$start_at"
shards=$(sed -n 's/^  completions: \([0-9]*\)$/\1/p' "$HERE/job.yaml")
echo "run $run_id: $shards shards, start at $(date -u -d "@$start_at" +%FT%TZ)" >&2

kubectl apply -f "$HERE/configmap.yaml"
kubectl delete job scalpel-load --ignore-not-found --wait=true
sed -e "s/START_AT_PLACEHOLDER/$start_at/" -e "s/RUN_ID_PLACEHOLDER/$run_id/" "$HERE/job.yaml" |
    kubectl apply -f -

# `kubectl wait` takes one condition; wait for either end, whichever comes first.
kubectl wait --for=condition=complete job/scalpel-load --timeout="$TIMEOUT" &
ok=$!
kubectl wait --for=condition=failed job/scalpel-load --timeout="$TIMEOUT" &
bad=$!
wait -n "$ok" "$bad" || true
kill "$ok" "$bad" 2>/dev/null || true

for i in $(seq 0 $((shards - 1))); do
    pod=$(kubectl get pods -l "job-name=scalpel-load,batch.kubernetes.io/job-completion-index=$i" \
        -o jsonpath='{.items[0].metadata.name}' || true)
    if [ -z "$pod" ]; then
        echo "shard $i: no pod (the merge will name it missing)" >&2
        continue
    fi
    kubectl logs "$pod" -c scalpel >"$OUT/shard-$i.log" ||
        echo "shard $i: no log from pod $pod" >&2
    grep -m1 '^{"format_version"' "$OUT/shard-$i.log" >"$OUT/shard-$i.json" || {
        echo "shard $i: no result in the log of pod $pod (see $OUT/shard-$i.log)" >&2
        rm -f "$OUT/shard-$i.json"
    }
done

shopt -s nullglob
results=("$OUT"/shard-*.json)
[ "${#results[@]}" -gt 0 ] || { echo "no shard left a result" >&2; exit 2; }
"$SCALPEL" report merge "${results[@]}" -o "$OUT/merged.json" --html "$OUT/merged.html"
