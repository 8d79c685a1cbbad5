"""The answer: the one place the final verdict word of every arm and load is decided.

The rule (:mod:`speclib.analysis.verdict.decision`), the gates
(:mod:`speclib.analysis.verdict.gates`) and the segments
(:mod:`speclib.analysis.verdict.segments`) compute; :func:`build_answer` decides what each
arm at each load level **is**, and :class:`Answer` holds it: the word, its reasons, the
pooled word it came from, every segment's verdict and the heterogeneity checks, the one
sentence that names a segment, and the run's headline when a segment changes it.
``summary.json`` (key ``answer``), the terminal table, the report's first screen and
``speclib compare`` render it; none of them decides a word again.

**The word "mixed".** A segment *helps* when its verdict is "adopt", *hurts* when it is
"worse", and *gains nothing* when its interval's lower bound is above ``1 − δ`` (it is shown
not to gain δ) without being worse. An arm whose pooled verdict passed its gates (not
"reject", "untrustworthy" or "failed") is **mixed** when (a), in one cut of the traffic, a
segment helps while another hurts or gains nothing, or its pooled verdict is "adopt" and a
segment hurts or gains nothing; or (b) the heterogeneity check shows two segments of one
cut to differ beyond δ (their per-block difference, in which the arm's instance effect
cancels, so it decides where each segment alone cannot) while the faster one's ratio is
below ``1 − δ`` and the slower one's is not: the pooled word would hide who gets slower.
An "adopt" arm whose segments differ beyond δ but none is shown not to gain keeps its word
and gets an **uneven** sentence in the headline naming the two furthest apart. Its
sentence names the segments with their ratios, intervals (at the level their Holm family
settled them) and shares, e.g. (tests/unit/test_segments.py's run) "mixed: ngram-k4 at c=1 is
×0.50 [0.47, 0.54] on echo (50 % of requests) and ×1.41 [1.29, 1.54] on fresh (50 %)
(the traffic's ratio ×0.95, inconclusive; segments by category)". The cut named is the
first of :data:`~speclib.analysis.verdict.segments.CUTS` that shows it (the prompt
category first).

Every ratio here is a traffic's ratio (:attr:`speclib.core.estimand.Estimand.TRAFFIC`):
the pooled one the whole traffic's, a segment's that segment's (the arm's mean TPOT over
the control's on its requests). The pooled word the rules read is therefore the traffic's:
a geometric mean of per-request ratios would call an arm "adopt" that makes the traffic
slower (×0.3 on half the requests and ×1.7 on the other half is ×0.71 geometric, ×1.0 for
the traffic).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from speclib.analysis.verdict.deploy import Deployment, deployment
from speclib.analysis.verdict.gates import Verdict
from speclib.analysis.verdict.mix import TrafficMix
from speclib.analysis.verdict.segments import CUTS, Heterogeneity, SegmentResult
from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable

__all__ = [
    "GATED_WORDS",
    "MIXED",
    "Answer",
    "ArmAnswer",
    "build_answer",
    "segment_role",
]

MIXED = "mixed"
GATED_WORDS = ("reject", "untrustworthy", "failed")
"""Pooled words a segment never overrides: a gate or the bench has the last word."""


def segment_role(seg: SegmentResult, margin: float) -> str:
    """``"helps"``, ``"hurts"``, ``"no gain"`` or ``"unclear"`` (see the module docstring)."""
    word = seg.decision.word
    if word == "adopt":
        return "helps"
    if word == "worse":
        return "hurts"
    if seg.ci is not None and seg.ci.ci_low > 1 - margin:
        return "no gain"
    return "unclear"


def _seg_words(s: SegmentResult, *, first: bool, mixed: bool = False) -> str:
    """A segment's ratio, interval and share; a category's share under the user's mix is
    the mix's ("of your mix"), never read as the run's requests."""
    ci = s.ci
    span = f" [{ci.ci_low:.2f}, {ci.ci_high:.2f}]" if ci is not None else ""
    whose = "of your mix" if mixed and s.cut == "category" else "of requests"
    share = f"{100 * s.share:.0f} % {whose}" if first else f"{100 * s.share:.0f} %"
    return f"×{s.estimate:.2f}{span} on {s.segment} ({share})"


@dataclass(frozen=True)
class ArmAnswer:
    """What one experiment arm is at one load level.

    ``word`` is the final verdict (one of the gates' words or ``"mixed"``), ``pooled_word``
    the gated pooled verdict it came from, ``reasons`` why, ``sentence`` the one sentence
    naming the segments behind "mixed" (or a pooled word that hides none: None), ``named``
    the ``(cut, segment, role)`` it names, ``segments`` and ``heterogeneity`` every
    segment's verdict and each cut's check; ``ratio`` and ``ci`` are the pooled ratio and
    interval, of the kind ``estimand`` names (the traffic's)."""

    arm: str
    level: int
    load: str
    word: str
    pooled_word: str
    ratio: float | None
    ci: tuple[float, float] | None
    reasons: tuple[str, ...]
    sentence: str | None = None
    named: tuple[tuple[str, str, str], ...] = ()
    segments: tuple[SegmentResult, ...] = ()
    heterogeneity: tuple[Heterogeneity, ...] = ()
    estimand: Estimand = Estimand.TRAFFIC

    @property
    def short(self) -> str | None:
        """The terminal's one phrase for "mixed" (None: the pooled word's own phrase)."""
        if self.word != MIXED:
            return None
        parts = [f"{seg} ×{next(s.estimate for s in self.segments if s.segment == seg):.2f}"
                 for _, seg, _ in self.named]  # fmt: skip
        return "mixed: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (segments and checks as mappings)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["segments"] = [s.to_dict() for s in self.segments]
        out["heterogeneity"] = [h.to_dict() for h in self.heterogeneity]
        out["short"] = self.short
        return jsonable(out)


@dataclass(frozen=True)
class Answer:
    """The run's answer: one :class:`ArmAnswer` per experiment arm and load level, the
    segments' multiplicity family in words, the user's mix as every output says it
    (:class:`~speclib.analysis.verdict.mix.TrafficMix`; None: the prompts as sent) and the
    headline sentences a segment adds, one per arm (its first mixed load's sentence, naming
    the other loads where it is mixed too; empty when no arm is mixed)."""

    arms: tuple[ArmAnswer, ...] = ()
    segment_family: str = ""
    mix: TrafficMix | None = None
    headline: tuple[str, ...] = field(default_factory=tuple)
    deploy: Deployment = field(default_factory=Deployment)

    def of(self, arm: str, level: int) -> ArmAnswer | None:
        """The answer of ``arm`` at load level ``level`` (None when it has none)."""
        return next((a for a in self.arms if (a.arm, a.level) == (arm, level)), None)

    def fields_of(self, arm: str, level: int) -> dict[str, Any]:
        """What a comparison's ``summary.json`` entry gains from its answer:
        ``pooled_decision`` (the gated pooled word; its ``decision`` is the answer's),
        ``short_reason`` (the terminal's phrase for "mixed") and ``segment_sentence``;
        nothing for an arm without an answer (the A/A arm)."""
        mine = self.of(arm, level)
        if mine is None:
            return {}
        return {"pooled_decision": mine.pooled_word, "short_reason": mine.short,
                "segment_sentence": mine.sentence}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The ``answer`` entry of ``summary.json``."""
        return jsonable({
            "arms": [a.to_dict() for a in self.arms],
            "segment_family": self.segment_family,
            "mix": self.mix.to_dict() if self.mix else None,
            "headline": list(self.headline),
            "deploy": self.deploy.to_dict(),
            "rule": (
                "mixed: in one cut of the traffic a segment is adopt while another is worse "
                "or gains nothing (interval above 1 − δ), or the pooled verdict is adopt and "
                "a segment is worse or gains nothing; gates keep the last word"
            ),
        })  # fmt: skip


def _by_roles(
    pooled: str, segs: Sequence[SegmentResult], margin: float
) -> tuple[tuple[tuple[str, str, str], ...], str | None]:
    """Rule (a): in one cut a segment helps and another hurts or gains nothing, or the
    pooled word is "adopt" and a segment hurts or gains nothing."""
    for cut in CUTS:
        mine = [s for s in segs if s.cut == cut]
        roles = {s.segment: segment_role(s, margin) for s in mine}
        helps = [s for s in mine if roles[s.segment] == "helps"]
        bad = [s for s in mine if roles[s.segment] in ("hurts", "no gain")]
        if bad and (helps or pooled == "adopt"):
            named = sorted([*helps, *bad], key=lambda s: s.estimate)
            return tuple((cut, s.segment, roles[s.segment]) for s in named), cut
    return (), None


def _by_interaction(
    segs: Sequence[SegmentResult], hets: Sequence[Heterogeneity], margin: float
) -> tuple[tuple[tuple[str, str, str], ...], str | None, tuple[float, float, float] | None]:
    """Rule (b): two segments of one cut shown to differ beyond δ (the heterogeneity
    check, where the arm's instance effect cancels) with the faster one's estimate below
    ``1 − δ`` and the slower one's at or above it: one gains, the other does not."""
    for cut in CUTS:
        het = next((h for h in hets if h.cut == cut and h.differs), None)
        if het is None:
            continue
        est = {s.segment: s.estimate for s in segs if s.cut == cut}
        for a, b, r, lo, hi in sorted(het.pairs, key=lambda p: -abs(p[2] - 1)):
            if a not in est or b not in est or not (lo > 1 + margin or hi < 1 / (1 + margin)):
                continue
            fast, slow, ratio = (a, b, (1 / r, 1 / hi, 1 / lo)) if r < 1 else (b, a, (r, lo, hi))
            if est.get(fast, 1.0) < 1 - margin <= est.get(slow, 0.0):
                role = "hurts" if est[slow] > 1 + margin else "no gain"
                return ((cut, fast, "helps"), (cut, slow, role)), cut, ratio
    return (), None, None


def _uneven(
    segs: Sequence[SegmentResult], hets: Sequence[Heterogeneity], margin: float
) -> tuple[tuple[tuple[str, str, str], ...], str, tuple[float, float, float]] | None:
    """An adopted arm whose segments of one cut differ beyond δ though none is shown not to
    gain: the two furthest apart (faster first), their cut and the ratio between them."""
    segs = [s for s in segs if s.share > 0]
    for cut in CUTS:
        het = next((h for h in hets if h.cut == cut and h.differs), None)
        names = {s.segment for s in segs if s.cut == cut}
        if het is None:
            continue
        beyond = [p for p in het.pairs if p[0] in names and p[1] in names
                  and (p[3] > 1 + margin or p[4] < 1 / (1 + margin))]  # fmt: skip
        if beyond:
            a, b, r, lo, hi = max(beyond, key=lambda p: abs(math.log(p[2])))
            fast, slow, apart = (a, b, (1 / r, 1 / hi, 1 / lo)) if r < 1 else (b, a, (r, lo, hi))
            return ((cut, fast, "faster"), (cut, slow, "slower")), cut, apart
    return None


def _mixed(
    pooled: str, segs: Sequence[SegmentResult], hets: Sequence[Heterogeneity], margin: float
) -> tuple[tuple[tuple[str, str, str], ...], str | None, tuple[float, float, float] | None]:
    """The segments named, their cut and (rule b) how far apart they are, when the arm is
    mixed; ``((), None, None)`` otherwise (see the module docstring)."""
    if pooled in GATED_WORDS:
        return (), None, None
    segs = [s for s in segs if s.share > 0]  # a category the user's mix does not send
    named, cut = _by_roles(pooled, segs, margin)
    if named:
        return named, cut, None
    return _by_interaction(segs, hets, margin)


def _undecided_clause(segs: Sequence[SegmentResult]) -> str:
    """Which of the two segments the difference rests on is not decided by its own
    interval: ", though neither alone is decided", ", though X alone is not decided", or
    nothing when both are."""
    open_ = [s.segment for s in segs if s.decision.word == "inconclusive"]
    if len(open_) == len(segs):
        return ", though neither alone is decided"
    if open_:
        return f", though {open_[0]} alone is not decided"
    return ""


def _one(comparison: Any, segs: Sequence[SegmentResult], hets: Sequence[Heterogeneity],
         margin: float, mixed: bool = False) -> ArmAnswer:  # fmt: skip
    c = comparison
    pooled = c.word
    ci = c.cis.get("tpot_s")
    named, cut, apart = _mixed(pooled, segs, hets, margin)
    reasons = tuple(c.verdict.reasons) if c.verdict else ("no valid pairs",)
    word, sentence = pooled, None
    if named:
        by_name = {s.segment: s for s in segs if s.cut == cut}
        parts = [_seg_words(by_name[seg], first=i == 0, mixed=mixed)
                 for i, (_, seg, _) in enumerate(named)]  # fmt: skip
        pooled_ratio = f"×{ci.estimate:.2f}" if ci is not None else "–"
        sentence = f"mixed: {c.experiment} at {c.load} is " + " and ".join(parts)
        if apart is not None:
            slow = named[-1][1]
            sentence += (f"; {slow} takes ×{apart[0]:.2f} [{apart[1]:.2f}, {apart[2]:.2f}] the "
                         f"time per token of {named[0][1]}, beyond δ"
                         + _undecided_clause([by_name[n] for _, n, _ in named]))  # fmt: skip
        sentence += f" (the traffic's ratio {pooled_ratio}, {pooled}; segments by {cut})"
        word = MIXED
        reasons = (*reasons, sentence)
    elif pooled == "adopt" and (uneven := _uneven(segs, hets, margin)) is not None:
        named, cut, apart = uneven
        by_name = {s.segment: s for s in segs if s.cut == cut}
        fast, slow = named[0][1], named[1][1]
        sentence = (
            f"uneven: {c.experiment} at {c.load} is "
            f"{_seg_words(by_name[fast], first=True, mixed=mixed)} and "
            f"{_seg_words(by_name[slow], first=False)}"
            f"; {slow} takes ×{apart[0]:.2f} [{apart[1]:.2f}, {apart[2]:.2f}] the time per "
            f"token of {fast}, beyond δ (still {pooled}; segments by {cut})"
        )
        reasons = (*reasons, sentence)
    return ArmAnswer(
        c.experiment, c.level, c.load, word, pooled,
        ci.estimate if ci is not None else None,
        (ci.ci_low, ci.ci_high) if ci is not None else None,
        reasons, sentence, named, tuple(segs), tuple(hets),
        ci.estimand if ci is not None else Estimand.TRAFFIC,
    )  # fmt: skip


def build_answer(
    comparisons: Sequence[Any],
    segments: Sequence[SegmentResult],
    heterogeneity: Sequence[Heterogeneity],
    *,
    margin: float,
    segment_family: str = "",
    mix: TrafficMix | None = None,
) -> tuple[Answer, list[Any]]:
    """The answer of every experiment comparison, and the comparisons with their verdict's
    word set to it (a "mixed" verdict carries the segment sentence as its last reason), so
    whatever renders a comparison shows the answer's word."""
    arms, out = [], []
    for c in comparisons:
        mine = [s for s in segments if (s.level, s.arm) == (c.level, c.experiment)]
        hets = [h for h in heterogeneity if (h.level, h.arm) == (c.level, c.experiment)]
        if c.role_aa:
            out.append(c)
            continue
        a = _one(c, mine, hets, margin, mixed=mix is not None)
        arms.append(a)
        if a.word != c.word and c.verdict is not None:
            c = replace(c, verdict=Verdict(a.word, a.reasons, c.verdict.tpot_decision,
                                           c.verdict.gates))  # fmt: skip
        out.append(c)
    headline = []
    for name in dict.fromkeys(a.arm for a in arms if a.sentence):
        for kind in (MIXED, "uneven"):
            mine = [a for a in arms if a.arm == name and (a.sentence or "").startswith(kind)]
            also = ", ".join(a.load for a in mine[1:])
            if mine:
                headline.append(mine[0].sentence + (f"; {kind} too at {also}" if also else ""))
    pooled = {(a.level, a.arm): a.ratio for a in arms
              if a.ratio is not None and a.pooled_word in ("adopt", MIXED)}  # fmt: skip
    plan = deployment(segments, pooled, {a.level: a.load for a in arms}, margin=margin)
    return Answer(tuple(arms), segment_family, mix, tuple(headline), plan), out
