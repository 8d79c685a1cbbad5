"""Sequential looks over replicate blocks: how much error to spend at each look, and when to stop.

With ``protocol.max_replicates: N`` the runner adds replicate blocks while the verdict is
inconclusive and looks at the data after each block ``k = min_blocks .. N``. Looking
repeatedly at 95 % intervals would decide falsely more often than 5 % of the time, so each
look gets its own, stricter level from an **alpha-spending function**.

* :func:`obrien_fleming_spending` is the Lan–DeMets (1983) O'Brien–Fleming-type function
  ``α(t) = 2 - 2 Φ(z[1 - α/2] / sqrt(t))`` of the information fraction ``t``: it spends
  almost nothing early and nearly all of α at the last look, so the last look's interval is
  close to the fixed-design one.
* :func:`spending_plan` fixes the looks and their levels: information fraction
  ``t_k = k / N`` (blocks are the unit of information, since the instance effects dominate
  the variance), and at look k the interval's error is ``α_k = α(t_k) - α(t_{k-1})``, the
  first look taking ``α(t_min)``. The looks' errors sum to α, so by the union bound
  (Bonferroni over looks) the chance of any false decision over all looks is at most α,
  whatever the correlation between looks. It is **conservative**: consecutive looks share
  most of their data, so the true overall error is below α (exact group-sequential
  boundaries would use that correlation to widen the early levels; with t-intervals on a
  handful of blocks the union bound is the simple valid choice). For N = 4 and
  ``min_blocks = 2`` at α = 0.05 the looks use α_k = 0.0056, 0.0180, 0.0264.
* :func:`interval_word` is the decision rule of :mod:`speclib.analysis.verdict.decision` on a bare
  interval: **adopt** if the upper bound is below ``1 - δ``; **equivalent** if the interval
  lies inside ``(1 - δ, 1 + δ)``; **worse** if the lower bound is above 1; else
  **inconclusive**.
* :func:`first_decisive_look` takes the intervals computed so far, each at its look's level,
  and returns the first look that decides, or says whether to go on.

Several experiments (and load levels): at each look, decide the comparisons still
undecided with Holm's procedure at family level ``1 - α_k``
(:func:`speclib.analysis.verdict.tpot_verdict.decide_family` with ``looks``); a comparison that
decides at look k is **frozen**: it keeps that decision and that interval, built at the
level of that look and Holm step (which is what the report shows as its confidence, never
the overall ``1 - α``). The run continues while any comparison is undecided, and only the
last look leaves one inconclusive. The analysis replays the looks from the records
(replicates ``< k`` at look k), so re-analysing a finished run gives the same frozen
decisions. The union bound over looks then keeps the chance of any false decision at most
α. The first look is at ``min_blocks >= 2``: one block has no degrees of freedom.

**A time budget** (``protocol.budget_min``) makes the number of looks unknown in advance:
the run may stop before the cap because the next block would not fit. The plan does not
depend on it: the maximum information is the cap, fixed before the run, and each look's
level is a function of its block count, the planned blocks and the cap only. Stopping
early (for the budget, or because every verdict is decided) only leaves α unspent; the
union bound above holds for whichever looks were made. The time a block took never sets a
level (block times depend on the arms' speed, which is what is measured). Why this
function and not one that spends by blocks without a cap (half of what is left at each
look): ``tests/benchmarks/bench_until_decided.py``, summarised in docs/method.md.

:func:`blocks_to_decide` says what an open comparison would take: the blocks in all at
which its interval would likely decide if its estimate and block-to-block SD hold, at the
level later looks would have (the plan's, or beyond the cap the last look of a plan whose
cap is that many blocks), with the same share of the look's α as now (its Holm step).

A calibration run (``protocol.target_resolution``: the control and the A/A arm only) has
no comparison to decide and uses no spending plan: the runner adds blocks while the A/A
interval, at ``analysis.confidence``, is wider than the target, judging its width only,
never where it lies; the A/A arm's word is taken once, on all its blocks
(:mod:`speclib.analysis.verdict.resolution`).

Example::

    plan = spending_plan(4, min_blocks=2, alpha=0.05)
    intervals = []
    for blocks, level in zip(plan.looks, plan.confidence_levels):
        ci = block_ratio_cis(summary_of_first(blocks), confidence_level=level).arms["ngram"]
        intervals.append((ci.ci_low, ci.ci_high))
        result = first_decisive_look(intervals, plan=plan, margin=0.05)
        if result.final:
            break
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from speclib.core.jsonutil import jsonable

__all__ = [
    "SequentialDecision",
    "SpendingPlan",
    "blocks_to_decide",
    "decision_distance",
    "first_decisive_look",
    "interval_word",
    "obrien_fleming_spending",
    "spending_plan",
]


@dataclass(frozen=True)
class SpendingPlan:
    """The looks of a sequential run and the level of each.

    ``looks[i]`` is the number of blocks at look i, ``information[i]`` its information
    fraction ``looks[i] / max_blocks``, ``cumulative_alpha[i]`` the spending function there,
    ``alpha_spent[i]`` the error allowed at that look and ``confidence_levels[i]`` the
    interval's confidence ``1 - alpha_spent[i]``.
    """

    alpha: float
    max_blocks: int
    looks: tuple[int, ...]
    information: tuple[float, ...]
    cumulative_alpha: tuple[float, ...]
    alpha_spent: tuple[float, ...]
    confidence_levels: tuple[float, ...]

    def level_at(self, blocks: int) -> float:
        """Confidence level of the look after ``blocks`` blocks (ValueError if not a look)."""
        if blocks not in self.looks:
            raise ValueError(f"`blocks` must be one of the looks {self.looks} (got {blocks!r})")
        return self.confidence_levels[self.looks.index(blocks)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class SequentialDecision:
    """Outcome of the looks so far.

    ``word`` is the first decisive look's decision, or "inconclusive". ``look`` is the
    index (into ``plan.looks``) of that look, or of the last look seen when none decided;
    ``blocks`` and ``confidence_level`` belong to that look; ``alpha_spent`` is the
    cumulative α spent up to it. ``final`` is True when a look decided or the last planned
    look was reached (stop adding blocks); False means: add a block and look again.
    """

    word: str
    look: int
    blocks: int
    confidence_level: float
    alpha_spent: float
    final: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


# --------------------------------------------------------------------------- validation


def _check_alpha(alpha: Any) -> float:
    ok = isinstance(alpha, (int, float, np.floating)) and not isinstance(alpha, bool)
    if not (ok and 0 < alpha < 1):
        raise ValueError(f"`alpha` must be in (0, 1) (got {alpha!r})")
    return float(alpha)


def _check_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer (got {value!r})")
    return int(value)


def _check_margin(margin: Any) -> float:
    ok = isinstance(margin, (int, float, np.floating)) and not isinstance(margin, bool)
    if not (ok and 0 < margin < 1):
        raise ValueError(f"`margin` must be a number in (0, 1) (got {margin!r})")
    return float(margin)


# ----------------------------------------------------------------------------- public


def obrien_fleming_spending(t: ArrayLike, *, alpha: float = 0.05) -> NDArray[np.float64]:
    """Lan–DeMets O'Brien–Fleming-type spending ``α(t) = 2 - 2 Φ(z[1-α/2] / sqrt(t))``.

    ``t`` is the information fraction in [0, 1] (scalar or array); ``α(0) = 0`` and
    ``α(1) = alpha`` (two-sided). Returns an array of the same shape.
    """
    alpha = _check_alpha(alpha)
    frac = np.asarray(t, dtype=np.float64)
    if not np.all(np.isfinite(frac)) or np.any((frac < 0) | (frac > 1)):
        raise ValueError(f"`t` must lie in [0, 1] (got {np.asarray(t).tolist()!r})")
    z = stats.norm.isf(alpha / 2)
    safe = np.where(frac > 0, frac, 1.0)
    return np.where(frac > 0, 2.0 * stats.norm.sf(z / np.sqrt(safe)), 0.0)


def spending_plan(max_blocks: int, *, min_blocks: int = 2, alpha: float = 0.05) -> SpendingPlan:
    """Looks after ``min_blocks .. max_blocks`` blocks with O'Brien–Fleming-type levels.

    ``max_blocks`` is ``protocol.max_replicates`` (N). ``min_blocks`` must be at least 2
    (``workload.replicates``): a one-block look cannot decide with the block interval (no
    degrees of freedom) and would only waste α.
    """
    n = _check_count(max_blocks, "max_blocks")
    first = _check_count(min_blocks, "min_blocks")
    alpha = _check_alpha(alpha)
    if first < 2:
        raise ValueError(f"`min_blocks` must be at least 2 (got {first}): one block cannot decide")
    if first > n:
        raise ValueError(f"`min_blocks` ({first}) must not exceed `max_blocks` ({n})")
    looks = np.arange(first, n + 1)
    info = looks / n
    cumulative = obrien_fleming_spending(info, alpha=alpha)
    cumulative[-1] = alpha  # exact at t = 1
    spent = np.diff(np.concatenate([[0.0], cumulative]))
    return SpendingPlan(
        alpha=alpha, max_blocks=n, looks=tuple(int(k) for k in looks),
        information=tuple(float(t) for t in info),
        cumulative_alpha=tuple(float(a) for a in cumulative),
        alpha_spent=tuple(float(a) for a in spent),
        confidence_levels=tuple(float(1 - a) for a in spent),
    )  # fmt: skip


def interval_word(low: float, high: float, *, margin: float) -> str:
    """The decision word of an interval ``(low, high)`` of a ratio, at margin δ = ``margin``.

    Same rule as :func:`speclib.analysis.verdict.decision.decide`: "adopt", "equivalent", "worse"
    or "inconclusive" (an undefined interval such as ``(0, inf)`` is inconclusive).
    """
    margin = _check_margin(margin)
    low, high = float(low), float(high)
    if math.isnan(low) or math.isnan(high) or low > high or low < 0:
        raise ValueError(f"`low`, `high` must satisfy 0 <= low <= high (got {low!r}, {high!r})")
    if high < 1 - margin:
        return "adopt"
    if low > 1 - margin and high < 1 + margin:
        return "equivalent"
    if low > 1:
        return "worse"
    return "inconclusive"


def first_decisive_look(
    intervals: Sequence[tuple[float, float]], *, plan: SpendingPlan, margin: float
) -> SequentialDecision:
    """The first look whose interval decides, given the intervals of the looks so far.

    ``intervals[i]`` is the ratio interval ``(low, high)`` after ``plan.looks[i]`` blocks,
    computed at ``plan.confidence_levels[i]``. Looks after the first decisive one are
    ignored (the run should have stopped there).
    """
    if not isinstance(plan, SpendingPlan):
        raise ValueError(f"`plan` must be a SpendingPlan (got {type(plan).__name__})")
    margin = _check_margin(margin)
    seen = list(intervals)
    if not seen or len(seen) > len(plan.looks):
        raise ValueError(
            f"`intervals` must hold 1 to {len(plan.looks)} (low, high) pairs (got {len(seen)})"
        )
    words = []
    for i, pair in enumerate(seen):
        if len(pair) != 2:
            raise ValueError(f"`intervals[{i}]` must be a (low, high) pair (got {pair!r})")
        words.append(interval_word(pair[0], pair[1], margin=margin))
    i = next((k for k, w in enumerate(words) if w != "inconclusive"), len(words) - 1)
    return _outcome(words[i], i, seen[i], plan)


def _outcome(
    word: str, i: int, pair: tuple[float, float], plan: SpendingPlan
) -> SequentialDecision:
    """The :class:`SequentialDecision` for look ``i`` with decision ``word``."""
    level = plan.confidence_levels[i]
    last = i == len(plan.looks) - 1
    text = (
        f"look {i + 1} of {len(plan.looks)} after {plan.looks[i]} blocks: "
        f"{100 * level:.3g}% CI {pair[0]:.3f}–{pair[1]:.3f} (α spent so far "
        f"{plan.cumulative_alpha[i]:.4f} of {plan.alpha:g})"
    )
    if word != "inconclusive":
        text += f": {word}"
    elif last:
        text += ": still inconclusive at the last planned look"
    else:
        text += f": inconclusive, add a block and look again at {plan.looks[i + 1]} blocks"
    return SequentialDecision(
        word=word, look=i, blocks=plan.looks[i], confidence_level=level,
        alpha_spent=plan.cumulative_alpha[i], final=word != "inconclusive" or last, reason=text,
    )  # fmt: skip


# ------------------------------------------------------------------ what it would take

MAX_PROJECTED_BLOCKS = 100
"""Beyond this many blocks in all, :func:`blocks_to_decide` says no practical number."""


def decision_distance(estimate: float, *, margin: float) -> tuple[float, str] | None:
    """How narrow (log half-width) an interval around ``estimate`` must get to decide, and
    the word it would reach: the rule of :func:`interval_word` read backwards, taking the
    decision that needs the least narrowing. None when the estimate is ``1 − δ``, where no
    width decides (not below it for adopt, not above it for equivalent, not above 1)."""
    margin = _check_margin(margin)
    if not (isinstance(estimate, (int, float, np.floating)) and estimate > 0
            and math.isfinite(estimate)):  # fmt: skip
        raise ValueError(f"`estimate` must be a positive ratio (got {estimate!r})")
    est, lower, upper = math.log(estimate), math.log1p(-margin), math.log1p(margin)
    options = []
    if est < lower:
        options.append((lower - est, "adopt"))
    if lower < est < upper:
        options.append((min(est - lower, upper - est), "equivalent"))
    if est > 0:
        options.append((est, "worse"))
    best = max(options, default=None)
    return best if best is not None and best[0] > 1e-12 else None  # rounding at 1 − δ


def blocks_to_decide(
    *,
    estimate: float,
    ci_high: float,
    df: int,
    confidence_level: float,
    family_alpha: float,
    margin: float,
    plan: SpendingPlan | None,
) -> tuple[int | None, str | None]:
    """The blocks in all at which a block t-interval would likely decide, and the word.

    The interval now: ``estimate`` and its upper bound ``ci_high`` (a ratio; the interval
    is symmetric on the log scale) on ``df`` degrees of freedom (``df + 1`` blocks) at
    ``confidence_level``, which is its Holm step's share of the look's ``family_alpha``:
    later looks keep that share. The block SD is held, and a look after ``b`` blocks is at
    the plan's level for ``b`` (``plan`` None: a fixed design of ``b`` blocks at
    ``family_alpha``). Returns ``(None, word)`` when no number up to
    :data:`MAX_PROJECTED_BLOCKS` would do, ``(None, None)`` without a finite interval or
    when the estimate sits on a boundary.
    """
    margin = _check_margin(margin)
    alpha = _check_alpha(family_alpha)
    if not (0 < confidence_level < 1):
        raise ValueError(f"`confidence_level` must be in (0, 1) (got {confidence_level!r})")
    if isinstance(df, bool) or not isinstance(df, (int, np.integer)) or df < 0:
        raise ValueError(f"`df` must be a non-negative integer (got {df!r})")
    if df < 1 or not (math.isfinite(ci_high) and ci_high > estimate > 0):
        return None, None
    need = decision_distance(estimate, margin=margin)
    if need is None:
        return None, None
    distance, word = need
    share = (1 - confidence_level) / alpha
    now = df + 1
    sd = (math.log(ci_high) - math.log(estimate)) / stats.t.isf((1 - confidence_level) / 2, df)
    sd *= math.sqrt(now)
    for blocks in range(now + 1, MAX_PROJECTED_BLOCKS + 1):
        a = _look_alpha(blocks, plan, alpha) * share
        half = stats.t.isf(a / 2, blocks - 1) * sd / math.sqrt(blocks)
        if half < distance:
            return blocks, word
    return None, word


def _look_alpha(blocks: int, plan: SpendingPlan | None, alpha: float) -> float:
    """The family α of a look after ``blocks`` blocks: the plan's, beyond its cap the last
    look of the same plan with its cap at ``blocks``; a fixed design's without a plan."""
    if plan is None:
        return alpha
    if blocks in plan.looks:
        return plan.alpha_spent[plan.looks.index(blocks)]
    first = plan.looks[0]
    return spending_plan(blocks, min_blocks=first, alpha=plan.alpha).alpha_spent[-1]
