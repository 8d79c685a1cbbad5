"""Nothing lost: a run folder is the user's record (issue #45), through the CLI.

Every case works on a copy of the stored run folder ``tests/fixtures/run-standin`` after one
analysis (so it holds a ``summary.json`` and ``report.html`` to lose). A refused input exits
2 with one screen naming the file, line or field and what to do, and leaves every file of
the folder as it was; a re-analysis keeps the earlier result in ``analyses/<UTC time>/``; a
folder that is not whole is decided only with ``--allow-incomplete``, and then every output
says what is missing; a re-decision under another params file says which fields changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def speclib(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "speclib", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def digest(folder: Path) -> dict[str, str]:
    """Every file of a folder and its content hash."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def params_file(tmp: Path, name: str, **changes: dict) -> Path:
    """The run's own params.yaml, pointed at the copied prompts, with sections changed."""
    data = yaml.safe_load((FIXTURES / "run-standin" / "params.yaml").read_text())
    data["workload"]["prompts"] = str(tmp / "prompts.jsonl")
    for section, values in changes.items():
        data[section] = {**data.get(section, {}), **values}
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stored run folder, analysed once through the CLI (summary.json, report.html)."""
    tmp = tmp_path_factory.mktemp("analysed")
    run = tmp / "run"
    shutil.copytree(FIXTURES / "run-standin", run)
    shutil.copy(FIXTURES / "run-standin-prompts.jsonl", tmp / "prompts.jsonl")
    resolved = run / "params.resolved.json"
    params = json.loads(resolved.read_text())
    params["workload"]["prompts"] = str(tmp / "prompts.jsonl")
    resolved.write_text(json.dumps(params, indent=2))
    proc = speclib("analyze", str(run), "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "summary.json").exists() and (run / "report.html").exists()
    return tmp


@pytest.fixture
def run(analysed: Path, tmp_path: Path) -> Path:
    """A fresh copy of the analysed run folder (its prompts beside it, as in ``analysed``)."""
    shutil.copy(analysed / "prompts.jsonl", tmp_path / "prompts.jsonl")
    shutil.copytree(analysed / "run", tmp_path / "run")
    return tmp_path / "run"


def refused(run: Path, *args: str, says: list[str]) -> str:
    """``speclib analyze`` refuses with exit 2 and one screen, changing no file."""
    before = digest(run)
    proc = speclib("analyze", str(run), *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) <= 25, proc.stderr
    for words in says:
        assert words in proc.stderr, proc.stderr
    assert digest(run) == before  # nothing written, nothing lost
    assert not (run / "analyses").exists()
    return proc.stderr


# --- 1. append-only results -----------------------------------------------------------------


def test_a_reanalysis_keeps_the_earlier_result(run: Path) -> None:
    before = {n: (run / n).read_bytes() for n in ("summary.json", "report.html")}
    proc = speclib("analyze", str(run), "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (kept,) = (run / "analyses").iterdir()  # analyses/<UTC time of the earlier one>/
    assert kept.name.endswith("Z") and kept.name[:8].isdigit()
    for name, content in before.items():
        assert (kept / name).read_bytes() == content
    assert (kept / "20_analysis.ipynb").exists()
    assert json.loads((run / "summary.json").read_text())["comparisons"]  # the new one
    assert not list((run / "analyses").glob(".new-*"))  # the staging folder is gone


def test_an_invalid_margin_is_refused_before_anything_is_written(run: Path) -> None:
    bad = params_file(run.parent, "bad.yaml", analysis={"margin": -0.5})
    refused(run, "--params", str(bad), says=["bad.yaml", "analysis.margin", "-0.5"])


def test_a_params_file_of_another_experiment_is_refused_naming_what_differs(run: Path) -> None:
    other = params_file(run.parent, "other.yaml", workload={"max_tokens": 64})
    err = refused(run, "--params", str(other), says=["other.yaml", "workload.max_tokens"])
    assert "another experiment" in err and "analysis section" in err


OWN_FILES = ["summary.json", "requests.jsonl", "launches/spec-r0/status.json"]


@pytest.mark.parametrize("target", OWN_FILES)
def test_compare_never_writes_over_a_runs_own_files(run: Path, target: str) -> None:
    before = digest(run)
    proc = speclib("compare", str(run), str(run), "--out", str(run / target), "--force")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "run folder" in proc.stderr and "Traceback" not in proc.stderr
    assert digest(run) == before


def test_compare_and_schedule_refuse_an_existing_file_unless_forced(run: Path) -> None:
    existing = run.parent / "table.html"
    existing.write_text("mine")
    proc = speclib("compare", str(run), "--out", str(existing))
    assert proc.returncode == 2 and "--force" in proc.stderr, proc.stderr[-2000:]
    assert existing.read_text() == "mine"
    proc = speclib("schedule", str(run), "--out", str(existing))
    assert proc.returncode == 2 and "--force" in proc.stderr, proc.stderr[-2000:]
    assert existing.read_text() == "mine"
    proc = speclib("compare", str(run), "--out", str(existing), "--force")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<table" in existing.read_text()
    proc = speclib("schedule", str(run), "--out", str(run / "confirm.yaml"))
    assert proc.returncode == 2 and "run folder" not in proc.stderr  # its own error, not ours


# --- 2. integrity before decision -----------------------------------------------------------


def _rewrite_records(run: Path, keep) -> None:
    path = run / "requests.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for i, line in enumerate(lines, 1) if keep(i, line)))


def test_a_damaged_line_is_named_as_file_and_line(run: Path) -> None:
    path = run / "requests.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[41] = lines[41][:30] + "\n"
    path.write_text("".join(lines))
    refused(run, says=["requests.jsonl:42: not a JSON record", "--allow-incomplete"])


def test_an_emptied_requests_file_does_not_replace_the_verdicts(run: Path) -> None:
    (run / "requests.jsonl").write_text("")
    refused(run, says=["requests.jsonl: holds no measured request"])


def test_a_deleted_launches_folder_is_not_decided_as_whole(run: Path) -> None:
    shutil.rmtree(run / "launches")
    refused(run, says=["launches/: missing"])


def test_a_missing_launch_of_a_block_is_named(run: Path) -> None:
    shutil.rmtree(run / "launches" / "spec-r2")
    refused(run, says=["block r2: launch spec-r2 has no launches/spec-r2/status.json"])


def test_an_unreadable_manifest_is_named(run: Path) -> None:
    (run / "manifest.json").write_text('{"design": ')
    refused(run, says=["manifest.json: not valid JSON at line 1"])


def test_records_missing_against_a_launchs_counts_are_named(run: Path) -> None:
    _rewrite_records(run, lambda i, line: '"launch_id":"spec-r1"' not in line)
    refused(
        run,
        says=["launch spec-r1: status.json counts 12 ok + 0 failed", "holds 0 ok + 0 failed"],
    )


def test_allow_incomplete_decides_on_what_is_there_and_says_so_everywhere(run: Path) -> None:
    before = (run / "summary.json").read_bytes()
    _rewrite_records(run, lambda i, line: '"launch_id":"spec-r1"' not in line)
    proc = speclib("analyze", str(run), "--allow-incomplete")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DECIDED ON INCOMPLETE RECORDS" in proc.stdout
    assert "launch spec-r1: status.json counts 12 ok" in proc.stdout
    summary = json.loads((run / "summary.json").read_text())
    found = summary["integrity"]
    assert not found["whole"] and found["decided_incomplete"]
    assert any("spec-r1" in p for p in found["missing"])
    report = (run / "report.html").read_text()
    assert "DECIDED ON INCOMPLETE RECORDS" in report and "spec-r1" in report
    (kept,) = (run / "analyses").iterdir()
    assert (kept / "summary.json").read_bytes() == before


# --- 3. a re-decision says so ---------------------------------------------------------------


def test_a_redecision_names_the_changed_fields_everywhere(run: Path) -> None:
    wide = params_file(run.parent, "wide.yaml", analysis={"margin": 0.5})
    proc = speclib("analyze", str(run), "--params", str(wide))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RE-DECIDED AFTER THE RUN" in proc.stdout and "analysis.margin 0.05 → 0.5" in proc.stdout
    change = json.loads((run / "summary.json").read_text())["redecision"]
    assert change["params_file"] == str(wide)
    assert change["changed"] == [{"field": "analysis.margin", "run": 0.05, "now": 0.5}]
    report = (run / "report.html").read_text()
    assert "RE-DECIDED AFTER THE RUN" in report and "analysis.margin" in report
    assert (run / "params.yaml").read_text() == (FIXTURES / "run-standin/params.yaml").read_text()


def test_an_unreadable_params_resolved_is_refused_before_anything_is_written(run: Path) -> None:
    (run / "params.resolved.json").write_text('{"name": ')
    refused(run, says=["params.resolved.json: cannot be read as the run's params", "restore"])


def test_a_failed_analysis_leaves_the_current_result_and_keeps_its_notebook(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notebook executor is the boundary: one that fails after writing its notebook."""
    import nbformat
    from papermill.exceptions import PapermillExecutionError

    from speclib.app import analyze

    def failing(name, out_path, parameters, **_):
        assert Path(parameters["summary_file"]).parent == out_path.parent  # written aside
        nbformat.write(nbformat.v4.new_notebook(), out_path)
        raise PapermillExecutionError(0, 3, "", "ValueError", "boom", [])

    monkeypatch.setattr(analyze, "execute_notebook", failing)
    before = digest(run)
    with pytest.raises(analyze.RunFailed, match=r"earlier summary\.json and report\.html are kept"):
        analyze.run_analysis(run, log=lambda _: None)
    (failed,) = (run / "analyses").iterdir()
    assert failed.name.startswith("failed-")
    assert {p.name for p in failed.iterdir()} >= {"20_analysis.ipynb", "report.html"}
    after = digest(run)
    assert {k: v for k, v in after.items() if not k.startswith("analyses/")} == before


def test_a_damaged_launch_sample_line_is_named_as_file_and_line(run: Path) -> None:
    path = run / "launches" / "control-r1" / "memory.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, "{not json\n")
    path.write_text("".join(lines))
    refused(run, says=["launches/control-r1/memory.jsonl:2: not a JSON record"])


def test_an_auxiliary_servers_launch_folder_is_not_a_missing_launch(run: Path) -> None:
    """The sampled run's scoring server (and a null check) has a launch folder with a log
    and a command but no status.json: it measured nothing, so the run is still whole; a
    measured launch's missing status.json is still named."""
    from speclib.analysis.health.integrity import check_integrity

    aux = run / "launches" / "scoring"
    aux.mkdir()
    (aux / "server.log").write_text("scoring server\n")
    assert check_integrity(run).problems == ()
    measured = sorted(p for p in (run / "launches").iterdir() if (p / "status.json").exists())
    (measured[0] / "status.json").unlink()
    assert any(measured[0].name in p for p in check_integrity(run).problems)
