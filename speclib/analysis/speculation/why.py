"""Why this speed-up: a measured decomposition, and an independent prediction when one exists.

Speculative decoding wins when each verify step yields more tokens than it costs plain decode
steps. :func:`median_step_time` measures a step from the stream itself (at closed-loop c=1
each token-bearing chunk is one engine step); :func:`explain` splits the measured speed-up
into *tokens per verify step* (from the ``/metrics`` counters) ÷ *step cost* (a verify step's
time over a plain step's, from the chunk timings). Both factors are measured, and their
quotient is checked against the measured TPOT ratio of the typical request (both are
geometric means over the paired prompts; the traffic's ratio, the verdict's, is another
figure: :mod:`speclib.core.estimand`).

The standard model (Leviathan, Kalman & Matias 2023) predicts the speed-up from the
acceptance ``α`` and the draft cost ``c``. ``c`` must not come from the same timings, or the
"prediction" reproduces the measurement by construction: it is 0 for an n-gram lookup by
definition, and for a draft model it is measured by serving the draft alone
(``analysis.measure_draft_cost``). The gap between the model's step cost ``1 + k·c`` and the
measured one is named: verifying ``k + 1`` positions, and the scheduling around it, is what
the model leaves out.

Every decode step counts, drafted or not. vLLM's acceptance counters (and the mean acceptance
length read from them) cover only the steps that had a draft; a step whose proposer found
nothing (an n-gram lookup without a match) yields one token at a plain step's cost and is
invisible to them. The share of decode steps that had a draft
(:mod:`speclib.analysis.speculation.drafting`: per-request metrics, else ``num_drafts`` over the
streams' decode steps) weighs the model: tokens per step ``s·E[accepted + 1 | drafted] +
(1 − s)``, cost per step ``s·(1 + k·c) + (1 − s)·1`` (an undrafted step costs a plain step
plus the proposer's lookup, 0 for n-gram). Without that share there is no prediction, never
one that silently assumes every step was drafted. Pure functions over numbers; no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from speclib.analysis.speculation.drafting import DraftedShare
from speclib.analysis.speculation.speedup import alpha_from_mean_length, expected_tokens_per_step
from speclib.core.wording import ratio_words

__all__ = [
    "Decomposition",
    "DraftCost",
    "Prediction",
    "WhySpeedup",
    "explain",
    "paired_stream_factors",
    "stream_steps",
]


def stream_steps(
    offsets: Sequence[float] | None, tokens: Sequence[int] | None
) -> tuple[float, float] | None:
    """``(mean step time, tokens per step)`` of one request's stream after its first chunk.

    At closed-loop c=1 each token-bearing chunk is one engine step, so the time from the
    first to the last chunk over the number of later chunks is the mean decode step, and the
    tokens those chunks carried over their count is the tokens per step. Their quotient is
    the request's TPOT. ``None`` with fewer than two chunks.
    """
    if not offsets or not tokens or len(offsets) < 2 or len(offsets) != len(tokens):
        return None
    n = len(offsets) - 1
    span = float(offsets[-1]) - float(offsets[0])
    if not (math.isfinite(span) and span > 0):
        return None
    return span / n, sum(int(t) for t in tokens[1:]) / n


def paired_stream_factors(
    control: Iterable[tuple[float, float] | None],
    experiment: Iterable[tuple[float, float] | None],
) -> tuple[float, float, int] | None:
    """Geometric means over paired prompts of the experiment's tokens per step and of its
    step time over the control's, and the number of pairs used.

    Per pair, TPOT ratio = step-time ratio ÷ tokens per step (the control carries one token
    per step), so the geometric means multiply back to the geometric-mean TPOT ratio.
    """
    tps, cost = [], []
    for c, e in zip(control, experiment, strict=True):
        if c is None or e is None or c[1] <= 0 or e[1] <= 0:
            continue
        tps.append(math.log(e[1] / c[1]))
        cost.append(math.log(e[0] / c[0]))
    if not tps:
        return None
    return math.exp(statistics.fmean(tps)), math.exp(statistics.fmean(cost)), len(tps)


@dataclass(frozen=True)
class Decomposition:
    """Measured: speed-up = tokens per step ÷ step cost (a step's time over a plain one's).

    ``tokens_per_step`` and ``step_cost`` are geometric means over paired prompts from the
    streams, over every decode step. ``verify_tokens`` is the tokens per step *that carried
    a draft* (the mean acceptance length, bonus token included) and ``acceptance_rate`` its
    accepted over proposed drafts; ``drafted_share`` is the share of decode steps that had a
    draft (below 1 when, e.g., an n-gram lookup finds no match), out of ``decode_steps``
    (``drafted_steps`` of them), from ``drafted_share_source``; ``requests_drafted`` of
    ``n_requests`` requests got drafts. None where nothing says it.
    """

    tokens_per_step: float
    step_cost: float
    n_pairs: int
    decomposed_speedup: float
    measured_speedup: float
    verify_tokens: float | None
    verify_tokens_source: str
    drafted_share: float | None
    acceptance_rate: float | None = None
    decode_steps: int | None = None
    drafted_steps: float | None = None
    undrafted_share: float | None = None
    drafted_share_source: str | None = None
    requests_drafted: int | None = None
    n_requests: int | None = None


@dataclass(frozen=True)
class DraftCost:
    """The draft cost ``c`` and where it comes from (never the speculative timings)."""

    c: float
    source: str
    ci: tuple[float, float] | None = None


@dataclass(frozen=True)
class Prediction:
    """The standard model's speed-up from the measured ``α`` and an independent ``c``."""

    alpha: float
    k: int
    cost: DraftCost
    drafted_share: float
    predicted_speedup: float
    predicted_range: tuple[float, float] | None
    best_k: int
    speedup_best_k: float
    model_step_cost: float
    verify_overhead: float | None


@dataclass(frozen=True)
class WhySpeedup:
    """The report's "why" for one experiment: what was measured, what the model says."""

    decomposition: Decomposition | None
    prediction: Prediction | None
    no_prediction: str | None
    summary: str


def _decompose(
    factors: tuple[float, float, int] | None,
    verify_tokens: float | None,
    verify_tokens_source: str,
    drafting: DraftedShare | None,
    measured_speedup: float,
    acceptance_rate: float | None,
) -> Decomposition | None:
    if factors is None:
        return None
    tokens, cost, n = factors
    d = drafting
    return Decomposition(
        tokens_per_step=tokens,
        step_cost=cost,
        n_pairs=n,
        decomposed_speedup=tokens / cost,
        measured_speedup=measured_speedup,
        verify_tokens=verify_tokens,
        verify_tokens_source=verify_tokens_source,
        drafted_share=d.drafted_share if d else None,
        acceptance_rate=acceptance_rate,
        decode_steps=d.decode_steps if d else None,
        drafted_steps=d.drafted_steps if d else None,
        undrafted_share=d.undrafted_share if d else None,
        drafted_share_source=d.source if d else None,
        requests_drafted=d.requests_drafted if d else None,
        n_requests=d.n_requests if d else None,
    )


def _model(alpha: float, k: int, c: float, share: float) -> tuple[float, float]:
    """(speed-up, step cost) of the model when only ``share`` of the steps carry drafts."""
    tokens = share * expected_tokens_per_step(alpha, k) + (1.0 - share)
    cost = share * (1.0 + k * c) + (1.0 - share)
    return tokens / cost, cost


def _predict(
    verify_tokens: float | None,
    drafted_share: float | None,
    k: int | None,
    cost: DraftCost | None,
    decomposition: Decomposition | None,
    k_range: Sequence[int],
) -> Prediction | None:
    if cost is None or not k or not verify_tokens or drafted_share is None:
        return None
    alpha = alpha_from_mean_length(min(max(verify_tokens, 1.0), k + 1.0), k)
    share = min(max(drafted_share, 0.0), 1.0)
    c = max(cost.c, 0.0)
    predicted, model_cost = _model(alpha, k, c, share)
    spread = None
    if cost.ci is not None:
        lo, hi = (max(x, 0.0) for x in cost.ci)
        spread = (_model(alpha, k, hi, share)[0], _model(alpha, k, lo, share)[0])
    curve = [(kk, _model(alpha, kk, c, share)[0]) for kk in k_range]
    best_k, best = max(curve, key=lambda kv: (kv[1], -kv[0]))
    return Prediction(
        alpha=alpha,
        k=k,
        cost=cost,
        drafted_share=share,
        predicted_speedup=predicted,
        predicted_range=spread,
        best_k=best_k,
        speedup_best_k=best,
        model_step_cost=model_cost,
        verify_overhead=decomposition.step_cost / model_cost if decomposition else None,
    )


def _measured_text(d: Decomposition) -> str:
    text = (
        f"Measured over {d.n_pairs} paired prompts: a decode step yields "
        f"{d.tokens_per_step:.2f} tokens and costs {d.step_cost:.2f}× a plain step → "
        f"{d.decomposed_speedup:.2f}× the speed (the typical request's measured TPOT "
        f"ratio, a geometric mean over the pairs as these factors are: "
        f"{ratio_words(1 / d.measured_speedup)})"
    )
    if d.undrafted_share is not None and d.decode_steps:
        text += (
            f". {d.undrafted_share:.0%} of decode steps had no draft "
            f"({d.decode_steps - (d.drafted_steps or 0):.0f} of {d.decode_steps}; "
            f"{d.drafted_share_source}"
        )
        if d.n_requests and d.drafted_share_source == "per-request metrics":
            text += f"; {d.requests_drafted} of {d.n_requests} requests got drafts"
        elif d.n_requests:
            text += f"; {d.requests_drafted} of {d.n_requests} requests streamed an accepted draft"
        text += ")"
    if d.verify_tokens is not None:
        text += "; on the drafted steps "
        if d.acceptance_rate is not None:
            text += f"acceptance was {d.acceptance_rate:.2f} and "
        text += f"a step yielded {d.verify_tokens:.2f} tokens ({d.verify_tokens_source})"
    return text


def _summary(d: Decomposition | None, p: Prediction | None, no_prediction: str | None) -> str:
    parts = [_measured_text(d)] if d is not None else []
    if p is not None:
        text = (
            f"Model (Leviathan et al. 2023) with α = {p.alpha:.2f} and c = {p.cost.c:.3f} "
            f"({p.cost.source}) predicts {p.predicted_speedup:.2f}× the speed"
        )
        if p.predicted_range is not None:
            low, high = p.predicted_range
            text += f" ({low:.2f}× to {high:.2f}× over c's CI)"
        text += f"; its best k is {p.best_k} ({p.speedup_best_k:.2f}× the speed)"
        parts.append(text)
        if p.verify_overhead is not None and d is not None:
            parts.append(
                f"Gap: the model prices a step at {p.model_step_cost:.2f} plain steps "
                f"(1 + k·c on drafted steps), the measured step costs {d.step_cost:.2f}: the "
                f"extra ×{p.verify_overhead:.2f} is verifying k + 1 = {p.k + 1} positions and "
                "the scheduling around it, which the model leaves out"
            )
    elif no_prediction:
        parts.append(f"No independent prediction: {no_prediction}")
    return ". ".join(parts) + "." if parts else ""


def explain(
    *,
    method: str | None,
    k: int | None,
    stream_factors: tuple[float, float, int] | None,
    measured_speedup: float,
    verify_tokens: float | None = None,
    verify_tokens_source: str = "/metrics counters",
    drafting: DraftedShare | None = None,
    acceptance_rate: float | None = None,
    draft_cost: DraftCost | None = None,
    no_cost_reason: str | None = None,
    k_range: Sequence[int] = tuple(range(1, 9)),
) -> WhySpeedup:
    """The measured decomposition and, when ``c`` and the drafted share are known, the
    prediction.

    ``stream_factors`` comes from :func:`paired_stream_factors`; ``measured_speedup`` is the
    control's TPOT over the experiment's (above 1 is a win); ``verify_tokens`` is the mean
    acceptance length on drafted steps (the drafting's own where it has one) and
    ``drafting`` the share of decode steps that had a draft
    (:func:`speclib.analysis.speculation.drafting.drafted_share`). For ``method == "ngram"`` the
    draft cost is 0 by definition; otherwise ``draft_cost`` must be measured elsewhere (the
    draft served alone), and ``no_cost_reason`` says why it is not.
    """
    if not (math.isfinite(measured_speedup) and measured_speedup > 0):
        raise ValueError(f"`measured_speedup` must be a positive number (got {measured_speedup!r})")
    ks = sorted({int(x) for x in k_range if int(x) >= 1})
    if not ks:
        raise ValueError("`k_range` must hold at least one positive integer")
    if drafting is not None and drafting.tokens_per_drafted_step is not None:
        verify_tokens = drafting.tokens_per_drafted_step
        verify_tokens_source = drafting.source
    d = _decompose(
        stream_factors,
        verify_tokens,
        verify_tokens_source,
        drafting,
        measured_speedup,
        acceptance_rate,
    )
    if method == "ngram" and draft_cost is None:
        draft_cost = DraftCost(0.0, "n-gram lookup: no model, c = 0 by definition")
    share = drafting.drafted_share if drafting is not None else None
    p = _predict(verify_tokens, share, k, draft_cost, d, ks)
    reason = None
    if p is None:
        reason = _no_prediction(verify_tokens, share, draft_cost, no_cost_reason)
    summary = _summary(d, p, reason)
    return WhySpeedup(decomposition=d, prediction=p, no_prediction=reason, summary=summary)


def _no_prediction(
    verify_tokens: float | None,
    share: float | None,
    cost: DraftCost | None,
    no_cost_reason: str | None,
) -> str:
    if cost is None:
        return no_cost_reason or "the draft cost c is unknown"
    if not verify_tokens:
        return "no acceptance counters"
    if share is None:
        return (
            "the share of decode steps that had a draft is unknown (no /metrics counters and "
            "no per-request spec metrics): the model cannot tell drafted steps from steps "
            "where the proposer found nothing"
        )
    return "k is unknown"
