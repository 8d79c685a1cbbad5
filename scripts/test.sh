#!/usr/bin/env bash
# README command two: set up .venv (and Chromium for the browser test), then run every test:
# lint, unit tests, real-vLLM integration tests and the papermill end-to-end run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 && [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null; then
  echo "[test] installing Debian's chromium for the report browser test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "[test] could not install chromium: the browser test will fail"
fi
.venv/bin/ruff check speclib tests scripts
.venv/bin/ruff format --check speclib tests scripts
.venv/bin/lint-imports
.venv/bin/python -m pytest "$@"
