"""Paired effect sizes and confidence intervals: is the experiment series faster than control?

This module turns matched per-prompt latencies (TPOT, and equally TTFT or end-to-end) of a
control series (target model, no speculation) and an experiment series (same target with a
draft model or n-gram speculation) into one frozen :class:`RatioCI`. It only computes; the
decision rule and the gates live in :mod:`speclib.analysis.verdict.decision`.

The effect is the geometric-mean ratio ``exp(mean(log(experiment / control)))``: below 1
means the experiment is faster. Its confidence interval comes from a bootstrap:

* without launch labels (or with a single launch): :func:`scipy.stats.bootstrap` with
  ``paired=True`` and BCa by default. When BCa cannot work (fewer than
  ``MIN_PAIRS_BCA`` pairs, all log-ratios equal, heavy ties, or non-finite bounds) it falls
  back to an *expanded* percentile interval (Hesterberg 2015: the distances from the
  estimate are scaled by ``sqrt(n / (n - 1)) * t[n-1] / z`` to undo the small-sample
  narrowness of the percentile interval) and says why in ``RatioCI.note``;
* with two or more launches: a two-stage bootstrap that resamples launches, then pairs
  within each launch, corrected to match the random-effects ANOVA variance and widened by
  ``t[L-1] / z`` (:mod:`speclib.analysis.stats.clustered` says how and why, with its
  simulated coverage).

Beside the CI the result carries the median paired difference (in the input's unit), the
Wilcoxon signed-rank p-value on the log-ratios, the share of the per-pair variance that
lies between launches, and whether more launches (rather than more prompts per launch)
would narrow the CI faster. Nothing here returns a silent NaN: undefined quantities are
``None`` in :meth:`RatioCI.to_dict`, and degenerate data raise a
:class:`DegenerateDataWarning`.

Example::

    import numpy as np
    from speclib.analysis.stats.paired import paired_ratio_ci
    from speclib.analysis.verdict.decision import decide

    ci = paired_ratio_ci(control_tpot, experiment_tpot, clusters=replicate,
                         confidence_level=0.95, rng=np.random.default_rng(12345))
    print(ci.estimate, ci.ci_low, ci.ci_high, ci.method)
    print(decide(ci, margin=0.05).word)   # "adopt" | "equivalent" | "worse" | "inconclusive"
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from speclib.analysis.stats.base import DegenerateDataWarning, finite_1d
from speclib.analysis.stats.clustered import (
    cluster_codes,
    padded_by_launch,
    two_stage_interval,
    widen,
)
from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable

__all__ = [
    "MIN_PAIRS_BCA",
    "RatioCI",
    "paired_mean_interval",
    "paired_ratio_ci",
    "wilcoxon_logratio",
]

MIN_PAIRS_BCA = 10
"""Below this many pairs BCa's jackknife acceleration is too noisy; percentile is used."""

_HEAVY_TIE_SHARE = 0.5  # BCa is skipped when one log-ratio value holds at least this share
_METHODS = ("BCa", "percentile")


@dataclass(frozen=True)
class RatioCI:
    """A paired experiment/control ratio with its confidence interval.

    ``estimate``, ``ci_low`` and ``ci_high`` are ratios experiment / control (below 1 means
    the experiment is faster). ``method`` is the interval actually used: ``"BCa"``,
    ``"percentile"``, ``"two-stage"`` or ``"degenerate"`` (one pair: the interval is
    ``(0, inf)``). ``note`` says why a fallback happened. ``median_delta`` is the median of
    ``experiment - control`` in the input's unit. ``var_between`` and ``var_within`` are the
    variance components of the per-pair log-ratios (between launches, within a launch);
    ``between_launch_share`` is ``var_between / (var_between + var_within)`` and
    ``more_launches_help`` says whether the between-launch term dominates the variance of
    the mean, so that more launches (rather than more prompts per launch) would narrow the
    interval faster. Launch fields are ``None`` without at least two launches. ``df`` is
    the degrees of freedom of a t-based interval (the block interval: the arm's blocks
    minus one), ``None`` for the bootstrap intervals. ``estimand`` says which ratio it is
    (:class:`speclib.core.estimand.Estimand`): the bootstrap's is the typical request's
    (the geometric mean above); the TPOT verdict's, from the block model, the traffic's.
    """

    estimate: float
    ci_low: float
    ci_high: float
    confidence_level: float
    method: str
    n_pairs: int
    n_launches: int
    median_delta: float
    wilcoxon_p: float | None
    between_launch_share: float | None
    more_launches_help: bool | None
    var_between: float | None
    var_within: float | None
    n_resamples: int
    note: str | None = None
    df: int | None = None
    estimand: Estimand = Estimand.TYPICAL

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping: plain Python numbers, non-finite floats become ``None``."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


# --------------------------------------------------------------------------- validation


def _positive_1d(values: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = finite_1d(values, name)
    if np.any(arr <= 0):
        bad = arr[arr <= 0][0]
        raise ValueError(f"`{name}` must hold positive values (found {bad!r})")
    return arr


def _validate_pairs(
    control: ArrayLike, experiment: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    c = _positive_1d(control, "control")
    e = _positive_1d(experiment, "experiment")
    if c.shape != e.shape:
        raise ValueError(
            f"`control` and `experiment` must have the same length (got {c.size} and {e.size})"
        )
    if c.size == 0:
        raise ValueError("`control` and `experiment` must hold at least one pair (got 0)")
    return c, e


def _validate_options(confidence_level: float, n_resamples: int, method: str, rng: Any) -> None:
    if not (isinstance(confidence_level, (float, int)) and 0 < confidence_level < 1):
        raise ValueError(f"`confidence_level` must be in (0, 1) (got {confidence_level!r})")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)):
        raise ValueError(f"`n_resamples` must be a positive integer (got {n_resamples!r})")
    if n_resamples < 1:
        raise ValueError(f"`n_resamples` must be a positive integer (got {n_resamples!r})")
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS} (got {method!r})")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            "`rng` must be a numpy.random.Generator, e.g. np.random.default_rng(seed) "
            f"(got {type(rng).__name__})"
        )


# ------------------------------------------------------------------------ one-stage interval


def _rounded(log_ratio: NDArray) -> NDArray:
    """Log-ratios rounded to 12 decimals, so that ``log(0.8 * c) - log(c)`` ties exactly."""
    return np.round(log_ratio, 12)


def _bca_obstacle(log_ratio: NDArray) -> str | None:
    """Why BCa should not be tried on these log-ratios, or None."""
    n = log_ratio.size
    if n < MIN_PAIRS_BCA:
        return f"fewer than {MIN_PAIRS_BCA} pairs ({n})"
    _, counts = np.unique(_rounded(log_ratio), return_counts=True)
    if counts.size == 1:
        return "all log-ratios are equal"
    if counts.max() >= _HEAVY_TIE_SHARE * n:
        return f"heavy ties ({counts.max()} of {n} log-ratios share one value)"
    return None


def _mean_difference(c: NDArray, e: NDArray, axis: int = -1) -> NDArray:
    return np.mean(e - c, axis=axis)


def paired_mean_interval(
    control: NDArray,
    experiment: NDArray,
    *,
    confidence_level: float,
    n_resamples: int,
    method: str = "BCa",
    obstacle: str | None = None,
    rng: np.random.Generator,
) -> tuple[float, float, str, str | None]:
    """Pair bootstrap CI of ``mean(experiment - control)``: ``(low, high, method_used, note)``.

    The one-stage interval of :func:`paired_ratio_ci` (which passes log latencies), shared
    by other paired comparisons on an additive scale (the per-prompt log-prob differences
    of :mod:`speclib.analysis.speculation.sampling`). ``control`` and ``experiment`` are 1-D float
    arrays of equal length, at least two pairs, already validated by the caller.
    :func:`scipy.stats.bootstrap` (``paired=True``) runs with ``method`` (``"BCa"`` or
    ``"percentile"``); ``obstacle``, the caller's reason why BCa cannot work on its data,
    selects the percentile method instead. A percentile interval, or BCa with non-finite
    bounds, becomes the expanded percentile interval (Hesterberg 2015), and ``note`` says
    so and why; the bootstrap's own warnings go into that note, never to the caller.
    """
    use = "percentile" if obstacle else method
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = stats.bootstrap(
            (control, experiment), _mean_difference, paired=True, vectorized=True,
            confidence_level=confidence_level, n_resamples=n_resamples, method=use, rng=rng,
        )  # fmt: skip
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if use == "BCa" and not (np.isfinite(low) and np.isfinite(high)):
        messages = "; ".join(str(w.message) for w in caught) or "no message"
        obstacle = f"BCa bounds were not finite ({messages})"
        use = "percentile"
    note = None
    if use == "percentile":
        est = float(np.mean(experiment - control))
        low, high, factor = _expanded_percentile(
            est, res.bootstrap_distribution, confidence_level, control.size
        )
        note = f"percentile interval expanded by {factor:.3f} (Hesterberg 2015)"
        if obstacle:
            note = f"BCa not used: {obstacle}; {note}"
    return low, high, use, note


def _one_stage_interval(
    c: NDArray, e: NDArray, *, confidence_level: float, n_resamples: int, method: str, rng
) -> tuple[float, float, str, str | None]:
    """Pair bootstrap CI of the mean log-ratio: ``(low, high, method_used, note)``."""
    log_c, log_e = np.log(c), np.log(e)
    return paired_mean_interval(
        log_c,
        log_e,
        confidence_level=confidence_level,
        n_resamples=n_resamples,
        method=method,
        obstacle=_bca_obstacle(log_e - log_c) if method == "BCa" else None,
        rng=rng,
    )


def _expanded_percentile(
    est: float, boot: NDArray, confidence_level: float, n_pairs: int
) -> tuple[float, float, float]:
    """Percentile interval widened by ``sqrt(n/(n-1)) * t[n-1] / z`` (Hesterberg 2015).

    Returns ``(low, high, factor)``; the factor tends to 1 as ``n_pairs`` grows.
    """
    alpha = 1.0 - confidence_level
    low, high = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    q = 1 - alpha / 2
    factor = math.sqrt(n_pairs / (n_pairs - 1)) * stats.t.ppf(q, n_pairs - 1) / stats.norm.ppf(q)
    low, high = widen(est, low, high, factor)
    return float(low), float(high), float(factor)


# --------------------------------------------------------------------------- public API


def wilcoxon_logratio(control: ArrayLike, experiment: ArrayLike) -> float:
    """Two-sided Wilcoxon signed-rank p-value of ``log(experiment / control)`` against 0.

    Zero log-ratios are dropped (``zero_method="wilcox"``); when every log-ratio is zero
    there is no evidence of a difference and the p-value is 1.0. The test ignores launch
    structure: it is the secondary evidence shown beside the CI, not the decision.
    """
    c, e = _validate_pairs(control, experiment)
    log_ratio = np.log(e) - np.log(c)
    if not np.any(log_ratio):
        return 1.0
    return float(stats.wilcoxon(log_ratio, zero_method="wilcox").pvalue)


def paired_ratio_ci(
    control: ArrayLike,
    experiment: ArrayLike,
    *,
    clusters: ArrayLike | None = None,
    confidence_level: float = 0.95,
    n_resamples: int = 4000,
    method: str = "BCa",
    rng: np.random.Generator,
) -> RatioCI:
    """Geometric-mean ratio ``experiment / control`` of matched pairs with a bootstrap CI.

    ``control[i]`` and ``experiment[i]`` are the same prompt's latency (positive, same
    unit) in the two series; ``clusters[i]`` optionally names the launch (replicate) both
    belong to. With two or more launches the two-stage bootstrap is used and ``method`` is
    ignored; otherwise ``method`` ("BCa" or "percentile") picks the pair bootstrap, with
    BCa falling back to the expanded percentile interval when it cannot work. One pair gives
    ``method="degenerate"`` with the interval ``(0, inf)`` and a
    :class:`DegenerateDataWarning`.
    """
    _validate_options(confidence_level, n_resamples, method, rng)
    c, e = _validate_pairs(control, experiment)
    codes = cluster_codes(clusters, c.size)
    log_ratio = np.log(e) - np.log(c)
    common = {
        "estimate": float(np.exp(log_ratio.mean())),
        "confidence_level": float(confidence_level),
        "n_pairs": int(c.size),
        "n_launches": int(codes.max() + 1),
        "median_delta": float(np.median(e - c)),
        "wilcoxon_p": wilcoxon_logratio(c, e),
        "n_resamples": int(n_resamples),
    }
    if c.size == 1:
        warnings.warn(
            "one pair: the confidence interval is undefined (reported as 0 to inf)",
            DegenerateDataWarning,
            stacklevel=2,
        )
        return RatioCI(
            ci_low=0.0, ci_high=math.inf, method="degenerate", between_launch_share=None,
            more_launches_help=None, var_between=None, var_within=None,
            note="one pair: no variance estimate", **common,
        )  # fmt: skip
    if np.unique(_rounded(log_ratio)).size == 1:
        warnings.warn(
            "all log-ratios are equal: the confidence interval has zero width",
            DegenerateDataWarning,
            stacklevel=2,
        )
    if common["n_launches"] >= 2:
        return _clustered(log_ratio, codes, common, confidence_level, n_resamples, rng)
    low, high, used, note = _one_stage_interval(
        c, e, confidence_level=confidence_level, n_resamples=n_resamples, method=method, rng=rng
    )
    return RatioCI(
        ci_low=math.exp(low), ci_high=math.exp(high), method=used, between_launch_share=None,
        more_launches_help=None, var_between=None, var_within=float(np.var(log_ratio, ddof=1)),
        note=note, **common,
    )  # fmt: skip


def _clustered(log_ratio, codes, common, confidence_level, n_resamples, rng) -> RatioCI:
    """The two-stage branch of :func:`paired_ratio_ci`, with the launch variance summary."""
    y, sizes = padded_by_launch(log_ratio, codes)
    _, low, high, a = two_stage_interval(
        y, sizes, confidence_level=confidence_level, n_resamples=n_resamples, rng=rng
    )
    var_b, var_w = float(a["var_between"]), float(a["var_within"])
    total = var_b + var_w
    share = var_b / total if total > 0 else None
    n_launch, n_pairs = sizes.size, log_ratio.size
    mean_var_between, mean_var_within = var_b / n_launch, var_w / n_pairs
    helps = mean_var_between > mean_var_within if total > 0 else None
    return RatioCI(
        ci_low=math.exp(float(low)), ci_high=math.exp(float(high)), method="two-stage",
        between_launch_share=share, more_launches_help=helps, var_between=var_b,
        var_within=var_w, note=None, **common,
    )  # fmt: skip
