"""Change-point test for a time-ordered series: did the server switch speed regime mid-run?

The drift diagnostics figure needs, for a time-ordered series such as the per-request TPOT
of one launch, whether there is a regime shift, where, how large, and with what
p-value. :func:`pettitt_test` runs Pettitt's (1979) nonparametric single change-point
test: with midranks ``r_i``, ``U_t = sum_{i <= t} (2 r_i - n - 1)`` (equivalently
``sum_{i <= t < j} sign(x_i - x_j)``) and ``K = max_t |U_t|``; the change is after the
index that maximises ``|U_t|``. The p-value is Pettitt's approximation
``p ≈ 2 exp(-6 K^2 / (n^3 + n^2))`` (capped at 1), which is conservative for short
series (on i.i.d. normal noise, p < 0.05 in 1.6 % of series of 24 values, 3.3 % of 45,
3.6 % of 100); ``method="permutation"`` gives a Monte Carlo p-value (series shuffled
``n_resamples`` times, plus-one corrected) that holds its level exactly under
exchangeability. No package in the environment implements the test with a p-value
(scipy has none; statsmodels is not installed; ruptures, also absent, locates changes
without a test), so it is written here. It uses ranks only, so it ignores outliers and
works on TPOT in any unit. A temporary dip (fast for a while, then back) is found as one change at
either edge of the dip; its p-value is then somewhat conservative. For a step away from
the middle of the series the location estimate leans a few points towards the middle.

:func:`shift_cancelled` answers the interleaved design's question: the raw TPOT series of
an arm has a significant change point, but the paired log-ratio series (experiment vs
control, in time order) has none – the design cancelled the shift.

Example::

    cp = pettitt_test(tpot_in_time_order)
    print(cp.significant, cp.index, cp.before_median, cp.after_median, cp.pvalue)
    check = shift_cancelled(raw=control_tpot, paired=log_ratio_in_time_order)
    print(check.cancelled, check.reason)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from speclib.analysis.stats.base import finite_1d
from speclib.core.jsonutil import jsonable

__all__ = [
    "MIN_SERIES_LENGTH",
    "ChangePoint",
    "ShiftCancellation",
    "pettitt_test",
    "shift_cancelled",
]

MIN_SERIES_LENGTH = 4
"""Shorter series cannot show a change point (the test returns p = 1 and no shift)."""

_METHODS = ("asymptotic", "permutation")


@dataclass(frozen=True)
class ChangePoint:
    """Result of Pettitt's test on one series.

    ``index`` is the first index of the second segment (the change happens between
    ``index - 1`` and ``index``); ``statistic`` is ``K = max |U_t|``; ``significant`` is
    ``pvalue < alpha``. Segment medians and means are in the input's unit;
    ``relative_change`` is ``after_median / before_median - 1`` (None when the first median
    is 0). For a series shorter than :data:`MIN_SERIES_LENGTH`, or a constant one, there
    is no shift (``pvalue`` 1, ``index`` None) and ``note`` says why.
    """

    n: int
    index: int | None
    statistic: float
    pvalue: float
    alpha: float
    significant: bool
    method: str
    before_median: float | None
    after_median: float | None
    before_mean: float | None
    after_mean: float | None
    relative_change: float | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class ShiftCancellation:
    """Whether the design cancelled a regime shift: the raw series shifts, the paired does not."""

    raw: ChangePoint
    paired: ChangePoint
    cancelled: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


# --------------------------------------------------------------------------- validation


def _series(values: ArrayLike, name: str) -> NDArray[np.float64]:
    return finite_1d(values, name)


def _check_options(alpha: float, method: str, n_resamples: int, rng: Any) -> None:
    if not (isinstance(alpha, (float, int)) and not isinstance(alpha, bool) and 0 < alpha < 1):
        raise ValueError(f"`alpha` must be in (0, 1) (got {alpha!r})")
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS} (got {method!r})")
    if method == "permutation":
        if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)):
            raise ValueError(f"`n_resamples` must be a positive integer (got {n_resamples!r})")
        if n_resamples < 1:
            raise ValueError(f"`n_resamples` must be a positive integer (got {n_resamples!r})")
        if not isinstance(rng, np.random.Generator):
            raise ValueError(
                '`rng` must be a numpy.random.Generator when method="permutation" '
                f"(got {type(rng).__name__})"
            )


# ------------------------------------------------------------------------------ test


def _pettitt_u(ranks: NDArray) -> NDArray:
    """``U_t`` for t = 1 .. n-1 (split after the t-th value), on the last axis."""
    n = ranks.shape[-1]
    return np.cumsum(2 * ranks - (n + 1), axis=-1)[..., :-1]


def _permutation_p(ranks: NDArray, k: float, n_resamples: int, rng) -> float:
    """Monte Carlo p-value of ``K`` under exchangeability (plus-one corrected)."""
    hits, done, block = 0, 0, max(1, 200_000 // ranks.size)
    while done < n_resamples:
        b = min(block, n_resamples - done)
        shuffled = rng.permuted(np.broadcast_to(ranks, (b, ranks.size)), axis=-1)
        hits += int((np.abs(_pettitt_u(shuffled)).max(axis=-1) >= k - 1e-9).sum())
        done += b
    return (hits + 1) / (n_resamples + 1)


def _no_shift(n: int, alpha: float, method: str, x: NDArray, note: str) -> ChangePoint:
    median = float(np.median(x)) if n else None
    mean = float(np.mean(x)) if n else None
    return ChangePoint(n, None, 0.0, 1.0, alpha, False, method, median, None, mean, None, None,
                       note)  # fmt: skip


def pettitt_test(
    series: ArrayLike,
    *,
    alpha: float = 0.05,
    method: str = "asymptotic",
    n_resamples: int = 9999,
    rng: np.random.Generator | None = None,
) -> ChangePoint:
    """Pettitt's test for one change in level of a time-ordered series.

    ``series`` is in time order (e.g. per-request TPOT of one launch, or paired
    log-ratios). ``method`` is ``"asymptotic"`` (Pettitt's approximation) or
    ``"permutation"`` (needs ``rng``). See the module docstring.
    """
    _check_options(alpha, method, n_resamples, rng)
    x = _series(series, "series")
    n = x.size
    if n < MIN_SERIES_LENGTH:
        return _no_shift(n, alpha, method, x, f"fewer than {MIN_SERIES_LENGTH} values ({n})")
    if np.all(x == x[0]):
        return _no_shift(n, alpha, method, x, "constant series")
    ranks = stats.rankdata(x)
    u = _pettitt_u(ranks)
    t = int(np.argmax(np.abs(u)))
    k = float(abs(u[t]))
    if method == "asymptotic":
        p = min(1.0, 2.0 * math.exp(-6.0 * k**2 / (n**3 + n**2)))
    else:
        p = _permutation_p(ranks, k, int(n_resamples), rng)
    before, after = x[: t + 1], x[t + 1 :]
    b_med, a_med = float(np.median(before)), float(np.median(after))
    return ChangePoint(
        n=n, index=t + 1, statistic=k, pvalue=float(p), alpha=float(alpha),
        significant=bool(p < alpha), method=method, before_median=b_med, after_median=a_med,
        before_mean=float(before.mean()), after_mean=float(after.mean()),
        relative_change=a_med / b_med - 1 if b_med != 0 else None,
    )  # fmt: skip


def shift_cancelled(
    *,
    raw: ArrayLike,
    paired: ArrayLike,
    alpha: float = 0.05,
    method: str = "asymptotic",
    n_resamples: int = 9999,
    rng: np.random.Generator | None = None,
) -> ShiftCancellation:
    """Did the design cancel a regime shift? Pettitt's test on both series.

    ``raw`` is an arm's per-request TPOT in time order, ``paired`` the paired log-ratios
    (experiment vs control) in time order. ``cancelled`` is True when the raw series has a
    significant change point and the paired series has none. Options as in
    :func:`pettitt_test` (with ``method="permutation"`` both tests draw from ``rng``).
    """
    opts = {"alpha": alpha, "method": method, "n_resamples": n_resamples, "rng": rng}
    raw_cp = pettitt_test(_series(raw, "raw"), **opts)
    paired_cp = pettitt_test(_series(paired, "paired"), **opts)
    if not raw_cp.significant:
        reason = f"no significant shift in the raw series (p = {raw_cp.pvalue:.3g})"
        return ShiftCancellation(raw_cp, paired_cp, False, reason)
    shift = (
        f"the raw series shifts at index {raw_cp.index} "
        f"(median {raw_cp.before_median:.4g} → {raw_cp.after_median:.4g}, p = {raw_cp.pvalue:.3g})"
    )
    if paired_cp.significant:
        reason = (
            f"{shift}, and so does the paired series at index {paired_cp.index} "
            f"(p = {paired_cp.pvalue:.3g}): the shift was not cancelled"
        )
        return ShiftCancellation(raw_cp, paired_cp, False, reason)
    reason = f"{shift}; the paired series does not (p = {paired_cp.pvalue:.3g}): cancelled"
    return ShiftCancellation(raw_cp, paired_cp, True, reason)
