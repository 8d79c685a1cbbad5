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
    end=$(( $(date +%s) + limit ))
    while [[ $(date +%s) -lt $end ]] && pgrep -f "speclib run --out $run" >/dev/null; do sleep 5; done
    state=ended; pgrep -f "speclib run --out $run" >/dev/null && state="still running"
    echo "mtp: $state after $(( $(date +%s) - $(cat /tmp/mtp-run.started) )) s"
    tail -n 3 "$run/run.log" 2>/dev/null || true ;;
  finish)
    out=${OUT:-/tmp/mtp-out}/mtp; mkdir -p "$out"
    for f in summary.json manifest.json report.html params.yaml; do
      cp "$run/$f" "$out/" 2>/dev/null || true
    done
    tar -czf "$out"/run-gpu-raw.tgz -C "$(dirname "$run")" --exclude=notebooks --exclude='*.pid' \
      --exclude=analyses "$(basename "$run")"
    ls -l "$out" ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
