"""What a run is doing, read from its run folder while the notebooks run.

The notebook kernel runs in another process, so the runner cannot see requests go by; but
the run folder is a contract (:mod:`speclib.core.rundir`): ``manifest.json`` lists the
blocks, ``launches/<id>/server.log`` grows while a server starts, ``requests.jsonl`` gets
one line per finished request and ``launches/<id>/status.json`` appears when a launch ends.
A :class:`RunWatcher` polls those files from a thread of the runner process (every 0.5 s
by default) into a frozen :class:`RunState` — the phase (setup, starting servers, warming
up, measuring block b of B with requests done/total and an ETA, analysis, report) — and
reports what deserves a line of its own (a block's servers ready, a failed launch, the
first failed request of a launch) as :class:`RunEvent` values. Showing them is
:mod:`speclib.app.terminal`'s job; what a starting server's log says (its start phase,
its last message) is read by :mod:`speclib.app.server_log`.

Totals come from the params the run folder holds (``params.resolved.json``): per block,
arms × load levels × prompts × repeats (per level: ``workload.repeats_at``).
``requests.jsonl`` is read incrementally; a file
rewritten by ``--resume`` (records of an unfinished launch moved aside) is read again.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speclib.app.server_log import READY_MARK, START_PHASES, last_message, start_phase
from speclib.core.rundir import RunDir, failure_headline

__all__ = [
    "POLL_INTERVAL_S",
    "RunEvent",
    "RunState",
    "RunWatcher",
    "ServerStart",
    "arm_request_total",
]

POLL_INTERVAL_S = 0.5
_NOT_ATTEMPTED = "not attempted"


@dataclass(frozen=True)
class ServerStart:
    """One server of the current block that has not served a request yet: its start phase
    (:data:`START_PHASES`, read from its log) and its last vLLM log message."""

    launch_id: str
    elapsed_s: float
    last_line: str
    phase: str = "starting Python"


@dataclass(frozen=True)
class RunState:
    """A snapshot of the run: the phase and, inside a block, its progress."""

    phase: str  # setup | starting | warmup | measuring | finishing | analysis | report
    block: str | None = None
    block_index: int = 0  # 1-based; 0 outside blocks
    n_blocks: int = 0
    arms: tuple[str, ...] = ()
    done: int = 0
    total: int | None = None
    failed: int = 0
    not_attempted: int = 0
    level: str | None = None
    starting: tuple[ServerStart, ...] = ()
    phase_s: float = 0.0  # time in this phase of this block
    eta_s: float | None = None


@dataclass(frozen=True)
class RunEvent:
    """Something worth a line of its own; ``error`` marks failures (shown even when quiet)."""

    text: str
    error: bool = False


def arm_request_total(run_dir: str | Path) -> int | None:
    """Measured requests one arm sends per block: load levels × prompts (one per turn of
    each question in a multi-turn run) × repeats.

    Read from ``params.resolved.json`` in the run folder; None when it cannot be read.
    """
    from speclib.core.datasets import workload_prompts
    from speclib.core.turns import sent_prompt_count
    from speclib.params.run_record import recorded_params

    rd = RunDir.at(run_dir)
    try:
        params = recorded_params(rd.params_resolved)
        w = params.workload
        n_prompts = sent_prompt_count(workload_prompts(params).prompts, w)
    except Exception:  # a progress display never stops a run
        return None
    return sum(w.repeats_at(lv, n_prompts) * n_prompts for lv in w.levels)


@dataclass
class _Tally:
    """Counts of the records of one block (mutable, owned by the watcher thread)."""

    done: int = 0
    failed: int = 0
    not_attempted: int = 0
    warm: int = 0
    level: str | None = None
    first_measure: float | None = None
    rate_base: tuple[float, int] | None = None  # (time, done) when measuring was first seen
    launches_seen: set[str] = field(default_factory=set)


class _RecordReader:
    """Reads the lines appended to ``requests.jsonl`` since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reset()

    def reset(self) -> None:
        self.offset, self.inode, self.rest = 0, None, b""

    def new_records(self) -> tuple[bool, list[dict[str, Any]]]:
        """``(rewritten, records)``: rewritten means every count must start again."""
        try:
            st = self.path.stat()
        except OSError:
            return False, []
        rewritten = self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset)
        if rewritten:
            self.reset()
        self.inode = st.st_ino
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read(st.st_size - self.offset)
        self.offset += len(chunk)
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return rewritten, out


class RunWatcher:
    """Polls a run folder into :attr:`state`; calls ``on_event`` for lines worth keeping.

    :meth:`poll` does one scan; the display calls it every ``interval_s`` from its thread.
    ``clock`` is the monotonic time source.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        on_event: Callable[[RunEvent], None] = lambda e: None,
        interval_s: float = POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rd = RunDir.at(run_dir)
        self.on_event, self.interval_s, self.clock = on_event, interval_s, clock
        self.started_wall = time.time()
        self.state = RunState("setup")
        self._reader = _RecordReader(self.rd.requests)
        self._tallies: dict[str, _Tally] = {}
        self._blocks: list[dict[str, Any]] = []
        self._per_arm: int | None = None
        self._reported: set[str] = set()
        self._phase_key: tuple[str | None, str] = (None, "setup")
        self._phase_t = clock()
        self._first_seen: dict[str, float] = {}
        self._log_phase: dict[str, tuple[int, str]] = {}
        self._ready: set[str] = set()  # launches whose API server said it is up

    # --- one scan --------------------------------------------------------------------------
    def poll(self) -> RunState:
        """Scan the folder once; update :attr:`state` and emit new events."""
        if not self._blocks or self._current() is None:  # run until decided adds blocks
            found = list(self.rd.read_manifest().get("blocks") or [])
            if len(found) > len(self._blocks):
                self._blocks = found
                self._per_arm = arm_request_total(self.rd.root)
        self._read_records()
        self._check_statuses()
        self.state = self._state()
        return self.state

    def _read_records(self) -> None:
        rewritten, records = self._reader.new_records()
        if rewritten:
            self._tallies.clear()
        now = self.clock()
        for rec in records:
            self._count(rec, now)

    def _count(self, rec: dict[str, Any], now: float) -> None:
        tally = self._tallies.setdefault(str(rec.get("block")), _Tally())
        lid = str(rec.get("launch_id"))
        tally.launches_seen.add(lid)
        if rec.get("phase") != "measure":
            tally.warm += 1
            return
        tally.done += 1
        if tally.first_measure is None:
            tally.first_measure = now
        level = rec.get("request_rate") or rec.get("concurrency")
        if level is not None:
            tally.level = f"{'rate ' if rec.get('request_rate') else 'c='}{level}"
        if rec.get("ok"):
            return
        error = str(rec.get("error") or "failed")
        if error.startswith(_NOT_ATTEMPTED):
            tally.not_attempted += 1
            return
        tally.failed += 1
        if f"req:{lid}" not in self._reported:
            self._reported.add(f"req:{lid}")
            self.on_event(RunEvent(f"{lid}: a request failed: {error.splitlines()[0][:200]}", True))

    def _check_statuses(self) -> None:
        for block in self._blocks:
            for lid in block.get("launch_ids", []):
                if f"status:{lid}" in self._reported:
                    continue
                status = self.rd.read_status(lid)
                if status is None:
                    continue
                self._reported.add(f"status:{lid}")
                if status.get("ok") or status.get("started_at", 0) < self.started_wall - 1:
                    continue
                first = failure_headline(status)
                if first.startswith(("KeyboardInterrupt", "SystemExit")):
                    self.on_event(RunEvent(f"{lid}: stopped by the interruption"))
                else:
                    self.on_event(RunEvent(f"FAILED {lid}: {first}", True))

    def _current(self) -> tuple[int, dict[str, Any]] | None:
        for i, block in enumerate(self._blocks):
            if any(f"status:{lid}" not in self._reported for lid in block.get("launch_ids", [])):
                return i, block
        return None

    def _state(self) -> RunState:
        if not self._blocks:
            return self._phase(None, "setup", RunState("setup"))
        current = self._current()
        if current is None:
            return self._after_blocks()
        i, block = current
        name = str(block.get("block"))
        arms = tuple(block.get("arms", []))
        tally = self._tallies.get(name, _Tally())
        total = self._per_arm * len(arms) if self._per_arm is not None else None
        base = RunState(
            "starting",
            block=name,
            block_index=i + 1,
            n_blocks=len(self._blocks),
            arms=arms,
            done=tally.done,
            total=total,
            failed=tally.failed,
            not_attempted=tally.not_attempted,
            level=tally.level,
        )
        if tally.done:
            phase = "finishing" if total is not None and tally.done >= total else "measuring"
            return self._measuring(self._phase(name, phase, base), tally)
        if tally.warm:
            return self._phase(name, "warmup", base)
        if not any(self.rd.launch(lid).exists() for lid in block.get("launch_ids", [])):
            return self._phase(None, "setup", RunState("setup", n_blocks=len(self._blocks)))
        state = self._phase(name, "starting", base)
        return _replace(state, starting=self._starting(block, tally))

    def _after_blocks(self) -> RunState:
        def fresh(path: Path) -> bool:
            try:
                return path.stat().st_mtime >= self.started_wall
            except OSError:
                return False

        n = len(self._blocks)
        if fresh(self.rd.report):
            return self._phase(None, "report", RunState("report", n_blocks=n))
        if fresh(self.rd.analysis_notebook):
            return self._phase(None, "analysis", RunState("analysis", n_blocks=n))
        return self._phase(None, "finishing", RunState("finishing", n_blocks=n))

    def _phase(self, block: str | None, phase: str, state: RunState) -> RunState:
        """Stamp the time spent in this phase; announce a block's first measured request."""
        now = self.clock()
        if (block, phase) != self._phase_key:
            previous = self._phase_key
            self._phase_key, self._phase_t = (block, phase), now
            if block is not None and previous == (block, "starting"):
                waited = now - self._first_seen.get(block, now)
                self.on_event(RunEvent(f"block {block}: servers ready after {waited:.0f} s"))
        return _replace(state, phase=phase, phase_s=now - self._phase_t)

    def _measuring(self, state: RunState, tally: _Tally) -> RunState:
        now = self.clock()
        if tally.rate_base is None:
            tally.rate_base = (now, tally.done)
        t0, d0 = tally.rate_base
        eta = None
        if state.total is not None and tally.done - d0 >= 2 and now > t0:
            rate = (tally.done - d0) / (now - t0)
            eta = max(0.0, (state.total - tally.done) / rate)
        return _replace(state, eta_s=eta)

    def _phase_of(self, lid: str, log: Path) -> str:
        """The start phase of a launch's log, read from where the last poll stopped."""
        pos, phase = self._log_phase.get(lid, (0, START_PHASES[0]))
        with contextlib.suppress(OSError), log.open("rb") as fh:
            fh.seek(pos)
            chunk = fh.read()
            cut = chunk.rfind(b"\n") + 1  # whole lines only
            if cut:
                if READY_MARK in chunk[:cut]:
                    self._ready.add(lid)
                new = start_phase(chunk[:cut].decode(errors="replace"))
                if START_PHASES.index(new) > START_PHASES.index(phase):
                    phase = new
                pos += cut
        self._log_phase[lid] = (pos, phase)
        return phase

    def _starting(self, block: dict[str, Any], tally: _Tally) -> tuple[ServerStart, ...]:
        now = self.clock()
        self._first_seen.setdefault(str(block.get("block")), now)
        out = []
        for lid in block.get("launch_ids", []):
            log = self.rd.launch_files(lid).server_log
            if lid in tally.launches_seen:
                continue
            since = self._first_seen.setdefault(lid, now)
            if not log.exists():  # not launched yet: starting all the same (not ready)
                out.append(ServerStart(lid, now - since, ""))
                continue
            phase = self._phase_of(lid, log)
            if lid in self._ready:  # up, waiting for the block's other servers (one GPU)
                continue
            out.append(ServerStart(lid, now - since, last_message(log), phase))
        return tuple(out)


def _replace(state: RunState, **changes: Any) -> RunState:
    from dataclasses import replace

    return replace(state, **changes)
