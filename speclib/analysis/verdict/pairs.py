"""The pairs of one load level and the ratio intervals on them.

:func:`level_pairs` gives every arm's usable TPOT pairs with the control at a level (the
input of :func:`speclib.analysis.verdict.tpot_verdict.decide_family`); :func:`gate_cis`
gives each arm's TTFT and E2E intervals for the gates from the block model of TPOT;
:func:`estimand_cis` gives each arm's token-weighted and typical-request TPOT ratios beside the
verdict's (:mod:`speclib.core.estimand`); :func:`pair_ratio_ci` is the pair bootstrap on one
metric of a pair frame (the typical request's ratio; seeded from
``analysis.seed`` and a salt); :func:`pair_exclusions` counts the pairs the TPOT comparison
left out, per side and reason, with the point ratio by each instrument.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.frames import pair_frame
from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.stats.paired import RatioCI, paired_ratio_ci
from speclib.analysis.verdict.tpot_verdict import (
    as_ratio_ci,
    block_analysis,
)
from speclib.core.estimand import Estimand
from speclib.params.experiment import ExperimentParams
from speclib.params.protocol import AnalysisParams

__all__ = [
    "GATE_METRICS",
    "estimand_cis",
    "finite_pairs",
    "gate_cis",
    "geo_ratio",
    "has_usable_pairs",
    "level_pairs",
    "mean_ratio",
    "pair_exclusions",
    "pair_ratio_ci",
]


GATE_METRICS = ("ttft_s", "e2e_s")
"""The latency metrics with a gate, each interval from the block model of TPOT."""


def pair_ratio_ci(
    pairs: pd.DataFrame,
    metric: str,
    level: float,
    a: AnalysisParams,
    salt: int,
    *,
    clustered: bool = True,
) -> RatioCI | None:
    c = pairs[f"{metric}_c"].to_numpy(float)
    e = pairs[f"{metric}_e"].to_numpy(float)
    keep = np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)
    if keep.sum() == 0:
        return None
    clusters = pairs["replicate"].to_numpy()[keep]
    rng = np.random.default_rng([a.seed, salt])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        return paired_ratio_ci(
            c[keep],
            e[keep],
            clusters=clusters if clustered and len(set(clusters)) > 1 else None,
            confidence_level=level,
            n_resamples=a.n_resamples,
            rng=rng,
        )


def geo_ratio(pairs: pd.DataFrame, col: str) -> float | None:
    if f"{col}_c" not in pairs or f"{col}_e" not in pairs:
        return None
    c = pd.to_numeric(pairs[f"{col}_c"], errors="coerce").to_numpy(float)
    e = pd.to_numeric(pairs[f"{col}_e"], errors="coerce").to_numpy(float)
    ok = np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)
    return float(np.exp(np.mean(np.log(e[ok] / c[ok])))) if ok.any() else None


def mean_ratio(pairs: pd.DataFrame, col: str) -> float | None:
    """The traffic's point ratio of ``col`` over the pairs with both sides positive: the
    arm's mean over the control's (None without such a pair or column)."""
    if f"{col}_c" not in pairs or f"{col}_e" not in pairs:
        return None
    c = pd.to_numeric(pairs[f"{col}_c"], errors="coerce").to_numpy(float)
    e = pd.to_numeric(pairs[f"{col}_e"], errors="coerce").to_numpy(float)
    ok = np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)
    return float(e[ok].mean() / c[ok].mean()) if ok.any() else None


def pair_exclusions(pairs: pd.DataFrame, control: str, experiment: str) -> dict[str, Any]:
    """Pairs (both requests succeeded) the TPOT comparison uses, each excluded one counted
    under its side and reason, and the traffic's point ratio (:func:`mean_ratio`) by each
    instrument over the used pairs."""
    if not len(pairs) or "tpot_excluded_c" not in pairs:
        return {"n_pairs_used": len(pairs), "excluded": {}, "ratio_by_instrument": {}}
    rc, re_ = pairs["tpot_excluded_c"], pairs["tpot_excluded_e"]
    used = rc.isna() & re_.isna()
    excluded: dict[str, int] = {}
    for a, b in zip(rc[~used], re_[~used], strict=True):
        key = f"{control}: {a}" if isinstance(a, str) else f"{experiment}: {b}"
        excluded[key] = excluded.get(key, 0) + 1
    kept = pairs[used]
    return {
        "n_pairs_used": int(used.sum()),
        "excluded": excluded,
        "ratio_by_instrument": {
            "client": mean_ratio(kept, "tpot_client_s"),
            "server": mean_ratio(kept, "tpot_server_s"),
            "estimand": Estimand.TRAFFIC,
        },
    }


def has_usable_pairs(pairs: pd.DataFrame) -> bool:
    c, e = pairs.get("tpot_s_c"), pairs.get("tpot_s_e")
    if c is None or e is None or not len(pairs):
        return False
    c, e = c.to_numpy(float), e.to_numpy(float)
    return bool((np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)).any())


def finite_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    c, e = pairs["tpot_s_c"].to_numpy(float), pairs["tpot_s_e"].to_numpy(float)
    return pairs[np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)]


def level_pairs(df: pd.DataFrame, params: ExperimentParams, level: int) -> dict[str, pd.DataFrame]:
    """Every arm's usable TPOT pairs with the control at one load level (arms without any
    left out): the input of :func:`speclib.analysis.verdict.tpot_verdict.decide_family`."""
    d = df[df["level"] == level]
    pairs = {n: pair_frame(d, control=params.control_name, experiment=n).pairs
             for n in params.experiments}  # fmt: skip
    return {n: finite_pairs(p) for n, p in pairs.items() if has_usable_pairs(p)}


def gate_cis(
    pairs_by_arm: dict[str, pd.DataFrame], *, aa_arm: str | None, confidence_level: float
) -> dict[str, dict[str, RatioCI | None]]:
    """Every arm's TTFT and E2E ratio CIs for the gates, from the block model of TPOT.

    For each metric of :data:`GATE_METRICS`: the per-block mean log ratio of the metric
    (the typical request's, :attr:`~speclib.core.estimand.Estimand.TYPICAL`: a gate guards
    every request's latency, and one stalled request must not decide it), and per arm a
    paired t-interval on its own block contrasts, ``blocks - 1`` df, against
    the same reference as TPOT (with an A/A arm: the mean of the two control servers; see
    :func:`speclib.analysis.verdict.tpot_verdict.block_analysis`). One block gives ``(0, inf)``:
    the gate is then "not assessed". Returns ``{arm: {metric: ci or None}}``.
    """
    out: dict[str, dict[str, RatioCI | None]] = {n: {} for n in pairs_by_arm}
    present = {n: p for n, p in pairs_by_arm.items() if len(p)}
    for m in GATE_METRICS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            found = None
            if present:
                found = block_analysis(present, aa_arm=aa_arm, confidence_level=confidence_level,
                                       metric=m, estimand=Estimand.TYPICAL)  # fmt: skip
        for n in pairs_by_arm:
            arm_ci = None
            if found is not None:
                arm_ci = found.aa if n == aa_arm and found.aa else found.arms.get(n)
            out[n][m] = as_ratio_ci(arm_ci, pairs_by_arm[n], m) if arm_ci else None
    return out


def estimand_cis(
    pairs_by_arm: dict[str, pd.DataFrame],
    *,
    aa_arm: str | None,
    confidence_level: float,
    mix: dict[str, float] | None = None,
) -> dict[str, dict[Estimand, RatioCI | None]]:
    """Every arm's TPOT ratio as the token-weighted ratio and as the typical request's, each
    with its block-level interval at ``confidence_level`` (descriptive: the verdict decides
    the traffic's ratio only, :func:`speclib.analysis.verdict.tpot_verdict.decide_family`).
    Under a ``mix`` the token-weighted ratio is the mix's and the typical request has none.
    Returns ``{arm: {estimand: ci or None}}`` (None: no interval could be formed, e.g. a
    pair without output tokens)."""
    out: dict[str, dict[Estimand, RatioCI | None]] = {n: {} for n in pairs_by_arm}
    present = {n: p for n, p in pairs_by_arm.items() if len(p)}
    for est in (Estimand.PER_TOKEN, Estimand.TYPICAL):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            found = block_analysis(present, aa_arm=aa_arm, confidence_level=confidence_level,
                                   estimand=est, mix=mix) if present else None  # fmt: skip
        for n in pairs_by_arm:
            arm_ci = None
            if found is not None:
                arm_ci = found.aa if n == aa_arm and found.aa else found.arms.get(n)
            out[n][est] = as_ratio_ci(arm_ci, pairs_by_arm[n], mixed=bool(mix)) if arm_ci else None
    return out
