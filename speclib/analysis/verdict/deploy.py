"""What to deploy: per prompt category and load level, speculation on (which arm), or off.

From the decided segments (:mod:`speclib.analysis.verdict.segments`, the ``category``
cut), :func:`deployment` picks for every category at every load level the arm to serve it
with: the fastest arm whose segment verdict is "adopt" (**on**), else **off** when every
arm was decided not to pay on it (worse, or shown to gain nothing), else **undecided**.
vLLM cannot choose a speculative config per request, so where the categories' choices
differ at a level, and routing them apart beats the best single deployment by more than
the margin δ, the advice is to **route** those requests to a separate deployment, with the
traffic's ratio of doing so beside that of one deployment for all (the best pooled arm's
traffic ratio), like with like: both are a mean TPOT over the control's
(:attr:`speclib.core.estimand.Estimand.TRAFFIC`). Routed, each category keeps its share
of the traffic and gets its chosen arm's mean TPOT (the control's where off), so the
ratio is ``Σ_c share_c · c̄_c · R_c / Σ_c share_c · c̄_c`` with ``c̄_c`` the control's
mean TPOT on category ``c`` and ``R_c`` the category's traffic ratio on its chosen arm
(1 where off). Where the choice differs between load levels, vLLM
can act on it itself: ``speculative_config.num_speculative_tokens_per_batch_size`` (the k
schedule of :mod:`speclib.analysis.load.k_schedule`, written by ``speclib schedule``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from speclib.analysis.verdict.segments import SegmentResult
from speclib.core.jsonutil import jsonable

__all__ = ["Choice", "Deployment", "deployment"]


@dataclass(frozen=True)
class Choice:
    """One category at one load level: ``choice`` is "on", "off" or "undecided"; ``arm``
    the arm to serve it with when on, ``ratio`` that arm's traffic ratio on it, ``share``
    the category's share of the traffic, ``control_mean_s`` the control's mean TPOT on it
    (None: unknown, the categories then weigh alike)."""

    level: int
    load: str
    category: str
    choice: str
    arm: str | None
    ratio: float | None
    share: float
    control_mean_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Deployment:
    """The choices and, per load level, the advice in words (``advice``: ``(level, text)``)."""

    choices: tuple[Choice, ...] = ()
    advice: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        advice = [{"level": lv, "text": t} for lv, t in self.advice]
        return jsonable({"choices": [c.to_dict() for c in self.choices], "advice": advice})


def _choose(segs: Sequence[SegmentResult], margin: float) -> tuple[str, SegmentResult | None]:
    adopt = [s for s in segs if s.decision.word == "adopt"]
    if adopt:
        return "on", min(adopt, key=lambda s: s.estimate)
    bad = [s.decision.word == "worse" or (s.ci is not None and s.ci.ci_low > 1 - margin)
           for s in segs]  # fmt: skip
    return ("off", None) if bad and all(bad) else ("undecided", None)


def deployment(
    segments: Sequence[SegmentResult],
    pooled: Mapping[tuple[int, str], float],
    loads: Mapping[int, str],
    *,
    margin: float,
) -> Deployment:
    """The choice per category and level, and the advice (see the module docstring).
    ``pooled[(level, arm)]`` is each arm's pooled traffic ratio at that level (for "one
    deployment for all"; the user's mix when given), ``loads[level]`` the level's label."""
    cats = [s for s in segments if s.cut == "category"]
    choices, advice = [], []
    for level in sorted({s.level for s in cats}):
        mine = [s for s in cats if s.level == level]
        names = sorted({s.segment for s in mine})
        row = []
        for cat in names:
            found = [s for s in mine if s.segment == cat]
            word, best = _choose(found, margin)
            share = found[0].share
            row.append(Choice(level, loads.get(level, str(level)), cat, word,
                              best.arm if best else None, best.estimate if best else None,
                              share, found[0].mean_control_s))  # fmt: skip
        choices += row
        text = _advice(row, {a: r for (lv, a), r in pooled.items() if lv == level}, margin)
        if text:
            advice.append((level, text))
    by_category: dict[str, list[Choice]] = {}
    for c in choices:
        if c.choice != "undecided":
            by_category.setdefault(c.category, []).append(c)
    changing = {cat: row for cat, row in by_category.items()
                if len({(c.choice, c.arm) for c in row}) > 1}  # fmt: skip
    if changing and len({c.level for c in choices}) > 1:
        advice.append((-1, _load_advice(changing)))
    return Deployment(tuple(choices), tuple(advice))


def _advice(row: Sequence[Choice], pooled: Mapping[str, float], margin: float) -> str | None:
    """The level's advice when its categories' choices differ and routing them apart beats
    the best single deployment by more than the margin δ (None otherwise)."""
    if len({(c.choice, c.arm) for c in row}) < 2 or any(c.choice == "undecided" for c in row):
        return None
    weight = {c.category: c.share * (c.control_mean_s or 1.0) for c in row}
    if any(c.control_mean_s is None for c in row):  # unknown: the categories weigh alike
        weight = {c.category: c.share for c in row}
    routed = sum(weight[c.category] * (c.ratio if c.choice == "on" and c.ratio else 1.0)
                 for c in row)  # fmt: skip
    total = sum(weight.values())
    routed = routed / total if total else math.nan
    best = min(pooled.items(), key=lambda kv: kv[1], default=(None, math.nan))
    one = min(best[1], 1.0) if math.isfinite(best[1]) else 1.0
    if not routed < one * (1 - margin):  # routing gains less than δ over one deployment
        return None
    on = [f"{c.category} on {c.arm}" for c in row if c.choice == "on"]
    off = [c.category for c in row if c.choice == "off"]
    where = (
        f"route {', '.join(on)} to a deployment with speculation"
        + (" each" if len({c.arm for c in row if c.choice == "on"}) > 1 else "")
        + (f" and {', '.join(off)} to one without" if off else "")
    )
    return (
        f"at {row[0].load}: {where}: expected TPOT ×{routed:.2f} for the traffic "
        f"(its mean TPOT, each kind at its share), against ×{one:.2f} for one deployment "
        "for all"
        + (f" ({best[0]} on, ×{best[1]:.2f})" if best[0] and best[1] < 1 else " (speculation off)")
    )


def _load_advice(changing: Mapping[str, Sequence[Choice]]) -> str:
    """Advice where a category's choice changes with load: vLLM switches k (or turns the
    drafts off) by batch size itself, but not the speculative method."""
    arms = {c.arm for row in changing.values() for c in row if c.choice == "on"}
    if len(arms) <= 1:
        return ("the choice changes with load: vLLM can switch k by batch size itself "
                "(speculative_config.num_speculative_tokens_per_batch_size; "
                "`speclib schedule RUN_DIR --out FILE` writes the params that confirm the "
                "k schedule)")  # fmt: skip
    where = "; ".join(
        f"{cat}: " + ", ".join(f"{c.arm or 'off'} at {c.load}" for c in row)
        for cat, row in changing.items()
    )
    return (f"the best arm changes with load ({where}): vLLM switches k by batch size "
            "(speculative_config.num_speculative_tokens_per_batch_size), not the method; "
            "where those arms share a method `speclib schedule RUN_DIR --out FILE` writes "
            "the k schedule, else choose the arm for the load you serve at")  # fmt: skip
