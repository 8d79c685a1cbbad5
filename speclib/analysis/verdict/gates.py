"""The gates: what a decision must also pass before it becomes a verdict.

Each gate is a small frozen object holding its rule, declared before the run
(:class:`ErrorGate`: the allowed rise in error rate, a Wilson bound on it from
:func:`error_increase_bounds`; :class:`OutputGate`: wrong outputs, greedy agreement;
:class:`MemoryGate`; :class:`TtftGate` and :class:`E2eGate`: latency intervals;
:class:`ModeGate`: the server mode; :class:`BenchGate`: the bench), and each reads one
record, the comparison's :class:`GateEvidence`. :func:`rule_gates` builds them from the
params' ``analysis`` section; :func:`apply_gates` weighs a
:class:`~speclib.analysis.verdict.decision.Decision` against them and returns the
:class:`Verdict` with its :class:`GateResult` list. The decision rule itself lives in
:mod:`speclib.analysis.verdict.decision`.

:func:`apply_gates` weighs more than TPOT: errors, wrong outputs, memory and clearly worse
TTFT or end-to-end latency turn any TPOT decision into **reject**, naming the gate. Each
gate is "pass", "fail" or "not assessed": no evidence is not a pass. A gate passes only
when its data rule the failure out (a latency interval whose upper bound is within the
limit, an error-rate bound within the allowance), fails when they show it, and is "not
assessed" otherwise (one block, an interval too wide, too few requests); that keeps the
TPOT word and adds a reason naming the gate. A gate that does not apply to the evidence
(no memory limit, no latency interval, no bench problem) is left out of the list.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

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

if TYPE_CHECKING:
    from speclib.params.protocol import AnalysisParams

__all__ = [
    "BENCH_WORD",
    "GATE_STATUSES",
    "VERDICT_WORDS",
    "BenchGate",
    "E2eGate",
    "ErrorGate",
    "Gate",
    "GateEvidence",
    "GateResult",
    "MemoryGate",
    "ModeGate",
    "OutputGate",
    "TtftGate",
    "Verdict",
    "apply_gates",
    "error_increase_bounds",
    "rule_gates",
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


def _check_count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer (got {value!r})")
    return int(value)


def _check_positive(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"`{name}` must be a positive number (got {value!r})")
    return float(value)


@dataclass(frozen=True)
class GateEvidence:
    """What one comparison (an arm against the control at one load level) measured that
    the gates weigh: the one record every gate reads. Validated when built; each message
    names the field.

    Rates are fractions in [0, 1]; ``control_requests`` / ``experiment_requests`` the
    measured requests of each side (None: not counted); ``wrong_outputs`` the arm's outputs
    flagged wrong beyond the control's (with the sampled run's implausible ones);
    ``agreement_rate`` the greedy outputs' exact-match rate (None: not compared);
    ``peak_memory_gib`` the arm's peak server memory (None: not measured); ``ttft`` and
    ``e2e`` the ratio intervals of experiment / control from the block model of TPOT;
    ``ttft_control_median_s`` the control's median TTFT over the pairs. The problems are
    sentences, None when there is none: ``ttft_problem`` (the client's TTFT lag behind the
    server differed between the arms at this level), ``bench_problem`` (the A/A arm showed an
    effect, or idle servers loaded the arms unequally), ``mode_problem`` (a launch of the arm
    did not run in the mode its params ask for; its records were left out),
    ``correctness_unknown`` (a sampled run whose outputs could not be scored).
    """

    control_error_rate: float
    experiment_error_rate: float
    control_requests: int | None = None
    experiment_requests: int | None = None
    wrong_outputs: int = 0
    agreement_rate: float | None = None
    peak_memory_gib: float | None = None
    ttft: RatioCI | None = None
    e2e: RatioCI | None = None
    ttft_control_median_s: float | None = None
    ttft_problem: str | None = None
    bench_problem: str | None = None
    mode_problem: str | None = None
    correctness_unknown: str | None = None

    def __post_init__(self) -> None:
        for name in ("control_error_rate", "experiment_error_rate"):
            object.__setattr__(self, name, check_fraction(getattr(self, name), name))
        for name in ("control_requests", "experiment_requests"):
            object.__setattr__(self, name, _check_count(getattr(self, name), name))
        wrong = self.wrong_outputs
        if isinstance(wrong, bool) or not isinstance(wrong, (int, np.integer)) or wrong < 0:
            raise ValueError(f"`wrong_outputs` must be a non-negative integer (got {wrong!r})")
        object.__setattr__(self, "wrong_outputs", int(wrong))
        if self.agreement_rate is not None:
            check_fraction(self.agreement_rate, "agreement_rate")
        _check_positive(self.peak_memory_gib, "peak_memory_gib")
        for name in ("ttft", "e2e"):
            if getattr(self, name) is not None:
                check_ci(getattr(self, name), name)


class Gate(Protocol):
    """A gate: a rule declared before the run, weighed against one :class:`GateEvidence`.

    :meth:`assess` returns the gate's :class:`GateResult`, or None where the gate does not
    apply to that evidence (no memory limit set, no bench problem, …)."""

    name: str

    def assess(self, evidence: GateEvidence) -> GateResult | None: ...


@dataclass(frozen=True)
class BenchGate:
    """Fails when the bench cannot be trusted (``bench_problem``); the verdict is then
    "untrustworthy", whatever TPOT says. Absent otherwise."""

    name: ClassVar[str] = "bench"

    def assess(self, evidence: GateEvidence) -> GateResult | None:
        """Fail with the bench problem, else None."""
        problem = evidence.bench_problem
        return GateResult(self.name, "fail", problem) if problem else None


@dataclass(frozen=True)
class ModeGate:
    """Fails when a launch of the arm did not run in the mode its params ask for
    (``mode_problem``). Absent otherwise."""

    name: ClassVar[str] = "mode"

    def assess(self, evidence: GateEvidence) -> GateResult | None:
        """Fail with the mode problem, else None."""
        problem = evidence.mode_problem
        return GateResult(self.name, "fail", problem) if problem else None


@dataclass(frozen=True)
class ErrorGate:
    """The rise in error rate against the allowance ``max_increase``: on the counts
    (``round(rate × requests)`` failed of each side's requests), one-sided bounds at
    ``confidence_level`` on ``p_e - p_c`` (:func:`error_increase_bounds`); pass when the
    upper bound is ≤ ``max_increase``, fail when the lower bound exceeds it, else not
    assessed (too few requests); not assessed without counts or with 0 requests."""

    max_increase: float
    confidence_level: float
    name: ClassVar[str] = "errors"

    def __post_init__(self) -> None:
        check_fraction(self.max_increase, "max_increase")
        check_fraction(self.confidence_level, "confidence_level", low_open=True)

    def assess(self, evidence: GateEvidence) -> GateResult:
        """Always assessed (perhaps "not assessed")."""
        return _error_gate(
            evidence.control_error_rate,
            evidence.experiment_error_rate,
            self.max_increase,
            (evidence.control_requests, evidence.experiment_requests),
            self.confidence_level,
        )


@dataclass(frozen=True)
class OutputGate:
    """Fails when any output is flagged wrong, or the greedy agreement is below
    ``min_agreement_rate`` (applied where the outputs were compared)."""

    min_agreement_rate: float | None = None
    name: ClassVar[str] = "outputs"

    def __post_init__(self) -> None:
        if self.min_agreement_rate is not None:
            check_fraction(self.min_agreement_rate, "min_agreement_rate")

    def assess(self, evidence: GateEvidence) -> GateResult:
        """Always assessed: pass or fail."""
        rate = evidence.agreement_rate
        minimum = self.min_agreement_rate if rate is not None else None
        return _output_gate(evidence.wrong_outputs, rate, minimum)


@dataclass(frozen=True)
class MemoryGate:
    """Fails when the arm's peak server memory exceeds ``limit_gib``; absent without a
    limit or without a measured peak."""

    limit_gib: float | None = None
    name: ClassVar[str] = "memory"

    def __post_init__(self) -> None:
        _check_positive(self.limit_gib, "limit_gib")

    def assess(self, evidence: GateEvidence) -> GateResult | None:
        """Pass or fail against the limit, else None."""
        peak, limit = evidence.peak_memory_gib, self.limit_gib
        if limit is None or peak is None:
            return None
        return _gate(self.name, peak <= limit, f"peak {peak:.2f} GiB (limit {limit:.2f} GiB)")


@dataclass(frozen=True)
class TtftGate:
    """TTFT against the limit ``1 + margin`` (a draft adds its own prefill, so operators
    usually tolerate a bounded rise): **fail** when ``ci_low > 1 + margin`` and, with
    ``min_delta_s`` set, the median rise exceeds it; **pass** when ``ci_high ≤ 1 + margin``,
    or with a minimum rise when ``(ci_high - 1) × ttft_control_median_s ≤ min_delta_s``
    (the upper bound in seconds at the control's median); else **not assessed** (one block,
    an interval too wide to tell, or the evidence's ``ttft_problem``). Absent without a
    TTFT interval."""

    margin: float
    min_delta_s: float = 0.0
    name: ClassVar[str] = "ttft"

    def assess(self, evidence: GateEvidence) -> GateResult | None:
        """The TTFT gate's result, None without a TTFT interval or problem."""
        if evidence.ttft_problem:
            return GateResult(self.name, "not assessed", evidence.ttft_problem)
        if evidence.ttft is None:
            return None
        return _latency_gate(self.name, evidence.ttft, self.margin, self.min_delta_s,
                             evidence.ttft_control_median_s)  # fmt: skip


@dataclass(frozen=True)
class E2eGate:
    """End-to-end latency against ``1 + margin``: fail when ``ci_low > 1 + margin``, pass
    when ``ci_high ≤ 1 + margin``, else not assessed. Absent without an E2E interval."""

    margin: float
    name: ClassVar[str] = "e2e"

    def assess(self, evidence: GateEvidence) -> GateResult | None:
        """The E2E gate's result, None without an E2E interval."""
        return None if evidence.e2e is None else _latency_gate(self.name, evidence.e2e, self.margin)


def rule_gates(analysis: AnalysisParams) -> tuple[Gate, ...]:
    """The gates the params' ``analysis`` section declares, in the order a verdict lists
    them: bench, mode, errors, outputs, memory, TTFT, E2E."""
    a = analysis
    return (
        BenchGate(),
        ModeGate(),
        ErrorGate(a.max_error_rate_increase, a.confidence),
        OutputGate(a.min_greedy_agreement),
        MemoryGate(a.memory_limit_gib),
        TtftGate(a.ttft_margin, a.ttft_max_increase_ms / 1e3),
        E2eGate(a.margin),
    )


def apply_gates(decision: Decision, evidence: GateEvidence, gates: Sequence[Gate]) -> Verdict:
    """Weigh the TPOT decision against ``gates``, each assessing ``evidence``; any failed
    gate makes the verdict "reject".

    Every gate that applies is "pass", "fail" or "not assessed" (:class:`GateResult`), in
    the order of ``gates``. A gate that is not assessed keeps the TPOT word, adds a reason
    "gate 'x' not assessed: …" and is never counted as passed. The evidence's
    ``correctness_unknown`` turns an "adopt" into "inconclusive"; its ``bench_problem``
    makes the verdict "untrustworthy", whatever TPOT says, because the bench cannot tell an
    effect from noise.
    """
    if not isinstance(decision, Decision):
        raise ValueError(f"`decision` must be a Decision (got {type(decision).__name__})")
    if not isinstance(evidence, GateEvidence):
        raise ValueError(f"`evidence` must be a GateEvidence (got {type(evidence).__name__})")
    results = [r for g in gates if (r := g.assess(evidence)) is not None]
    failed = [g for g in results if g.failed]
    unknown = [g for g in results if g.status == "not assessed"]
    reasons = [
        decision.reason,
        *(f"gate {g.name!r} failed: {g.detail}" for g in failed),
        *(f"gate {g.name!r} not assessed: {g.detail}" for g in unknown),
    ]
    word = "reject" if failed else decision.word
    if evidence.correctness_unknown and word == "adopt":
        word = "inconclusive"
        reasons.append(f"correctness unknown ({evidence.correctness_unknown}): cannot be adopted")
    if evidence.bench_problem:
        word = BENCH_WORD
    if failed and decision.word == "adopt":
        reasons.append("faster on TPOT, but a failed gate rules adoption out")
    return Verdict(word, tuple(reasons), decision, tuple(results))
