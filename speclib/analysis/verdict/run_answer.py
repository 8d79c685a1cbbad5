"""The answer of a run: its pairs cut into segments, decided, and the final words.

:func:`traffic_mix` is the user's traffic mix for the analysis (``speclib analyze --mix``
over ``workload.mix``), checked against the records' categories; :func:`traffic_said` the
same as every output says it (:class:`speclib.analysis.verdict.mix.TrafficMix`).
:func:`run_answer` labels
every arm's pairs at every load level by segment
(:func:`speclib.analysis.verdict.segments.label_pairs`, the tertile edges shared by the
arms of a level), decides all segments as one Holm family, checks each cut's heterogeneity,
and hands the comparisons to :func:`speclib.analysis.verdict.answer.build_answer`, the one
place their final word is decided.
"""

from __future__ import annotations

import pandas as pd

from speclib.analysis.verdict.answer import Answer, build_answer
from speclib.analysis.verdict.comparisons import Comparison
from speclib.analysis.verdict.mix import TrafficMix, check_mix, describe_mix, parse_mix
from speclib.analysis.verdict.pairs import level_pairs
from speclib.analysis.verdict.segments import (
    CUTS,
    count_pairs,
    decide_segments,
    heterogeneity,
    label_pairs,
)
from speclib.params.experiment import AA_ARM, ExperimentParams

__all__ = ["run_answer", "traffic_mix", "traffic_said"]


def traffic_mix(
    params: ExperimentParams, df: pd.DataFrame, mix: str | dict[str, float] | None
) -> dict[str, float] | None:
    """The user's traffic mix (``mix`` over ``workload.mix``), checked against the records'
    categories; None for the prompts as sent."""
    given = parse_mix(mix) if isinstance(mix, str) and mix else (mix or None)
    given = given if given is not None else params.workload.mix
    if given is None:
        return None
    cats = set(df["category"].dropna().astype(str)) if "category" in df else set()
    return check_mix(given, cats)


def run_answer(
    df: pd.DataFrame,
    params: ExperimentParams,
    comps: list[Comparison],
    levels: list[int],
    confidence: float,
    mix: dict[str, float] | None,
) -> tuple[Answer, list[Comparison]]:
    """Every segment decided (one Holm family), each cut's heterogeneity, then the answer
    (:func:`speclib.analysis.verdict.answer.build_answer`) and the comparisons it words.
    With a ``mix``, the pairs of categories it gives no share are left out of every cut."""
    aa_arm = AA_ARM if params.protocol.aa else None
    edges = params.analysis.segment_edges
    labelled: dict[tuple[int, str], pd.DataFrame] = {}
    aa: dict[int, pd.DataFrame] = {}
    for lvl in levels:
        found = level_pairs(df, params, lvl)
        if mix:  # the categories the user's traffic does not hold are no part of its segments
            sent = {c for c, w in mix.items() if w > 0}
            found = {a: p[p["category"].astype(str).isin(sent)] for a, p in found.items()}
        ref = found.get(aa_arm) if aa_arm in found else next(iter(found.values()), None)
        for arm, pairs in found.items():
            lab = label_pairs(pairs, edges=edges, reference=ref, accepted=arm != aa_arm)
            if arm == aa_arm:
                aa[lvl] = lab
            else:
                labelled[(lvl, arm)] = lab
    shares = {
        (lvl, arm, "category", cat): share
        for (lvl, arm) in labelled
        for cat, share in (mix or {}).items()
    }
    m = params.analysis.margin
    segs, family = decide_segments(labelled, aa=aa, aa_arm=aa_arm, confidence=confidence,
                                   margin=m, shares=shares)  # fmt: skip
    tests = sum(count_pairs(lab, cut) for lab in labelled.values() for cut in CUTS)
    opts = {"margin": m, "confidence": confidence, "n_tests": tests}
    hets = [
        h
        for (lvl, arm), lab in labelled.items()
        for cut in CUTS
        if (h := heterogeneity(lab, level=lvl, arm=arm, cut=cut, aa=aa.get(lvl), **opts))
    ]
    said = traffic_said(df, params, mix)
    return build_answer(comps, segs, hets, margin=m, segment_family=family, mix=said)


def traffic_said(
    df: pd.DataFrame, params: ExperimentParams, mix: dict[str, float] | None
) -> TrafficMix | None:
    """The mix as every output says it, against the run's measured requests per category
    (the control's: each prompt as often as it was sent); None without a mix."""
    if not mix:
        return None
    rows = df[df["series"] == params.control_name] if "series" in df else df
    cats = rows["category"].dropna().astype(str) if "category" in rows else pd.Series([])
    return describe_mix(mix, {str(k): int(v) for k, v in cats.value_counts().items()})
