"""The decision: turn a TPOT ratio CI and the gate inputs into one verdict word with reasons.

:func:`decide` applies the rule declared before the run (margin δ, confidence level) to a
:class:`~speclib.analysis.stats.paired.RatioInterval` of experiment / control TPOT:

* **adopt** – the CI's upper bound is below ``1 - δ`` (time per token cut by more than the margin);
* **equivalent** – the CI lies inside ``(1 - δ, 1 + δ)``;
* **worse** – the CI's lower bound is above 1;
* **inconclusive** – anything else. Then it estimates how many more pairs (prompts), and
  with launches how many more launches, would likely reach a decision if the point
  estimate and the variance hold (half-widths scale with ``1/sqrt(n)``, and with
  launches also with the ratio of Student-t quantiles), or ``None`` when no finite amount
  below the cap would do.

The rules overlap only when the CI lies inside ``(1, 1 + δ)``: that is "equivalent", and
the reason says "equivalent within ±δ, but measurably slower". A CI inside ``(1 − δ, 1)``
is "equivalent" too, and the reason says "measurably faster, but by less than δ".

The gates that turn a decision into a verdict (errors, outputs, memory, TTFT and E2E)
are :mod:`speclib.analysis.verdict.gates`.

:func:`holm_decide` decides several experiments against one control with Holm's step-down
procedure applied to the decisions: with k experiments still undecided, every one of them
gets a CI at confidence ``1 - α/k`` (α = 1 - family confidence); those whose CI reaches a
decision (adopt, equivalent or worse) are settled at that level and removed; the rest are
recomputed at ``1 - α/(k - settled)``; when a round settles none, the remaining ones are
inconclusive at that round's level. With one experiment this is the plain rule. It keeps
the family-wise error rate of the decisions at α (Holm 1979, with each decision read as
the rejection of the CI's complementary hypotheses); the CIs shown are those at the level
each comparison was settled, which is between ``1 - α/m`` and ``1 - α``.

Example::

    decision = decide(tpot_ci, margin=0.05)
    print(decision.word, decision.reason, decision.extra_pairs_needed)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from speclib.analysis.stats.base import t_width_scale
from speclib.analysis.stats.margin_rule import classify
from speclib.analysis.stats.ratio_interval import IntervalMethod, RatioInterval
from speclib.core.jsonutil import jsonable
from speclib.core.verdict_words import Side, Word

__all__ = [
    "MAX_EXTRA_LAUNCHES",
    "MAX_EXTRA_PAIRS",
    "Decision",
    "decide",
    "holm_decide",
]

MAX_EXTRA_PAIRS = 100_000
"""Above this many extra pairs the planning answer is ``None`` (no practical n decides)."""
MAX_EXTRA_LAUNCHES = 1_000


@dataclass(frozen=True)
class Decision:
    """The TPOT decision. ``target_word`` is the decision the extra data would likely reach."""

    word: Word
    reason: str
    margin: float
    confidence_level: float
    extra_pairs_needed: int | None = None
    extra_launches_needed: int | None = None
    target_word: Word | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


# ------------------------------------------------------------------------- validation


def check_fraction(value: Any, name: str, *, low_open: bool = False) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok and math.isfinite(value) and (0 < value < 1 if low_open else 0 <= value <= 1):
        return float(value)
    interval = "(0, 1)" if low_open else "[0, 1]"
    raise ValueError(f"`{name}` must be a number in {interval} (got {value!r})")


def check_ci(ci: Any, name: str) -> RatioInterval:
    if not isinstance(ci, RatioInterval):
        raise ValueError(f"`{name}` must be a RatioInterval (got {type(ci).__name__})")
    return ci


# ---------------------------------------------------------------------- the TPOT rule


def _classify(ci: RatioInterval, margin: float) -> tuple[Word, str]:
    lo, hi = ci.ci_low, ci.ci_high
    text = (
        f"TPOT ratio {ci.estimate:.3f} ({100 * ci.confidence_level:.3g}% CI {lo:.3f}–{hi:.3f}, "
        f"{ci.label}, {ci.n_pairs} pairs, {ci.n_blocks} launch(es) per arm)"
    )
    found = classify(lo, hi, margin=margin)
    if found.word == Word.ADOPT:
        return found.word, (
            f"{text}: upper bound below 1 − δ = {1 - margin:.3f}, time per token cut by more than δ"
        )
    if found.word == Word.EQUIVALENT:
        inside = f"inside (1 − δ, 1 + δ) = ({1 - margin:.3f}, {1 + margin:.3f})"
        if found.side == Side.ABOVE_ONE:
            inside = (f"equivalent within ±δ = ±{margin:.3g}, but measurably slower: the whole "
                      f"interval is above 1 ({inside})")  # fmt: skip
        elif found.side == Side.BELOW_ONE:
            inside = (f"measurably faster, but by less than δ = {margin:.3g}: the whole "
                      f"interval is below 1 ({inside})")  # fmt: skip
        return found.word, f"{text}: {inside}"
    if found.word == Word.WORSE:
        return found.word, f"{text}: lower bound above 1, slower than control"
    return found.word, f"{text}: no rule applies at δ = {margin:.3f}"


def _ratio(distance: float, half_width: float) -> float:
    return distance / half_width if half_width > 0 else math.inf


def _needed_shrink(ci: RatioInterval, margin: float) -> tuple[float, Word] | None:
    """Largest factor ``s`` on both half-widths (log scale) that would reach a decision.

    Returns ``(s, word)`` for the decision needing the least shrinking, or None when the
    estimate sits on a boundary (``s == 0``) or the interval is undefined.
    """
    if ci.method is IntervalMethod.DEGENERATE or not (0 < ci.ci_low <= ci.ci_high < math.inf):
        return None
    est = math.log(ci.estimate)
    hw_lo, hw_hi = est - math.log(ci.ci_low), math.log(ci.ci_high) - est
    lower, upper = math.log(1 - margin), math.log(1 + margin)
    options = []
    if est < lower:
        options.append((_ratio(lower - est, hw_hi), Word.ADOPT))
    if lower < est < upper:
        options.append((min(_ratio(est - lower, hw_lo), _ratio(upper - est, hw_hi)),
                        Word.EQUIVALENT))  # fmt: skip
    if est > 0:
        options.append((_ratio(est, hw_lo), Word.WORSE))
    best = max(options, default=None)
    return best if best is not None and best[0] > 0 else None


def _extra_pairs(ci: RatioInterval, shrink: float) -> int | None:
    """Extra pairs (launch count unchanged) so that the half-widths shrink by ``shrink``."""
    n = ci.n_pairs
    boot = ci.bootstrap
    if ci.n_blocks < 2:
        target = n / shrink**2
    else:
        var_b = (boot.var_between if boot else None) or 0.0
        var_w = (boot.var_within if boot else None) or 0.0
        now = var_b / ci.n_blocks + var_w / n
        room = shrink**2 * now - var_b / ci.n_blocks
        if var_w <= 0 or room <= 0:
            return None
        target = var_w / room
    extra = math.floor(target) + 1 - n
    return max(extra, 1) if extra <= MAX_EXTRA_PAIRS else None


def _extra_launches(ci: RatioInterval, shrink: float) -> int | None:
    """Extra launches (same pairs per launch) so that the half-widths shrink by ``shrink``.

    Both variance terms of the mean scale with ``1/L``, and the CI uses a t quantile on
    ``df`` degrees of freedom (the interval's own ``ci.df``, else ``L - 1``), which grow by
    one per added launch, so the half-width at ``L'`` launches is
    ``t[df + L' - L] / t[df] * sqrt(L / L')`` times today's.
    """
    n_launch = ci.n_blocks
    df = ci.df if ci.df is not None else n_launch - 1
    if n_launch < 2 or df < 1:
        return None
    more = np.arange(n_launch + 1, n_launch + MAX_EXTRA_LAUNCHES + 1)
    scale = t_width_scale(
        n_blocks=n_launch, df=df, confidence_level=ci.confidence_level, blocks=more
    )
    hit = np.flatnonzero(scale < shrink)
    return int(more[hit[0]] - n_launch) if hit.size else None


def decide(ci: RatioInterval, *, margin: float) -> Decision:
    """Apply the adopt / equivalent / worse / inconclusive rule to a TPOT ratio CI.

    ``margin`` is δ in (0, 1), declared before the run. For an inconclusive result the
    decision also carries ``extra_pairs_needed`` (more prompts over the same launches) and,
    with two or more launches, ``extra_launches_needed`` (more launches of the same size),
    each ``None`` when no amount up to the caps would likely decide.
    """
    check_ci(ci, "ci")
    margin = check_fraction(margin, "margin", low_open=True)
    word, reason = _classify(ci, margin)
    common = {"margin": margin, "confidence_level": ci.confidence_level}
    if word != Word.INCONCLUSIVE:
        return Decision(word, reason, **common)
    if ci.method is IntervalMethod.DEGENERATE:
        return Decision(word, f"{reason}; one pair gives no variance estimate", **common)
    need = _needed_shrink(ci, margin)
    if need is None:
        return Decision(word, f"{reason}; the estimate sits on a boundary", **common)
    shrink, target = need
    blocks = ci.method.of_blocks
    # A block interval's t quantile has df = blocks - 1 whatever the pairs per block: more
    # prompts cannot buy degrees of freedom, so only more blocks are advised.
    pairs = None if blocks else _extra_pairs(ci, shrink)
    launches = _extra_launches(ci, shrink)
    plan = _plan_text(pairs, launches, target, unit="blocks" if blocks else "launches")
    return Decision(word, f"{reason}; {plan}", **common, extra_pairs_needed=pairs,
                    extra_launches_needed=launches, target_word=target)  # fmt: skip


def _plan_text(
    pairs: int | None, launches: int | None, target: Word, *, unit: str = "launches"
) -> str:
    parts = []
    if pairs is not None:
        parts.append(f"about {pairs} more pairs")
    if launches is not None:
        parts.append(f"about {launches} more {unit}")
    if not parts:
        return f"no practical amount of data would likely reach '{target}'"
    return " or ".join(parts) + f" would likely reach '{target}' if the estimate holds"


# ------------------------------------------------------------- several experiments


def holm_decide(
    compute_ci: Callable[[Any, float], RatioInterval],
    names: Sequence[Hashable],
    *,
    family_confidence: float = 0.95,
    margin: float,
) -> dict[Any, tuple[RatioInterval, Decision]]:
    """Decide several experiments against one control with Holm's step-down procedure.

    ``compute_ci(name, confidence_level)`` returns the TPOT :class:`RatioInterval` of experiment
    ``name`` at that level (e.g. a closure over
    :func:`speclib.analysis.stats.paired.paired_ratio_ci`).
    Returns ``{name: (ci, decision)}``, each CI at the level its decision was made; see the
    module docstring for the procedure. ``names`` may be any hashable keys, e.g.
    ``(load level, arm)`` pairs when the family spans load levels.
    """
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"`names` must be non-empty and unique (got {names!r})")
    alpha = 1 - check_fraction(family_confidence, "family_confidence", low_open=True)
    check_fraction(margin, "margin", low_open=True)
    remaining, out = names, {}
    while remaining:
        level = 1 - alpha / len(remaining)
        results = {n: check_ci(compute_ci(n, level), "compute_ci(...)") for n in remaining}
        decided = {n: decide(ci, margin=margin) for n, ci in results.items()}
        settled = [n for n in remaining if decided[n].word != Word.INCONCLUSIVE]
        for n in settled if settled else remaining:
            out[n] = (results[n], decided[n])
        remaining = [n for n in remaining if n not in out]
    return {n: out[n] for n in names}
