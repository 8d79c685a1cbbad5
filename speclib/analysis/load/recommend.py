"""Which value of a sweep to use: the rule declared before the run, with its interval.

Among the arms of one sweep family (the series a params file wrote with ``sweep``, see
:mod:`speclib.params.sweep`) at one load level, the **recommended** value is the
smallest one (smallest ``k``) whose TPOT ratio is shown to be within δ
(``analysis.margin``) of the best arm's, **and** which itself pays: its verdict against the
control is ADOPT. When no arm of the family is ADOPT the answer is "no k pays" (``None``).

**The test.** Every ratio here is the traffic's (:attr:`speclib.core.estimand.Estimand.
TRAFFIC`: per block, the log of the arm's mean TPOT over the control's, as the verdicts;
for the user's mix when given). The best arm is the one with the lowest mean per-block
log-ratio ``d`` against the control. For every other arm ``a`` the ratio of ratios
``a / best`` rests on the two arms' own noise (each arm has its own instance variance, see
:mod:`speclib.analysis.stats.block_intervals`): where they share at least two blocks, a paired
t-interval
on the per-block differences ``d[a, b] - d[best, b]`` (the control's error cancels;
df = shared blocks − 1); otherwise Welch's t on the two arms' block means (Satterthwaite
df). An arm is *within δ* when the upper bound is below ``1 + δ``. Holm's step-down runs
over the family's other arms exactly as :func:`~speclib.analysis.verdict.decision.holm_decide`
does (round with ``m`` open arms at confidence ``1 - α/m``; settled arms leave; stop when a
round settles none). The best arm is chosen from the same data, which the test does not
correct for: "within δ of the best" is read as "not shown worse than the best by more
than δ".

Example::

    rec = recommend(arms, summary=summary, margin=0.05, confidence_level=0.95)
    print(rec.value, rec.ratio, (rec.ci_low, rec.ci_high), rec.reason)

:func:`sweep_recommendations` applies the rule to every family and load level of a run's
comparisons (what ``summary.json`` lists under ``recommendations``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from speclib.analysis.stats.block_summary import BlockSummary
from speclib.analysis.stats.t_interval import t_interval, welch_t_interval
from speclib.analysis.verdict.comparisons import Comparison
from speclib.analysis.verdict.tpot_verdict import pair_summary
from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable
from speclib.params.experiment import ExperimentParams
from speclib.params.sweep import sweep_sort_key

__all__ = [
    "OUTCOMES",
    "ArmTest",
    "Recommendation",
    "SweepArm",
    "recommend",
    "sweep_recommendations",
]

OUTCOMES = ("recommended", "no_k_pays", "undecided", "no_data")

PAYS = "adopt"  # the verdict word of an arm that pays


@dataclass(frozen=True)
class SweepArm:
    """One arm of a sweep family at one load level, as the rule takes it.

    ``value`` is its ``{key: value}`` of the sweep; ``verdict`` its final word against the
    control; ``ratio`` and ``ci`` its TPOT ratio to the control and interval as the
    verdict table shows them (None without pairs).
    """

    arm: str
    value: Mapping[str, Any]
    verdict: str
    ratio: float | None = None
    ci: tuple[float, float] | None = None


@dataclass(frozen=True)
class ArmTest:
    """One arm's ratio of ratios to the best arm and whether it is within δ (Holm-settled)."""

    arm: str
    value: dict[str, Any]
    verdict: str
    ratio_to_best: float
    ci_low: float
    ci_high: float
    confidence_level: float
    shared_blocks: int
    within_margin: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Recommendation:
    """The recommended value of one sweep family at one load level, or None ("no k pays").

    ``outcome`` is one of :data:`OUTCOMES`: ``"recommended"``; ``"no_k_pays"`` (no arm of
    the family is ADOPT); ``"undecided"`` (arms that pay are not shown within δ of the best
    arm); ``"no_data"``. ``ratio``/``ci_low``/``ci_high`` are the recommended arm's TPOT
    ratio to the control with its interval; ``best_arm`` the arm with the lowest ratio;
    ``tests`` every other arm's test against it; ``reason`` says the outcome in words.
    """

    family: str
    level: int
    load: str
    outcome: str
    arm: str | None
    value: dict[str, Any] | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    best_arm: str | None
    margin: float
    confidence_level: float
    reason: str
    tests: tuple[ArmTest, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (``summary.json``'s ``recommendations`` entries)."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self) if f.name != "tests"}
        out["tests"] = [t.to_dict() for t in self.tests]
        return out


def _validate(arms: Any, summary: Any, margin: Any, confidence_level: Any) -> list[SweepArm]:
    if not isinstance(summary, BlockSummary):
        raise ValueError(f"`summary` must be a BlockSummary (got {type(summary).__name__})")
    ok = isinstance(margin, (int, float)) and not isinstance(margin, bool)
    if not (ok and 0 < margin < 1):
        raise ValueError(f"`margin` must be a number in (0, 1) (got {margin!r})")
    ok = isinstance(confidence_level, (int, float)) and not isinstance(confidence_level, bool)
    if not (ok and 0 < confidence_level < 1):
        raise ValueError(f"`confidence_level` must be in (0, 1) (got {confidence_level!r})")
    arms = list(arms)
    if not arms or not all(isinstance(a, SweepArm) for a in arms):
        raise ValueError("`arms` must be a non-empty sequence of SweepArm")
    names = [a.arm for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"`arms` must name each arm once (got {names})")
    return arms


def _test(
    a: str, best: str, summary: BlockSummary, level: float
) -> tuple[float, float, float, int]:
    """``(ratio, low, high, shared blocks)`` of ``a / best`` at confidence ``level``, on
    the two arms' own noise: a paired t on the per-block differences where they share at
    least two blocks, else Welch's t on their block means (Satterthwaite df)."""
    i, j = summary.arms.index(a), summary.arms.index(best)
    in_a, in_b = summary.n_pairs[i] > 0, summary.n_pairs[j] > 0
    both = in_a & in_b
    shared = int(both.sum())
    if shared >= 2:
        t = t_interval(summary.mean[i][both] - summary.mean[j][both], confidence_level=level)
    else:
        t = welch_t_interval(summary.mean[i][in_a], summary.mean[j][in_b],
                             confidence_level=level)  # fmt: skip
    if not t.decidable:
        return math.exp(t.mean), 0.0, math.inf, shared
    return math.exp(t.mean), math.exp(t.low), math.exp(t.high), shared


def _holm(
    others: list[SweepArm], best: str, summary: BlockSummary, margin: float, confidence: float
) -> list[ArmTest]:
    """Holm's step-down over ``others``: which are shown within δ of ``best``."""
    alpha = 1 - confidence
    open_ = list(others)
    done: list[ArmTest] = []
    while open_:
        level = 1 - alpha / len(open_)
        tests = []
        for arm in open_:
            ratio, lo, hi, shared = _test(arm.arm, best, summary, level)
            tests.append(ArmTest(arm.arm, dict(arm.value), arm.verdict, ratio, lo, hi, level,
                                 shared, hi < 1 + margin))  # fmt: skip
        settled = [t for t in tests if t.within_margin]
        if not settled:
            done += tests
            break
        done += settled
        open_ = [a for a in open_ if a.arm not in {t.arm for t in settled}]
    order = {a.arm: i for i, a in enumerate(others)}
    return sorted(done, key=lambda t: order[t.arm])


def _words(arms: Sequence[SweepArm]) -> str:
    return ", ".join(f"{a.arm} {a.verdict}" for a in arms)


def recommend(
    arms: Sequence[SweepArm],
    *,
    summary: BlockSummary,
    margin: float,
    confidence_level: float = 0.95,
    family: str = "",
    level: int = 0,
    load: str = "",
) -> Recommendation:
    """The smallest value within δ of the best arm (Holm across the family) that is ADOPT.

    ``arms`` are the family's arms at one load level; ``summary`` holds the per-block mean
    log-ratios against the control of every arm of that level (the family's and any other,
    which only add degrees of freedom to ``σ²``; see the module docstring). Arms missing
    from ``summary`` (no pairs) take no part. ``confidence_level`` is the family confidence
    of the Holm procedure. Returns a :class:`Recommendation` whose ``arm``/``value`` are
    None when no arm of the family pays, or when those that pay are not shown within δ of
    the best arm.
    """
    arms = _validate(arms, summary, margin, confidence_level)
    common = {"family": family, "level": level, "load": load, "margin": float(margin),
              "confidence_level": float(confidence_level)}  # fmt: skip
    measured = [a for a in arms if a.arm in summary.arms]
    if not measured:
        return _no_data(**common)
    means = {
        a.arm: float(np.mean(summary.mean[i][summary.n_pairs[i] > 0]))
        for i, a in ((summary.arms.index(a.arm), a) for a in measured)
    }
    best = min(measured, key=lambda a: (means[a.arm], sweep_sort_key(a.value)))
    others = [a for a in measured if a.arm != best.arm]
    tests = tuple(_holm(others, best.arm, summary, margin, confidence_level))
    within = {best.arm} | {t.arm for t in tests if t.within_margin}
    paying = [a for a in measured if a.verdict == PAYS]
    candidates = sorted(
        (a for a in paying if a.arm in within), key=lambda a: sweep_sort_key(a.value)
    )
    common |= {"best_arm": best.arm, "tests": tests}
    if not candidates:
        outcome = "undecided" if paying else "no_k_pays"
        if not paying:
            why = f"no k pays: no arm of {family or 'the family'} is ADOPT ({_words(measured)})"
        else:
            why = (
                f"no recommendation: {', '.join(a.arm for a in paying)} pay(s) but is not shown "
                f"within δ = {margin:g} of the best arm {best.arm} (more blocks would tell)"
            )
        return Recommendation(**common, outcome=outcome, arm=None, value=None, ratio=None,
                              ci_low=None, ci_high=None, reason=why)  # fmt: skip
    pick = candidates[0]
    ci = pick.ci or (None, None)
    if pick.arm == best.arm:
        how = "it is the best arm"
    else:
        t = next(t for t in tests if t.arm == pick.arm)
        how = (
            f"its TPOT is {t.ratio_to_best:.3f}× the best arm {best.arm}'s "
            f"({100 * t.confidence_level:.3g}% CI {t.ci_low:.3f}–{t.ci_high:.3f}, Holm), "
            f"within δ = {margin:g}"
        )
    smaller = [a.arm for a in paying if sweep_sort_key(a.value) < sweep_sort_key(pick.value)]
    note = f"; smaller {', '.join(smaller)} pay(s) but not within δ of the best" if smaller else ""
    why = f"{pick.arm} ({_value_text(pick.value)}): ADOPT and {how}{note}"
    return Recommendation(**common, outcome="recommended", arm=pick.arm,
                          value=dict(pick.value), ratio=pick.ratio, ci_low=ci[0],
                          ci_high=ci[1], reason=why)  # fmt: skip


def _no_data(**common: Any) -> Recommendation:
    return Recommendation(**common, outcome="no_data", arm=None, value=None, ratio=None,
                          ci_low=None, ci_high=None, best_arm=None,
                          reason="no arm of the family has valid pairs")  # fmt: skip


def _value_text(value: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in value.items())


def _level_summary(
    comps: Sequence[Comparison], mix: Mapping[str, float] | None = None
) -> BlockSummary | None:
    """Per-block log traffic ratios against the control of every arm of one level, for
    ``mix`` when given (None without usable pairs)."""
    found = {c.experiment: c.pairs for c in comps if len(c.pairs) and "tpot_s_c" in c.pairs}
    found = {a: p.assign(block=(p["block"] if "block" in p else p["replicate"]).astype(str))
             for a, p in found.items()}  # fmt: skip
    return pair_summary(found, estimand=Estimand.TRAFFIC, mix=mix) if found else None


def _sweep_arm(c: Comparison, value: Mapping[str, Any]) -> SweepArm:
    ci = c.cis.get("tpot_s")
    return SweepArm(
        c.experiment, value, c.word, ci.estimate if ci else None,
        (ci.ci_low, ci.ci_high) if ci else None,
    )  # fmt: skip


def sweep_recommendations(
    params: ExperimentParams,
    comparisons: Sequence[Comparison],
    *,
    confidence_level: float,
    mix: Mapping[str, float] | None = None,
) -> list[Recommendation]:
    """:func:`recommend` for every sweep family of ``params`` at every load level of
    ``comparisons`` (empty for a run without a sweep), on the traffic's ratio (for ``mix``
    when given, as the verdicts)."""
    families = params.sweep_families
    if not families:
        return []
    out = []
    for level in sorted({c.level for c in comparisons}):
        comps = [c for c in comparisons if c.level == level]
        summary = _level_summary(comps, mix)
        by_name = {c.experiment: c for c in comps}
        for family, members in families.items():
            arms = [
                _sweep_arm(by_name[m], params.series_by_name(m).sweep_value or {})
                for m in members
                if m in by_name
            ]
            if not arms:
                continue
            load = by_name[arms[0].arm].load
            where = {"family": family, "level": level, "load": load}
            if summary is None:
                out.append(_no_data(**where, margin=params.analysis.margin,
                                    confidence_level=confidence_level))  # fmt: skip
                continue
            out.append(recommend(arms, summary=summary, margin=params.analysis.margin,
                                 confidence_level=confidence_level, **where))  # fmt: skip
    return out
