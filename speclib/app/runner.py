"""The batch run in one pass: setup → blocks → looks → analysis → report.

Each step is owned by one module, and the params are handed in once. They are checked
(:func:`speclib.run.preflight.checked_params`) and the run folder too
(:func:`speclib.app.run_folder.check_run_folder`), before anything is touched; the run then
owns the folder (:mod:`speclib.app.run_lock`) until its analysis is written.
:func:`speclib.app.run_folder.ready_run` records the params in the run folder, which every
later step reads, and executes ``00_setup``
(environment, models, the design, the manifest). The blocks step
(:class:`speclib.app.block_loop.LocalBlocks`, or with ``protocol.executor: ray`` the same loop
as parallel Ray tasks, :class:`speclib.app.ray_executor.RayExecutor`) runs one ``10_series``
per block, then, with ``protocol.max_replicates``, looks at the TPOT verdicts after each
added block to decide whether to add another, and records every launch's server command in
the manifest (:mod:`speclib.run.manifest`); leaving it reaps every server of the folder. The
analysis (:mod:`speclib.app.analyze`) executes ``20_analysis`` and exports ``report.html``
with code hidden; before it, in a greedy run whose answers differ between arms, the target
ranks both tokens at each first difference (:func:`speclib.run.scoring.ensure_ranked`).
Every executed notebook is kept in ``RUN_DIR/notebooks`` with its
injected parameters. A launch that fails is recorded and the others still run; a server
left behind by a killed kernel is reaped through the launches' pidfiles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from speclib.app.analyze import run_analysis
from speclib.app.block_loop import LocalBlocks
from speclib.app.kernel import signal_guard
from speclib.app.outcome import RunFailed, RunResult, log_to_stderr
from speclib.app.run_folder import ReadyRun, check_run_folder, default_run_dir, ready_run
from speclib.app.run_lock import hold_run
from speclib.core.rundir import RunDir

__all__ = ["run_experiment"]


def run_experiment(
    params_file: str | Path | None,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    log: Callable[[str], None] = log_to_stderr,
) -> RunResult:
    """Validate, run setup, every series launch and the analysis; export the report.

    ``resume`` continues the run in ``out`` with the params it recorded (``params_file``
    may then be None)."""
    from speclib.run.preflight import checked_params

    if resume:  # the folder first: its record holds the params
        check_run_folder(RunDir.at(out or ""), resume=True)
    # raises ParamsError before anything starts
    params = checked_params(params_file, resume=out if resume else None)
    rd = RunDir.at(out or default_run_dir(params))
    check_run_folder(rd, resume=resume)  # before anything is touched
    restore, interrupted = signal_guard()
    try:
        with hold_run(rd, "run") as gone:
            if gone is not None:
                log(f"the folder's last owner is gone: {gone.line()}")
            run = ready_run(params, rd=rd, resume=resume, log=log)
            with _blocks_step(run, log) as blocks:
                failed = blocks.run_all(interrupted=interrupted)
            _rank_step(run, log)
            _analysis_step(run, log)
    finally:
        restore()
    return RunResult(run.rd.root, run.rd.report, run.rd.summary, tuple(failed))


def _rank_step(run: ReadyRun, log: Callable[[str], None]) -> None:
    """A greedy run whose arms' answers differ from the control's: the target, served once
    more without speculation, ranks both tokens at each first difference
    (:func:`speclib.run.scoring.ensure_ranked`), so the outputs gate can tell a near tie
    from a real disagreement. ``speclib analyze`` reads what this step wrote and never
    starts a server for it."""
    if run.params.workload.temperature != 0:
        return
    from speclib.run.scoring import ensure_ranked

    log(ensure_ranked(run.rd.root))


def _analysis_step(run: ReadyRun, log: Callable[[str], None]) -> None:
    """The run's own analysis (the params just recorded: no re-decision). Records it
    cannot decide on (none at all, every launch failed) make a failed run (exit 1), not
    invalid input as they are for ``speclib analyze``."""
    from speclib.app.analyze import AnalysisRefused

    try:
        run_analysis(run.rd.root, log=log)
    except AnalysisRefused as exc:
        raise RunFailed(f"the run's analysis refused its records: {exc}") from None


def _blocks_step(run: ReadyRun, log: Callable[[str], None]) -> LocalBlocks:
    """The blocks step of ``run``: here, or as Ray tasks (``protocol.executor: ray``)."""
    if run.params.protocol.executor == "ray":
        from speclib.app.ray_executor import RayExecutor

        return RayExecutor(run, log=log)
    return LocalBlocks(run, log=log)
