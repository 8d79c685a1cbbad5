#!/usr/bin/env bash
# On the GPU machine (the vLLM bundle unpacked in /tmp/site by ../shared/gpu/unpack.sh): the
# GPU demo (params/gpu-demo.yaml: a synthetic Qwen3-4B-shaped pair the run builds there) in
# few device calls, each at most 600 s. Steps, chained in one call or spread over several:
#   bash scripts/gpu_demo.sh run        speclib run params/gpu-demo.yaml --detach (/tmp/demo-run)
#   bash scripts/gpu_demo.sh wait [S]   wait up to S seconds (default 540) for the run to end,
#                                       on its report or on its error alike
#   bash scripts/gpu_demo.sh finish     summary, manifest, params, report, run log and the raw
#                                       run folder (no notebooks, pids, analyses) into $OUT
# Every call carries speclib/notebooks (a git-ignored link to notebooks/ that setup.sh makes).
set -euo pipefail
cd "$(dirname "$0")/.."
run=/tmp/demo-run
[[ -f /tmp/site/env.sh ]] && source /tmp/site/env.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
py=${PYTHON:-python3}
running() { pgrep -f "[s]peclib run --out $run" >/dev/null; }
while [[ $# -gt 0 ]]; do
  step=$1; shift
  case "$step" in
  run)
    "$py" -m speclib validate params/gpu-demo.yaml
    "$py" -m speclib run params/gpu-demo.yaml --detach --out "$run"
    date +%s > /tmp/demo-run.started ;;
  wait)
    limit=540
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then limit=$1; shift; fi
    end=$(( $(date +%s) + limit ))
    while [[ $(date +%s) -lt $end ]] && running; do sleep 5; done
    if running; then state="still running"; else state="ended"; fi
    echo "$state after $(( $(date +%s) - $(cat /tmp/demo-run.started) )) s:"
    tail -n 25 "$run/run.log" ;;
  finish)
    if running; then echo "the run is still going"; exit 1; fi
    out=${OUT:-/tmp/demo-out}; mkdir -p "$out"
    for f in summary.json manifest.json params.yaml report.html run.log; do
      [[ -f "$run/$f" ]] && cp "$run/$f" "$out/"
    done
    tar -czf "$out"/run-gpu-raw.tgz -C "$(dirname "$run")" --exclude=notebooks --exclude='*.pid' \
      --exclude=analyses "$(basename "$run")"
    ls -l "$out" ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
