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


# --- 4. never another run's process, never a broken or foreign folder as whole (#54) -------


def _victim() -> subprocess.Popen[bytes]:
    """A process in a session of its own (as a detached run's server is)."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )


def _pidfile_naming(run: Path, proc: subprocess.Popen[bytes]) -> None:
    """The launch's pidfile as a kit-started server writes it: its pid and command line."""
    import time

    deadline = time.monotonic() + 10
    argv: list[str] = []
    while not argv[1:] and time.monotonic() < deadline:
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
    info = {"pid": proc.pid, "pgid": proc.pid, "argv": argv}
    (run / "launches" / "control-r0" / "server.pid").write_text(json.dumps(info))


def _holding(run: Path, purpose: str) -> subprocess.Popen[str]:
    """Another kit process that owns ``run`` (a live run, or an analysis of it)."""
    code = (
        "import sys, time\n"
        "from speclib.app.run_lock import hold_run\n"
        "from speclib.core.rundir import RunDir\n"
        f"with hold_run(RunDir.at(sys.argv[1]), {purpose!r}):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(120)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _one_screen_error(proc: subprocess.CompletedProcess[str], *says: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 25
    for words in says:
        assert words in proc.stderr, proc.stderr


def test_run_out_at_another_run_refuses_and_kills_nothing(run: Path) -> None:
    victim = _victim()
    try:
        _pidfile_naming(run, victim)
        before = digest(run)
        params = params_file(run.parent, "p.yaml", server={"model": str(run.parent)})
        proc = speclib("run", str(params), "--out", str(run))
        _one_screen_error(proc, f"run folder {run} holds a run", "nothing was touched", "--resume")
        assert victim.poll() is None  # alive: refusing a folder stops no process
        assert digest(run) == before
    finally:
        victim.kill()
        victim.wait()


def test_a_live_run_is_never_resumed_reaped_or_analysed(run: Path) -> None:
    victim = _victim()
    owner = _holding(run, "run")
    try:
        _pidfile_naming(run, victim)
        before = digest(run)
        for args in (["run", "--resume", str(run)], ["run", "--detach", "--resume", str(run)]):
            proc = speclib(*args)
            _one_screen_error(proc, "is in use by a run", f"pid {owner.pid}", f"kill {owner.pid}")
        _one_screen_error(speclib("analyze", str(run)), "is in use by a run")
        assert victim.poll() is None
        assert digest(run) == before
    finally:
        owner.kill()
        owner.wait()
        victim.kill()
        victim.wait()


def test_a_second_analysis_of_a_folder_is_refused_naming_the_first(run: Path) -> None:
    first = _holding(run, "analyze")
    try:
        refused(run, "--mix", "c=1", says=["is in use by an analysis", f"pid {first.pid}"])
    finally:
        first.kill()
        first.wait()


def test_resume_of_a_missing_folder_says_so_and_starts_nothing(run: Path) -> None:
    typo = run.parent / "typo"
    params = params_file(run.parent, "p.yaml")
    for args in (["run", "--resume", str(typo)], ["run", "--resume", str(typo), str(params)]):
        _one_screen_error(speclib(*args), f"--resume {typo}: the folder does not exist")
    assert not typo.exists()


def test_a_missing_run_folder_is_invalid_input(run: Path) -> None:
    missing = run.parent / "missing"
    _one_screen_error(speclib("analyze", str(missing)), f"{missing} does not exist")
    _one_screen_error(speclib("compare", str(missing)), f"run folder {missing} does not exist")


def test_a_deleted_manifest_is_not_decided_as_whole(run: Path) -> None:
    (run / "manifest.json").unlink()
    refused(run, says=["manifest.json: missing (the run's design"])


def test_analyses_that_is_a_file_is_refused(run: Path) -> None:
    (run / "analyses").write_text("mine")
    before = digest(run)
    _one_screen_error(speclib("analyze", str(run)), "analyses is a file")
    assert digest(run) == before


def test_allow_incomplete_on_empty_records_keeps_the_current_report(run: Path) -> None:
    (run / "requests.jsonl").write_text("")
    refused(run, "--allow-incomplete", says=["nothing to decide, even with --allow-incomplete"])


def test_records_of_another_experiment_are_refused_not_decided(run: Path) -> None:
    """A folder holding only one run's records, analysed with the params of another
    experiment (other series names): refused, and no params record left in the folder."""
    only = run.parent / "only"
    only.mkdir()
    shutil.copy(run / "requests.jsonl", only / "requests.jsonl")
    data = yaml.safe_load(params_file(run.parent, "x.yaml").read_text())
    data["series"][1]["name"] = "other"
    data["protocol"]["aa"] = False
    other = run.parent / "other.yaml"
    other.write_text(yaml.safe_dump(data))
    proc = speclib("analyze", str(only), "--params", str(other))
    _one_screen_error(
        proc, "the records are not of the experiment", "'spec'", "give the params file"
    )
    assert sorted(p.name for p in only.iterdir()) == ["requests.jsonl"]


def test_mix_on_a_damaged_line_names_the_line(run: Path) -> None:
    path = run / "requests.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[50] = lines[50][:30] + "\n"
    path.write_text("".join(lines))
    err = refused(run, "--mix", "c=1", says=["requests.jsonl:51: not a JSON record"])
    assert "control character" not in err and "line 1" not in err


def test_compare_refuses_a_damaged_summary_and_a_missing_out_folder(run: Path) -> None:
    (run / "summary.json").write_text('{"comparisons": [')
    _one_screen_error(speclib("compare", str(run)), f"summary {run / 'summary.json'} is not valid")
    out = run.parent / "missing" / "x.html"
    proc = speclib("compare", str(run), "--out", str(out))
    _one_screen_error(proc, f"--out {out}: its folder {out.parent} does not exist")
    assert ".tmp" not in proc.stderr


def test_the_runs_own_params_copy_is_the_same_experiment(tmp_path: Path) -> None:
    """``analyze RUN --params RUN/params.yaml``, unedited: its prompt path is relative to
    the run's original file, not to the copy; it is the same experiment, no field changed."""
    from speclib.core.rundir import RunDir
    from speclib.params.loader import load_params
    from speclib.params.override import redecision
    from speclib.params.run_record import recorded_params, write_record

    study = tmp_path / "study"
    study.mkdir()
    shutil.copy(FIXTURES / "run-standin-prompts.jsonl", study / "prompts.jsonl")
    data = yaml.safe_load((FIXTURES / "run-standin" / "params.yaml").read_text())
    data["workload"]["prompts"] = "prompts.jsonl"
    data["server"]["model"] = str(study)
    (study / "params.yaml").write_text(yaml.safe_dump(data))
    rd = RunDir.at(tmp_path / "run")
    write_record(load_params(study / "params.yaml", check_vllm=False), rd)
    change = redecision(
        recorded_params(rd.params_resolved),
        load_params(rd.params_copy, check_files=False),
        source=str(rd.params_copy),
    )
    assert change.changed == ()


def test_decided_incomplete_and_mix_weighted_say_so_in_json_and_compare(run: Path) -> None:
    """Item 16: ``analyze --json`` and ``compare`` read from summary.json that a run was
    decided on incomplete records, for a traffic mix; ``--mix`` with --allow-incomplete
    decides past a damaged line."""
    path = run / "requests.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[50] = lines[50][:30] + "\n"
    path.write_text("".join(lines))
    proc = speclib("analyze", str(run), "--allow-incomplete", "--mix", "c=1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    basis = out["decided_on"]
    assert any("requests.jsonl:51" in p for p in basis["incomplete_records"])
    assert basis["mix"] == {"c": 1.0} and basis["redecided_with"] is None
    table = speclib("compare", str(run))
    assert table.returncode == 0, table.stderr
    assert "incomplete records (2)" in table.stdout and "mix c=1" in table.stdout
