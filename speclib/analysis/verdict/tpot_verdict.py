"""The TPOT decisions of a run: block-level intervals, Holm over the family, the A/A gate.

A verdict must survive the machine's own noise: measured on the kit's CPU machines, a server
drifts ±10 % between windows, shifts regime inside a launch, and two identical servers
differ by ~5 %. The per-pair bootstrap over one launch per arm cannot see the last of these
(it gave 2 false verdicts in 6 A/A runs). So the TPOT interval of every arm comes from
:mod:`speclib.analysis.stats.block_intervals`: a paired t-interval on that arm's own
per-replicate-block
contrasts against the control (with an A/A arm: against the mean of the two control
servers), on ``blocks - 1`` degrees of freedom. Each arm's interval rests on its own noise;
only the control and the A/A arm, two copies of one server, are treated as exchangeable.
One block leaves no degrees of freedom: the interval is ``(0, inf)`` and the verdict says
why it cannot decide.

**The estimand.** Every verdict here is about the traffic as a whole, so its ratio is the
traffic's (:attr:`speclib.core.estimand.Estimand.TRAFFIC`): per block, the log of the arm's
mean TPOT over the control's on the block's paired prompts (:func:`pair_summary`); under a
user's mix, each side's mean is the share-weighted combination of its categories' means.
The geometric mean of per-request ratios (the typical request) and the token-weighted
ratio use the same model through ``estimand=`` and are reported beside it, never decided.

**The family.** :func:`decide_family` applies the pre-declared rule
(:func:`speclib.analysis.verdict.decision.decide`) with Holm's step-down over the whole family of
TPOT comparisons: every experiment arm (each sweep value is an arm) at every load level.
The A/A arm is not part of the family: it is decided on its own, per load level, at the
family confidence, and if it shows an effect (adopt or worse) the bench is untrustworthy
and every experiment's verdict of that level says so (see
:func:`speclib.analysis.verdict.gates.apply_gates`). Its reason reads as a bench check (its
resolution against δ and the blocks that would make it "equivalent",
:mod:`speclib.analysis.verdict.resolution`), never as an experiment's plan towards "adopt" or
"worse". :func:`family_text` says what the family
was, e.g. "Holm over 6 comparisons: 2 arms × 3 load levels".

**Looks.** With ``looks`` (a run-until-decided plan, :mod:`speclib.analysis.stats.sequential`)
the decisions are replayed look by look from the same records: at look ``k`` only the
replicates ``< k`` count, the comparisons still open are decided by Holm at that look's
family confidence ``1 - α_k``, and a comparison decided at look ``k`` keeps that
decision and that interval (at the level it was built at); only the last look leaves a
comparison inconclusive. Pure functions of paired frames.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.stats.block_intervals import BlockAnalysis, BlockArmCI, block_ratio_cis
from speclib.analysis.stats.block_summary import (
    BlockSummary,
    summarize_blocks,
    summarize_mean_ratios,
)
from speclib.analysis.stats.paired import RatioCI
from speclib.analysis.verdict.decision import Decision, holm_decide
from speclib.analysis.verdict.resolution import bench_check
from speclib.core.estimand import Estimand

__all__ = [
    "MIX_NOTE",
    "LevelDecision",
    "as_ratio_ci",
    "block_analysis",
    "decide_family",
    "decide_level",
    "family_text",
    "no_interval",
    "pair_summary",
    "summary_of",
]

_BLOCK_KEY = "replicate"


@dataclass(frozen=True)
class LevelDecision:
    """Every arm's TPOT decision at one load level.

    ``experiments`` maps each experiment to ``(ci, decision)`` at the level its Holm step
    (and look) settled it; ``aa`` is the A/A arm's own ``(ci, decision)`` at the family
    confidence of the last look (None without an A/A arm); ``blocks`` the block analysis
    at that confidence (noise components, degrees of freedom); ``bench_effect`` is a reason
    string when the A/A arm showed an effect (then no verdict of this level can be
    trusted), else None. ``family`` describes the Holm family (:func:`family_text`) and
    ``looks`` maps each experiment to the index of the look that settled it.
    """

    experiments: dict[str, tuple[RatioCI, Decision]]
    aa: tuple[RatioCI, Decision] | None
    blocks: BlockAnalysis | None
    bench_effect: str | None
    family: str = ""
    looks: dict[str, int] | None = None


def _usable(pairs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The pairs with a positive, finite ``metric`` on both sides, with a ``block`` column."""
    c = pd.to_numeric(pairs[f"{metric}_c"], errors="coerce").to_numpy(float)
    e = pd.to_numeric(pairs[f"{metric}_e"], errors="coerce").to_numpy(float)
    keep = np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)
    out = pairs[keep]
    labels = out["block"] if "block" in out else out[_BLOCK_KEY]
    return out.assign(block=labels.to_numpy())


def _decode_tokens(pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """Each side's decode tokens (output tokens less the first); None when unknown."""
    if "output_tokens_c" not in pairs or "output_tokens_e" not in pairs:
        return None
    kc = pd.to_numeric(pairs["output_tokens_c"], errors="coerce").to_numpy(float) - 1
    ke = pd.to_numeric(pairs["output_tokens_e"], errors="coerce").to_numpy(float) - 1
    return (ke, kc) if np.all(np.isfinite(kc) & np.isfinite(ke) & (kc > 0) & (ke > 0)) else None


def _drop_empty(summary: BlockSummary) -> BlockSummary | None:
    """The summary without arms that have no value in any block (a mix none of whose
    blocks holds every category); None when no arm is left."""
    keep = (summary.n_pairs > 0).any(axis=1)
    if keep.all():
        return summary
    if not keep.any():
        return None
    var = None if summary.pair_var is None else summary.pair_var[keep]
    arms = tuple(a for a, k in zip(summary.arms, keep, strict=True) if k)
    return replace(summary, arms=arms, mean=summary.mean[keep], n_pairs=summary.n_pairs[keep],
                   pair_var=var)  # fmt: skip


def pair_summary(
    pairs_by_arm: Mapping[str, pd.DataFrame],
    *,
    estimand: Estimand = Estimand.TRAFFIC,
    metric: str = "tpot_s",
    mix: Mapping[str, float] | None = None,
) -> BlockSummary | None:
    """Every arm's per-block log-ratio against the control, of the kind ``estimand`` names
    (:mod:`speclib.analysis.stats.block_summary`); None without usable pairs (or, for the
    token-weighted ratio, without every pair's output tokens).

    ``pairs_by_arm`` maps arm → its pairs with the control (columns ``{metric}_c``,
    ``{metric}_e`` and ``block``, else ``replicate``; ``output_tokens_c`` and
    ``output_tokens_e`` for :attr:`~speclib.core.estimand.Estimand.PER_TOKEN`, ``category``
    with a ``mix``). With ``mix`` (category → share of the user's traffic) each side's mean
    over a block is the share-weighted combination of its categories' means; the typical
    request has no value under a mix (None).
    """
    found = {a: _usable(p, metric) for a, p in pairs_by_arm.items() if len(p)}
    found = {a: p for a, p in found.items() if len(p)}
    if mix:
        found = {a: p.assign(category=p["category"].fillna("uncategorised").astype(str))
                 for a, p in found.items() if "category" in p}  # fmt: skip
    if not found or (mix and estimand is Estimand.TYPICAL):
        return None
    frame = pd.concat([p.assign(_arm=a) for a, p in found.items()], ignore_index=True)
    e = frame[f"{metric}_e"].to_numpy(float)
    c = frame[f"{metric}_c"].to_numpy(float)
    arm, block = frame["_arm"].to_numpy(), frame["block"].to_numpy()
    if estimand is Estimand.TYPICAL:
        return summarize_blocks(np.log(e / c), arm=arm, block=block)
    opts: dict[str, Any] = {"arm": arm, "block": block}
    if mix:
        opts.update(group=frame["category"].to_numpy(), shares=dict(mix))
    if estimand is Estimand.PER_TOKEN:
        tokens = _decode_tokens(frame)
        if tokens is None:
            return None
        opts.update(arm_tokens=tokens[0], control_tokens=tokens[1])
    return _drop_empty(summarize_mean_ratios(e, c, **opts))


def block_analysis(
    pairs_by_arm: Mapping[str, pd.DataFrame],
    *,
    aa_arm: str | None,
    confidence_level: float,
    metric: str = "tpot_s",
    estimand: Estimand = Estimand.TRAFFIC,
    mix: Mapping[str, float] | None = None,
) -> BlockAnalysis | None:
    """Block-level intervals of every arm against the control (None without pairs).

    ``pairs_by_arm`` maps arm → its pairs with the control (see :func:`pair_summary`, which
    also says what ``estimand`` and ``mix`` do; the verdict's estimand is the traffic's).
    With an A/A arm, each experiment is compared with the mean of the two control servers
    (the A/A arm's effect is 0 by construction), which averages two instance draws and
    narrows the interval; the A/A arm's own interval is against the control. Every interval
    uses only its own arm's block-to-block variance. ``metric`` names the columns
    (``{metric}_c``, ``{metric}_e``): the TTFT and E2E gates use the same model with
    ``"ttft_s"``, ``"e2e_s"``.
    """
    summary = pair_summary(pairs_by_arm, estimand=estimand, metric=metric, mix=mix)
    if summary is None:
        return None
    aa = aa_arm if aa_arm in summary.arms else None
    others = [a for a in summary.arms if a != aa]
    return block_ratio_cis(
        summary,
        aa_arm=aa,
        reference="controls" if aa and others else "control",
        confidence_level=confidence_level,
    )


def as_ratio_ci(
    ci: BlockArmCI, pairs: pd.DataFrame, metric: str = "tpot_s", *, mixed: bool = False
) -> RatioCI:
    """The block interval in the form the decision rule takes, with the pairs' medians
    (``median_delta``: median of ``{metric}_e - {metric}_c`` over pairs with both finite);
    ``mixed``: the interval is for a user's mix (said in its method).

    No Wilcoxon p-value: over pairs it would pool the blocks (pseudo-replication), and over
    a handful of block means it has no power; the interval is the evidence.
    """
    c = pd.to_numeric(pairs[f"{metric}_c"], errors="coerce").to_numpy(float)
    e = pd.to_numeric(pairs[f"{metric}_e"], errors="coerce").to_numpy(float)
    both = np.isfinite(c) & np.isfinite(e)
    var_between = var_within = None
    if ci.se_within_log is not None and math.isfinite(ci.se_log):
        var_within = ci.se_within_log**2 * max(ci.n_pairs, 1)
        var_between = max(ci.se_log**2 - ci.se_within_log**2, 0.0) * max(ci.n_blocks, 1)
    method = ci.method.replace("blocks (", "blocks (mix-weighted ", 1) if mixed else ci.method
    return RatioCI(
        estimate=ci.estimate,
        ci_low=ci.ci_low,
        ci_high=ci.ci_high,
        confidence_level=ci.confidence_level,
        method=method,
        n_pairs=ci.n_pairs,
        n_launches=ci.n_blocks,
        median_delta=float(np.median(e[both] - c[both])) if both.any() else math.nan,
        wilcoxon_p=None,
        between_launch_share=ci.instance_share,
        more_launches_help=ci.more_blocks_help,
        var_between=var_between,
        var_within=var_within,
        n_resamples=0,
        note=ci.note,
        df=ci.df,
        estimand=ci.estimand,
    )


MIX_NOTE = "fewer than two blocks hold every category of the mix: no interval"


def no_interval(
    pairs: pd.DataFrame, *, confidence_level: float, note: str,
    mix: Mapping[str, float] | None = None,
) -> RatioCI:  # fmt: skip
    """An undecidable traffic's ratio ``(0, inf)`` for pairs the block model cannot use,
    with why; its point estimate pools the blocks (NaN when even that has no value)."""
    pooled = pair_summary({"arm": pairs.assign(block=0)}, mix=mix) if len(pairs) else None
    estimate = math.exp(float(pooled.mean[0, 0])) if pooled is not None else math.nan
    return RatioCI(estimate, 0.0, math.inf, float(confidence_level), "blocks (none)",
                   len(pairs), 0, math.nan, None, None, None, None, None, 0, note, 0,
                   Estimand.TRAFFIC)  # fmt: skip


def _quiet_analysis(pairs_by_arm, aa_arm, level, mix=None) -> BlockAnalysis | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        return block_analysis(pairs_by_arm, aa_arm=aa_arm, confidence_level=level, mix=mix)


def family_text(keys: Sequence[tuple[Hashable, str]], *, confidence: float) -> str:
    """The Holm family in words, e.g. "Holm over 6 comparisons: 2 arms × 3 load levels"."""
    arms = len({a for _, a in keys})
    levels = len({lv for lv, _ in keys})
    shape = f"{arms} arm{'s' * (arms != 1)} × {levels} load level{'s' * (levels != 1)}"
    return (
        f"Holm step-down over {len(keys)} comparison{'s' * (len(keys) != 1)}: {shape} "
        f"(every experiment arm and sweep value at every load level; the A/A arm is not in "
        f"the family), family confidence {100 * confidence:.4g} %"
    )


def _before(pairs: pd.DataFrame, replicates: int | None) -> pd.DataFrame:
    if replicates is None or not len(pairs):
        return pairs
    return pairs[pd.to_numeric(pairs[_BLOCK_KEY], errors="coerce") < replicates]


def decide_family(
    pairs_by_level: Mapping[Hashable, Mapping[str, pd.DataFrame]],
    *,
    experiments: Sequence[str],
    aa_arm: str | None,
    confidence: float,
    margin: float,
    looks: Sequence[tuple[int, float]] | None = None,
    mix: Mapping[str, float] | None = None,
) -> dict[Hashable, LevelDecision]:
    """Decide every experiment at every load level, Holm over the whole family.

    ``pairs_by_level[level][arm]`` are the arm's pairs with the control at that level
    (see :func:`block_analysis`). Without ``looks`` the family is decided once at family
    confidence ``confidence``. With ``looks``, a sequence of ``(replicates, confidence)``
    (the replicates ``< replicates`` are seen at that look), the looks are replayed in
    order and a comparison settled at a look keeps that look's interval and decision; the
    last look's confidence is also the A/A arm's. With ``mix`` (category → share of the
    user's traffic) each experiment's interval is the traffic's ratio for that mix
    (:func:`pair_summary`; "no interval" where fewer than two blocks hold every category of
    it); the A/A arm's stays on the prompts as sent (it measures the bench). Returns one
    :class:`LevelDecision` per level that has pairs.
    """
    plan = [(None, confidence)] if not looks else [(int(r), float(c)) for r, c in looks]
    cache: dict[tuple[Any, Any, float, bool], BlockAnalysis | None] = {}

    def analysis_at(
        level: Hashable, reps: int | None, conf: float, mixed: bool = False
    ) -> BlockAnalysis | None:
        key = (level, reps, conf, mixed)
        if key not in cache:
            seen = {a: _before(p, reps) for a, p in pairs_by_level[level].items()}
            cache[key] = _quiet_analysis({a: p for a, p in seen.items() if len(p)}, aa_arm, conf,
                                         mix if mixed else None)  # fmt: skip
        return cache[key]

    def present(reps: int | None) -> list[tuple[Hashable, str]]:
        return [
            (lv, n)
            for lv, arms in pairs_by_level.items()
            for n in experiments
            if len(_before(arms.get(n, pd.DataFrame()), reps)) > 0
        ]

    settled: dict[tuple[Hashable, str], tuple[RatioCI, Decision]] = {}
    at_look: dict[tuple[Hashable, str], int] = {}
    for i, (reps, conf) in enumerate(plan):
        open_ = [k for k in present(reps) if k not in settled]
        if not open_:
            continue

        def compute_ci(key: tuple[Hashable, str], level: float, reps=reps) -> RatioCI:
            found = analysis_at(key[0], reps, level, bool(mix))
            pairs = _before(pairs_by_level[key[0]][key[1]], reps)
            if found is None or key[1] not in found.arms:  # no block holds the whole mix
                return no_interval(pairs, confidence_level=level, note=MIX_NOTE, mix=mix)
            return as_ratio_ci(found.arms[key[1]], pairs, mixed=bool(mix))

        out = holm_decide(compute_ci, open_, family_confidence=conf, margin=margin)
        last = i == len(plan) - 1
        for key, (ci, dec) in out.items():
            if dec.word != "inconclusive" or last:
                settled[key], at_look[key] = (ci, dec), i
    keys = list(settled)
    text = family_text(keys, confidence=plan[-1][1]) if keys else ""
    final_reps, final_conf = plan[-1]
    result: dict[Hashable, LevelDecision] = {}
    for lv in pairs_by_level:
        main = analysis_at(lv, final_reps, final_conf)
        aa, effect = _aa_gate(main, pairs_by_level[lv], aa_arm, final_reps, margin)
        mine = {n: settled[(lv, n)] for n in experiments if (lv, n) in settled}
        looks_of = {n: at_look[(lv, n)] for n in mine}
        result[lv] = LevelDecision(mine, aa, main, effect, text, looks_of)
    return result


def _aa_gate(main, pairs_by_arm, aa_arm, reps, margin):
    """The A/A arm's own ``(ci, decision)`` and the bench-effect reason (or None).

    The decision is the rule's word with the bench check as its reason
    (:meth:`speclib.analysis.verdict.resolution.BenchCheck.decision`)."""
    if not (aa_arm and main is not None and main.aa is not None):
        return None, None
    ci = as_ratio_ci(main.aa, _before(pairs_by_arm[aa_arm], reps))
    decision = bench_check(ci, margin=margin).decision()
    if decision.word not in ("adopt", "worse"):
        return (ci, decision), None
    return (ci, decision), (
        f"the A/A arm (a second copy of the control) measured ratio {ci.estimate:.3f} "
        f"[{ci.ci_low:.3f}, {ci.ci_high:.3f}] and was decided '{decision.word}' although "
        "no effect exists: this bench's noise is larger than its intervals admit"
    )


def decide_level(
    pairs_by_arm: Mapping[str, pd.DataFrame],
    *,
    experiments: Sequence[str],
    aa_arm: str | None,
    confidence: float,
    margin: float,
) -> LevelDecision:
    """Decide every experiment (Holm across them) and the A/A arm at one load level.

    The family is this level's experiments only; :func:`decide_family` decides several
    load levels as one family (what ``speclib analyze`` does).
    """
    found = decide_family({0: pairs_by_arm}, experiments=experiments, aa_arm=aa_arm,
                          confidence=confidence, margin=margin)  # fmt: skip
    return found[0]


def summary_of(result: LevelDecision) -> dict[str, Any]:
    """JSON-safe summary of the level's block analysis and A/A arm (for ``summary.json``)."""
    out: dict[str, Any] = {"bench_effect": result.bench_effect}
    if result.blocks is not None:
        out["blocks"] = result.blocks.to_dict()
    if result.aa is not None:
        ci, decision = result.aa
        out["aa"] = {
            "ci": ci.to_dict(),
            "decision": decision.word,
            "reason": decision.reason,
            "bench_check": bench_check(ci, margin=decision.margin).to_dict(),
        }
    return out
