"""The gates: what a decision must also pass before it becomes a verdict.

:func:`apply_gates` weighs a :class:`~speclib.analysis.verdict.decision.Decision` against
the gates declared before the run — errors (a Wilson bound on the increase of the error
rate, :func:`error_increase_bounds`), outputs (wrong outputs, greedy agreement), memory,
and TTFT/E2E intervals — each "pass", "fail" or "not assessed", plus the bench, the server
mode and the sampling check, and returns the :class:`Verdict` with its
:class:`GateResult` list. The decision rule itself lives in
:mod:`speclib.analysis.verdict.decision`.

:func:`apply_gates` weighs more than TPOT: errors, wrong outputs, memory and clearly worse
TTFT or end-to-end latency turn any TPOT decision into **reject**, naming the gate. Each
gate is "pass", "fail" or "not assessed": no evidence is not a pass. A gate passes only
when its data rule the failure out (a latency interval whose upper bound is within the
limit, an error-rate bound within the allowance), fails when they show it, and is "not
assessed" otherwise (one block, an interval too wide, too few requests); that keeps the
TPOT word and adds a reason naming the gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from scipy import stats

from speclib.analysis.stats.paired import RatioCI
from speclib.analysis.verdict.decision import (
    DECISION_WORDS,
    Decision,
    check_ci,
    check_fraction,
)
from speclib.core.jsonutil import jsonable

__all__ = [
    "BENCH_WORD",
    "GATE_STATUSES",
    "VERDICT_WORDS",
    "GateResult",
    "Verdict",
    "apply_gates",
    "error_increase_bounds",
]


GATE_STATUSES = ("pass", "fail", "not assessed")


VERDICT_WORDS = (*DECISION_WORDS, "reject", "untrustworthy", "failed", "mixed")
"""Every final word; "mixed" is decided by :mod:`speclib.analysis.verdict.answer`."""


BENCH_WORD = "untrustworthy"  # the verdict when the bench itself shows an effect (A/A gate)


@dataclass(frozen=True)
class GateResult:
    """One gate: its name, its status and what was compared.

    ``status`` is one of :data:`GATE_STATUSES`: ``"pass"`` (the data rule a failure
    out), ``"fail"`` (the data show it) or ``"not assessed"`` (the data cannot tell; the
    detail says why). Only ``"fail"`` turns a verdict into "reject"; ``"not assessed"`` is
    never a pass (:attr:`passed` is False) and never a failure (:attr:`failed` is False).
    """

    name: str
    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in GATE_STATUSES:
            raise ValueError(f"`status` must be one of {GATE_STATUSES} (got {self.status!r})")

    @property
    def passed(self) -> bool:
        """True only when the gate was assessed and passed."""
        return self.status == "pass"

    @property
    def failed(self) -> bool:
        """True only when the gate was assessed and failed."""
        return self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping: name, status, detail, and ``passed`` (True only for "pass")."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}
        out["passed"] = self.passed
        return out


def _gate(name: str, ok: bool, detail: str) -> GateResult:
    """A gate whose inputs always decide it (pass or fail)."""
    return GateResult(name, "pass" if ok else "fail", detail)


@dataclass(frozen=True)
class Verdict:
    """Final word for one experiment series, the reasons behind it, and every gate checked."""

    word: str
    reasons: tuple[str, ...]
    tpot_decision: Decision
    gates: tuple[GateResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score bounds of a proportion ``k / n`` at normal quantile ``z``."""
    p, zz = k / n, z * z
    centre = (p + zz / (2 * n)) / (1 + zz / n)
    half = z * math.sqrt(p * (1 - p) / n + zz / (4 * n * n)) / (1 + zz / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def error_increase_bounds(
    control: tuple[int, int], experiment: tuple[int, int], *, confidence_level: float
) -> tuple[float, float]:
    """One-sided bounds, each at ``confidence_level``, on the rise in error rate ``p_e - p_c``.

    ``control`` and ``experiment`` are ``(failed, requests)`` counts, each with requests > 0.
    Newcombe's hybrid score interval (1998, method 10) from the two Wilson intervals at
    ``z = Φ⁻¹(confidence_level)``: ``low = d - sqrt((p_e - l_e)² + (u_c - p_c)²)``,
    ``high = d + sqrt((u_e - p_e)² + (p_c - l_c)²)``; it behaves with zero failures, where a
    Wald interval collapses to a point.
    """
    z = float(stats.norm.ppf(confidence_level))
    (k_c, n_c), (k_e, n_e) = control, experiment
    p_c, p_e = k_c / n_c, k_e / n_e
    l_c, u_c = _wilson(k_c, n_c, z)
    l_e, u_e = _wilson(k_e, n_e, z)
    d = p_e - p_c
    low = d - math.sqrt((p_e - l_e) ** 2 + (u_c - p_c) ** 2)
    high = d + math.sqrt((u_e - p_e) ** 2 + (p_c - l_c) ** 2)
    return low, high


def _error_gate(
    control: float,
    experiment: float,
    max_increase: float,
    counts: tuple[int | None, int | None],
    confidence_level: float,
) -> GateResult:
    n_c, n_e = counts
    increase = experiment - control
    if n_c is None or n_e is None:
        detail = (f"error rate {experiment:.2%} vs control {control:.2%} (increase "
                  f"{increase:+.2%}, allowed {max_increase:.2%}); request counts not given, "
                  "so no bound on the increase")  # fmt: skip
        return GateResult("errors", "not assessed", detail)
    k_c, k_e = round(control * n_c), round(experiment * n_e)
    counted = f"{k_e}/{n_e} requests failed vs control {k_c}/{n_c}"
    if n_c == 0 or n_e == 0:
        return GateResult("errors", "not assessed", f"{counted}: no requests to count")
    low, high = error_increase_bounds((k_c, n_c), (k_e, n_e), confidence_level=confidence_level)
    conf = f"{100 * confidence_level:.3g}%"
    detail = (
        f"{counted} (increase {k_e / n_e - k_c / n_c:+.2%}, one-sided {conf} bounds "
        f"{low:+.2%} to {high:+.2%}, Newcombe–Wilson), allowed increase {max_increase:.2%}"
    )
    if high <= max_increase:
        return GateResult("errors", "pass", f"{detail}: the upper bound is within it")
    if low > max_increase:
        return GateResult("errors", "fail", f"{detail}: the lower bound exceeds it")
    return GateResult("errors", "not assessed", f"{detail}: too few requests to tell either way")


def _output_gate(wrong: int, agreement: float | None, min_agreement: float | None) -> GateResult:
    detail = f"{wrong} output(s) flagged wrong"
    passed = wrong == 0
    if min_agreement is not None:
        detail += f"; agreement {agreement:.2%} (minimum {min_agreement:.2%})"
        passed = passed and agreement >= min_agreement
    elif agreement is not None:
        detail += f"; agreement {agreement:.2%} (no minimum set)"
    return _gate("outputs", passed, detail)


def _latency_gate(
    name: str,
    ci: RatioCI,
    margin: float,
    min_delta_s: float = 0.0,
    control_median_s: float | None = None,
) -> GateResult:
    """Fail when clearly worse, pass when the interval rules that out, else not assessed."""
    lo, hi, limit = ci.ci_low, ci.ci_high, 1 + margin
    rise = f" and the median rises by more than {1e3 * min_delta_s:.0f} ms" if min_delta_s else ""
    head = (
        f"{name} ratio {ci.estimate:.3f} ({100 * ci.confidence_level:.3g}% CI "
        f"{lo:.3f}–{hi:.3f}, {ci.method}), median change {1e3 * ci.median_delta:+.1f} ms; "
        f"clearly worse when the lower bound exceeds {limit:.3f}{rise}"
    )
    if lo > limit and (min_delta_s <= 0 or ci.median_delta > min_delta_s):
        return GateResult(name, "fail", head)
    if hi <= limit:
        return GateResult(name, "pass", f"{head}: the upper bound rules that out")
    if min_delta_s > 0 and control_median_s is not None and math.isfinite(hi):
        at_median = (hi - 1) * control_median_s
        if at_median <= min_delta_s:
            median_ms = 1e3 * control_median_s
            return GateResult(name, "pass", (
                f"{head}: the upper bound at the control's median ({median_ms:.0f} ms) is a "
                f"rise of {1e3 * at_median:+.0f} ms at most, which rules that out"))  # fmt: skip
    if (ci.df is not None and ci.df < 1) or hi == math.inf:
        why = "no degrees of freedom (one block): the interval cannot tell"
    elif not (0 < lo <= hi < math.inf):
        why = "the interval is undefined (no usable pairs)"
    elif lo > limit:
        why = "the ratio is above the limit but the median rise is not shown to exceed the minimum"
    else:
        why = (f"interval too wide to tell: its upper bound {hi:.3f} does not rule out "
               f"{limit:.3f} and its lower bound {lo:.3f} does not show it"
               + (f" (df = {ci.df})" if ci.df is not None else ""))  # fmt: skip
    return GateResult(name, "not assessed", f"{head}: {why}")


def _check_gate_inputs(wrong_outputs, agreement_rate, min_agreement_rate, peak, limit) -> None:
    if isinstance(wrong_outputs, bool) or not isinstance(wrong_outputs, (int, np.integer)):
        raise ValueError(f"`wrong_outputs` must be a non-negative integer (got {wrong_outputs!r})")
    if wrong_outputs < 0:
        raise ValueError(f"`wrong_outputs` must be a non-negative integer (got {wrong_outputs!r})")
    if min_agreement_rate is not None:
        check_fraction(min_agreement_rate, "min_agreement_rate")
        check_fraction(agreement_rate, "agreement_rate")
    elif agreement_rate is not None:
        check_fraction(agreement_rate, "agreement_rate")
    for value, name in ((peak, "peak_memory_gib"), (limit, "memory_limit_gib")):
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"`{name}` must be a positive number (got {value!r})")
    if limit is not None and peak is None:
        raise ValueError("`peak_memory_gib` is required when `memory_limit_gib` is set")


def _check_count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer (got {value!r})")
    return int(value)


def apply_gates(
    decision: Decision,
    *,
    control_error_rate: float,
    experiment_error_rate: float,
    max_error_rate_increase: float,
    control_requests: int | None = None,
    experiment_requests: int | None = None,
    wrong_outputs: int = 0,
    agreement_rate: float | None = None,
    min_agreement_rate: float | None = None,
    peak_memory_gib: float | None = None,
    memory_limit_gib: float | None = None,
    ttft: RatioCI | None = None,
    e2e: RatioCI | None = None,
    ttft_margin: float | None = None,
    ttft_min_delta_s: float = 0.0,
    ttft_control_median_s: float | None = None,
    confidence_level: float | None = None,
    bench_problem: str | None = None,
    mode_problem: str | None = None,
    correctness_unknown: str | None = None,
    ttft_problem: str | None = None,
) -> Verdict:
    """Weigh the TPOT decision against the gates; any failed gate makes the verdict "reject".

    Every gate is "pass", "fail" or "not assessed" (:class:`GateResult`). A gate that is
    not assessed keeps the TPOT word, adds a reason "gate 'x' not assessed: …" and is never
    counted as passed.

    * ``errors``: on the counts (``round(rate × requests)`` failed of ``control_requests``
      / ``experiment_requests``), one-sided bounds at ``confidence_level`` (default the
      decision's) on the rise ``p_e - p_c`` (:func:`error_increase_bounds`): pass when the
      upper bound is ≤ ``max_error_rate_increase``, fail when the lower bound exceeds it,
      else not assessed (too few requests); not assessed without counts or with 0 requests.
    * ``outputs``: fail when any output is flagged wrong, or ``agreement_rate`` is below
      ``min_agreement_rate`` when that is given. ``memory``: fail when the peak exceeds
      ``memory_limit_gib``, when given.
    * ``ttft`` and ``e2e`` (ratio CIs of experiment / control, from the same block model as
      TPOT): with limit ``1 + m`` (``m`` = ``ttft_margin``, default the decision's δ, for
      TTFT — a draft adds its own prefill, so operators usually tolerate a bounded rise — and
      δ for E2E), **fail** when ``ci_low > 1 + m`` and, when ``ttft_min_delta_s`` is set
      (TTFT only), the median rise exceeds it; **pass** when ``ci_high ≤ 1 + m``, or with a
      minimum rise when ``(ci_high - 1) × ttft_control_median_s ≤ ttft_min_delta_s`` (the
      upper bound in seconds at the control's median); else **not assessed** (one block,
      or an interval too wide to tell). ``ttft_problem`` (the client's TTFT lag behind the
      server differed between the arms at this level) makes the TTFT gate "not assessed".

    Rates are fractions in [0, 1]. ``bench_problem`` (the A/A arm showed an effect, or idle
    servers loaded the arms unequally) fails the ``bench`` gate; ``mode_problem`` (a launch of
    the series did not run in the mode its params ask for; its records were left out) fails
    the ``mode`` gate. ``correctness_unknown`` (a sampled run whose outputs could not be
    scored) turns an "adopt" into "inconclusive". With ``bench_problem`` the verdict is then
    "untrustworthy", whatever TPOT says, because the bench cannot tell an effect from noise.
    """
    if not isinstance(decision, Decision):
        raise ValueError(f"`decision` must be a Decision (got {type(decision).__name__})")
    control = check_fraction(control_error_rate, "control_error_rate")
    experiment = check_fraction(experiment_error_rate, "experiment_error_rate")
    max_increase = check_fraction(max_error_rate_increase, "max_error_rate_increase")
    counts = (_check_count(control_requests, "control_requests"),
              _check_count(experiment_requests, "experiment_requests"))  # fmt: skip
    level = decision.confidence_level if confidence_level is None else confidence_level
    level = check_fraction(level, "confidence_level", low_open=True)
    _check_gate_inputs(
        wrong_outputs, agreement_rate, min_agreement_rate, peak_memory_gib, memory_limit_gib
    )
    gates = [
        _error_gate(control, experiment, max_increase, counts, level),
        _output_gate(int(wrong_outputs), agreement_rate, min_agreement_rate),
    ]
    if memory_limit_gib is not None:
        detail = f"peak {peak_memory_gib:.2f} GiB (limit {memory_limit_gib:.2f} GiB)"
        gates.append(_gate("memory", peak_memory_gib <= memory_limit_gib, detail))
    if ttft_problem:
        gates.append(GateResult("ttft", "not assessed", ttft_problem))
    elif ttft is not None:
        margin = decision.margin if ttft_margin is None else ttft_margin
        gates.append(_latency_gate("ttft", check_ci(ttft, "ttft"), margin, ttft_min_delta_s,
                                   ttft_control_median_s))  # fmt: skip
    if e2e is not None:
        gates.append(_latency_gate("e2e", check_ci(e2e, "e2e"), decision.margin))
    if mode_problem:
        gates.insert(0, GateResult("mode", "fail", mode_problem))
    if bench_problem:
        gates.insert(0, GateResult("bench", "fail", bench_problem))
    failed = [g for g in gates if g.failed]
    unknown = [g for g in gates if g.status == "not assessed"]
    reasons = [
        decision.reason,
        *(f"gate {g.name!r} failed: {g.detail}" for g in failed),
        *(f"gate {g.name!r} not assessed: {g.detail}" for g in unknown),
    ]
    word = "reject" if failed else decision.word
    if correctness_unknown and word == "adopt":
        word = "inconclusive"
        reasons.append(f"correctness unknown ({correctness_unknown}): cannot be adopted")
    if bench_problem:
        word = BENCH_WORD
    if failed and decision.word == "adopt":
        reasons.append("faster on TPOT, but a failed gate rules adoption out")
    return Verdict(word, tuple(reasons), decision, tuple(gates))
