"""A non-editable install runs the kit: the package (notebooks included as package data) is
built into a wheel and installed into a separate folder, then `speclib run` works from there
against the stand-in server, without the repository on the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import fake_servers_left
from tests.unit.test_robustness import REPO, _params

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(REPO)],
        capture_output=True, text=True, timeout=600, cwd=build,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return target


def test_the_wheel_carries_the_notebooks(installed: Path) -> None:
    notebooks = installed / "speclib" / "notebooks"
    assert notebooks.is_dir() and not notebooks.is_symlink()
    assert {p.name for p in notebooks.glob("*.ipynb")} == {
        "00_setup.ipynb",
        "10_series.ipynb",
        "20_analysis.ipynb",
    }


def test_speclib_run_works_from_a_non_editable_install(installed: Path, tmp_path: Path) -> None:
    params = _params(tmp_path, n_prompts=3)
    data = yaml.safe_load(params.read_text())
    data["workload"]["replicates"] = 2
    params.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": str(installed)}
    where = subprocess.run(
        [sys.executable, "-c", "import speclib; print(speclib.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(installed)), where.stdout
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(out), "--quiet"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "report.html").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert {c["experiment"] for c in summary["comparisons"]} == {"spec"}
    assert fake_servers_left() == []
