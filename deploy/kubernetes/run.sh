#!/usr/bin/env bash
# Runs one sharded load test on the current kubectl context and merges the results:
#
#   deploy/kubernetes/run.sh [OUT_DIR]
#
# 1. applies the data ConfigMap and the Indexed Job with a common start time (now + LEAD
#    seconds, so every pod is scheduled and pulled before the clock starts) and a run id;
# 2. waits for the Job to complete (or fail);
# 3. reads each shard's JSON result from its pod's log (stdout), one file per index;
# 4. runs `scalpel report merge`, which checks that all N shards of this run are there,
#    none twice, same settings, and re-judges the SLO on the whole run (exit 1 if broken).
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
        -o jsonpath='{.items[0].metadata.name}')
    kubectl logs "$pod" -c scalpel >"$OUT/shard-$i.json" ||
        echo "shard $i: no log from pod $pod" >&2
done

"$SCALPEL" report merge "$OUT"/shard-*.json --json "$OUT/merged.json" --html "$OUT/merged.html"
