"""docs/architecture.md's "to change X, open Y" map stays true: every file it names exists,
and every function, class or constant it names in a file is defined there.

A row's cell is read left to right: a backticked folder (``speclib/analysis/load/``) or file
path sets where a bare file name (``pairs.py``) is looked up; a backticked name that is an
identifier (``decide``) must be defined at the top level of the last file named before it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"
_CODE = re.compile(r"`([^`\s]+)`")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _map_rows() -> list[tuple[str, str]]:
    """``(what, where)`` of every row of the map's table."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## To change X, open Y", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("to change", "---"):
            rows.append((cells[0], cells[1]))
    return rows


def _defined(path: Path) -> set[str]:
    """Top-level names a module defines: functions, classes and assigned names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _problems(where: str) -> list[str]:
    problems: list[str] = []
    folder: Path | None = None
    current: Path | None = None
    for token in _CODE.findall(where):
        if token.endswith("/") and "/" in token.rstrip("/"):
            folder = REPO / token
            if not folder.is_dir():
                problems.append(f"no folder {token}")
            current = None
        elif "/" in token and Path(token).suffix:
            current = REPO / token
            folder = current.parent
            if not current.exists():
                problems.append(f"no file {token}")
                current = None
        elif token.endswith(".py"):
            current = (folder or REPO) / token
            if not current.exists():
                problems.append(f"no file {token} in {current.parent.relative_to(REPO)}")
                current = None
        elif (
            _IDENT.match(token)
            and current is not None
            and current.suffix == ".py"
            and token not in _defined(current)
        ):
            problems.append(f"{current.relative_to(REPO)} defines no {token}")
    return problems


def test_the_map_has_rows() -> None:
    assert len(_map_rows()) >= 20


@pytest.mark.parametrize("what,where", _map_rows(), ids=lambda v: v[:40])
def test_every_file_and_name_of_the_map_exists(what: str, where: str) -> None:
    assert not _problems(where), f"row {what!r}: {_problems(where)}"


def test_a_wrong_name_is_caught() -> None:
    assert _problems("`speclib/core/rundir.py` (`no_such_function_here`)")
    assert _problems("`speclib/analysis/verdict/` (`no_such_module.py`)")
    assert not _problems("`speclib/analysis/verdict/decision.py` (`decide`), `pairs.py`")


_FLOW_FILE = re.compile(r"\b((?:[a-z_]+/)+[a-z_0-9]+\.py)\b")
_FLOW_NAME = re.compile(r"\b([a-z_]+/[a-z_0-9]+\.py): ([A-Z]\w+|[a-z]+_\w+)")  # code names


def _flow() -> str:
    """The drawing under "How a run's data flows"."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## How a run's data flows", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def test_the_data_flow_names_files_and_functions_that_exist() -> None:
    flow = _flow()
    files = set(_FLOW_FILE.findall(flow))
    assert len(files) >= 20
    missing = sorted(f for f in files if not (REPO / "speclib" / f).is_file())
    assert not missing, f"the data flow names files that do not exist: {missing}"
    for path, name in _FLOW_NAME.findall(flow):
        assert name in _defined(REPO / "speclib" / path), f"{path} defines no {name}"


def test_the_data_flow_holds_every_step_the_runner_takes() -> None:
    """Every module of the kit that ``app/runner.py`` imports is in the drawing, except the
    run's result record and log (``app/outcome.py``), which is no step of the run."""
    tree = ast.parse((REPO / "speclib" / "app" / "runner.py").read_text(encoding="utf-8"))
    steps = {
        node.module.removeprefix("speclib.").replace(".", "/") + ".py"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("speclib.")
    } - {"app/outcome.py"}
    assert len(steps) >= 5
    drawn = set(_FLOW_FILE.findall(_flow()))
    assert steps <= drawn, f"steps of the runner the drawing lacks: {sorted(steps - drawn)}"
