"""The layers hold: import-linter's contracts pass, fail on a back-edge, no private name
crosses a module boundary, every module says what it is for, no module name repeats, and
no module but ``speclib/core/rundir.py`` joins a run folder's file names by hand."""

from __future__ import annotations

import ast
import os
import re
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
        ("analysis/stats/paired.py", "import speclib.serve.httpapi", "Analysis never talks"),
        ("run/requests.py", "import speclib.run.replicate_block", "No import cycles"),
        (
            "analysis/stats/block_intervals.py",
            "import speclib.analysis.verdict.decision",
            "Analysis layers",
        ),
        (
            "analysis/speculation/why.py",
            "import speclib.analysis.verdict.comparisons",
            "Analysis layers",
        ),
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


def _concept(path: Path) -> str:
    """The first sentence of a module's docstring: what the module is for."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split()).split(". ")[0]


def test_every_module_says_what_it_is_for() -> None:
    """One concept per module, at whatever length it takes (no size rule): its docstring's
    first sentence names it."""
    silent = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "speclib").rglob("*.py"))
        if len(_concept(path).split()) < 3
    ]
    assert silent == [], "a module's docstring says what it is for"


def test_no_module_name_repeats_across_packages() -> None:
    """A file name says what it holds, once: no two modules of one name in different layers
    (``__init__``/``__main__`` aside)."""
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "speclib").rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    repeated = {name: where for name, where in seen.items() if len(where) > 1}
    assert repeated == {}


_RUN_FOLDER_NAMES = re.compile(
    r"/\s*f?[\"'](requests\.jsonl|summary\.json|manifest\.json|status\.json|report\.html|"
    r"params\.resolved\.json|params\.yaml|cpu\.jsonl|memory\.jsonl|server\.log|launches|"
    r"notebooks|output_scores\.jsonl|turn_history\.jsonl|metrics_[^\"']*\.prom|"
    r"[^\"']*\.ipynb)[\"']"
)


_NOT_A_RUN_FOLDER = ("speclib/app/kernel.py",)  # the package's own notebooks/, not a run's


def test_run_folder_paths_are_joined_only_in_rundir() -> None:
    """Every path of a run folder is a member of ``RunDir`` or ``LaunchDir``
    (``speclib/core/rundir.py``): no other module joins a run folder's names by hand."""
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in sorted((REPO / "speclib").rglob("*.py"))
        if path.name != "rundir.py" and str(path.relative_to(REPO)) not in _NOT_A_RUN_FOLDER
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if _RUN_FOLDER_NAMES.search(line)
    ]
    assert found == []
