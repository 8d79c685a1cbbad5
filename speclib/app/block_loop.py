"""Running the replicate blocks of a run: one notebook per block, resume, run until decided.

:class:`LocalBlocks` runs the blocks of a ready run (:class:`speclib.app.run_folder.ReadyRun`)
on this host, one after the other; the Ray executor (:mod:`speclib.app.ray_executor`) is
the same loop with each block a Ray task. Either way, :meth:`LocalBlocks.run_all` is the
whole blocks step: the plan said (the blocks at least and at most, the time budget), the
blocks the manifest planned, then :func:`until_decided`, which looks at the verdicts after
each block (:func:`speclib.analysis.run_look.look_at_run`) and adds a block while one the
first screen shows is inconclusive, the cap (``protocol.max_replicates``) is not reached
and the budget (``protocol.budget_min``) affords one more (a calibration run,
``protocol.target_resolution``: while its A/A resolution is coarser than its target); the
analysis spends α over the looks. Last, every launch's server command is recorded. Why
the run stopped goes to the manifest as a code and its numbers
(:class:`speclib.core.stopping.Stopping`, through :mod:`speclib.run.manifest`), each block
added too; :class:`BlockClock` times the blocks the budget is judged by.

One block is the ``10_series`` notebook (:func:`execute_block`), handed the run folder and
the block: the params come from the folder's record (:mod:`speclib.params.run_record`). A
resumed run keeps the blocks whose launches all finished and moves the records of an
unfinished block aside before running it again whole (:func:`prepare_block`). Leaving the
loop, every server of the run folder is reaped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from speclib.app.kernel import execute_notebook
from speclib.app.run_folder import ReadyRun
from speclib.core.rundir import RunDir, failure_headline
from speclib.core.stopping import Stopping, pace_line, plan_line, stopping_lines
from speclib.run.manifest import add_block, read_plan, record_launches, record_stopping
from speclib.serve.pidfile import reap_run

__all__ = [
    "BlockClock",
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


@dataclass
class BlockClock:
    """The run's time against its budget: ``started`` (``time.monotonic``, the run's start)
    and the seconds each replicate took as run (``by_replicate``, in order; a sweep
    interleaved in groups runs several blocks per replicate, timed together; a block kept by
    ``--resume`` is not timed). ``now`` is the clock (a test passes its own)."""

    started: float
    by_replicate: dict[Any, float] = field(default_factory=dict)
    now: Callable[[], float] = time.monotonic

    @property
    def seconds(self) -> list[float]:
        """Each timed replicate's seconds, in the order they ran."""
        return list(self.by_replicate.values())

    def record(self, replicate: Any, seconds: float) -> None:
        """Add ``seconds`` to ``replicate``'s time."""
        self.by_replicate[replicate] = self.by_replicate.get(replicate, 0.0) + seconds

    def elapsed_s(self) -> float:
        """Seconds since the run started."""
        return self.now() - self.started

    def next_block_s(self) -> float | None:
        """What one more replicate will likely take: the longest after the first (the first
        compiles on a GPU), else the first; None before any was timed."""
        done = self.seconds
        if not done:
            return None
        return max(done[1:]) if len(done) > 1 else done[0]

    def affords_block(self, budget_min: float) -> bool:
        """Whether one more replicate would likely end within ``budget_min`` of the start
        (with none timed yet, as after a resume that kept every planned block: whether any
        time is left)."""
        nxt = self.next_block_s()
        return self.elapsed_s() + (nxt or 0.0) <= 60 * budget_min


class LocalBlocks:
    """The blocks step of one run on this host (``protocol.executor: local``).

    A context manager: leaving it reaps every server of the run folder, whatever happened.
    """

    def __init__(self, run: ReadyRun, *, log: Callable[[str], None]) -> None:
        self.run, self.log = run, log
        self.clock = BlockClock(run.started)

    def __enter__(self) -> LocalBlocks:
        return self

    def __exit__(self, *exc: object) -> None:
        reap_run(self.run.rd)

    def run_all(self, *, interrupted: Callable[[], bool]) -> list[str]:
        """Every block of the run: the plan said, those planned, those added until decided;
        then every launch's command recorded in the manifest. Failed launch ids."""
        least, most = self.run.params.block_bounds
        self.log(plan_line(least, most, self.run.params.protocol.budget_min))
        began = self.clock.now()
        failed = self.planned_blocks(interrupted=interrupted)
        if not self.clock.seconds:  # blocks run in parallel (Ray): their time as one block's
            self.clock.record("planned", self.clock.now() - began)
        failed += until_decided(self.run, execute=self.run_one, log=self.log, clock=self.clock,
                                interrupted=interrupted)  # fmt: skip
        record_launches(self.run.rd)
        return failed

    def planned_blocks(self, *, interrupted: Callable[[], bool]) -> list[str]:
        """The blocks setup planned, one after the other; failed launch ids. Once the first
        and the second replicate are timed: when the planned blocks will likely end, and
        (after the second) what the budget affords."""
        failed = []
        blocks = self.run.plan.blocks
        for i, block in enumerate(blocks):
            failed += one_block(self.run, block, execute=self.run_one, log=self.log,
                                clock=self.clock)  # fmt: skip
            last_of_replicate = i + 1 == len(blocks) or (
                blocks[i + 1]["replicate"] != block["replicate"])  # fmt: skip
            if last_of_replicate and block["replicate"] in self.clock.by_replicate and (
                    len(self.clock.seconds) <= 2):  # fmt: skip
                self.log(self._pace())
            if interrupted():
                raise KeyboardInterrupt(f"block {block['block']} interrupted")
        return failed

    def _pace(self) -> str:
        least, most = self.run.params.block_bounds
        return pace_line(block_min=[x / 60 for x in self.clock.seconds],
                         elapsed_min=self.clock.elapsed_s() / 60, at_least=least,
                         at_most=most, budget_min=self.run.params.protocol.budget_min)  # fmt: skip

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
    run: ReadyRun,
    *,
    execute: BlockExecutor,
    log: Callable[[str], None],
    clock: BlockClock | None = None,
    interrupted: Callable[[], bool] = lambda: False,
) -> list[str]:
    """Run until decided, after the planned blocks: look (the verdicts the first screen
    would show, :func:`speclib.analysis.run_look.look_at_run`) and add a block while one is
    inconclusive, fewer than the cap ran and ``clock`` says the budget affords one more.
    A calibration run (``protocol.target_resolution``) adds blocks until its A/A resolution
    reaches the target instead. Each added block is run by ``execute``. Why the run stopped
    is recorded in the manifest (:class:`speclib.core.stopping.Stopping`) and logged; the
    analysis adds what is still open. Failed launch ids of the added blocks."""
    from speclib.run.design import plan_blocks

    params, rd, plan = run.params, run.rd, run.plan
    clock = clock or BlockClock(run.started)
    least, most = params.block_bounds
    budget = params.protocol.budget_min
    failed: list[str] = []
    code, look = "planned", None
    rep = least
    while most > least:
        # here, not at the top: the analysis imports scipy (~0.8 s of CPU), which a run
        # with a fixed number of blocks never needs in this process
        from speclib.analysis.run_look import look_at_run

        look = look_at_run(rd)
        log(look.line)
        if look.decided:
            code = "resolution" if look.calibration is not None else "decided"
            break
        if rep >= most:
            code = "cap"
            break
        if not clock.affords_block(budget):
            code = "budget"
            break
        for block in plan_blocks(
            params, plan.design, range(rep, rep + 1), group_size=plan.group_size
        ):
            entry = block.to_dict()
            add_block(rd, entry)
            failed += one_block(run, entry, execute=execute, log=log, clock=clock)
            if interrupted():
                raise KeyboardInterrupt(f"block {entry['block']} interrupted")
        rep += 1
    nxt = clock.next_block_s()
    stopping = Stopping(
        code=code, blocks=len({b["replicate"] for b in read_plan(rd).blocks}), at_least=least,
        at_most=most, budget_min=budget, elapsed_min=round(clock.elapsed_s() / 60, 2),
        block_min=tuple(round(x / 60, 2) for x in clock.seconds),
        next_block_min=None if nxt is None else round(nxt / 60, 2),
    )  # fmt: skip
    record_stopping(rd, stopping.to_dict())  # the analysis adds what is still open
    for line in stopping_lines(stopping.with_open(look.open if look else ())):
        log(line)
    return failed


def one_block(
    run: ReadyRun,
    block: dict[str, Any],
    *,
    execute: BlockExecutor,
    log: Callable[[str], None],
    clock: BlockClock | None = None,
) -> list[str]:
    """Run one block of the manifest (kept when a resumed run finished it); failed launch
    ids. ``clock`` gets the time it took."""
    if not prepare_block(run.rd, block, resume=run.resume, log=log):
        return []
    began = clock.now() if clock is not None else 0.0
    errors = execute(block)
    if clock is not None:
        clock.record(block["replicate"], clock.now() - began)
    return report_block(block, errors, log=log)


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
