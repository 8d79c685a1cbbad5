"""Making a run folder ready for its blocks: placed, the params recorded, setup executed.

The folder is ``output_dir``, else ``runs/<name>-<time>`` (:func:`default_run_dir`).
:func:`ready_run` is the first step of a batch run once the params passed their checks, in
one call: every server a killed run left in the folder is reaped; the folder is refused
when it holds an earlier run and ``--resume`` was not given; the params are recorded in it
(:func:`speclib.params.run_record.write_record`: ``params.yaml`` and
``params.resolved.json``, which every later step reads); ``00_setup`` (environment, models,
the design, the manifest) is executed on the folder and the plan it wrote read back
(:class:`ReadyRun`). A resumed run brings the params it recorded
(:func:`speclib.run.preflight.checked_params`), so its record is written again unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from speclib.app.kernel import execute_notebook
from speclib.app.outcome import RunFailed
from speclib.core.rundir import RunDir
from speclib.params.experiment import ExperimentParams
from speclib.params.run_record import write_record
from speclib.run.manifest import RunPlan, read_plan
from speclib.serve.pidfile import reap_run

__all__ = ["ReadyRun", "default_run_dir", "ready_run"]


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


def ready_run(
    params: ExperimentParams,
    *,
    out: str | Path | None,
    resume: bool,
    log: Callable[[str], None],
) -> ReadyRun:
    """Make the run folder (``out``, else :func:`default_run_dir`) ready for the blocks:
    every server a killed run left there reaped, the folder refused when it holds an earlier
    run (unless resumed), the params recorded, ``00_setup`` executed and its plan read back."""
    started = time.monotonic()
    rd = RunDir.at(out or default_run_dir(params))
    reap_run(rd)
    if rd.root.exists() and any(p != rd.run_log for p in rd.root.iterdir()) and not resume:
        raise RunFailed(f"run folder {rd.root} is not empty: use --resume or another --out")
    write_record(params, rd)
    log(f"run folder: {rd.root}")
    log("setup: environment, models, manifest")
    plan = _setup(rd)
    log(f"design: {plan.design} ({plan.reason})")
    return ReadyRun(params, rd, plan, resume, started)


def _setup(rd: RunDir) -> RunPlan:
    """Execute ``00_setup`` on the run folder: no params file, the params it records are
    the run's. The design and blocks it planned."""
    from papermill.exceptions import PapermillExecutionError

    nb = rd.setup_notebook()
    try:
        execute_notebook("00_setup", nb, {"run_dir": str(rd.root), "params_file": ""})
    except PapermillExecutionError as exc:
        raise RunFailed(
            f"setup failed, no server was started: {exc.ename}: {exc.evalue} (notebook: {nb})"
        ) from None
    return read_plan(rd)
