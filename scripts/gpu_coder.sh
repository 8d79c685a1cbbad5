#!/usr/bin/env bash
# On the GPU machine (no package index; the vLLM bundle unpacked in /tmp/site by
# ../shared/gpu/unpack.sh): the real coder pair end to end, in few device calls.
#   bash scripts/gpu_coder.sh receive  (every call that carries .gpu-models/send) keep what
#                                      arrived in /tmp/coder-pieces; say how many are missing
#   bash scripts/gpu_coder.sh build    reassemble both GGUFs, check their sha256, build the
#                                      bf16 target/ and draft/ folders (speclib build-demo
#                                      --real qwen2.5-coder --gguf ...), GGUFs removed after
#   bash scripts/gpu_coder.sh run [B [N]]  speclib run params/coder-gpu.yaml --detach (/tmp/coder-run);
#                                      B: protocol.budget_min, N: planned blocks (a copy)
#   bash scripts/gpu_coder.sh wait [S] wait up to S seconds (default 540) for the run to end
#   bash scripts/gpu_coder.sh finish   speclib replay-acceptance --analyze, then the evidence
#                                      (summary, manifest, report, replay, divergences, build
#                                      info, the raw run folder) into $OUT
# Every call carries speclib/notebooks too (the link scripts/setup.sh makes to notebooks/,
# git-ignored, so it does not travel by itself): without it the run's first block dies
# with "No such file or directory: .../speclib/notebooks/10_series.ipynb".
# build dequantises on the GPU when one is free; beside running servers it runs out of
# memory: then CUDA_VISIBLE_DEVICES= bash scripts/gpu_coder.sh build (148 s on 16 cores).
# One call can chain them (each call at most 600 s): `bash scripts/gpu_coder.sh receive build run
# wait 360`, then `wait 540`, then `wait 300 finish`.
set -euo pipefail
cd "$(dirname "$0")/.."
pieces=/tmp/coder-pieces run=/tmp/coder-run
[[ -f /tmp/site/env.sh ]] && source /tmp/site/env.sh
export PYTHONPATH="/tmp/coder-site:$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
py=${PYTHON:-python3}
source scripts/gpu_run_steps.sh
while [[ $# -gt 0 ]]; do
  step=$1; shift
  case "$step" in
  receive)
    mkdir -p "$pieces"
    # .gpu-models/send (gpu_pieces.sh next), or any .gpu-models/sNN (gpu_pieces.sh stage)
    for d in .gpu-models/send .gpu-models/s[0-9]*; do
      [[ -d "$d" ]] || continue
      for f in "$d"/*; do [[ -e "$f" ]] && mv -f "$f" "$pieces/"; done
    done
    for w in "$pieces"/gguf-*.whl; do
      [[ -e "$w" ]] && "$py" -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target /tmp/coder-site "$w" && rm -f "$w"
    done
    if [[ -f "$pieces/pieces.txt" ]]; then
      total=$(wc -l < "$pieces/pieces.txt")
      missing=$(cd "$pieces" && while read -r p; do [[ -f "$p" ]] || echo "$p"; done < pieces.txt)
      n=$(echo -n "$missing" | grep -c . || true)
      echo "have $(( total - n )) of $total pieces${missing:+; $n missing, first $(echo "$missing" | head -1)}"
    else
      echo "$(ls "$pieces" | grep -c part- || true) pieces here; pieces.txt not yet"
    fi ;;
  build)
    t0=$(date +%s)
    (cd "$pieces" && cat $(grep '^target' pieces.txt) > target.gguf \
      && cat $(grep '^draft' pieces.txt) > draft.gguf && sha256sum -c gguf.sha256)
    "$py" -m speclib build-demo --real qwen2.5-coder \
      --gguf target="$pieces/target.gguf" --gguf draft="$pieces/draft.gguf"
    rm -f "$pieces"/*.gguf
    echo "built in $(( $(date +%s) - t0 )) s" ;;
  run)
    # run [BUDGET_MIN [PLANNED]]: the device session's time left decides the budget (and,
    # if short, fewer planned blocks): a copy of the params with protocol.budget_min and
    # workload.replicates set, beside the original so its relative paths hold.
    params=params/coder-gpu.yaml
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
      budget=$1; shift; planned=3
      if [[ "${1:-}" =~ ^[0-9]+$ ]]; then planned=$1; shift; fi
      "$py" - "$budget" "$planned" <<'PY'
import sys
import yaml
data = yaml.safe_load(open("params/coder-gpu.yaml"))
data["protocol"]["budget_min"] = float(sys.argv[1])
data["workload"]["replicates"] = int(sys.argv[2])
yaml.safe_dump(data, open("params/coder-gpu-session.yaml", "w"), sort_keys=False)
PY
      params=params/coder-gpu-session.yaml
    fi
    "$py" -m speclib validate "$params"
    "$py" -m speclib run "$params" --detach --out "$run"
    date +%s > /tmp/coder-run.started ;;
  wait)
    limit=540
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then limit=$1; shift; fi
    wait_for_run "$run" /tmp/coder-run.started "$limit" 25 ;;
  finish)
    if run_going "$run"; then echo "the run is still going"; exit 1; fi
    "$py" -m speclib replay-acceptance "$run" --analyze 2>&1 | tee "$run/replay.log"
    out=${OUT:-/tmp/coder-out}; mkdir -p "$out"
    info=$(ls -d ~/.cache/speclib/real-qwen2.5-coder-*/build-info.json | head -1)
    cp "$info" "$out"/build-info.json
    cp "$run"/summary.json "$run"/manifest.json "$run"/report.html "$run"/replay.log "$out"/
    pack_run "$run" "$out" acceptance_replay.json ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
