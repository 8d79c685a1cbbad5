"""The speed-up model of speculative decoding (Leviathan, Kalman & Matias 2023).

:func:`leviathan_speedup` and :func:`expected_tokens_per_step` are the model;
:func:`alpha_from_mean_length` turns a measured mean acceptance length into its per-token
``α``. The draft cost ``c`` is an input, never fitted to the timings the model is meant to
explain (see :mod:`speclib.analysis.speculation.why`). Pure arithmetic; inputs are validated first
and
errors name the argument.
"""

from __future__ import annotations

import math

__all__ = [
    "alpha_from_mean_length",
    "expected_tokens_per_step",
    "leviathan_speedup",
]


def _check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise TypeError(f"`alpha` must be a number in [0, 1] (got {alpha!r})")
    if not (0.0 <= alpha <= 1.0):
        raise ValueError(f"`alpha` must be in [0, 1] (got {alpha!r})")
    return float(alpha)


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"`k` must be a positive integer (got {k!r})")
    if k < 1:
        raise ValueError(f"`k` must be a positive integer (got {k!r})")
    return k


def _check_c(c: float) -> float:
    if isinstance(c, bool) or not isinstance(c, int | float):
        raise TypeError(f"`c` must be a finite number >= 0 (got {c!r})")
    if not (math.isfinite(c) and c >= 0):
        raise ValueError(f"`c` must be a finite number >= 0 (got {c!r})")
    return float(c)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens per verify step, ``(1 − α^(k+1)) / (1 − α)`` (bonus token included).

    Computed as ``Σ_{i=0..k} α^i``, so ``α = 1`` gives the limit ``k + 1`` and ``α = 0``
    gives 1. ``α`` is the per-token acceptance probability of the i.i.d. model.
    """
    a, k = _check_alpha(alpha), _check_k(k)
    return math.fsum(a**i for i in range(k + 1))


def leviathan_speedup(*, alpha: float, k: int, c: float) -> float:
    """Expected walltime improvement factor ``(1 − α^(k+1)) / ((1 − α)(k·c + 1))``.

    Leviathan, Kalman & Matias (2023), "Fast Inference from Transformers via Speculative
    Decoding", Theorem 3.8: ``α`` per-token acceptance probability, ``k`` draft tokens per
    step, ``c`` cost of one draft step relative to one target step. Above 1 is a win.
    """
    c = _check_c(c)
    return expected_tokens_per_step(alpha, k) / (k * c + 1.0)


def alpha_from_mean_length(mean_acceptance_length: float, k: int) -> float:
    """The ``α`` of the i.i.d. model that yields this mean acceptance length for ``k``.

    vLLM's ``draft_acceptance_rate`` (accepted / proposed) is *not* Leviathan's ``α``: a
    draft at position ``i`` only counts if all before it were accepted, so under the model
    the rate is ``(α − α^(k+1)) / (k(1 − α))``, below ``α``. The mean acceptance length
    (``1 + accepted / steps``) equals :func:`expected_tokens_per_step`; this inverts it by
    bisection. Values outside ``[1, k + 1]`` raise ``ValueError``.
    """
    k = _check_k(k)
    m = float(mean_acceptance_length)
    if not (math.isfinite(m) and 1.0 - 1e-9 <= m <= k + 1 + 1e-9):
        raise ValueError(
            f"`mean_acceptance_length` must be in [1, k + 1] = [1, {k + 1}] (got {m!r})"
        )
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens_per_step(mid, k) < m:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
