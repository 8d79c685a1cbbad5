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
    print(decision.word, render(decision.reason), decision.extra_pairs_needed)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from speclib.analysis.stats.margin_rule import classify
from speclib.analysis.stats.ratio_interval import IntervalMethod, RatioInterval
from speclib.analysis.stats.t_interval import t_width_scale
from speclib.core.jsonutil import jsonable
from speclib.core.reason_text import render
from speclib.core.reasons import Code, Reason
from speclib.core.verdict_words import Word

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
    """The TPOT decision: the rule's word and why (a :class:`~speclib.core.reasons.Reason`,
    in words by :func:`speclib.core.reason_text.render`). ``target_word`` is the decision
    the extra data would likely reach."""

    word: Word
    reason: Reason
    margin: float
    confidence_level: float
    extra_pairs_needed: int | None = None
    extra_launches_needed: int | None = None
    target_word: Word | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (the reason in words, ``reason_code`` its data)."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}
        return {**out, "reason": render(self.reason), "reason_code": self.reason.to_dict()}


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


_RULE_CODES = {
    Word.ADOPT: Code.RULE_ADOPT,
    Word.EQUIVALENT: Code.RULE_EQUIVALENT,
    Word.WORSE: Code.RULE_WORSE,
    Word.INCONCLUSIVE: Code.RULE_INCONCLUSIVE,
}


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
    found = classify(ci.ci_low, ci.ci_high, margin=margin)
    word = found.word
    values = {**ci.described, "margin": margin, "side": str(found.side)}
    common = {"margin": margin, "confidence_level": ci.confidence_level}
    if word != Word.INCONCLUSIVE:
        return Decision(word, Reason(_RULE_CODES[word], values), **common)
    if ci.method is IntervalMethod.DEGENERATE:
        return Decision(word, Reason(Code.RULE_INCONCLUSIVE, {**values, "obstacle": "one_pair"}),
                        **common)  # fmt: skip
    need = _needed_shrink(ci, margin)
    if need is None:
        return Decision(word, Reason(Code.RULE_INCONCLUSIVE, {**values, "obstacle": "boundary"}),
                        **common)  # fmt: skip
    shrink, target = need
    blocks = ci.method.of_blocks
    # A block interval's t quantile has df = blocks - 1 whatever the pairs per block: more
    # prompts cannot buy degrees of freedom, so only more blocks are advised.
    pairs = None if blocks else _extra_pairs(ci, shrink)
    launches = _extra_launches(ci, shrink)
    plan = {"extra_pairs": pairs, "extra_blocks": launches, "target": target,
            "unit": "blocks" if blocks else "launches"}  # fmt: skip
    return Decision(word, Reason(Code.RULE_INCONCLUSIVE, {**values, **plan}), **common,
                    extra_pairs_needed=pairs, extra_launches_needed=launches,
                    target_word=target)  # fmt: skip


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
