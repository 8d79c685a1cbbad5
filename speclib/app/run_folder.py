"""Making a run folder ready for its blocks: placed, filled, setup executed.

The folder is ``output_dir``, else ``runs/<name>-<time>`` (:func:`default_run_dir`).
:func:`ready_run` is the first step of a batch run once the params passed their checks, in
one call: every server a killed run left in the folder is reaped; the folder is refused
when it holds an earlier run and ``--resume`` was not given; the params file is copied in
and its resolved form written (:func:`write_resolved`, also used by ``speclib analyze``);
``00_setup`` (environment, models, the design, the manifest) is executed and the plan it
wrote read back (:class:`ReadyRun`). :func:`resume_params_file` finds the params file an
interrupted run was started with.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from speclib.app.block_loop import reap_all
from speclib.app.kernel import execute_notebook
from speclib.app.outcome import RunFailed
from speclib.core.rundir import RunDir, write_json_atomic
from speclib.params.experiment import ExperimentParams
from speclib.run.manifest import RunPlan, read_plan

__all__ = ["ReadyRun", "default_run_dir", "ready_run", "resume_params_file", "write_resolved"]


@dataclass(frozen=True)
class ReadyRun:
    """A run whose folder is ready and whose setup ran: what the blocks step needs.

    ``params_file``: the absolute path handed to every notebook."""

    params: ExperimentParams
    params_file: str
    rd: RunDir
    plan: RunPlan
    resume: bool


def default_run_dir(params: ExperimentParams) -> Path:
    """``output_dir`` from params, else ``runs/<name>-<timestamp>`` in the current folder."""
    if params.output_dir:
        return params.resolve_path(params.output_dir)
    return Path.cwd() / "runs" / f"{params.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def ready_run(
    params: ExperimentParams,
    params_file: str | Path,
    rd: RunDir,
    *,
    resume: bool,
    log: Callable[[str], None],
) -> ReadyRun:
    """Make ``rd`` ready for the blocks: every server a killed run left there reaped, the
    folder refused when it holds an earlier run (unless resumed), the params copied and
    resolved, ``00_setup`` executed and its plan read back."""
    reap_all(rd)
    _fill(params, rd, resume=resume)
    log(f"run folder: {rd.root}")
    log("setup: environment, models, manifest")
    pfile = str(Path(params_file).resolve())
    plan = _setup(pfile, rd)
    log(f"design: {plan.design} ({plan.reason})")
    return ReadyRun(params, pfile, rd, plan, resume)


def _fill(params: ExperimentParams, rd: RunDir, *, resume: bool) -> None:
    """Refuse a folder that holds an earlier run (unless resumed); copy the params file in
    and write its resolved form."""
    if rd.root.exists() and any(p != rd.run_log for p in rd.root.iterdir()) and not resume:
        raise RunFailed(f"run folder {rd.root} is not empty: use --resume or another --out")
    rd.root.mkdir(parents=True, exist_ok=True)
    if params.source and not rd.params_copy.exists():
        shutil.copyfile(params.source, rd.params_copy)
    write_resolved(params, rd)


def write_resolved(params: ExperimentParams, rd: RunDir) -> None:
    """``params.resolved.json``: the params as validated, the prompts' path made absolute."""
    data = params.model_dump()
    data["workload"]["prompts"] = str(params.resolve_path(params.workload.prompts))
    write_json_atomic(rd.params_resolved, data)


def _setup(params_file: str, rd: RunDir) -> RunPlan:
    """Execute ``00_setup`` into the run folder; the design and blocks it planned."""
    from papermill.exceptions import PapermillExecutionError

    nb = rd.notebooks / "00_setup.ipynb"
    try:
        execute_notebook("00_setup", nb, {"params_file": params_file, "run_dir": str(rd.root)})
    except PapermillExecutionError as exc:
        raise RunFailed(
            f"setup failed, no server was started: {exc.ename}: {exc.evalue} (notebook: {nb})"
        ) from None
    return read_plan(rd)


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
