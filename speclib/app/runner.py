"""The batch run in one pass: setup → blocks → looks → analysis → report.

Each step is owned by one module. :func:`speclib.app.run_folder.ready_run` checks the
params, makes the run folder ready and executes ``00_setup`` (environment, models, the
design, the manifest); the blocks run one ``10_series`` each (:mod:`speclib.app.block_loop`,
notebooks by :mod:`speclib.app.kernel`; with ``protocol.executor: ray`` as parallel Ray
tasks, :mod:`speclib.app.ray_executor`), then, with ``protocol.max_replicates``, a look at
the TPOT verdicts after each added block decides whether to add another; every launch's
server command is recorded in the manifest (:mod:`speclib.run.manifest`); the analysis
(:mod:`speclib.app.analyze`) executes ``20_analysis`` and exports ``report.html`` with code
hidden. Every executed notebook is kept in ``RUN_DIR/notebooks`` with its injected
parameters. A launch that fails is recorded and the others still run; a server left behind
by a killed kernel is reaped through the launches' pidfiles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from speclib.app.analyze import run_analysis
from speclib.app.block_loop import one_block, reap_all, until_decided
from speclib.app.kernel import signal_guard
from speclib.app.outcome import RunResult, log_to_stderr
from speclib.app.run_folder import ReadyRun, default_run_dir, ready_run
from speclib.core.rundir import RunDir
from speclib.run.manifest import record_launches

__all__ = ["run_experiment"]


def run_experiment(
    params_file: str | Path,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    log: Callable[[str], None] = log_to_stderr,
) -> RunResult:
    """Validate, run setup, every series launch and the analysis; export the report."""
    from speclib.run.preflight import checked_params

    params = checked_params(params_file)  # raises ParamsError before anything starts
    rd = RunDir.at(out or default_run_dir(params))
    restore, interrupted = signal_guard()
    try:
        run = ready_run(params, params_file, rd, resume=resume, log=log)
        if params.protocol.executor == "ray":
            failed = _run_on_ray(run, log, interrupted)
        else:
            failed = _run_here(run, log, interrupted)
        record_launches(rd)
        run_analysis(rd.root, log=log)  # the params just recorded: no re-decision
    finally:
        reap_all(rd)
        restore()
    return RunResult(rd.root, rd.report, rd.summary, tuple(failed))


def _run_here(
    run: ReadyRun, log: Callable[[str], None], interrupted: Callable[[], bool]
) -> list[str]:
    """The blocks one after the other on this host (``protocol.executor: local``)."""
    failed = []
    for block in run.plan.blocks:
        failed += one_block(
            run.params_file, run.rd, block, run.plan.design, resume=run.resume, log=log
        )
        if interrupted():
            raise KeyboardInterrupt(f"block {block['block']} interrupted")
    return failed + until_decided(
        run.params, run.params_file, run.rd, run.plan, resume=run.resume, log=log
    )


def _run_on_ray(
    run: ReadyRun, log: Callable[[str], None], interrupted: Callable[[], bool]
) -> list[str]:
    """The blocks as parallel Ray tasks (``protocol.executor: ray``)."""
    from speclib.app.ray_executor import RayExecutor

    with RayExecutor(run.params, run.rd, log=log) as ray_run:
        failed = ray_run.run_blocks(
            run.params_file,
            list(run.plan.blocks),
            run.plan.design,
            resume=run.resume,
            interrupted=interrupted,
        )
        failed += until_decided(
            run.params,
            run.params_file,
            run.rd,
            run.plan,
            resume=run.resume,
            log=log,
            execute=ray_run.run_one,
        )
    return failed
