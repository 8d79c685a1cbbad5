"""What the statistics modules share: the degenerate-data warning, input validation and
Holm's adjustment.

:class:`DegenerateDataWarning` says the data cannot support the requested interval;
:func:`finite_1d` validates a one-dimensional array of finite numbers, naming the
argument; :func:`holm_adjust` gives Holm step-down adjusted p-values. (A t-interval's
quantile and its projection to more blocks are in :mod:`speclib.analysis.stats.t_interval`.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

__all__ = [
    "DegenerateDataWarning",
    "finite_1d",
    "holm_adjust",
]


class DegenerateDataWarning(stats.DegenerateDataWarning):
    """The data cannot support the requested interval (one pair, all values equal, ...)."""


def finite_1d(values: ArrayLike, name: str) -> NDArray[np.float64]:
    """``values`` as a one-dimensional float array of finite numbers; ValueError naming
    the argument ``name`` otherwise (shared input validation of the statistics modules)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be an array of numbers ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be one-dimensional (got shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` must hold finite numbers (found NaN or inf)")
    return arr


def holm_adjust(pvalues: Sequence[float] | ArrayLike) -> NDArray[np.float64]:
    """Holm step-down adjusted p-values, in the input's order.

    ``adjusted[(i)] = max_{j <= i} min(1, (m - j + 1) * p[(j)])`` over the ascending order
    ``p[(1)] <= ... <= p[(m)]``. Reject hypothesis i at family-wise level α when
    ``adjusted[i] <= α``. Example: ``holm_adjust([0.01, 0.04, 0.03])`` is
    ``[0.03, 0.06, 0.06]``.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"`pvalues` must be a non-empty 1-D sequence (got shape {p.shape})")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"`pvalues` must lie in [0, 1] (got {p.tolist()})")
    order = np.argsort(p, kind="stable")
    m = p.size
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(1.0, stepped)
    return adjusted
