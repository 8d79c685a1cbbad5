"""What a run's answer still leaves open, and how many blocks would likely decide each.

Run until decided adds blocks while a verdict the first screen shows is inconclusive. Those
verdicts are the answer's (:mod:`speclib.analysis.verdict.answer`): each arm's word at each
load, and each segment its sentence names. :func:`open_verdicts` lists the open ones:

* an arm whose TPOT interval is inconclusive, whether its word says so or a gate already
  made it "reject": the looks spend α on the TPOT verdicts and the segments only, and the
  gates (errors, outputs, TTFT and E2E, memory, at ``analysis.confidence``) are weighed once,
  on every block, after the stop, so stopping on a gate would test it at every look with no
  α spent for it. A reject by the mode gate (a launch in the wrong mode) or an untrustworthy
  bench, and an arm that failed outright, are final: more blocks would not change them;
* a segment the answer names ("mixed" or "uneven") whose own interval neither decides nor
  shows it gains nothing (:func:`speclib.analysis.verdict.answer.segment_role` "unclear").

"mixed" is an answer: its segments decide it, not the pooled interval. Each open verdict
carries the blocks in all that would likely decide it
(:func:`speclib.analysis.stats.sequential.blocks_to_decide`): its estimate and block SD
held, at the level later looks of the run's plan would have, with its Holm step's share of
the look's α. Pure functions of the analysis's results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from speclib.analysis.stats.paired import RatioCI
from speclib.analysis.stats.sequential import SpendingPlan, blocks_to_decide
from speclib.analysis.verdict.answer import Answer, segment_role
from speclib.analysis.verdict.comparisons import Comparison
from speclib.core.stopping import OpenVerdict

__all__ = ["FINAL_GATES", "open_verdicts"]

FINAL_GATES = ("mode", "bench")
"""Gates whose failure more blocks would not undo: a launch in the wrong mode, an
untrustworthy bench (every verdict of a level "untrustworthy")."""


def _projected(
    base: OpenVerdict, ci: RatioCI | None, *, plan: SpendingPlan | None, confidence: float,
    margin: float,
) -> OpenVerdict:  # fmt: skip
    """``base`` with its interval and the blocks that would likely decide it."""
    if ci is None:
        return base
    df = ci.df if ci.df is not None else max(ci.n_launches - 1, 0)
    needed, target = blocks_to_decide(
        estimate=ci.estimate, ci_high=ci.ci_high, df=int(df),
        confidence_level=ci.confidence_level, family_alpha=1 - confidence, margin=margin,
        plan=plan,
    )  # fmt: skip
    return OpenVerdict(
        base.arm, base.level, base.load, base.cut, base.segment, ci.estimate, ci.ci_low,
        ci.ci_high, needed, target,
    )  # fmt: skip


def _pooled_open(word: str, c: Comparison | None) -> bool:
    """Whether an arm's own verdict at a load is open (see the module docstring)."""
    if c is None or c.verdict is None:
        return word == "inconclusive"
    if c.verdict.tpot_decision.word != "inconclusive":
        return False
    if word == "inconclusive":
        return True
    failed = {g.name for g in c.verdict.gates if g.status == "fail"}
    return word == "reject" and not failed & set(FINAL_GATES)


def open_verdicts(
    comparisons: Sequence[Comparison],
    answer: Answer,
    *,
    plan: SpendingPlan | None,
    confidence: float,
    margin: float,
) -> tuple[OpenVerdict, ...]:
    """The verdicts of ``answer`` still open after this look (see the module docstring).

    ``comparisons``: the run's, whose TPOT intervals the arms' words rest on;
    ``confidence``: this look's family confidence (``1 - α_k``); ``plan``: the run's looks
    (None: one decision, projected as a fixed design of more blocks)."""
    by_key = {(c.experiment, c.level): c for c in comparisons}
    opts = {"plan": plan, "confidence": confidence, "margin": margin}
    found: list[OpenVerdict] = []
    for a in answer.arms:
        c = by_key.get((a.arm, a.level))
        if _pooled_open(a.word, c):
            ci = c.cis.get("tpot_s") if c is not None else None
            found.append(_projected(OpenVerdict(a.arm, a.level, a.load), ci, **opts))
        segs = {(s.cut, s.segment): s for s in a.segments}
        for cut, name, _ in a.named:
            seg = segs.get((cut, name))
            if seg is not None and segment_role(seg, margin) == "unclear":
                rough = seg.estimate if math.isfinite(seg.estimate) else None
                base = OpenVerdict(a.arm, a.level, a.load, cut, name, ratio=rough)
                found.append(_projected(base, seg.ci, **opts))
    return tuple(found)
