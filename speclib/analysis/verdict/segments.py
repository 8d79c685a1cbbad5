"""Segments of the traffic: which part of the requests an arm helps or hurts, decided.

A **segment** is a part of the traffic, cut one of four ways (:data:`CUTS`):

* ``category`` – the prompt file's ``category`` field;
* ``accepted`` – whether the arm got any draft token accepted for the request, read from
  the stream: a chunk that carries more than one token is a step that accepted a draft (at
  concurrency 1 one chunk is one engine step; the arm's per-request spec metrics count too
  where the records hold them). A request whose every chunk carries one token got nothing
  accepted; the A/A arm is not cut this way;
* ``prompt_length`` and ``output_length`` – tertiles of the control's prompt and output
  tokens over the level's prompts, or the edges ``analysis.segment_edges`` declares; a cut
  whose values do not split (every output ``max_tokens`` long) is left out.

Every segment with pairs in at least :data:`~speclib.analysis.verdict.categories.
MIN_CATEGORY_BLOCKS` blocks and :data:`~speclib.analysis.verdict.categories.
MIN_CATEGORY_PAIRS` pairs gets **the pooled comparison's rule**: the block-level paired
t-interval of :func:`speclib.analysis.verdict.tpot_verdict.block_analysis` on the segment's
pairs (against both controls with an A/A arm) and :func:`speclib.analysis.verdict.decision.
decide`. A segment's ratio is **its traffic's ratio** (the arm's mean TPOT over the
control's on the segment's pairs, :attr:`speclib.core.estimand.Estimand.TRAFFIC`), as the
pooled one is: so the segments' mean TPOTs, weighted by their shares, give back the
pooled traffic's (what routing compares, :mod:`speclib.analysis.verdict.deploy`). All
segments of all cuts, arms and load levels form **one Holm family** at the run's family
confidence (:func:`decide_segments`), stated in words. A segment too small for an interval
is "inconclusive" with the reason, outside the family.

**Heterogeneity** (:func:`heterogeneity`): within one cut, for every two segments, the
per-block difference of their contrasts (the log of each segment's traffic ratio in the
block: the arm's instance effect of a block multiplies both segments' mean TPOT alike, so
it cancels) gets a paired t-interval over the blocks holding both, at ``1 - α / pairs``
(Bonferroni over every such pair of every cut, arm and load level of the run); the
segments **differ beyond δ** when some such ratio of ratios lies wholly outside
``[1 / (1 + δ), 1 + δ]``. It is on the segments' own scale, so the ratio of ratios it
bounds is the ratio of the two segments' estimates that the mixed rule names.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import combinations, pairwise
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.stats.ratio_interval import RatioInterval
from speclib.analysis.stats.t_interval import t_interval
from speclib.analysis.verdict.categories import MIN_CATEGORY_BLOCKS, MIN_CATEGORY_PAIRS
from speclib.analysis.verdict.decision import Decision, check_fraction, holm_decide
from speclib.analysis.verdict.tpot_verdict import block_analysis, pair_summary, with_pairs
from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable
from speclib.core.reason_text import render
from speclib.core.reasons import Code, Reason
from speclib.core.verdict_words import Word
from speclib.core.wording import span_text

__all__ = [
    "CUTS",
    "Heterogeneity",
    "SegmentResult",
    "count_pairs",
    "decide_segments",
    "heterogeneity",
    "label_pairs",
    "segment_family_text",
    "unsplit_edges",
]

CUTS = ("category", "accepted", "prompt_length", "output_length")
"""The ways the traffic is cut into segments, in the order the answer names them."""

ACCEPTED, NONE_ACCEPTED = "drafts accepted", "nothing accepted"
_KEY = ["replicate", "prompt_id", "repeat"]


@dataclass(frozen=True)
class SegmentResult:
    """One segment's TPOT comparison of one arm at one load level.

    ``share`` is the segment's share of the arm's pairs at that level (or the user's mix,
    :mod:`speclib.analysis.verdict.mix`, for a category); ``estimate`` and ``ci`` are the
    segment's traffic ratio (``estimand``) and its interval, ``decision`` at the level the
    Holm family settled it (None and "inconclusive" without an interval; ``note`` says
    why); ``mean_control_s`` and ``mean_arm_s`` the two sides' mean TPOT over the
    segment's pairs (what routing weighs the segments by)."""

    level: int
    arm: str
    cut: str
    segment: str
    share: float
    n_pairs: int
    n_blocks: int
    estimate: float
    ci: RatioInterval | None
    decision: Decision
    note: Reason | None = None
    mean_control_s: float | None = None
    mean_arm_s: float | None = None
    estimand: Estimand = Estimand.TRAFFIC

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (the interval flat: ``ci_low``, ``ci_high``, ``confidence_level``)."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self) if f.name != "ci"}
        out["note"] = render(self.note) if self.note is not None else None
        out["decision"] = self.decision.word
        out["reason"] = render(self.decision.reason)
        ci = self.ci
        out.update(ci_low=ci.ci_low if ci else None, ci_high=ci.ci_high if ci else None,
                   confidence_level=ci.confidence_level if ci else None,
                   df=ci.df if ci else None)  # fmt: skip
        return jsonable(out)


@dataclass(frozen=True)
class Heterogeneity:
    """Whether one cut's segments of one arm and level differ beyond δ.

    ``pairs`` holds, per two segments, ``(a, b, ratio, low, high)``: the ratio of a's TPOT
    ratio to b's with its Bonferroni interval at ``confidence_level``; ``differs`` is True
    when some interval lies wholly outside ``[1/(1+δ), 1+δ]``."""

    level: int
    arm: str
    cut: str
    differs: bool
    confidence_level: float
    pairs: tuple[tuple[str, str, float, float, float], ...]
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return jsonable({f.name: getattr(self, f.name) for f in fields(self)})


# ------------------------------------------------------------------------ the cuts


def _tertile_labels(values: pd.Series, edges: Sequence[float] | None, unit: str) -> pd.Series:
    """Labels "≤ a", "a–b", "> b" of ``values`` by ``edges`` (default: the tertiles of the
    distinct prompts' values); an empty Series when fewer than two segments result."""
    v = pd.to_numeric(values, errors="coerce")
    if v.notna().sum() == 0:
        return pd.Series(dtype=object)
    cuts = (
        sorted(set(float(e) for e in edges))
        if edges
        else sorted(set(np.quantile(v.dropna().to_numpy(float), [1 / 3, 2 / 3]).round().tolist()))
    )
    bins = [-math.inf, *cuts, math.inf]
    names = [f"≤ {cuts[0]:g} {unit}"]
    names += [f"{a:g}–{b:g} {unit}" for a, b in pairwise(cuts)]
    names += [f"> {cuts[-1]:g} {unit}"]
    labels = pd.cut(v, bins=bins, labels=names, right=True).astype(object)
    return labels if labels.dropna().nunique() >= 2 else pd.Series(dtype=object)


def _accepted(pairs: pd.DataFrame) -> pd.Series:
    """``ACCEPTED`` when the arm's stream had a chunk of more than one token (or its spec
    metrics count an accepted token), else ``NONE_ACCEPTED``."""

    def one(row: pd.Series) -> str:
        chunks = row.get("chunk_tokens_e")
        many = isinstance(chunks, (list, tuple)) and any(int(t) > 1 for t in chunks)
        mean_len = pd.to_numeric(row.get("spec_mean_len_e"), errors="coerce")
        return ACCEPTED if many or (pd.notna(mean_len) and mean_len > 1) else NONE_ACCEPTED

    return pairs.apply(one, axis=1) if len(pairs) else pd.Series(dtype=object)


def label_pairs(
    pairs: pd.DataFrame,
    *,
    edges: Mapping[str, Sequence[float]] | None = None,
    reference: pd.DataFrame | None = None,
    accepted: bool = True,
) -> pd.DataFrame:
    """``pairs`` with one label column per cut that splits them (``seg_<cut>``).

    ``reference`` is the frame whose control values set the tertile edges (default:
    ``pairs``), so every arm of a level is cut at the same lengths; ``edges`` overrides them
    per cut (``prompt_length``, ``output_length``); ``accepted=False`` leaves the
    ``accepted`` cut out (the A/A arm)."""
    out = pairs.copy()
    ref = pairs if reference is None else reference
    edges = edges or {}
    if "category" in out and out["category"].notna().any():
        out["seg_category"] = out["category"].fillna("uncategorised").astype(str)
    if accepted and len(out):
        out["seg_accepted"] = _accepted(out)
    for cut, col, unit in (("prompt_length", "prompt_tokens_c", "prompt tokens"),
                           ("output_length", "output_tokens_c", "output tokens")):  # fmt: skip
        if col not in out or col not in ref:
            continue
        own = edges.get(cut)
        if own is None:
            per_prompt = ref.drop_duplicates("prompt_id")[col]
            found = _tertile_labels(per_prompt, None, unit)
            if found.empty:
                continue
            v = pd.to_numeric(per_prompt, errors="coerce").dropna().to_numpy(float)
            own = sorted(set(np.quantile(v, [1 / 3, 2 / 3]).round().tolist()))
        labels = _tertile_labels(out[col], own, unit)
        if not labels.empty:
            out[f"seg_{cut}"] = labels
    return out


# ------------------------------------------------------------------ the decisions


def segment_family_text(n: int, *, confidence: float, margin: float) -> str:
    """The segments' Holm family in words."""
    return (
        f"Holm step-down over {n} segment comparison{'s' * (n != 1)} (every segment of every "
        f"cut — {', '.join(CUTS)} — of every experiment arm at every load level), family "
        f"confidence {100 * confidence:.4g} %, margin δ = ±{margin:.3g}; a separate family from "
        "the pooled verdicts"
    )


def _subset(pairs: pd.DataFrame, col: str, seg: str) -> pd.DataFrame:
    return pairs[pairs[col] == seg]


def _aa_subset(aa: pd.DataFrame | None, mine: pd.DataFrame, col: str, seg: str, cut: str):
    """The A/A arm's pairs of a segment: by the same label, or, for the ``accepted`` cut,
    by the arm's own requests (same block, prompt and repeat)."""
    if aa is None or not len(aa):
        return None
    if cut != "accepted":
        return aa[aa[col] == seg] if col in aa else None
    keys = _subset(mine, col, seg)[_KEY].drop_duplicates()
    return aa.merge(keys, on=_KEY, how="inner")


def _seg_ci(mine, aa, arm, aa_arm, level) -> RatioInterval | None:
    by_arm = {arm: mine} if aa is None or not len(aa) else {arm: mine, aa_arm: aa}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        found = block_analysis(by_arm, aa_arm=aa_arm, confidence_level=level)
    if found is None or arm not in found.arms:
        return None
    return with_pairs(found.arms[arm], mine)


def _usable(p: pd.DataFrame) -> pd.DataFrame:
    c = pd.to_numeric(p.get("tpot_s_c"), errors="coerce")
    e = pd.to_numeric(p.get("tpot_s_e"), errors="coerce")
    keep = np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)
    out = p[keep].copy()
    if "block" not in out:
        out["block"] = out["replicate"]
    return out


def decide_segments(
    labelled: Mapping[tuple[int, str], pd.DataFrame],
    *,
    aa: Mapping[int, pd.DataFrame] | None = None,
    aa_arm: str | None = None,
    confidence: float,
    margin: float,
    shares: Mapping[tuple[int, str, str, str], float] | None = None,
    min_pairs: int = MIN_CATEGORY_PAIRS,
    min_blocks: int = MIN_CATEGORY_BLOCKS,
) -> tuple[list[SegmentResult], str]:
    """Decide every segment of every arm and level, Holm over all of them as one family.

    ``labelled[(level, arm)]`` are the arm's pairs with the control, labelled by
    :func:`label_pairs`; ``aa[level]`` the A/A arm's labelled pairs (with ``aa_arm``) when
    the run has one. ``shares`` overrides a segment's share (the user's mix). Returns the
    results (in level, arm, cut, segment order) and the family in words ("" when empty).
    """
    confidence = check_fraction(confidence, "confidence", low_open=True)
    margin = check_fraction(margin, "margin", low_open=True)
    cells: dict[tuple[int, str, str, str], tuple[pd.DataFrame, pd.DataFrame | None]] = {}
    small: dict[tuple[int, str, str, str], Reason] = {}
    totals: dict[tuple[int, str], int] = {}
    for (level, arm), raw in labelled.items():
        pairs = _usable(raw)
        totals[(level, arm)] = len(pairs)
        aa_pairs = None if aa is None or aa.get(level) is None else _usable(aa[level])
        for cut in CUTS:
            col = f"seg_{cut}"
            if col not in pairs or pairs[col].dropna().nunique() < 2:
                continue
            for seg in sorted(set(pairs[col].dropna())):
                mine = _subset(pairs, col, seg)
                key = (level, arm, cut, str(seg))
                cells[key] = (mine, _aa_subset(aa_pairs, mine, col, seg, cut))
                blocks = mine["block"].nunique()
                if blocks < min_blocks:
                    small[key] = Reason(Code.TOO_FEW, {"what": "blocks", "need": min_blocks})
                elif len(mine) < min_pairs:
                    small[key] = Reason(Code.TOO_FEW, {"what": "pairs", "need": min_pairs})
    family = [k for k in cells if k not in small]

    def compute_ci(key: Hashable, level: float) -> RatioInterval:
        mine, aa_seg = cells[key]  # type: ignore[index]
        ci = _seg_ci(mine, aa_seg, key[1], aa_arm, level)  # type: ignore[index]
        assert ci is not None
        return ci

    decided = holm_decide(compute_ci, family, family_confidence=confidence,
                          margin=margin) if family else {}  # fmt: skip
    out = []
    for key, (mine, aa_seg) in cells.items():
        level, arm, cut, seg = key
        share = (shares or {}).get(key, len(mine) / max(totals[(level, arm)], 1))
        if key in decided:
            ci, dec = decided[key]
            est, note = ci.estimate, ci.note
        else:
            ci, note = None, small[key]
            rough = _seg_ci(mine, aa_seg, arm, aa_arm, confidence)
            est = rough.estimate if rough is not None else math.nan
            why = Reason(Code.SEGMENT_UNDECIDED, {"cut": cut, "segment": seg, "why": note})
            dec = Decision(Word.INCONCLUSIVE, why, margin, confidence)
        out.append(
            SegmentResult(
                level,
                arm,
                cut,
                seg,
                float(share),
                len(mine),
                int(mine["block"].nunique()),
                float(est),
                ci,
                dec,
                note,
                float(mine["tpot_s_c"].astype(float).mean()),
                float(mine["tpot_s_e"].astype(float).mean()),
            )
        )
    text = segment_family_text(len(family), confidence=confidence, margin=margin) if family else ""
    return out, text


# ------------------------------------------------------------------ heterogeneity


def _block_log_ratios(pairs: pd.DataFrame) -> pd.Series:
    """Per block, the log of the traffic's ratio (mean TPOT of the arm over the control's)."""
    summary = pair_summary({"arm": pairs})
    if summary is None:
        return pd.Series(dtype=float)
    present = summary.n_pairs[0] > 0
    return pd.Series(summary.mean[0][present], index=np.asarray(summary.blocks)[present])


def _block_contrasts(pairs: pd.DataFrame, aa: pd.DataFrame | None) -> pd.Series:
    """Per block: the log of the segment's traffic ratio, less half the A/A arm's where it
    has pairs in every one of these blocks (the contrast of the verdict's block model)."""
    d = _block_log_ratios(pairs)
    if aa is not None and len(aa):
        d_aa = _block_log_ratios(_usable(aa))
        if set(d.index) <= set(d_aa.index):
            d = d - d_aa.reindex(d.index) / 2
    return d


def count_pairs(labelled: pd.DataFrame, cut: str) -> int:
    """How many two-segment pairs :func:`heterogeneity` tests in ``cut`` (0: no cut)."""
    col = f"seg_{cut}"
    k = labelled[col].dropna().nunique() if col in labelled else 0
    return k * (k - 1) // 2


def heterogeneity(
    labelled: pd.DataFrame,
    *,
    level: int,
    arm: str,
    cut: str,
    margin: float,
    confidence: float,
    aa: pd.DataFrame | None = None,
    n_tests: int | None = None,
) -> Heterogeneity | None:
    """Whether the segments of ``cut`` differ beyond δ for one arm (None: fewer than two
    segments with two shared blocks). See the module docstring for the test; ``n_tests``
    widens the Bonferroni correction to a whole family of such pairs (default: this cut's
    pairs)."""
    pairs = _usable(labelled)
    col = f"seg_{cut}"
    if col not in pairs:
        return None
    aa_pairs = None if aa is None else _usable(aa)
    per = {}
    for seg in sorted(set(pairs[col].dropna())):
        mine = _subset(pairs, col, seg)
        per[str(seg)] = _block_contrasts(mine, _aa_subset(aa_pairs, mine, col, seg, cut))
    combos = list(combinations(per, 2))
    if not combos:
        return None
    tests = max(n_tests or 0, len(combos))
    level_conf = 1 - (1 - confidence) / tests
    found, bound = [], math.log1p(margin)
    for a, b in combos:
        diff = (per[a] - per[b]).dropna()
        if diff.size < 2:
            continue
        t = t_interval(diff.to_numpy(float), confidence_level=level_conf)
        found.append((a, b, math.exp(t.mean), math.exp(t.low), math.exp(t.high)))
    if not found:
        return None
    beyond = [f for f in found if f[3] > math.exp(bound) or f[4] < math.exp(-bound)]
    if beyond:
        a, b, r, lo, hi = max(beyond, key=lambda f: abs(math.log(f[2])))
        detail = (f"{cut}: {a} against {b} ×{r:.2f} [{span_text(lo, hi)}] "
                  f"({100 * level_conf:.4g} % Bonferroni over {tests} pair(s)): the "
                  f"segments differ beyond δ = ±{margin:.3g}")  # fmt: skip
    else:
        detail = (
            f"{cut}: no two segments shown to differ beyond δ = ±{margin:.3g} "
            f"({100 * level_conf:.4g} % Bonferroni over {tests} pair(s))"
        )
    return Heterogeneity(level, arm, cut, bool(beyond), level_conf, tuple(found), detail)


def unsplit_edges(
    df: pd.DataFrame, *, control: str, edges: Mapping[str, Sequence[float]] | None
) -> list[str]:
    """One note per declared cut (``analysis.segment_edges``) that splits none of the
    control's measured requests: all fall in one segment, so that cut has no segments and
    the report would show none without saying why."""
    notes = []
    rows = df[df["series"] == control] if "series" in df else df
    for cut, col, unit in (("prompt_length", "prompt_tokens", "prompt tokens"),
                           ("output_length", "output_tokens", "output tokens")):  # fmt: skip
        own = (edges or {}).get(cut)
        if not own or col not in rows:
            continue
        v = pd.to_numeric(rows[col], errors="coerce").dropna()
        if len(v) and _tertile_labels(v, own, unit).empty:
            notes.append(
                f"analysis.segment_edges.{cut} {[float(e) for e in own]} split no data: the "
                f"control's measured requests have {v.min():g}–{v.max():g} {unit}, all in one "
                f"segment, so there is no {cut.replace('_', ' ')} segment"
            )
    return notes
