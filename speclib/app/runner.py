"""The batch run: validate params, then execute the notebooks in order with papermill.

``00_setup`` (environment, models, the design, manifest) → ``10_series`` once per replicate
block (:mod:`speclib.app.block_loop`; notebooks run by :mod:`speclib.app.kernel`; with
``protocol.executor: ray`` the blocks run as parallel Ray tasks, :mod:`speclib.app.ray_executor`) →
``20_analysis`` (records → statistics → figures → decision), then ``report.html`` is
exported from the executed analysis notebook with code hidden. Every executed notebook is
kept in ``RUN_DIR/notebooks`` with its injected parameters. A launch that fails is recorded
and the others still run; a server left behind by a killed kernel is reaped through the
launches' pidfiles.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from speclib.app.block_loop import one_block, reap_all, until_decided
from speclib.app.kernel import NOTEBOOKS_DIR, execute_notebook, signal_guard
from speclib.core.rundir import RunDir, write_json_atomic
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import load_params

__all__ = [
    "NOTEBOOKS_DIR",
    "AnalysisRefused",
    "RunFailed",
    "RunResult",
    "default_run_dir",
    "execute_notebook",
    "resume_params_file",
    "run_analysis",
    "run_experiment",
]


class RunFailed(RuntimeError):
    """The run could not produce a report; the message says which step and why."""


@dataclass(frozen=True)
class RunResult:
    """Where the outputs of a run are, and which launches failed."""

    run_dir: Path
    report: Path
    summary: Path
    failed_launches: tuple[str, ...]


def default_run_dir(params: ExperimentParams) -> Path:
    """``output_dir`` from params, else ``runs/<name>-<timestamp>`` in the current folder."""
    if params.output_dir:
        return params.resolve_path(params.output_dir)
    return Path.cwd() / "runs" / f"{params.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _prepare(params: ExperimentParams, rd: RunDir, *, resume: bool) -> None:
    if rd.root.exists() and any(p != rd.run_log for p in rd.root.iterdir()) and not resume:
        raise RunFailed(f"run folder {rd.root} is not empty: use --resume or another --out")
    rd.root.mkdir(parents=True, exist_ok=True)
    if params.source and not rd.params_copy.exists():
        shutil.copyfile(params.source, rd.params_copy)
    _write_resolved(params, rd)


def _write_resolved(params: ExperimentParams, rd: RunDir) -> None:
    data = params.model_dump()
    data["workload"]["prompts"] = str(params.resolve_path(params.workload.prompts))
    write_json_atomic(rd.params_resolved, data)


def _log(msg: str) -> None:
    print(f"[speclib {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _setup(params_file: str, rd: RunDir) -> None:
    from papermill.exceptions import PapermillExecutionError

    nb = rd.notebooks / "00_setup.ipynb"
    try:
        execute_notebook("00_setup", nb, {"params_file": params_file, "run_dir": str(rd.root)})
    except PapermillExecutionError as exc:
        raise RunFailed(
            f"setup failed, no server was started: {exc.ename}: {exc.evalue} (notebook: {nb})"
        ) from None


def resume_params_file(run_dir: str | Path) -> str:
    """The params file an interrupted run was started with (recorded in the run folder)."""
    rd = RunDir.at(run_dir)
    try:
        source = json.loads(rd.params_resolved.read_text("utf-8")).get("source")
    except (OSError, ValueError):
        source = None
    if not source or not Path(source).is_file():
        raise RunFailed(
            f"cannot resume {rd.root}: the params file it was started with "
            f"({source}) is gone; pass it again: speclib run PARAMS --resume DIR"
        )
    return str(source)


def run_experiment(
    params_file: str | Path,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    log: Callable[[str], None] = _log,
) -> RunResult:
    """Validate, run setup, every series launch and the analysis; export the report."""

    from speclib.run.preflight import require_checkpoints_fit

    params = load_params(params_file)  # raises ParamsError before anything starts
    require_checkpoints_fit(params, str(params_file))  # so does a head or draft that cannot fit
    rd = RunDir.at(out or default_run_dir(params))
    restore, interrupted = signal_guard()
    try:
        reap_all(rd)
        _prepare(params, rd, resume=resume)
        pfile = str(Path(params_file).resolve())
        log(f"run folder: {rd.root}")
        log("setup: environment, models, manifest")
        _setup(pfile, rd)
        manifest = json.loads(rd.manifest.read_text("utf-8"))
        design = manifest["design"]["design"]
        log(f"design: {design} ({manifest['design']['reason']})")
        if params.protocol.executor == "ray":
            failed = _run_on_ray(params, pfile, rd, manifest, resume, log, interrupted)
        else:
            failed = _run_here(params, pfile, rd, manifest, resume, log, interrupted)
        _record_launches(rd)
        run_analysis(rd.root, log=log)  # the params just recorded: no re-decision
    finally:
        reap_all(rd)
        restore()
    return RunResult(rd.root, rd.report, rd.summary, tuple(failed))


def _run_here(params, pfile, rd, manifest, resume, log, interrupted) -> list[str]:
    """The blocks one after the other on this host (``protocol.executor: local``)."""
    design, failed = manifest["design"]["design"], []
    for block in manifest["blocks"]:
        failed += one_block(pfile, rd, block, design, resume=resume, log=log)
        if interrupted():
            raise KeyboardInterrupt(f"block {block['block']} interrupted")
    return failed + until_decided(params, pfile, rd, design, resume=resume, log=log)


def _run_on_ray(params, pfile, rd, manifest, resume, log, interrupted) -> list[str]:
    """The blocks as parallel Ray tasks (``protocol.executor: ray``)."""
    from speclib.app.ray_executor import RayExecutor

    design = manifest["design"]["design"]
    with RayExecutor(params, rd, log=log) as ray_run:
        failed = ray_run.run_blocks(
            pfile, manifest["blocks"], design, resume=resume, interrupted=interrupted
        )
        failed += until_decided(
            params, pfile, rd, design, resume=resume, log=log, execute=ray_run.run_one
        )
    return failed


def _record_launches(rd: RunDir) -> None:
    """Add every launch's server command line (secrets redacted) and times to the manifest."""
    keep = ("launch_id", "series", "replicate", "ok", "command", "base_url", "started_at")
    keep += ("ended_at", "server_ready_s")
    manifest = rd.read_manifest()
    if not manifest:
        return
    manifest["launches"] = [{k: s.get(k) for k in keep} for s in rd.statuses()]
    write_json_atomic(rd.manifest, manifest)


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
    from speclib.params.loader import ParamsError, recorded_params
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
    log: Callable[[str], None] = _log,
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
        _write_resolved(load_params(params_file, check_files=False), rd)
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
