"""The t-interval: the one place a Student-t confidence interval on a mean is computed.

Every interval of the kit that rests on a handful of per-block values (the TPOT verdict's
block contrasts, a segment's, the heterogeneity check's differences, a sweep arm against
the best, goodput per block) is ``mean ± t[df, (1 + level) / 2] · se``. :func:`t_interval`
takes the values themselves (one sample: ``se = sd / sqrt(m)``, ``df = m - 1``);
:func:`welch_t_interval` the difference of two samples' means (Welch's standard error and
Satterthwaite's degrees of freedom); :func:`t_bounds` the bounds from an estimate, a
standard error and degrees of freedom already known. All three return a frozen
:class:`TInterval`. With no degrees of freedom (one value) the interval is
``(-inf, inf)``, ``df == 0``: no data can make it narrower, and a caller says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from speclib.analysis.stats.base import finite_1d
from speclib.core.jsonutil import jsonable

__all__ = ["TInterval", "t_bounds", "t_interval", "welch_t_interval"]


@dataclass(frozen=True)
class TInterval:
    """``mean`` with its two-sided t-interval ``(low, high)`` at ``confidence_level``:
    ``se`` is the standard error of the mean, ``df`` the degrees of freedom (a float for
    Welch's; 0: no interval, the bounds are infinite), ``n`` how many values it rests on."""

    mean: float
    low: float
    high: float
    se: float
    df: float
    n: int
    confidence_level: float

    @property
    def decidable(self) -> bool:
        """False when the interval has no degrees of freedom (its bounds are infinite)."""
        return self.df > 0 and math.isfinite(self.se)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


def _level(confidence_level: Any) -> float:
    ok = isinstance(confidence_level, (int, float)) and not isinstance(confidence_level, bool)
    if not (ok and 0 < confidence_level < 1):
        raise ValueError(f"`confidence_level` must be in (0, 1) (got {confidence_level!r})")
    return float(confidence_level)


def t_bounds(
    mean: float, *, se: float, df: float, confidence_level: float, n: int = 0
) -> TInterval:
    """The t-interval ``mean ± t[df, (1 + level) / 2] · se`` (see the module docstring);
    ``df <= 0`` or an infinite ``se`` gives ``(-inf, inf)``."""
    level = _level(confidence_level)
    if not math.isfinite(mean):
        raise ValueError(f"`mean` must be finite (got {mean!r})")
    if not (se >= 0):
        raise ValueError(f"`se` must be non-negative (got {se!r})")
    if df <= 0 or not math.isfinite(se):
        return TInterval(float(mean), -math.inf, math.inf, math.inf, 0.0, n, level)
    half = float(special.stdtrit(df, 0.5 + level / 2)) * se
    return TInterval(float(mean), mean - half, mean + half, float(se), float(df), n, level)


def t_interval(values: ArrayLike, *, confidence_level: float) -> TInterval:
    """The one-sample t-interval on the mean of ``values`` (finite numbers, at least one):
    ``se = sd(ddof=1) / sqrt(m)`` on ``m - 1`` degrees of freedom."""
    v = finite_1d(values, "values")
    if v.size == 0:
        raise ValueError("`values` must hold at least one number")
    m = int(v.size)
    mean = float(v.mean())
    if m < 2:
        return t_bounds(mean, se=math.inf, df=0, confidence_level=confidence_level, n=m)
    se = float(np.std(v, ddof=1)) / math.sqrt(m)
    if se <= 1e-12 * max(1.0, abs(mean)):  # equal values up to rounding: a zero width
        se = 0.0
    return t_bounds(mean, se=se, df=m - 1, confidence_level=confidence_level, n=m)


def welch_t_interval(x: ArrayLike, y: ArrayLike, *, confidence_level: float) -> TInterval:
    """Welch's t-interval on ``mean(x) - mean(y)``: the two samples' own variances,
    Satterthwaite's degrees of freedom; ``(-inf, inf)`` unless each has two values."""
    a, b = finite_1d(x, "x"), finite_1d(y, "y")
    if a.size == 0 or b.size == 0:
        raise ValueError("`x` and `y` must each hold at least one number")
    mean = float(a.mean() - b.mean())
    n = int(a.size + b.size)
    if a.size < 2 or b.size < 2:
        return t_bounds(mean, se=math.inf, df=0, confidence_level=confidence_level, n=n)
    va, vb = float(np.var(a, ddof=1)) / a.size, float(np.var(b, ddof=1)) / b.size
    var = va + vb
    if var <= 0:
        return t_bounds(mean, se=0.0, df=n - 2, confidence_level=confidence_level, n=n)
    df = var**2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    return t_bounds(mean, se=math.sqrt(var), df=df, confidence_level=confidence_level, n=n)
