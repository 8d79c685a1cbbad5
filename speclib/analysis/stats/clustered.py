"""The two-stage (launch-clustered) bootstrap behind
:func:`speclib.analysis.stats.paired.paired_ratio_ci`.

When the pairs come from two or more launches (server replicates), the interval of the mean
log-ratio comes from a two-stage bootstrap that resamples launches with replacement, then
pairs with replacement within each resampled launch. Resampling at both stages counts the
within-launch variance twice and resampling L launches shrinks the between part by
(L - 1) / L (Davison & Hinkley 1997, §3.8), so before resampling the launch means are
shrunk and the within-launch residuals inflated so that the bootstrap variance of the mean
matches the one-way random-effects ANOVA estimate. The percentile interval of that
distribution is then widened by ``t[L-1] / z``, because the launch-to-launch variance is
estimated from only L launches. Without that widening the interval under-covers badly with
3-8 launches. In simulations (30 pairs per launch, log-normal TPOT) the 95 % interval
covered the true ratio in 94-96 % of experiments when launch noise dominates, and is
conservative (97-100 %) when it is small or when there are only 2-3 launches: two launches
cannot measure launch-to-launch variation, so their interval is very wide, and the decision
then asks for more launches.

Everything works on launches padded into an ``(..., L, M)`` array (:func:`padded_by_launch`)
and accepts leading batch axes, so tests run hundreds of simulated experiments at once
through the very routine the public function uses (:func:`two_stage_interval`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from speclib.analysis.stats.t_interval import t_critical

__all__ = ["cluster_codes", "padded_by_launch", "two_stage_interval", "widen"]

_MAX_BLOCK_ELEMENTS = 2_000_000  # bound on memory per resampling block (floats)


def cluster_codes(clusters: ArrayLike | None, n: int) -> NDArray[np.intp]:
    """Integer launch codes 0..L-1, one per pair (all zero when ``clusters`` is None)."""
    if clusters is None:
        return np.zeros(n, dtype=np.intp)
    labels = np.asarray(clusters)
    if labels.ndim != 1 or labels.size != n:
        raise ValueError(f"`clusters` must hold one label per pair ({n}); got shape {labels.shape}")
    if labels.dtype.kind == "f" and np.any(np.isnan(labels)):
        raise ValueError("`clusters` must not hold missing (NaN) labels")
    if labels.dtype == object and any(v is None for v in labels):
        raise ValueError("`clusters` must not hold missing (None) labels")
    try:
        _, codes = np.unique(labels, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"`clusters` labels must be comparable ({exc})") from None
    return codes.astype(np.intp)


def padded_by_launch(
    values: NDArray[np.float64], codes: NDArray[np.intp]
) -> tuple[NDArray, NDArray]:
    """Arrange values by launch: ``(L, M)`` array padded with NaN, and launch sizes ``(L,)``."""
    sizes = np.bincount(codes)
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    col = np.arange(codes.size) - np.repeat(starts, sizes)
    y = np.full((sizes.size, sizes.max()), np.nan)
    y[codes[order], col] = values[order]
    return y, sizes


def _anova(y: NDArray, sizes: NDArray) -> dict[str, NDArray]:
    """One-way random-effects ANOVA over padded launches; works on leading batch axes.

    Returns the pair-weighted grand mean, launch means, mean squares between (``msb``) and
    within (``msw``), the effective launch size ``n0`` and the variance components
    ``var_between = max(0, (msb - msw) / n0)`` and ``var_within = msw``.
    """
    n_launch = sizes.shape[-1]
    n_total = sizes.sum(axis=-1)
    mask = np.arange(y.shape[-1]) < sizes[..., None]
    sums = np.where(mask, y, 0.0).sum(axis=-1)
    means = sums / sizes
    grand = sums.sum(axis=-1) / n_total
    resid = np.where(mask, y - means[..., None], 0.0)
    ss_within = (resid**2).sum(axis=(-1, -2))
    ss_between = (sizes * (means - grand[..., None]) ** 2).sum(axis=-1)
    df_within = n_total - n_launch
    msw = np.divide(ss_within, df_within, out=np.zeros_like(ss_within), where=df_within > 0)
    msb = ss_between / max(n_launch - 1, 1)
    n0 = (n_total - (sizes**2).sum(axis=-1) / n_total) / max(n_launch - 1, 1)
    var_between = np.maximum(0.0, (msb - msw) / n0)
    return {
        "grand": grand, "means": means, "resid": resid, "msb": msb, "msw": msw,
        "var_between": var_between, "var_within": msw, "mask": mask,
    }  # fmt: skip


def _shrunk(y: NDArray, sizes: NDArray, a: dict[str, NDArray]) -> NDArray:
    """Shrink launch means and inflate residuals so two-stage resampling is unbiased.

    Values become ``grand + c * (mean_k - grand) + d_k * (y - mean_k)`` with
    ``d_k = sqrt(n_k / (n_k - 1))`` and ``c**2 = L / (L - 1) * max(0, 1 - msw / msb)``:
    then the two-stage bootstrap variance of the mean is ``msb / N`` (balanced launches),
    the unbiased ANOVA estimate, instead of roughly ``(L - 1) / L * msb / N + msw / N``.
    """
    n_launch = sizes.shape[-1]
    ratio = np.divide(a["msw"], a["msb"], out=np.ones_like(a["msb"]), where=a["msb"] > 0)
    c = np.sqrt(n_launch / (n_launch - 1) * np.maximum(0.0, 1.0 - ratio))
    d = np.sqrt(np.divide(sizes, sizes - 1, out=np.ones(sizes.shape), where=sizes > 1))
    centre = a["grand"][..., None] + c[..., None] * (a["means"] - a["grand"][..., None])
    out = centre[..., None] + d[..., None] * a["resid"]
    return np.where(a["mask"], out, np.nan)


# ------------------------------------------------------------------------ resampling


def _two_stage_means(
    y: NDArray, sizes: NDArray, n_resamples: int, rng: np.random.Generator
) -> NDArray:
    """Bootstrap means of padded launches ``y (..., L, M)``; returns ``(..., n_resamples)``.

    Each resample draws L launches with replacement, then, inside each drawn launch of size
    n_k, n_k pairs with replacement; the statistic is the pair-weighted mean. Resamples are
    drawn in blocks of bounded memory.
    """
    n_launch, width = y.shape[-2:]
    batch = y.shape[:-2]
    n_batch = int(np.prod(batch, dtype=np.int64))
    block = max(1, _MAX_BLOCK_ELEMENTS // max(1, n_batch * n_launch * width))
    offset = (np.arange(n_batch) * (n_launch * width)).reshape((*batch, 1, 1, 1))
    values = y.ravel()
    balanced = bool(np.all(sizes == width))
    out = []
    for start in range(0, n_resamples, block):
        b = min(block, n_resamples - start)
        pick = rng.integers(0, n_launch, size=(*batch, b, n_launch))
        n_k = np.take_along_axis(sizes[..., None, :], pick, axis=-1)[..., None]
        if balanced:
            inner = rng.integers(0, width, size=(*batch, b, n_launch, width))
        else:
            inner = (rng.random((*batch, b, n_launch, width)) * n_k).astype(np.intp)
        drawn = values[offset + pick[..., None] * width + inner]
        if not balanced:
            drawn = np.where(np.arange(width) < n_k, drawn, 0.0)
        out.append(drawn.sum(axis=(-1, -2)) / n_k.sum(axis=(-1, -2)))
    return np.concatenate(out, axis=-1)


def widen(
    est: NDArray, low: NDArray, high: NDArray, factor: NDArray | float
) -> tuple[NDArray, NDArray]:
    """Scale both distances from the estimate by ``factor`` (Student-t expansion).

    Also the expansion of the one-stage percentile interval in :mod:`speclib.analysis.stats.paired`.
    """
    return est - factor * (est - low), est + factor * (high - est)


def two_stage_interval(
    y: NDArray,
    sizes: NDArray,
    *,
    confidence_level: float,
    n_resamples: int,
    rng: np.random.Generator,
) -> tuple[NDArray, NDArray, NDArray, dict[str, NDArray]]:
    """Two-stage cluster bootstrap CI of the mean over padded launches (batch-capable).

    Returns ``(estimate, low, high, anova)`` on the input (log) scale, where ``anova`` holds
    the variance components (``var_between``, ``var_within``). :func:`paired_ratio_ci`
    uses exactly this routine for clustered data; tests call it on batches of simulated
    experiments.
    """
    n_launch = sizes.shape[-1]
    if n_launch < 2:
        raise ValueError("`clusters` must name at least two launches for the two-stage bootstrap")
    a = _anova(y, sizes)
    boot = _two_stage_means(_shrunk(y, sizes, a), sizes, n_resamples, rng)
    alpha = 1.0 - confidence_level
    low, high = np.quantile(boot, [alpha / 2, 1 - alpha / 2], axis=-1)
    factor = t_critical(n_launch - 1, confidence_level=confidence_level) / stats.norm.ppf(
        1 - alpha / 2
    )
    low, high = widen(a["grand"], low, high, factor)
    return a["grand"], low, high, a
