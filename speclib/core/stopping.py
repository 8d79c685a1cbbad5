"""Why a run stopped adding replicate blocks: a code and its numbers, and their words.

Run until decided (:func:`speclib.app.block_loop.until_decided`) looks at the verdicts
after the planned blocks and adds a block while one the first screen shows is
inconclusive, the time budget affords one more and the cap is not reached. What it did is
data: a :class:`Stopping` (one of :data:`STOP_CODES`, the blocks run, the plan's bounds, the
minutes each block took) written to the manifest by the runner; the analysis adds what is
still open, each an :class:`OpenVerdict` with the blocks that would likely decide it
(:mod:`speclib.analysis.verdict.still_open`), and ``summary.json`` holds the whole
(``stopping``). Nothing reads words back: :func:`plan_line`, :func:`pace_line`,
:func:`look_line` and :func:`stopping_lines` render the numbers for the run's log, the
terminal and the report alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from speclib.core.wording import span_text

__all__ = [
    "STOP_CODES",
    "OpenVerdict",
    "Stopping",
    "affordable_blocks",
    "look_line",
    "pace_line",
    "plan_line",
    "stopping_lines",
]

STOP_CODES = ("decided", "budget", "cap", "resolution", "planned")
"""Why the run stopped adding blocks: ``decided`` (no verdict the first screen shows is
open), ``budget`` (the next block would likely end after the time budget), ``cap`` (the
block cap was reached), ``resolution`` (a calibration run reached its target resolution),
``planned`` (no looks: the planned blocks only)."""


@dataclass(frozen=True)
class OpenVerdict:
    """A verdict the first screen shows that is still inconclusive, and what it would take.

    ``arm`` at load level ``level`` (``load`` its label); ``cut`` and ``segment`` name the
    segment its answer names (None: the arm's own word at that load). ``ratio``, ``ci_low``,
    ``ci_high``: its TPOT ratio and interval now (None without one). ``blocks_needed``: the
    blocks in all at which it would likely decide if its estimate and block-to-block SD
    hold, reaching ``target``; None when no practical number would (``target`` set: too
    close to a boundary of the rule; None: no interval to project)."""

    arm: str
    level: int
    load: str
    cut: str | None = None
    segment: str | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    blocks_needed: int | None = None
    target: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (an infinite bound as None)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("ratio", "ci_low", "ci_high"):
            if out[key] is not None and not math.isfinite(out[key]):
                out[key] = None
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpenVerdict:
        """The inverse of :meth:`to_dict`."""
        return cls(**{f.name: data.get(f.name) for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Stopping:
    """Why the run stopped adding blocks (``code``, one of :data:`STOP_CODES`; None for a
    folder whose runner recorded none), after ``blocks`` blocks of at least ``at_least`` and
    at most ``at_most``, with the time budget ``budget_min``; ``elapsed_min`` from the start
    of the run to the end of its last block, ``block_min`` each block's minutes as run (a
    block kept by ``--resume`` is not among them), ``next_block_min`` what one more block
    was expected to take; ``open``: what is still inconclusive."""

    code: str | None
    blocks: int
    at_least: int
    at_most: int
    budget_min: float | None = None
    elapsed_min: float | None = None
    block_min: tuple[float, ...] = ()
    next_block_min: float | None = None
    open: tuple[OpenVerdict, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.code is not None and self.code not in STOP_CODES:
            raise ValueError(f"`code` must be one of {STOP_CODES} (got {self.code!r})")

    def with_open(self, found: Sequence[OpenVerdict]) -> Stopping:
        """The same record with ``open`` set."""
        return replace(self, open=tuple(found))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (``summary.json``'s and the manifest's ``stopping``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "open"}
        out["block_min"] = list(self.block_min)
        out["open"] = [o.to_dict() for o in self.open]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Stopping | None:
        """The record :meth:`to_dict` wrote; None for none, or for an older kit's record (a
        sentence, no code)."""
        if not data or "code" not in data:
            return None
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        kept["block_min"] = tuple(kept.get("block_min") or ())
        kept["open"] = tuple(OpenVerdict.from_dict(o) for o in kept.get("open") or ())
        return cls(**kept)


def affordable_blocks(
    *, done: int, elapsed_min: float, block_min: float, budget_min: float, at_most: int
) -> int:
    """How many blocks in all the budget affords: ``done`` so far plus as many more of
    ``block_min`` minutes each as end within ``budget_min`` from now (``elapsed_min``),
    at most ``at_most``."""
    if block_min <= 0:
        return at_most
    more = math.floor((budget_min - elapsed_min) / block_min + 1e-9)
    return max(done, min(at_most, done + max(more, 0)))


# --------------------------------------------------------------------------- the words


def _min(x: float) -> str:
    return f"{x:.1f} min"


def plan_line(at_least: int, at_most: int, budget_min: float | None) -> str:
    """The plan at the start: "blocks: at least 3, at most 5 while a verdict is open, within
    a budget of 15 min" (or the planned blocks only)."""
    if at_most <= at_least:
        return f"blocks: {at_least} (the planned blocks only: no block is added)"
    budget = f", within a budget of {budget_min:g} min" if budget_min else ""
    return (f"blocks: at least {at_least}, at most {at_most} while a verdict is still "
            f"inconclusive{budget}")  # fmt: skip


def pace_line(
    *, block_min: Sequence[float], elapsed_min: float, at_least: int, at_most: int,
    budget_min: float | None,
) -> str:  # fmt: skip
    """After the first blocks are timed (``block_min``, in order): when the planned blocks
    will likely end and, once a block after the first is timed (the first compiles on a
    GPU), how many blocks the budget affords. When that is fewer than the cap, it says so:
    the looks spend α up to the cap, so a cap the budget cannot reach costs power."""
    done = len(block_min)
    nxt = max(block_min[1:]) if done > 1 else block_min[-1]
    end = elapsed_min + max(at_least - done, 0) * nxt
    text = (f"block {done} took {_min(block_min[-1])}: the {at_least} planned blocks end at "
            f"about {_min(end)}")  # fmt: skip
    if done == 1:
        return text + (" (if the later blocks take as long; on a GPU, where the first "
                       "compiles, they take less)")  # fmt: skip
    if at_most > at_least and budget_min:
        can = affordable_blocks(done=done, elapsed_min=elapsed_min, block_min=nxt,
                                budget_min=budget_min, at_most=at_most)  # fmt: skip
        can = max(can, at_least)
        text += f"; the budget of {budget_min:g} min affords about {can} of at most {at_most}"
        if can < at_most:
            text += (f" (the looks spend alpha up to {at_most}: protocol.max_replicates: {can} "
                     "would spend it where this run can look)")  # fmt: skip
    return text


def _name(o: OpenVerdict) -> str:
    return f"{o.arm} at {o.load}" + (f" on {o.segment} ({o.cut})" if o.segment else "")


def _item(o: OpenVerdict) -> str:
    what = _name(o)
    if o.ratio is not None:
        what += f" ×{o.ratio:.2f} [{span_text(o.ci_low, o.ci_high)}]"
    return what


def _needs(o: OpenVerdict, blocks: int, block_min: float | None) -> str:
    if o.blocks_needed is not None:
        more = o.blocks_needed - blocks
        time = f", ~{more * block_min:.0f} min" if block_min else ""
        return (f"{more} more block{'s' * (more != 1)} ({o.blocks_needed} in all{time}) would "
                f"likely decide it ({o.target})")  # fmt: skip
    if o.target is not None:
        return (
            "its estimate is too close to a boundary of the rule for its noise: no "
            "practical number of blocks would decide it"
        )
    return "no interval to project (too few blocks or pairs)"


def look_line(
    blocks: int, confidence: float | None, found: Sequence[OpenVerdict], *, decided: bool,
    calibration: str | None = None,
) -> str:  # fmt: skip
    """One look, for the run's log: "look after 3 blocks (confidence 98.86 %): 2 still
    inconclusive: draft-k2 at c=8, ngram-k4 at c=1 on fresh (category)"."""
    head = f"look after {blocks} block{'s' * (blocks != 1)}"
    if confidence is not None:
        head += f" (confidence {100 * confidence:.4g} %)"
    if calibration is not None:
        return f"{head}: {calibration}"
    if decided:
        return f"{head}: every verdict decided"
    names = ", ".join(_name(o) for o in found[:4])
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    return f"{head}: {len(found)} still inconclusive: {names}{more}"


def _why(s: Stopping) -> str:
    if s.code == "decided":
        return "every verdict decided"
    if s.code == "resolution":
        return "the A/A resolution reached its target (see the calibration)"
    if s.code == "cap":
        return f"the cap of {s.at_most} blocks is reached (protocol.max_replicates)"
    if s.code == "planned":
        return "the planned blocks only (protocol.max_replicates)"
    if s.code == "budget":
        after = ""
        if s.next_block_min is not None and s.elapsed_min is not None:
            after = (f": one more block (~{_min(s.next_block_min)}) would end at about "
                     f"{_min(s.elapsed_min + s.next_block_min)}")  # fmt: skip
        return f"the time budget of {s.budget_min:g} min is spent{after}"
    return "–"


def stopping_lines(s: Stopping, *, limit: int | None = 6) -> list[str]:
    """The blocks run and why the run stopped, then each open verdict and what it would take
    (the first ``limit`` of them, then how many more; None: all)."""
    bounds = (f"at least {s.at_least}, at most {s.at_most}" if s.at_most > s.at_least
              else "the planned blocks")  # fmt: skip
    took = ""
    if s.elapsed_min is not None:
        took = f"; {_min(s.elapsed_min)}" + (f" of {s.budget_min:g}" if s.budget_min else "")
    stopped = f"; stopped: {_why(s)}" if s.code is not None else ""
    lines = [f"blocks: {s.blocks} run ({bounds}{took}){stopped}"]
    shown = s.open if limit is None else s.open[:limit]
    for o in shown:
        lines.append(f"still inconclusive: {_item(o)}: {_needs(o, s.blocks, s.next_block_min)}")
    if len(shown) < len(s.open):
        rest = len(s.open) - len(shown)
        lines.append(f"… and {rest} more still inconclusive (summary.json: stopping)")
    return lines
