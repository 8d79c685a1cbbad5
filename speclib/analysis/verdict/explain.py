"""What a comparison says about the speculation itself: acceptance and the why.

:func:`acceptance_summary` sums an arm's acceptance per request and from its launches'
``/metrics`` deltas (with the reconciliation of the two); :func:`explain_speedup` splits
the measured speed-up into tokens per verify step and step cost and, when the draft cost
``c`` is known independently (:func:`draft_cost`: the draft served alone; an MTP layer's
modelled from the weights a guess reads), sets the standard model's prediction beside it
(:mod:`speclib.analysis.speculation.why`).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pandas as pd

from speclib.analysis.frames import pair_frame
from speclib.analysis.speculation.acceptance import request_acceptance, sum_counters
from speclib.analysis.speculation.drafting import (
    DraftedShare,
    drafted_share,
    request_drafting,
    stream_check,
)
from speclib.analysis.speculation.launches import LaunchMetrics
from speclib.analysis.speculation.why import (
    DraftCost,
    WhySpeedup,
    explain,
    paired_stream_factors,
    stream_steps,
)
from speclib.analysis.stats.paired import RatioCI
from speclib.analysis.verdict.pairs import geo_ratio, pair_ratio_ci
from speclib.params.experiment import ExperimentParams

__all__ = [
    "acceptance_summary",
    "arm_drafting",
    "draft_cost",
    "explain_speedup",
    "implausible_count",
    "mtp_draft_cost",
    "plausibility_dict",
    "unscored_reason",
    "why_by_category",
]


def plausibility_dict(p: Any) -> dict[str, Any] | None:
    if p is None:
        return None
    keep = (
        "word",
        "implausible",
        "estimate",
        "ci_low",
        "ci_high",
        "confidence_level",
        "margin_nats",
        "n_prompts",
        "mean_logprob_control",
        "mean_logprob_experiment",
        "n_degenerate_control",
        "n_degenerate_experiment",
        "n_outside_control",
        "n_outside_experiment",
        "nucleus_p_value",
        "reason",
    )
    return {k: getattr(p, k, None) for k in keep}


def acceptance_summary(exp_df: pd.DataFrame, lms: list[LaunchMetrics]) -> dict[str, Any]:
    ok = exp_df[exp_df["ok"].astype(bool)]
    per_req = [request_acceptance(s) for s in ok["spec"] if isinstance(s, dict)]
    with_drafts = [r for r in per_req if r.rate is not None]
    counters = [m.spec for m in lms if m.spec is not None]
    total = sum_counters(counters)
    recs = [m.reconciliation for m in lms if m.reconciliation is not None]
    return {
        "requests_with_metrics": len(per_req),
        "requests_without_drafts": sum(r.no_drafts for r in per_req),
        "per_request_median_rate": statistics.median([r.rate for r in with_drafts])
        if with_drafts
        else None,
        "per_request_median_mean_length": statistics.median(
            [r.mean_length for r in with_drafts if r.mean_length is not None]
        )
        if with_drafts
        else None,
        "metrics_acceptance_rate": total.acceptance_rate if total else None,
        "metrics_mean_acceptance_length": total.mean_acceptance_length if total else None,
        "metrics_per_position_rate": list(total.per_position_rate or []) if total else None,
        "metrics_counters": total.to_dict() if total else None,
        "reconciled": all(r.matches for r in recs) if recs else None,
        "reconciliation_notes": sorted({r.explanation for r in recs if r.explanation}),
        "stream": stream_check(
            [request_drafting(c, s if isinstance(s, dict) else None) for c, s in _streams(ok)],
            [m.drafting for m in lms if m.drafting is not None],
        ).to_dict(),
    }


def _streams(rows: pd.DataFrame) -> list[tuple[Any, Any]]:
    """``(chunk_tokens, spec)`` of each row (an empty stream where the frame has none)."""
    if not len(rows) or "chunk_tokens" not in rows:
        return []
    specs = rows["spec"] if "spec" in rows else [None] * len(rows)
    return list(zip(rows["chunk_tokens"], specs, strict=True))


def draft_cost(
    df: pd.DataFrame,
    params: ExperimentParams,
    name: str,
    method: str | None,
    salt: int,
    launches: list[LaunchMetrics] | None = None,
) -> tuple[DraftCost | None, str | None]:
    """``c`` from the draft served alone (its TPOT over the control's), for MTP modelled from
    the weights a guess reads (:func:`mtp_draft_cost`), or why there is none."""
    if method == "mtp":
        return mtp_draft_cost(launches or [])
    arm = params.draft_cost_arms.get(name)
    if arm is None:
        if method == "draft_model":
            return (
                None,
                "set analysis.measure_draft_cost: true to serve the draft alone and measure c",
            )
        if method == "ngram":
            return None, None
        return None, f"the draft of method {method!r} cannot be served alone to measure c"
    pairs = pair_frame(df, control=params.control_name, experiment=arm).pairs
    ci = (
        pair_ratio_ci(pairs, "tpot_s", params.analysis.confidence, params.analysis, salt)
        if len(pairs)
        else None
    )
    if ci is None or not math.isfinite(ci.estimate):
        return None, f"the draft-alone arm {arm!r} gave no usable pairs (see its launch)"
    source = f"draft served alone: its TPOT over the target's, {ci.n_pairs} paired prompts"
    return DraftCost(ci.estimate, source, (ci.ci_low, ci.ci_high)), None


def mtp_draft_cost(launches: list[LaunchMetrics]) -> tuple[DraftCost | None, str | None]:
    """An MTP arm's ``c``, modelled (not timed: vLLM cannot serve an MTP layer alone) from
    what one guess reads against a target step, as its launches recorded it
    (:mod:`speclib.analysis.speculation.mtp_cost`); or why there is none."""
    weights = next((m.mtp_weights for m in launches if m.mtp_weights), None)
    if weights is None:
        return None, (
            "an MTP layer cannot be served alone to measure c, and its launches recorded no "
            "weights count of the checkpoint to model it"
        )
    source = (
        "modelled, not timed: an MTP guess runs one MTP module "
        f"({weights['mtp_module_params'] / 1e6:,.1f} M parameters) and the LM head "
        f"({weights['head_params'] / 1e6:,.1f} M) on the target's own hidden state, against "
        f"{weights['target_params'] / 1e6:,.1f} M a target step reads; no draft model, "
        "a decode step priced by the weights it reads"
    )
    return DraftCost(float(weights["c"]), source), None


def arm_drafting(
    df: pd.DataFrame, name: str, pairs: pd.DataFrame, lms: list[LaunchMetrics]
) -> DraftedShare | None:
    """The share of the experiment's decode steps that had a draft, over its requests of the
    pairs' load level(s) (:func:`speclib.analysis.speculation.drafting.drafted_share`)."""
    levels = set(pairs["level"]) if "level" in pairs else set()
    rows = df[(df["series"] == name) & df["level"].isin(levels) & df["ok"].astype(bool)]
    reqs = [request_drafting(c, s if isinstance(s, dict) else None) for c, s in _streams(rows)]
    return drafted_share(reqs, [m.drafting for m in lms if m.drafting is not None])


def explain_speedup(
    df: pd.DataFrame,
    params: ExperimentParams,
    name: str,
    pairs: pd.DataFrame,
    acc: dict[str, Any],
    tpot: RatioCI | None,
    salt: int,
    launches: list[LaunchMetrics] | None = None,
) -> WhySpeedup | None:
    """The measured decomposition of the speed-up, and the model's prediction when ``c`` is
    known independently (:mod:`speclib.analysis.speculation.why`). The decomposition's
    factors are geometric means over the pairs, so the ratio it is checked against is the
    typical request's (:attr:`speclib.core.estimand.Estimand.TYPICAL`), not the traffic's
    ``tpot``."""
    spec_cfg = params.series_by_name(name).speculative_config or {}
    if not spec_cfg or tpot is None or not (tpot.estimate > 0) or not len(pairs):
        return None
    from_counters = acc.get("metrics_mean_acceptance_length")
    tokens = from_counters or acc.get("per_request_median_mean_length")
    method = spec_cfg.get("method")
    cost, reason = draft_cost(df, params, name, method, salt, launches)
    sides = {
        side: [
            stream_steps(o, t)
            for o, t in zip(
                pairs[f"chunk_offsets_s_{side}"], pairs[f"chunk_tokens_{side}"], strict=True
            )
        ]
        for side in ("c", "e")
    }
    return explain(
        method=method,
        k=spec_cfg.get("num_speculative_tokens"),
        stream_factors=paired_stream_factors(sides["c"], sides["e"]),
        measured_speedup=1 / (geo_ratio(pairs, "tpot_s") or tpot.estimate),
        verify_tokens=tokens,
        verify_tokens_source="/metrics counters" if from_counters else "per-request metrics",
        drafting=arm_drafting(df, name, pairs, launches or []),
        acceptance_rate=acc.get("metrics_acceptance_rate"),
        draft_cost=cost,
        no_cost_reason=reason,
    )


def why_by_category(pairs: pd.DataFrame) -> dict[str, dict[str, float | int]]:
    """Per prompt category, the measured decomposition of the speed-up from the streams of
    its paired prompts (:func:`speclib.analysis.speculation.why.paired_stream_factors`):
    tokens per decode step, a step's cost over a plain one, their quotient (the speed-up
    they make) and the pairs used. At c=1 a chunk is one engine step, so this is what each
    kind of prompt lets the draft accept, and what a step costs, read apart."""
    if not len(pairs) or "category" not in pairs or "chunk_offsets_s_c" not in pairs:
        return {}
    out: dict[str, dict[str, float | int]] = {}
    for cat in sorted(set(pairs["category"].dropna().astype(str))):
        mine = pairs[pairs["category"].astype(str) == cat]
        sides = [
            [stream_steps(o, t) for o, t in
             zip(mine[f"chunk_offsets_s_{side}"], mine[f"chunk_tokens_{side}"], strict=True)]
            for side in ("c", "e")
        ]  # fmt: skip
        factors = paired_stream_factors(sides[0], sides[1])
        if factors is not None:
            tokens, cost, n = factors
            out[cat] = {"tokens_per_step": tokens, "step_cost": cost,
                        "speedup": tokens / cost, "n_pairs": n}  # fmt: skip
    return out


def unscored_reason(params: ExperimentParams, plaus: Any) -> str | None:
    """Why a sampled run's outputs are of unknown correctness (None: scored, or greedy)."""
    if params.workload.temperature == 0.0 or params.analysis.score_outputs == "off":
        return None
    if plaus is None:
        return "the sampling check did not score this series' outputs"
    return None


def implausible_count(p: Any) -> int:
    """Outputs the sampling check flags: degenerate ones, at least one if the series is."""
    if p is None:
        return 0
    n = int(getattr(p, "n_degenerate_experiment", 0) or 0)
    return max(n, 1) if getattr(p, "implausible", False) else n
