"""Running the replicate blocks of a run: one notebook per block, resume, run until decided.

:class:`LocalBlocks` runs the blocks of a ready run (:class:`speclib.app.run_folder.ReadyRun`)
on this host, one after the other; the Ray executor (:mod:`speclib.app.ray_executor`) is
the same loop with each block a Ray task. Either way, :meth:`LocalBlocks.run_all` is the
whole blocks step: the blocks the manifest planned, then, with ``protocol.max_replicates``,
:func:`until_decided`, which looks at the TPOT verdicts after each block
(:func:`speclib.analysis.run_tpot.look_at_run`) and adds blocks while one is inconclusive (a
calibration run, ``protocol.target_resolution``: while the A/A resolution is coarser than
its target; the analysis spends α over the looks), and last every launch's server command
recorded. Every block added, and why the run stopped, goes to the manifest through its owner
(:mod:`speclib.run.manifest`).

One block is the ``10_series`` notebook (:func:`execute_block`), handed the run folder and
the block: the params come from the folder's record (:mod:`speclib.params.run_record`). A
resumed run keeps the blocks whose launches all finished and moves the records of an
unfinished block aside before running it again whole (:func:`prepare_block`). Leaving the
loop, every server of the run folder is reaped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from speclib.app.kernel import execute_notebook
from speclib.app.run_folder import ReadyRun
from speclib.core.rundir import RunDir, failure_headline
from speclib.run.manifest import add_block, read_plan, record_launches, update_manifest
from speclib.serve.pidfile import reap_run

__all__ = [
    "BlockExecutor",
    "LocalBlocks",
    "execute_block",
    "one_block",
    "prepare_block",
    "report_block",
    "until_decided",
]

BlockExecutor = Callable[[dict[str, Any]], list[str]]
"""Runs one block of the manifest; returns ``launch_id: error`` of its failed launches
(:meth:`LocalBlocks.run_one`, a Ray task with ``executor: ray``)."""


class LocalBlocks:
    """The blocks step of one run on this host (``protocol.executor: local``).

    A context manager: leaving it reaps every server of the run folder, whatever happened.
    """

    def __init__(self, run: ReadyRun, *, log: Callable[[str], None]) -> None:
        self.run, self.log = run, log

    def __enter__(self) -> LocalBlocks:
        return self

    def __exit__(self, *exc: object) -> None:
        reap_run(self.run.rd)

    def run_all(self, *, interrupted: Callable[[], bool]) -> list[str]:
        """Every block of the run: those planned, those added until decided; then every
        launch's command recorded in the manifest. Failed launch ids."""
        failed = self.planned_blocks(interrupted=interrupted)
        failed += until_decided(self.run, execute=self.run_one, log=self.log)
        record_launches(self.run.rd)
        return failed

    def planned_blocks(self, *, interrupted: Callable[[], bool]) -> list[str]:
        """The blocks setup planned, one after the other; failed launch ids."""
        failed = []
        for block in self.run.plan.blocks:
            failed += one_block(self.run, block, execute=self.run_one, log=self.log)
            if interrupted():
                raise KeyboardInterrupt(f"block {block['block']} interrupted")
        return failed

    def run_one(self, block: dict[str, Any]) -> list[str]:
        """One block here (a :data:`BlockExecutor`)."""
        return execute_block(self.run.rd, block, self.run.plan.design)


def execute_block(rd: RunDir, block: dict[str, Any], design: str) -> list[str]:
    """Execute the series notebook for one block into ``rd``; ``launch_id: error`` of failures.

    This is the whole of one block on this host: the ``10_series`` notebook, handed the run
    folder (whose record holds the params) and the block, then every server of the run
    folder left behind reaped.
    """
    from papermill.exceptions import PapermillExecutionError

    out = rd.series_notebook(block["block"])
    error = None
    try:
        execute_notebook(
            "10_series",
            out,
            {
                "run_dir": str(rd.root),
                "replicate": block["replicate"],
                "arms": " ".join(block["arms"]),
                "design": design,
                "block": block["block"],
            },
        )
    except PapermillExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}"
    finally:
        reap_run(rd)
    failed = []
    for lid in block["launch_ids"]:
        status = rd.read_status(lid) or {}
        if not status.get("ok"):
            failed.append(f"{lid}: {failure_headline(status, error or 'launch failed')}")
    return failed


def until_decided(
    run: ReadyRun, *, execute: BlockExecutor, log: Callable[[str], None]
) -> list[str]:
    """Run until decided: add replicate blocks while a verdict is inconclusive, up to
    ``protocol.max_replicates``; the analysis spends α over the looks (O'Brien-Fleming).
    A calibration run (``protocol.target_resolution``) adds blocks until the A/A resolution
    reaches its target instead; stopped at the cap, its reason says how many blocks it would
    need. Each added block is run by ``execute``."""
    from speclib.analysis.run_tpot import look_at_run
    from speclib.run.design import plan_blocks

    params, rd, plan = run.params, run.rd, run.plan
    most, failed = params.protocol.max_replicates, []
    first = params.workload.replicates
    if not most or most <= first:
        return []
    reason = f"stopped: reached protocol.max_replicates = {most}"
    for rep in range(first, most + 1):
        look = look_at_run(rd, params)
        log(f"look after {rep} block(s): {look.why}")
        if look.decided:
            reason = look.why
            break
        if rep == most:
            reason += f"; {look.why}"
            break
        for block in plan_blocks(
            params, plan.design, range(rep, rep + 1), group_size=plan.group_size
        ):
            entry = block.to_dict()
            add_block(rd, entry)
            failed += one_block(run, entry, execute=execute, log=log)
    blocks = len({b["replicate"] for b in read_plan(rd).blocks})
    update_manifest(rd, stopping={"blocks": blocks, "max_replicates": most, "reason": reason})
    log(f"run until decided: {blocks} block(s); {reason}")
    return failed


def one_block(
    run: ReadyRun,
    block: dict[str, Any],
    *,
    execute: BlockExecutor,
    log: Callable[[str], None],
) -> list[str]:
    """Run one block of the manifest (kept when a resumed run finished it); failed launch ids."""
    if not prepare_block(run.rd, block, resume=run.resume, log=log):
        return []
    return report_block(block, execute(block), log=log)


def prepare_block(
    rd: RunDir, block: dict[str, Any], *, resume: bool, log: Callable[[str], None]
) -> bool:
    """Whether ``block`` must run: False when a resumed run finished it (kept). Before a
    re-run, the records of its unfinished launches are moved aside (:func:`_supersede`)."""
    name = block["block"]
    if resume and _block_done(rd, block):
        log(f"block {name}: done before, kept (resume)")
        return False
    moved = sum(_supersede(rd, lid) for lid in block["launch_ids"]) if resume else 0
    if moved:
        log(f"block {name}: {moved} records of the unfinished block moved to {rd.superseded}")
    arms = ", ".join(block["arms"])
    log(f"block {name}: starting {len(block['arms'])} server(s) ({arms}) and sending requests")
    return True


def _block_done(rd: RunDir, block: dict[str, Any]) -> bool:
    return all((rd.read_status(lid) or {}).get("ok") for lid in block["launch_ids"])


def report_block(
    block: dict[str, Any], errors: list[str], *, log: Callable[[str], None]
) -> list[str]:
    """Log how a block ended (each ``launch_id: error``, else done); its failed launch ids."""
    for err in errors:
        log(f"FAILED {err.splitlines()[0][:300]}")
    if not errors:
        log(f"block {block['block']}: done")
    return [e.split(":", 1)[0] for e in errors]


def _supersede(rd: RunDir, lid: str) -> int:
    """Move the records of an unfinished launch out of ``requests.jsonl`` before re-running
    it (kept in ``requests.superseded.jsonl``, so nothing is lost and nothing counts twice).
    """
    if not rd.requests.exists():
        return 0
    keep, moved = [], []
    for line in rd.requests.read_text("utf-8").splitlines():
        if not line.strip():
            continue
        try:
            is_mine = json.loads(line).get("launch_id") == lid
        except ValueError:  # a torn last line from a crash: drop it with the launch
            is_mine = True
        (moved if is_mine else keep).append(line)
    if moved:
        with (rd.superseded).open("a", encoding="utf-8") as fh:
            fh.write("\n".join(moved) + "\n")
        tmp = rd.requests.with_suffix(".tmp")
        tmp.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
        tmp.replace(rd.requests)
    return len(moved)
