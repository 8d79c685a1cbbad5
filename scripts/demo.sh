#!/usr/bin/env bash
# README command one: set up .venv, then run the CPU demo end to end on real vLLM.
# Output: runs/cpu-demo/report.html (+ summary.json, requests.jsonl, notebooks, logs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT="${1:-runs/cpu-demo}"
if [[ -e "$OUT" ]]; then
  mv "$OUT" "$OUT.old-$(date +%Y%m%d-%H%M%S)"
fi
.venv/bin/python -m speclib run params/cpu-demo.yaml --out "$OUT"
echo "open $OUT/report.html"
