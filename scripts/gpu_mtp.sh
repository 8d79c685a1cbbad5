#!/usr/bin/env bash
# On the GPU machine (the vLLM bundle unpacked in /tmp/site by ../shared/gpu/unpack.sh): the
# MTP run of params/gpu-mtp.yaml, in few device calls, beside the coder pair's transfer.
#   bash scripts/gpu_mtp.sh start     build the synthetic MiMo target (speclib build-demo
#                                     --synthetic qwen3-4b --mtp), then speclib run
#                                     params/gpu-mtp.yaml --detach (/tmp/mtp-run)
#   bash scripts/gpu_mtp.sh wait [S]  wait up to S seconds (default 0) for the run to end; the
#                                     tail of its log
#   bash scripts/gpu_mtp.sh finish    the evidence (summary, manifest, report, the raw run
#                                     folder) into $OUT/mtp
# Every call carries speclib/notebooks too (the link scripts/setup.sh makes to notebooks/,
# git-ignored, so it does not travel by itself): without it the run's first block dies
# with "No such file or directory: .../speclib/notebooks/10_series.ipynb".
set -euo pipefail
cd "$(dirname "$0")/.."
run=/tmp/mtp-run
[[ -f /tmp/site/env.sh ]] && source /tmp/site/env.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1  # the notebooks' kernels import speclib
py=${PYTHON:-python3}
source scripts/gpu_run_steps.sh
while [[ $# -gt 0 ]]; do
  step=$1; shift
  case "$step" in
  start)
    t0=$(date +%s)
    "$py" -m speclib build-demo --synthetic qwen3-4b --mtp --quiet
    echo "built in $(( $(date +%s) - t0 )) s"
    "$py" -m speclib validate params/gpu-mtp.yaml | tail -n 2
    "$py" -m speclib run params/gpu-mtp.yaml --detach --out "$run"
    date +%s > /tmp/mtp-run.started ;;
  wait)
    limit=0
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then limit=$1; shift; fi
    echo -n "mtp: "
    wait_for_run "$run" /tmp/mtp-run.started "$limit" 3 ;;
  finish)
    pack_run "$run" "${OUT:-/tmp/mtp-out}/mtp" summary.json manifest.json report.html \
      params.yaml ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
