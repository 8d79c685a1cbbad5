"""Analysing a run folder again (``speclib analyze``): the inputs checked, the results
written aside and moved into place, the earlier ones kept.

:func:`run_analysis` executes ``20_analysis`` on the records on disk and exports
``report.html``; it is also the last step of a batch run. It owns the folder while it runs
(:mod:`speclib.app.run_lock`: a second analysis, or one of a folder a live run writes, is
refused naming that process; a run's own analysis runs under the run's lock). Its inputs
are checked before anything is written (:class:`AnalysisRefused`): the folder exists, its
records are whole (or ``--allow-incomplete`` and there is something to decide on), they are
the records of the experiment the params describe (the run's own, or ``--params`` for a
folder that holds only records), the params override is of the same experiment, and
``--mix`` names categories the records have. A failed analysis leaves the current results
untouched; a successful one keeps the previous results in ``analyses/<their time>/``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from speclib.app.kernel import execute_notebook
from speclib.app.outcome import RunFailed, RunResult, log_to_stderr
from speclib.app.run_lock import hold_run
from speclib.core.fspaths import resolved
from speclib.core.rundir import RunDir
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import load_params
from speclib.params.run_record import recorded_params, write_record

__all__ = ["AnalysisRefused", "run_analysis"]


class AnalysisRefused(ValueError):
    """``speclib analyze`` refused its input before writing anything (exit 2): no such
    folder, records not whole or of another experiment, a params file invalid or of another
    experiment, a ``--mix`` the records cannot have."""


def _stamp(when: float | None = None) -> str:
    """A UTC time as a folder name: ``20261206T032500Z``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))


def _check_folder(rd: RunDir) -> None:
    """The folder is one ``analyze`` can read and write: it exists, holds records, and its
    ``analyses`` (where earlier results are kept) is a folder if there."""
    if not rd.root.is_dir():
        what = "is a file, not a run folder" if rd.root.exists() else "does not exist"
        raise AnalysisRefused(f"{rd.root} {what}: nothing to analyse (check the path)")
    if not rd.requests.exists():
        raise AnalysisRefused(
            f"{rd.root} holds no requests.jsonl: nothing to analyse (is it a run folder?)"
        )
    if rd.analyses.exists() and not rd.analyses.is_dir():
        raise AnalysisRefused(
            f"{rd.analyses} is a file, where the earlier analyses are kept: move it away "
            "(nothing was written)"
        )


def _check_inputs(
    rd: RunDir, params_file: str | None, *, allow_incomplete: bool, mix: str | None
) -> ExperimentParams:
    """Everything the analysis will use, checked before anything is written: the records
    (:mod:`speclib.analysis.health.integrity`), the params (the run's own, the params
    override valid and of the same experiment), that the records are of that experiment,
    and ``mix``; the params that describe the records."""
    from speclib.analysis.health.integrity import RunNotWhole, require_whole
    from speclib.params.loader import ParamsError
    from speclib.params.override import redecision

    try:
        found = require_whole(rd.root, allow_incomplete=allow_incomplete)
    except RunNotWhole as exc:
        raise AnalysisRefused(str(exc)) from None
    if not params_file and not rd.params_resolved.exists():
        raise AnalysisRefused(
            f"{rd.root} holds no params.resolved.json: pass the params file that "
            "describes its records with --params FILE"
        )
    override = load_params(params_file, check_files=False) if params_file else None
    if not rd.params_resolved.exists():  # records only: the params file describes them
        assert override is not None
        params = override
    else:
        try:
            params = recorded_params(rd.params_resolved)
        except ParamsError as exc:
            raise AnalysisRefused(str(exc)) from None
    if override is not None and override is not params:
        try:
            redecision(params, override, source=str(params_file))
        except ValueError as exc:
            raise ParamsError(str(exc)) from None
    _require_records_of(params, found.series, rd, params_file)
    if mix is not None:
        from speclib.analysis.verdict.mix import check_mix, parse_mix

        try:
            check_mix(parse_mix(mix), set(found.categories))
        except ValueError as exc:
            raise AnalysisRefused(f"--mix: {exc}") from None
    return params


def _require_records_of(
    params: ExperimentParams, series: tuple[str, ...], rd: RunDir, params_file: str | None
) -> None:
    """The records name only arms of ``params``, the control among them: else they are
    another experiment's, and deciding them under these params would be a wrong answer."""
    arms = [a.name for a in params.arms]
    foreign = [s for s in series if s not in arms]
    if not foreign and params.control_name in series:
        return
    source = params_file or str(rd.params_resolved)
    why = (
        f"records of series {', '.join(map(repr, foreign[:8]))} that it does not have"
        if foreign
        else f"no record of its control {params.control_name!r}"
    )
    raise AnalysisRefused(
        f"{rd.requests}: the records are not of the experiment {source} describes "
        f"({params.name!r}, arms {', '.join(arms)}): {why}. Nothing was written; give the "
        "params file of the experiment that made these records"
    )


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
    ``analyses/failed-<time>/`` and the current results untouched. A folder that held only
    records gets the params file's record (``params.yaml``, ``params.resolved.json``) only
    when its analysis succeeds. One analysis of a folder at a time
    (:class:`~speclib.app.run_lock.RunFolderBusy` for a second)."""
    rd = RunDir.at(run_dir)
    _check_folder(rd)
    if params_file:  # the notebook runs in another folder
        params_file = str(resolved(params_file))
    with hold_run(rd, "analyze"):
        params = _check_inputs(rd, params_file, allow_incomplete=allow_incomplete, mix=mix)
        new = [p for p in (rd.params_resolved, rd.params_copy) if not p.exists()]
        if rd.params_resolved in new:  # records only: the params file describes them
            write_record(params, rd)
        try:
            return _analyse(rd, params_file, allow_incomplete=allow_incomplete, mix=mix, log=log)
        except BaseException:
            for path in new:  # the folder as it was: no params left by a failed analysis
                path.unlink(missing_ok=True)
            raise


def _analyse(
    rd: RunDir,
    params_file: str | None,
    *,
    allow_incomplete: bool,
    mix: str | None,
    log: Callable[[str], None],
) -> RunResult:
    """Execute the analysis notebook aside, then move its results into place (the
    earlier ones kept); :class:`RunFailed` when it fails (the current ones untouched)."""
    from papermill.exceptions import PapermillExecutionError

    from speclib.report.export import export_report

    log("analysis: statistics, figures, report")
    rd.analyses.mkdir(exist_ok=True)
    for left in rd.analyses.glob(rd.analysis_staging("*").name):  # a killed analysis's
        shutil.rmtree(left, ignore_errors=True)  # (this one owns the folder now)
    stage = Path(tempfile.mkdtemp(prefix=rd.analysis_staging(_stamp()).name + "-", dir=rd.analyses))
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
