"""The speed-up model of speculative decoding (Leviathan, Kalman & Matias 2023).

:func:`leviathan_speedup` and :func:`expected_tokens_per_step` are the model;
:func:`alpha_from_mean_length` turns a measured mean acceptance length into its per-token
``α``; :func:`estimate_draft_cost` infers the relative draft cost ``c`` from measured TPOTs;
:func:`explain_speedup` says what speed-up the measured acceptance and draft cost predict,
and which lever (cheaper draft, better-matched draft, another ``k``) would help most.
Pure arithmetic; inputs are validated first and errors name the argument.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "SpeedupExplanation",
    "alpha_from_mean_length",
    "estimate_draft_cost",
    "expected_tokens_per_step",
    "explain_speedup",
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


def estimate_draft_cost(
    *,
    control_tpot: float,
    k: int,
    spec_step_time: float | None = None,
    spec_tpot: float | None = None,
    mean_acceptance_length: float | None = None,
) -> float:
    """Infer the relative draft cost ``c`` from measured times.

    The model says a speculative step costs ``control_tpot × (1 + k·c)``, so
    ``c = (spec_step_time / control_tpot − 1) / k``. Give either ``spec_step_time``
    (``(E2E − TTFT) / decode steps`` of a speculative request) or ``spec_tpot`` and
    ``mean_acceptance_length`` (step time ≈ TPOT × tokens per step). On CPU the target
    is compute-bound, so verifying ``k + 1`` positions costs more than one decode step;
    that extra cost lands in ``c``, which is therefore larger than the draft/target size
    ratio. The result may be slightly negative from timing noise; it is returned as
    measured.
    """
    k = _check_k(k)
    if not (math.isfinite(control_tpot) and control_tpot > 0):
        raise ValueError(f"`control_tpot` must be a positive number (got {control_tpot!r})")
    if spec_step_time is None:
        if spec_tpot is None or mean_acceptance_length is None:
            raise ValueError(
                "give `spec_step_time`, or both `spec_tpot` and `mean_acceptance_length`"
            )
        spec_step_time = spec_tpot * mean_acceptance_length
    elif spec_tpot is not None or mean_acceptance_length is not None:
        raise ValueError(
            "give `spec_step_time` or `spec_tpot` + `mean_acceptance_length`, not both"
        )
    if not (math.isfinite(spec_step_time) and spec_step_time > 0):
        raise ValueError(f"`spec_step_time` must be a positive number (got {spec_step_time!r})")
    return (spec_step_time / control_tpot - 1.0) / k


@dataclass(frozen=True)
class SpeedupExplanation:
    """Measured vs modelled speed-up and the what-ifs behind the report's advice.

    Speed-ups are ``control / experiment`` (above 1 is a win). ``c_used`` is ``c``
    clamped at 0 for the model. ``k_curve`` holds ``(k, speed-up)`` at the measured ``α``
    and ``c``. ``lever`` is ``"cheaper draft"``, ``"better-matched draft"``,
    ``"different k"`` or ``"none"`` (no what-if gains more than ``min_gain``).
    """

    measured_speedup: float | None
    alpha: float
    k: int
    c: float
    c_used: float
    tokens_per_step: float
    predicted_speedup: float
    speedup_half_c: float
    alpha_what_if: float
    speedup_alpha_what_if: float
    best_k: int
    speedup_best_k: float
    k_curve: tuple[tuple[int, float], ...]
    lever: str
    summary: str


def explain_speedup(
    *,
    alpha: float,
    k: int,
    c: float,
    measured_speedup: float | None = None,
    alpha_what_if: float = 0.9,
    k_range: Iterable[int] = range(1, 9),
    min_gain: float = 0.02,
) -> SpeedupExplanation:
    """Predicted speed-up at the measured ``α``, ``c`` and ``k``, and three what-ifs.

    ``alpha`` should be the model's per-token ``α`` (see :func:`alpha_from_mean_length`),
    ``c`` typically comes from :func:`estimate_draft_cost`. What-ifs: a draft half as
    expensive (``c/2``), a better-matched draft (``α`` raised to ``alpha_what_if``; no
    change when already above), and the best ``k`` in ``k_range`` at the measured ``α``
    and ``c``. Note that when ``c`` was inferred from the same timings, the prediction
    matches the measurement by construction; the what-ifs are the point.
    """
    a, k = _check_alpha(alpha), _check_k(k)
    if not math.isfinite(c):
        raise ValueError(f"`c` must be finite (got {c!r})")
    c_used = max(float(c), 0.0)
    a_if = max(a, _check_alpha(alpha_what_if))
    ks = sorted({_check_k(x) for x in k_range})
    if not ks:
        raise ValueError("`k_range` must hold at least one positive integer")
    if measured_speedup is not None and not (
        math.isfinite(measured_speedup) and measured_speedup > 0
    ):
        raise ValueError(f"`measured_speedup` must be a positive number (got {measured_speedup!r})")

    predicted = leviathan_speedup(alpha=a, k=k, c=c_used)
    half_c = leviathan_speedup(alpha=a, k=k, c=c_used / 2)
    better = leviathan_speedup(alpha=a_if, k=k, c=c_used)
    curve = tuple((kk, leviathan_speedup(alpha=a, k=kk, c=c_used)) for kk in ks)
    best_k, best_k_speedup = max(curve, key=lambda kv: (kv[1], -kv[0]))

    options = {
        "cheaper draft": half_c,
        "better-matched draft": better,
        "different k": best_k_speedup if best_k != k else predicted,
    }
    lever, best = max(options.items(), key=lambda kv: kv[1])
    if best < predicted * (1.0 + min_gain):
        lever = "none"

    parts = [f"Model (α={a:.2f}, k={k}, c={c_used:.2f}) predicts ×{predicted:.2f}"]
    if measured_speedup is not None:
        parts[0] += f", measured ×{measured_speedup:.2f}"
        if abs(measured_speedup / predicted - 1.0) > 0.15:
            parts.append(
                "the step model explains the measurement poorly (overheads outside it: "
                "scheduling, sampling, batching, streaming)"
            )
    parts.append(
        f"c/2 → ×{half_c:.2f}; α={a_if:.2f} → ×{better:.2f}; "
        f"best k={best_k} → ×{best_k_speedup:.2f}"
    )
    if lever == "none":
        parts.append(f"no single lever gains more than {min_gain:.0%} under the model")
    else:
        parts.append(
            f"the biggest lever is a {lever}"
            if lever != "different k"
            else f"the biggest lever is k={best_k}"
        )
    return SpeedupExplanation(
        measured_speedup=measured_speedup,
        alpha=a,
        k=k,
        c=float(c),
        c_used=c_used,
        tokens_per_step=expected_tokens_per_step(a, k),
        predicted_speedup=predicted,
        speedup_half_c=half_c,
        alpha_what_if=a_if,
        speedup_alpha_what_if=better,
        best_k=best_k,
        speedup_best_k=best_k_speedup,
        k_curve=curve,
        lever=lever,
        summary="; ".join(parts) + ".",
    )
