"""The notebooks in notebooks/: thin, documented, generated, and opening with usable defaults.

Checks what a JupyterLab user and ``papermill`` rely on, without starting a server:
``papermill --help-notebook`` lists every parameter with its description and default; the
defaults point at the CPU demo from the notebooks folder; the code cells hold only imports,
assignments and calls (no loop, branch, comprehension, function or class: that logic
belongs in ``speclib`` with a unit test); every imported name exists and every call of a
``speclib`` function binds to its signature; and the files are exactly what
``scripts/make_notebooks.py`` writes (nobody hand-edited an ``.ipynb``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
DEFAULTS = {
    "00_setup": {"run_dir": "../runs/interactive", "params_file": "../params/cpu-demo.yaml"},
    "10_series": {"run_dir": "../runs/interactive",  # no params file: the run folder's record
                  "replicate": 0, "arms": "", "design": "interleaved", "block": ""},
    "20_analysis": {"run_dir": "../runs/cpu-demo", "params_file": "",
                    "allow_incomplete": False, "summary_file": "", "mix": ""},
}  # fmt: skip
MAX_STATEMENTS = 20  # non-import statements outside the parameters cell (one call per figure cell)
FORBIDDEN = (
    ast.For, ast.AsyncFor, ast.While, ast.If, ast.IfExp, ast.Try, ast.With, ast.AsyncWith,
    ast.Match, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.BoolOp, ast.Global, ast.Nonlocal,
)  # fmt: skip
ALLOWED_IMPORTS = ("speclib", "IPython.display")
_HEADER = re.compile(r'^  (\w+): (\S+) \(default ("(?:[^"\\]|\\.)*"|[^)\s]*)\)(.*)$')


def _cells(name: str) -> list[nbformat.NotebookNode]:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells


def _parameters_cell(name: str) -> nbformat.NotebookNode:
    tagged = [c for c in _cells(name) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{name}: expected one cell tagged 'parameters'"
    return tagged[0]


def _code(name: str) -> list[ast.Module]:
    code = [c for c in _cells(name) if c.cell_type == "code"]
    return [ast.parse(c.source) for c in code if "parameters" not in c.metadata.get("tags", [])]


def help_notebook(path: Path) -> dict[str, dict[str, str]]:
    """Run ``papermill --help-notebook`` and parse name → {type, default, help}."""
    proc = subprocess.run(
        [sys.executable, "-m", "papermill", "--help-notebook", str(path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    params: dict[str, dict[str, str]] = {}
    current = None
    for line in proc.stdout.split("Parameters inferred", 1)[1].splitlines()[1:]:
        m = _HEADER.match(line)
        if m:
            current = m.group(1)
            params[current] = {"type": m.group(2), "default": m.group(3), "help": m.group(4)}
        elif current and line.startswith("    "):
            params[current]["help"] += " " + line
    return {k: {**v, "help": " ".join(v["help"].split())} for k, v in params.items()}


def test_help_parser_sees_a_missing_description(tmp_path: Path) -> None:
    cell = nbformat.v4.new_code_cell('run_dir: str = "x"  # where\nseed: int = 3')
    cell.metadata["tags"] = ["parameters"]
    path = tmp_path / "nb.ipynb"
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nbformat.v4.new_notebook(cells=[cell], metadata={"kernelspec": kernel}), path)
    found = help_notebook(path)
    assert found["run_dir"]["help"] == "where"
    assert found["seed"] == {"type": "int", "default": "3", "help": ""}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_help_lists_every_parameter_with_description_and_default(name: str) -> None:
    found = help_notebook(NOTEBOOKS / f"{name}.ipynb")
    assert list(found) == list(DEFAULTS[name])
    for param, default in DEFAULTS[name].items():
        info = found[param]
        assert len(info["help"]) >= 10, f"{name}.{param} has no description: {info}"
        assert info["type"] == type(default).__name__
        shown = (json.dumps(default), repr(default))  # a bool is written False in Python
        assert info["default"] in shown, f"{name}.{param}: {info['default']}"


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_parameters_cell_is_only_typed_constants(name: str) -> None:
    tree = ast.parse(_parameters_cell(name).source)
    assert tree.body
    for stmt in tree.body:
        assert isinstance(stmt, ast.AnnAssign) and isinstance(stmt.value, ast.Constant), (
            f"{name}: parameters cell line {stmt.lineno} is not `name: type = constant`"
        )


def test_default_params_file_exists_from_the_notebooks_folder() -> None:
    for name, defaults in DEFAULTS.items():
        if defaults.get("params_file"):
            assert (NOTEBOOKS / defaults["params_file"]).resolve().is_file(), name


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_code_cells_are_imports_and_a_few_calls(name: str) -> None:
    statements = 0
    for tree in _code(name):
        for node in ast.walk(tree):
            assert not isinstance(node, FORBIDDEN), (
                f"{name}: {type(node).__name__} at line {getattr(node, 'lineno', '?')}: move "
                "logic with loops or branches into speclib"
            )
        for stmt in tree.body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                modules = (
                    [a.name for a in stmt.names]
                    if isinstance(stmt, ast.Import)
                    else [stmt.module or ""]
                )
                assert all(m.startswith(ALLOWED_IMPORTS) for m in modules), modules
                continue
            assert isinstance(stmt, ast.Assign | ast.Expr), f"{name}: {ast.dump(stmt)[:80]}"
            statements += 1
    assert 1 <= statements <= MAX_STATEMENTS, f"{name}: {statements} statements"


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_imported_names_exist_and_calls_bind(name: str) -> None:
    """A renamed function or argument in speclib breaks the notebook: catch it here."""
    names = {}
    for tree in _code(name):
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom):
                module = importlib.import_module(stmt.module or "")
                for alias in stmt.names:
                    assert hasattr(module, alias.name), f"{stmt.module} has no {alias.name}"
                    names[alias.asname or alias.name] = getattr(module, alias.name)
    calls = [n for tree in _code(name) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    checked = 0
    for call in calls:
        func = names.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if func is None or not getattr(func, "__module__", "").startswith("speclib"):
            continue
        if any(isinstance(a, ast.Starred) for a in call.args):
            continue
        inspect.signature(func).bind(*call.args, **{k.arg: k.value for k in call.keywords})
        checked += 1
    assert checked >= 1, f"{name}: no speclib call found"


def test_notebooks_are_what_the_generator_writes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_notebooks.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for name in DEFAULTS:
        fresh = json.loads((tmp_path / f"{name}.ipynb").read_text())
        kept = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
        assert kept == fresh, (
            f"notebooks/{name}.ipynb differs from scripts/make_notebooks.py: edit the "
            "script and run it, never the .ipynb"
        )
