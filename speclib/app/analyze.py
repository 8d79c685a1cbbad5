"""Analysing a run folder again (``speclib analyze``): the inputs checked, the results
written aside and moved into place, the earlier ones kept.

:func:`run_analysis` executes ``20_analysis`` on the records on disk and exports
``report.html``; it is also the last step of a batch run. Its inputs are checked before
anything is written (:class:`AnalysisRefused`); a failed analysis leaves the current results
untouched; a successful one keeps the previous results in ``analyses/<their time>/``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from speclib.app.kernel import execute_notebook
from speclib.app.outcome import RunFailed, RunResult, log_to_stderr
from speclib.core.rundir import RunDir
from speclib.params.loader import load_params
from speclib.params.run_record import recorded_params, write_record

__all__ = ["AnalysisRefused", "run_analysis"]


class AnalysisRefused(ValueError):
    """``speclib analyze`` refused its input before writing anything (exit 2): the records
    are not whole, or the params file is invalid or of another experiment."""


def _stamp(when: float | None = None) -> str:
    """A UTC time as a folder name: ``20261206T032500Z``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))


def _check_inputs(rd: RunDir, params_file: str | None, *, allow_incomplete: bool) -> None:
    """Everything the analysis will use, checked before anything is written: the records
    (:mod:`speclib.analysis.health.integrity`) and the params override (valid, and of the
    same experiment as the run)."""
    from speclib.analysis.health.integrity import RunNotWhole, require_whole
    from speclib.params.loader import ParamsError
    from speclib.params.override import redecision

    try:
        require_whole(rd.root, allow_incomplete=allow_incomplete)
    except RunNotWhole as exc:
        raise AnalysisRefused(str(exc)) from None
    if not params_file and not rd.params_resolved.exists():
        raise AnalysisRefused(
            f"{rd.root} holds no params.resolved.json: pass the params file that "
            "describes its records with --params FILE"
        )
    override = load_params(params_file, check_files=False) if params_file else None
    if not rd.params_resolved.exists():
        return  # records only: the params file describes them
    try:
        run_params = recorded_params(rd.params_resolved)
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0][:300]
        raise AnalysisRefused(
            f"{rd.params_resolved}: cannot be read as the run's params ({first}); restore "
            "it from a copy of the run folder"
        ) from None
    if override is not None:
        try:
            redecision(run_params, override, source=str(params_file))
        except ValueError as exc:
            raise ParamsError(str(exc)) from None


def _keep_previous(rd: RunDir) -> Path | None:
    """Copy the current analysis (summary, report, notebook) to ``analyses/<its time>/``."""
    current = [p for p in rd.analysis_outputs() if p.exists()]
    if not current:
        return None
    when = rd.summary.stat().st_mtime if rd.summary.exists() else current[0].stat().st_mtime
    keep = rd.analysis_archive(_stamp(when))
    keep.mkdir(parents=True)
    for path in current:
        shutil.copy2(path, keep / path.name)
    return keep


def run_analysis(
    run_dir: str | Path,
    *,
    params_file: str | None = None,
    allow_incomplete: bool = False,
    log: Callable[[str], None] = log_to_stderr,
    mix: str | None = None,
) -> RunResult:
    """Execute ``20_analysis`` on the records on disk and export ``report.html``; ``mix``
    (``"fresh=0.8,echo=0.2"``) re-decides for that traffic mix.

    Append-only for results: the inputs are checked first (:class:`AnalysisRefused`, or
    :class:`~speclib.params.loader.ParamsError`, before anything is written); the notebook,
    ``summary.json`` and ``report.html`` are written into ``analyses/.new-<time>/`` and
    moved into place only when the analysis succeeded, after the previous ones were copied
    to ``analyses/<their time>/``. A failed analysis leaves its notebook and error page in
    ``analyses/failed-<time>/`` and the current results untouched."""
    from papermill.exceptions import PapermillExecutionError

    from speclib.report.export import export_report

    rd = RunDir.at(run_dir)
    if not rd.requests.exists():
        raise RunFailed(f"{rd.root} holds no requests.jsonl: nothing to analyse")
    if params_file:  # the notebook runs in another folder
        params_file = str(Path(params_file).expanduser().resolve())
    _check_inputs(rd, params_file, allow_incomplete=allow_incomplete)
    if params_file and not rd.params_resolved.exists():  # records only: the file describes them
        write_record(load_params(params_file, check_files=False), rd)
    log("analysis: statistics, figures, report")
    stage = rd.analysis_staging(_stamp())
    stage.mkdir(parents=True, exist_ok=True)
    summary, report, nb = (stage / p.name for p in rd.analysis_outputs())
    error = None
    try:
        execute_notebook(
            "20_analysis",
            nb,
            {
                "run_dir": str(rd.root),
                "params_file": params_file or "",
                "allow_incomplete": allow_incomplete,
                "summary_file": str(summary),
                "mix": mix or "",
            },
        )
    except PapermillExecutionError as exc:
        error = f"analysis notebook failed at cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    export_report(nb, report)
    if error or not summary.exists():
        failed = rd.analysis_archive(_stamp(), failed=True)
        stage.rename(failed)
        kept = "the earlier summary.json and report.html are kept" if rd.summary.exists() else ""
        raise RunFailed(
            f"{error or 'the analysis wrote no summary.json'} (the notebook with the error: "
            f"{failed / nb.name}{'; ' + kept if kept else ''})"
        )
    kept = _keep_previous(rd)
    if kept:
        log(f"the previous analysis is kept in {kept}")
    rd.notebooks.mkdir(parents=True, exist_ok=True)
    for staged, final in zip((summary, report, nb), rd.analysis_outputs(), strict=True):
        os.replace(staged, final)
    for rest in stage.glob("*.kernel.log"):  # the kernel's output, beside the notebook
        os.replace(rest, rd.notebooks / rest.name)
    shutil.rmtree(stage, ignore_errors=True)
    if not any(rd.analyses.iterdir()):
        rd.analyses.rmdir()  # nothing kept: no earlier analysis
    log(f"report: {rd.report}")
    statuses = rd.statuses()
    failed_ids = tuple(s["launch_id"] for s in statuses if not s.get("ok"))
    return RunResult(rd.root, rd.report, rd.summary, failed_ids)
