"""Making a run folder ready for its blocks: placed, checked, the params recorded, setup run.

The folder is ``output_dir``, else ``runs/<name>-<time>`` (:func:`default_run_dir`).
:func:`check_run_folder` refuses, before anything is touched (:class:`RunFolderRefused`,
exit 2), a folder that may not be a run folder (a system folder, the home folder, inside
another run: :func:`speclib.core.rundir.place_problem`), one that holds an earlier run
unless ``--resume`` was given, a ``--resume`` folder that does not exist, and one a live kit
process owns (:mod:`speclib.app.run_lock`). :func:`ready_run` is the first step of a batch
run that holds the folder's lock: on ``--resume``, the servers the run's dead owner left
behind are reaped (nothing else ever reaps another process's servers); the params are
recorded in the folder (:func:`speclib.params.run_record.write_record`: ``params.yaml`` and
``params.resolved.json``, which every later step reads); ``00_setup`` (environment, models,
the design, the manifest) is executed on the folder and the plan it wrote read back
(:class:`ReadyRun`). A resumed run brings the params it recorded
(:func:`speclib.run.preflight.checked_params`), so its record is written again unchanged;
its setup is executed into a notebook of its own and appends this machine's environment to
the manifest, keeping the original's (:func:`speclib.run.manifest.resumed_manifest`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from speclib.app.kernel import execute_notebook
from speclib.app.outcome import RunFailed
from speclib.app.run_lock import require_free
from speclib.core.rundir import RunDir, place_problem
from speclib.params.experiment import ExperimentParams
from speclib.params.run_record import write_record
from speclib.run.manifest import RunPlan, read_plan, setups_before
from speclib.serve.pidfile import reap_run

__all__ = ["ReadyRun", "RunFolderRefused", "check_run_folder", "default_run_dir", "ready_run"]


class RunFolderRefused(ValueError):
    """The run folder cannot be used as asked; nothing was touched (exit 2)."""


@dataclass(frozen=True)
class ReadyRun:
    """A run whose folder is ready and whose setup ran: what the blocks step needs.

    ``params``: as checked and recorded in ``rd`` (every notebook reads that record);
    ``started``: when the run started (``time.monotonic``), from which its time budget
    counts (``protocol.budget_min``)."""

    params: ExperimentParams
    rd: RunDir
    plan: RunPlan
    resume: bool
    started: float = field(default_factory=time.monotonic)


def default_run_dir(params: ExperimentParams) -> Path:
    """``output_dir`` from params, else ``runs/<name>-<timestamp>`` in the current folder."""
    if params.output_dir:
        return params.resolve_path(params.output_dir)
    return Path.cwd() / "runs" / f"{params.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_run_folder(rd: RunDir, *, resume: bool) -> None:
    """Refuse ``rd`` as the run folder, touching nothing, when it may not be one
    (:func:`~speclib.core.rundir.place_problem`), is a file, does not exist on ``resume``,
    holds anything but a detached run's log without ``resume``, or a live kit process owns
    it (:func:`~speclib.app.run_lock.require_free`: :class:`RunFolderBusy`)."""
    if why := place_problem(rd.root):
        raise RunFolderRefused(f"run folder: {why}")
    if rd.root.exists() and not rd.root.is_dir():
        raise RunFolderRefused(f"run folder {rd.root} is a file: name a folder")
    if resume and not rd.root.is_dir():
        raise RunFolderRefused(
            f"--resume {rd.root}: the folder does not exist, so there is no run to continue "
            "(check the path; a new run is `speclib run PARAMS --out DIR`)"
        )
    require_free(rd)
    if resume and rd.manifest.exists() and not rd.read_manifest():
        raise RunFolderRefused(
            f"--resume {rd.root}: its manifest.json cannot be read, and it holds the run's "
            "design, blocks and where it ran (a resume would lose them): restore it from a "
            "copy of the run folder"
        )
    if not resume and rd.holds_run():
        raise RunFolderRefused(
            f"run folder {rd.root} holds a run; nothing was touched: `speclib run --resume "
            f"{rd.root}` continues that run, a new run needs a new --out folder"
        )
    if resume and not rd.holds_run() and not rd.is_empty():
        raise RunFolderRefused(
            f"--resume {rd.root}: the folder holds no run to continue (no params record, "
            "manifest, records or launches), only other files; nothing was touched"
        )
    if not resume and not rd.is_empty():
        raise RunFolderRefused(
            f"run folder {rd.root} holds other files; nothing was touched: a run starts in "
            "a new or empty folder (name one with --out)"
        )


def ready_run(
    params: ExperimentParams,
    *,
    rd: RunDir,
    resume: bool,
    log: Callable[[str], None],
) -> ReadyRun:
    """Make the run folder ``rd``, whose lock the caller holds, ready for the blocks: on
    ``resume`` the servers its dead owner left reaped, the params recorded, ``00_setup``
    executed (a resume's into a notebook of its own) and its plan read back."""
    started = time.monotonic()
    check_run_folder(rd, resume=resume)  # again, now that the folder is ours
    if resume:
        reap_run(rd)
    write_record(params, rd)
    log(f"run folder: {rd.root}")
    log("setup: environment, models, manifest")
    plan = _setup(rd)
    log(f"design: {plan.design} ({plan.reason})")
    return ReadyRun(params, rd, plan, resume, started)


def _setup(rd: RunDir) -> RunPlan:
    """Execute ``00_setup`` on the run folder: no params file, the params it records are
    the run's. The design and blocks it planned. A resumed run's setup (the folder has a
    manifest) is its own notebook, ``00_setup-resume-<n>.ipynb``: the original is kept."""
    from papermill.exceptions import PapermillExecutionError

    nb = rd.setup_notebook(setups_before(rd.read_manifest()))
    try:
        execute_notebook("00_setup", nb, {"run_dir": str(rd.root), "params_file": ""})
    except PapermillExecutionError as exc:
        raise RunFailed(
            f"setup failed, no server was started: {exc.ename}: {exc.evalue} (notebook: {nb})"
        ) from None
    return read_plan(rd)
