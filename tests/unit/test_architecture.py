"""The layers hold: import-linter's contracts pass, fail on a back-edge, and no private name
crosses a module boundary."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=300,
    )


def test_the_contracts_pass_on_the_tree() -> None:
    proc = _lint(REPO)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "4 kept, 0 broken" in proc.stdout


@pytest.mark.parametrize(
    ("module", "back_edge", "contract"),
    [
        ("core/records.py", "import speclib.app.runner", "Layers"),
        ("analysis/frames.py", "import speclib.serve.process", "Layers"),
        ("analysis/stats/paired.py", "import speclib.core.httpapi", "Analysis never talks"),
        ("run/requests.py", "import speclib.run.block", "No import cycles"),
        ("analysis/stats/blocks.py", "import speclib.analysis.verdict.decision", "Analysis layers"),
        ("analysis/spec/why.py", "import speclib.analysis.verdict.comparisons", "Analysis layers"),
        ("analysis/health/drift.py", "import speclib.analysis.load.goodput", "Analysis layers"),
        ("analysis/frames.py", "import speclib.analysis.stats.paired", "Analysis layers"),
    ],
)
def test_a_back_edge_breaks_a_contract(tmp_path: Path, module, back_edge, contract) -> None:
    shutil.copytree(REPO / "speclib", tmp_path / "speclib", symlinks=True)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "speclib" / module
    target.write_text(target.read_text() + f"\n{back_edge}  # noqa\n")
    proc = _lint(tmp_path)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "BROKEN" in proc.stdout and contract in proc.stdout


def test_no_private_name_is_imported_across_modules() -> None:
    offenders = []
    for path in (REPO / "speclib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("speclib"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    offenders.append(f"{path.relative_to(REPO)}: {node.module} {private}")
    assert offenders == []
