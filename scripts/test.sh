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
# Two tiers, one after the other. Tests not marked `alone` (stand-in servers; real servers
# that start, fail or die; the real sampled, multi-turn and synthetic runs, whose tests check
# outputs, not timings) run on SPECLIB_TEST_WORKERS pytest-xdist workers (2; a file stays on
# one worker, so its fixtures run once). Tests marked `alone` check the real demo run's
# timings against vLLM's stamps: they run serially afterwards, with nothing else running.
# With a test path (or any other argument that is not an option) pytest runs once, serially,
# on what was asked.
for arg in "$@"; do
  [[ "$arg" == -* ]] || exec .venv/bin/python -m pytest "$@"
done
rc=0
.venv/bin/python -m pytest -m "not alone" -n "${SPECLIB_TEST_WORKERS:-2}" --dist loadfile "$@" || rc=$?
.venv/bin/python -m pytest -m alone "$@" || rc=$?
exit "$rc"
