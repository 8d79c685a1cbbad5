"""Scores of sampled outputs under the target: the per-position maths and the nucleus test.

:func:`expected_logprob` is ``E_q[log p]`` at one position for a correct sampler at the
run's temperature and top-p, and :func:`outside_nucleus` whether a token lies certainly
outside the top-p nucleus (both used by :mod:`speclib.run.scoring` when it scores outputs).
Over a run's scores (:mod:`speclib.core.scores`), :func:`per_prompt_means` averages one
metric per prompt, and :func:`nucleus_test` is the sign test over prompts of outputs
outside the nucleus in the experiment only against the control only. The plausibility
comparison built on them is :mod:`speclib.analysis.speculation.sampling`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from speclib.core.scores import OutputScore

__all__ = [
    "NUCLEUS_TOLERANCE",
    "expected_logprob",
    "n_outside",
    "nucleus_reason",
    "nucleus_test",
    "outside_nucleus",
    "outside_per_prompt",
    "per_prompt_means",
    "score_value",
]


NUCLEUS_TOLERANCE = 0.005
"""Tempered mass by which a token must miss the nucleus to count as outside it."""


def expected_logprob(logprobs: Sequence[float], *, temperature: float, top_p: float) -> float:
    """``E_q[log p]`` at one position, from the target's top-K log-probs ``log p``.

    ``q`` is what a correct sampler draws from: ``p ** (1 / temperature)`` renormalised over
    the given tokens, then cut to the smallest most-likely set holding ``top_p`` of it (the
    token that crosses ``top_p`` is kept) and renormalised. Mass outside the top-K is
    ignored, so K must cover the nucleus (it does when the top-K hold most of the mass).
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    z = lp / temperature
    w = np.exp(z - z.max())
    w /= w.sum()
    order = np.argsort(-w, kind="stable")
    ws = w[order]
    keep = (np.cumsum(ws) - ws) < top_p
    q = ws[keep] / ws[keep].sum()
    return float(np.dot(q, lp[order][keep]))


def outside_nucleus(
    top_logprobs: Sequence[float],
    logprob: float,
    *,
    temperature: float,
    top_p: float,
    tolerance: float = NUCLEUS_TOLERANCE,
) -> bool:
    """Whether a token of log-prob ``logprob`` lies *certainly* outside the top-p nucleus.

    ``top_logprobs`` are the target's ``K`` largest log-probs at the position (the token's
    own among them or not). A correct sampler at ``temperature`` and ``top_p`` draws only
    from the smallest most-likely set whose tempered mass reaches ``top_p`` (vLLM keeps a
    token while the tempered mass of the tokens more likely than it is below ``top_p``), so
    speculation that keeps the target's distribution never emits a token outside it. With
    only the top ``K`` known, the tempered mass of the other tokens is bounded above by
    ``R · p_K ** (1/T − 1)`` (``R`` their untempered mass, ``p_K`` the smallest top-K
    probability; valid for ``T <= 1``), so the mass above the token is bounded below; the
    token is outside when that bound reaches ``top_p + tolerance`` (the tolerance absorbs
    float32 differences between the sampling pass and the scoring pass). ``False`` means
    inside or undecidable: up to the tolerance, a token the full distribution keeps is
    never called outside (sampling options beyond temperature and top-p, e.g. penalties,
    change the nucleus for both series alike, hence the comparison with the control).
    """
    if not (0 < temperature <= 1):
        raise ValueError(f"`temperature` must be in (0, 1] (got {temperature!r})")
    top = np.sort(np.asarray(top_logprobs, dtype=np.float64))[::-1]
    if top.size == 0 or top_p >= 1:
        return False
    inv = 1.0 / temperature
    weights = np.exp(top * inv)
    rest = max(0.0, 1.0 - float(np.exp(top).sum()))
    bound = rest * math.exp(float(top[-1]) * (inv - 1.0))
    above = float(weights[top > logprob].sum())
    return above / (float(weights.sum()) + bound) >= top_p + tolerance


def score_value(score: OutputScore, metric: str) -> float | None:
    return getattr(score, metric) if score.ok else None


def per_prompt_means(scores: list[OutputScore], series: str, metric: str) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for s in scores:
        v = score_value(s, metric)
        if s.series == series and v is not None:
            groups[s.prompt_id].append(float(v))
    return {pid: float(np.mean(v)) for pid, v in groups.items()}


def outside_per_prompt(scores: list[OutputScore], series: str) -> dict[str, bool]:
    """Per prompt: whether any checked output of the series has a token outside the nucleus
    (the counts are never negative, so their per-prompt mean is positive exactly then)."""
    return {pid: v > 0 for pid, v in per_prompt_means(scores, series, "n_outside_nucleus").items()}


def n_outside(scores: list[OutputScore], series: str) -> int | None:
    """Outputs of the series with a token outside the nucleus; None when none was checked."""
    values = (score_value(s, "n_outside_nucleus") for s in scores if s.series == series)
    counts = [v for v in values if v is not None]
    return sum(v > 0 for v in counts) if counts else None


def nucleus_test(
    scores: list[OutputScore], control: str, experiment: str
) -> tuple[int, int, float | None]:
    """Sign test over prompts: outputs outside the nucleus in the experiment only vs control only.

    A correct sampler never draws such a token, so a series that does on significantly more
    prompts than the control is not sampling from the target's distribution.
    """
    oc, oe = outside_per_prompt(scores, control), outside_per_prompt(scores, experiment)
    paired = set(oc) & set(oe)
    b = sum(oe[p] and not oc[p] for p in paired)
    c = sum(oc[p] and not oe[p] for p in paired)
    if not paired:
        return b, c, None
    from scipy import stats  # here: the scoring step imports this module without needing it

    p = stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue if b + c else 1.0
    return b, c, float(p)


def nucleus_reason(b: int, c: int, p: float | None, level: float) -> str:
    if p is None:
        return ""
    verdict = (
        "the experiment draws tokens a correct sampler never draws"
        if p < 1 - level
        else "no evidence of tokens outside the nucleus beyond the control's"
    )
    return (
        f"; top-p nucleus: {b} prompt(s) with tokens outside it in the experiment only, "
        f"{c} in the control only (sign test p = {p:.2g}): {verdict}"
    )
