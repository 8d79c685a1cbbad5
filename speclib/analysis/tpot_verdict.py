"""The TPOT decision at one load level: block-level intervals, Holm, and the A/A gate.

A verdict must survive the machine's own noise: measured on the kit's CPU machines, a server
drifts ±10 % between windows, shifts regime inside a launch, and two identical servers
differ by ~5 %. The per-pair bootstrap over one launch per arm cannot see the last of these
(it gave 2 false verdicts in 6 A/A runs). So the TPOT interval of every arm comes from
:mod:`speclib.analysis.blocks`: the per-replicate-block mean paired log-ratios, with the
server-instance variance pooled over all arms of the run (control, A/A arm, experiments),
and a t quantile on its degrees of freedom. One launch per arm and no A/A arm leaves no
degrees of freedom: the interval is ``(0, inf)`` and the verdict says why it cannot decide.

:func:`decide_level` applies the pre-declared rule (:func:`speclib.analysis.decision.decide`)
with Holm's step-down across the experiments, and decides the A/A arm (a second copy of the
control) at the run's confidence level: if that arm shows an effect (adopt or worse), the
bench is untrustworthy and every experiment's verdict says so (see
:func:`speclib.analysis.decision.apply_gates`). Pure functions of paired frames.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.blocks import BlockAnalysis, BlockArmCI, block_ratio_cis, summarize_blocks
from speclib.analysis.decision import Decision, decide, holm_decide
from speclib.analysis.stats import DegenerateDataWarning, RatioCI, wilcoxon_logratio

__all__ = ["LevelDecision", "as_ratio_ci", "block_analysis", "decide_level", "summary_of"]

_BLOCK_KEY = "replicate"


@dataclass(frozen=True)
class LevelDecision:
    """Every arm's TPOT decision at one load level.

    ``experiments`` maps each experiment to ``(ci, decision)`` at the level its Holm step
    settled it; ``aa`` is the A/A arm's own ``(ci, decision)`` at the run's confidence
    (None without an A/A arm); ``blocks`` the block analysis at the run's confidence (noise
    components, degrees of freedom); ``bench_effect`` is a reason string when the A/A arm
    showed an effect (then no verdict of this level can be trusted), else None.
    """

    experiments: dict[str, tuple[RatioCI, Decision]]
    aa: tuple[RatioCI, Decision] | None
    blocks: BlockAnalysis | None
    bench_effect: str | None


def _log_ratios(pairs_by_arm: Mapping[str, pd.DataFrame]) -> tuple[list, list, list]:
    values, arms, blocks = [], [], []
    for arm, pairs in pairs_by_arm.items():
        if not len(pairs):
            continue
        lr = np.log(pairs["tpot_s_e"].to_numpy(float) / pairs["tpot_s_c"].to_numpy(float))
        values += list(lr)
        arms += [arm] * len(lr)
        blocks += list(pairs["block"] if "block" in pairs else pairs[_BLOCK_KEY])
    return values, arms, blocks


def block_analysis(
    pairs_by_arm: Mapping[str, pd.DataFrame],
    *,
    aa_arm: str | None,
    confidence_level: float,
) -> BlockAnalysis | None:
    """Block-level intervals of every arm against the control (None without pairs).

    ``pairs_by_arm`` maps arm → its pairs with the control (columns ``tpot_s_c``,
    ``tpot_s_e`` and ``block``, else ``replicate``, naming the block of each pair). With an
    A/A arm, each experiment is compared with the mean of the two control servers (the A/A
    arm's effect is 0 by construction), which uses its known mean and narrows the interval;
    the A/A arm's own interval is against the control.
    """
    values, arms, blocks = _log_ratios(pairs_by_arm)
    if not values:
        return None
    summary = summarize_blocks(np.asarray(values), arm=np.asarray(arms), block=np.asarray(blocks))
    aa = aa_arm if aa_arm in summary.arms else None
    others = [a for a in summary.arms if a != aa]
    return block_ratio_cis(
        summary,
        aa_arm=aa,
        reference="controls" if aa and others else "control",
        confidence_level=confidence_level,
    )


def as_ratio_ci(ci: BlockArmCI, pairs: pd.DataFrame) -> RatioCI:
    """The block interval in the form the decision rule takes, with the pairs' medians."""
    c = pairs["tpot_s_c"].to_numpy(float)
    e = pairs["tpot_s_e"].to_numpy(float)
    wilcoxon = wilcoxon_logratio(c, e) if len(pairs) >= 2 else None
    var_between = var_within = None
    if ci.se_within_log is not None and math.isfinite(ci.se_log):
        var_within = ci.se_within_log**2 * max(ci.n_pairs, 1)
        var_between = max(ci.se_log**2 - ci.se_within_log**2, 0.0) * max(ci.n_blocks, 1)
    return RatioCI(
        estimate=ci.estimate,
        ci_low=ci.ci_low,
        ci_high=ci.ci_high,
        confidence_level=ci.confidence_level,
        method=f"blocks ({ci.reference}, t, df={ci.df})",
        n_pairs=ci.n_pairs,
        n_launches=ci.n_blocks,
        median_delta=float(np.median(e - c)) if len(pairs) else math.nan,
        wilcoxon_p=wilcoxon,
        between_launch_share=ci.instance_share,
        more_launches_help=ci.more_blocks_help,
        var_between=var_between,
        var_within=var_within,
        n_resamples=0,
        note=ci.note,
    )


def _quiet_analysis(pairs_by_arm, aa_arm, level) -> BlockAnalysis | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        return block_analysis(pairs_by_arm, aa_arm=aa_arm, confidence_level=level)


def decide_level(
    pairs_by_arm: Mapping[str, pd.DataFrame],
    *,
    experiments: Sequence[str],
    aa_arm: str | None,
    confidence: float,
    margin: float,
) -> LevelDecision:
    """Decide every experiment (Holm across them) and the A/A arm at one load level."""
    present = [n for n in experiments if len(pairs_by_arm.get(n, ())) > 0]
    cache: dict[float, BlockAnalysis | None] = {}

    def analysis_at(level: float) -> BlockAnalysis | None:
        if level not in cache:
            cache[level] = _quiet_analysis(pairs_by_arm, aa_arm, level)
        return cache[level]

    def compute_ci(name: str, level: float) -> RatioCI:
        found = analysis_at(level)
        assert found is not None and name in found.arms
        return as_ratio_ci(found.arms[name], pairs_by_arm[name])

    decided: dict[str, tuple[RatioCI, Decision]] = {}
    if present:
        decided = holm_decide(compute_ci, present, family_confidence=confidence, margin=margin)
    main = analysis_at(confidence)
    aa, effect = None, None
    if aa_arm and main is not None and main.aa is not None:
        ci = as_ratio_ci(main.aa, pairs_by_arm[aa_arm])
        aa = (ci, decide(ci, margin=margin))
        if aa[1].word in ("adopt", "worse"):
            effect = (
                f"the A/A arm (a second copy of the control) measured ratio {ci.estimate:.3f} "
                f"[{ci.ci_low:.3f}, {ci.ci_high:.3f}] and was decided '{aa[1].word}' although "
                "no effect exists: this bench's noise is larger than its intervals admit"
            )
    return LevelDecision(decided, aa, main, effect)


def summary_of(result: LevelDecision) -> dict[str, Any]:
    """JSON-safe summary of the level's block analysis and A/A arm (for ``summary.json``)."""
    out: dict[str, Any] = {"bench_effect": result.bench_effect}
    if result.blocks is not None:
        out["blocks"] = result.blocks.to_dict()
    if result.aa is not None:
        ci, decision = result.aa
        out["aa"] = {"ci": ci.to_dict(), "decision": decision.word, "reason": decision.reason}
    return out
