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


MAX_LINES = 400


def _says_why_it_is_long(docstring: str) -> bool:
    """A module's docstring that states why it is over the limit says "over 400"."""
    return f"over {MAX_LINES}" in " ".join(docstring.split())


def test_a_module_over_400_lines_says_why_in_its_docstring() -> None:
    long_and_silent = []
    for path in sorted((REPO / "speclib").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") <= MAX_LINES:
            continue
        if not _says_why_it_is_long(ast.get_docstring(ast.parse(text)) or ""):
            long_and_silent.append(f"{path.relative_to(REPO)} ({text.count(chr(10))} lines)")
    assert long_and_silent == [], "split these along their seams, or say why in the docstring"


def test_the_size_rule_reads_the_docstring_not_the_code() -> None:
    assert _says_why_it_is_long("The module is a little over\n 400 lines because it is one rule.")
    assert not _says_why_it_is_long("Parses params.")
    assert not _says_why_it_is_long("")
