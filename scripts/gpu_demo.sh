#!/usr/bin/env bash
# On the GPU machine (the vLLM bundle unpacked in /tmp/site by ../shared/gpu/unpack.sh): the
# GPU demo (params/gpu-demo.yaml: a synthetic Qwen3-4B-shaped pair the run builds there) in
# few device calls, each at most 600 s. Steps, chained in one call or spread over several:
#   bash scripts/gpu_demo.sh run [B]    speclib run params/gpu-demo.yaml --detach (/tmp/demo-run);
#                                       B: protocol.budget_min of a copy, if less time is left
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
source scripts/gpu_run_steps.sh
while [[ $# -gt 0 ]]; do
  step=$1; shift
  case "$step" in
  run)
    # run [BUDGET_MIN]: a device session with less time than the file's 15 min sets its own
    # protocol.budget_min (a copy of the params beside the original, so its paths hold)
    params=params/gpu-demo.yaml
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
      "$py" - "$1" <<'PY'
import sys
import yaml
data = yaml.safe_load(open("params/gpu-demo.yaml"))
data["protocol"]["budget_min"] = float(sys.argv[1])
yaml.safe_dump(data, open("params/gpu-demo-session.yaml", "w"), sort_keys=False)
PY
      params=params/gpu-demo-session.yaml; shift
    fi
    "$py" -m speclib validate "$params"
    "$py" -m speclib run "$params" --detach --out "$run"
    date +%s > /tmp/demo-run.started ;;
  wait)
    limit=540
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then limit=$1; shift; fi
    wait_for_run "$run" /tmp/demo-run.started "$limit" 25 ;;
  finish)
    if run_going "$run"; then echo "the run is still going"; exit 1; fi
    pack_run "$run" "${OUT:-/tmp/demo-out}" summary.json manifest.json params.yaml report.html \
      run.log ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
