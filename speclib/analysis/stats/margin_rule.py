"""The rule on an interval of a ratio against the margin δ: the one place it is written.

Every verdict of the kit (an arm's TPOT, a segment's, the A/A arm's bench check, a look of
a run until decided) applies the same rule, declared before the run, to an interval
``(low, high)`` of a ratio experiment / control (below 1: the experiment is faster):

* **adopt** – ``high < 1 − δ``: time per token cut by more than δ;
* **equivalent** – ``1 − δ < low`` and ``high < 1 + δ``;
* **worse** – ``low > 1``: slower than the control;
* **inconclusive** – anything else (an undefined interval such as ``(0, inf)`` included).

The rules overlap only inside ``(1, 1 + δ)``: that is "equivalent", measurably slower.
:func:`classify` returns the word and where the interval lies against 1
(:class:`~speclib.core.verdict_words.Side`), which says an "equivalent" that is measurably
slower or faster. :func:`decision_distance` reads the rule backwards: how narrow an
interval around an estimate must get to decide, and the word it would reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from speclib.core.verdict_words import Side, Word

__all__ = ["Classified", "classify", "decision_distance", "side_of"]


@dataclass(frozen=True)
class Classified:
    """The rule's ``word`` on an interval, and the ``side`` of 1 it lies on."""

    word: Word
    side: Side


def _check_margin(margin: Any) -> float:
    ok = isinstance(margin, (int, float, np.floating)) and not isinstance(margin, bool)
    if not (ok and 0 < margin < 1):
        raise ValueError(f"`margin` must be a number in (0, 1) (got {margin!r})")
    return float(margin)


def _check_bounds(low: Any, high: Any) -> tuple[float, float]:
    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        raise ValueError(f"`low`, `high` must be numbers (got {low!r}, {high!r})") from None
    if math.isnan(lo) or math.isnan(hi) or lo > hi or lo < 0:
        raise ValueError(f"`low`, `high` must satisfy 0 <= low <= high (got {low!r}, {high!r})")
    return lo, hi


def side_of(low: float, high: float) -> Side:
    """Where the interval ``(low, high)`` lies against 1."""
    lo, hi = _check_bounds(low, high)
    if lo > 1:
        return Side.ABOVE_ONE
    if hi < 1:
        return Side.BELOW_ONE
    return Side.COVERS_ONE


def classify(low: float, high: float, *, margin: float) -> Classified:
    """The rule's word on the ratio interval ``(low, high)`` at δ = ``margin`` (see the
    module docstring), and its side of 1. ``0 <= low <= high`` (``high`` may be inf)."""
    margin = _check_margin(margin)
    lo, hi = _check_bounds(low, high)
    side = side_of(lo, hi)
    if hi < 1 - margin:
        return Classified(Word.ADOPT, side)
    if lo > 1 - margin and hi < 1 + margin:
        return Classified(Word.EQUIVALENT, side)
    if lo > 1:
        return Classified(Word.WORSE, side)
    return Classified(Word.INCONCLUSIVE, side)


def decision_distance(estimate: float, *, margin: float) -> tuple[float, Word] | None:
    """How narrow (log half-width) an interval around ``estimate`` must get to decide, and
    the word it would reach: the rule read backwards, taking the decision that needs the
    least narrowing. None when the estimate is ``1 − δ``, where no width decides (not
    below it for adopt, not above it for equivalent, not above 1)."""
    margin = _check_margin(margin)
    if not (isinstance(estimate, (int, float, np.floating)) and estimate > 0
            and math.isfinite(estimate)):  # fmt: skip
        raise ValueError(f"`estimate` must be a positive ratio (got {estimate!r})")
    est, lower, upper = math.log(estimate), math.log1p(-margin), math.log1p(margin)
    options = []
    if est < lower:
        options.append((lower - est, Word.ADOPT))
    if lower < est < upper:
        options.append((min(est - lower, upper - est), Word.EQUIVALENT))
    if est > 0:
        options.append((est, Word.WORSE))
    best = max(options, default=None)
    return best if best is not None and best[0] > 1e-12 else None  # rounding at 1 − δ
