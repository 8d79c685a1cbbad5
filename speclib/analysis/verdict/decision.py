"""The decision: turn a TPOT ratio CI and the gate inputs into one verdict word with reasons.

:func:`decide` applies the rule declared before the run (margin δ, confidence level) to a
:class:`~speclib.analysis.stats.paired.RatioCI` of experiment / control TPOT:

* **adopt** – the CI's upper bound is below ``1 - δ`` (time per token cut by more than the margin);
* **equivalent** – the CI lies inside ``(1 - δ, 1 + δ)``;
* **worse** – the CI's lower bound is above 1;
* **inconclusive** – anything else. Then it estimates how many more pairs (prompts), and
  with launches how many more launches, would likely reach a decision if the point
  estimate and the variance hold (half-widths scale with ``1/sqrt(n)``, and with
  launches also with the ratio of Student-t quantiles), or ``None`` when no finite amount
  below the cap would do.

The rules overlap only when the CI lies inside ``(1, 1 + δ)``: that is "equivalent", and
the reason says "equivalent within ±δ, but measurably slower". A CI inside ``(1 − δ, 1)``
is "equivalent" too, and the reason says "measurably faster, but by less than δ".

:func:`apply_gates` weighs more than TPOT: errors, wrong outputs, memory and clearly worse
TTFT or end-to-end latency turn any TPOT decision into **reject**, naming the gate. Each
gate is "pass", "fail" or "not assessed": no evidence is not a pass. A gate passes only
when its data rule the failure out (a latency interval whose upper bound is within the
limit, an error-rate bound within the allowance), fails when they show it, and is "not
assessed" otherwise (one block, an interval too wide, too few requests); that keeps the
TPOT word and adds a reason naming the gate.

:func:`holm_decide` decides several experiments against one control with Holm's step-down
procedure applied to the decisions: with k experiments still undecided, every one of them
gets a CI at confidence ``1 - α/k`` (α = 1 - family confidence); those whose CI reaches a
decision (adopt, equivalent or worse) are settled at that level and removed; the rest are
recomputed at ``1 - α/(k - settled)``; when a round settles none, the remaining ones are
inconclusive at that round's level. With one experiment this is the plain rule. It keeps
the family-wise error rate of the decisions at α (Holm 1979, with each decision read as
the rejection of the CI's complementary hypotheses); the CIs shown are those at the level
each comparison was settled, which is between ``1 - α/m`` and ``1 - α``.

Example::

    decision = decide(tpot_ci, margin=0.05)
    verdict = apply_gates(decision, control_error_rate=0.0, experiment_error_rate=0.01,
                          max_error_rate_increase=0.02, control_requests=400,
                          experiment_requests=400, wrong_outputs=0, ttft=ttft_ci, e2e=e2e_ci)
    print(verdict.word, verdict.reasons)

The module is over 500 lines because the rule, the planning of extra data that would
decide, the gates and Holm's procedure are one decision and share its validation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from scipy import stats

from speclib.analysis.stats.paired import RatioCI, t_width_scale
from speclib.core.jsonutil import jsonable

__all__ = [
    "BENCH_WORD",
    "DECISION_WORDS",
    "GATE_STATUSES",
    "MAX_EXTRA_LAUNCHES",
    "MAX_EXTRA_PAIRS",
    "VERDICT_WORDS",
    "Decision",
    "GateResult",
    "Verdict",
    "apply_gates",
    "decide",
    "error_increase_bounds",
    "holm_decide",
]

DECISION_WORDS = ("adopt", "equivalent", "worse", "inconclusive")
GATE_STATUSES = ("pass", "fail", "not assessed")
VERDICT_WORDS = (*DECISION_WORDS, "reject", "untrustworthy", "failed")
BENCH_WORD = "untrustworthy"  # the verdict when the bench itself shows an effect (A/A gate)
MAX_EXTRA_PAIRS = 100_000
"""Above this many extra pairs the planning answer is ``None`` (no practical n decides)."""
MAX_EXTRA_LAUNCHES = 1_000


@dataclass(frozen=True)
class Decision:
    """The TPOT decision. ``target_word`` is the decision the extra data would likely reach."""

    word: str
    reason: str
    margin: float
    confidence_level: float
    extra_pairs_needed: int | None = None
    extra_launches_needed: int | None = None
    target_word: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


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


# ------------------------------------------------------------------------- validation


def _check_fraction(value: Any, name: str, *, low_open: bool = False) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok and math.isfinite(value) and (0 < value < 1 if low_open else 0 <= value <= 1):
        return float(value)
    interval = "(0, 1)" if low_open else "[0, 1]"
    raise ValueError(f"`{name}` must be a number in {interval} (got {value!r})")


def _check_ci(ci: Any, name: str) -> RatioCI:
    if not isinstance(ci, RatioCI):
        raise ValueError(f"`{name}` must be a RatioCI (got {type(ci).__name__})")
    return ci


# ---------------------------------------------------------------------- the TPOT rule


def _classify(ci: RatioCI, margin: float) -> tuple[str, str]:
    lo, hi = ci.ci_low, ci.ci_high
    text = (
        f"TPOT ratio {ci.estimate:.3f} ({100 * ci.confidence_level:.3g}% CI {lo:.3f}–{hi:.3f}, "
        f"{ci.method}, {ci.n_pairs} pairs, {ci.n_launches} launch(es) per arm)"
    )
    if hi < 1 - margin:
        return "adopt", (
            f"{text}: upper bound below 1 − δ = {1 - margin:.3f}, time per token cut by more than δ"
        )
    if lo > 1 - margin and hi < 1 + margin:
        inside = f"inside (1 − δ, 1 + δ) = ({1 - margin:.3f}, {1 + margin:.3f})"
        if lo > 1:
            inside = (f"equivalent within ±δ = ±{margin:.3g}, but measurably slower: the whole "
                      f"interval is above 1 ({inside})")  # fmt: skip
        elif hi < 1:
            inside = (f"measurably faster, but by less than δ = {margin:.3g}: the whole "
                      f"interval is below 1 ({inside})")  # fmt: skip
        return "equivalent", f"{text}: {inside}"
    if lo > 1:
        return "worse", f"{text}: lower bound above 1, slower than control"
    return "inconclusive", f"{text}: no rule applies at δ = {margin:.3f}"


def _ratio(distance: float, half_width: float) -> float:
    return distance / half_width if half_width > 0 else math.inf


def _needed_shrink(ci: RatioCI, margin: float) -> tuple[float, str] | None:
    """Largest factor ``s`` on both half-widths (log scale) that would reach a decision.

    Returns ``(s, word)`` for the decision needing the least shrinking, or None when the
    estimate sits on a boundary (``s == 0``) or the interval is undefined.
    """
    if ci.method == "degenerate" or not (0 < ci.ci_low <= ci.ci_high < math.inf):
        return None
    est = math.log(ci.estimate)
    hw_lo, hw_hi = est - math.log(ci.ci_low), math.log(ci.ci_high) - est
    lower, upper = math.log(1 - margin), math.log(1 + margin)
    options = []
    if est < lower:
        options.append((_ratio(lower - est, hw_hi), "adopt"))
    if lower < est < upper:
        options.append((min(_ratio(est - lower, hw_lo), _ratio(upper - est, hw_hi)), "equivalent"))
    if est > 0:
        options.append((_ratio(est, hw_lo), "worse"))
    best = max(options, default=None)
    return best if best is not None and best[0] > 0 else None


def _extra_pairs(ci: RatioCI, shrink: float) -> int | None:
    """Extra pairs (launch count unchanged) so that the half-widths shrink by ``shrink``."""
    n = ci.n_pairs
    if ci.n_launches < 2:
        target = n / shrink**2
    else:
        var_b, var_w = ci.var_between or 0.0, ci.var_within or 0.0
        now = var_b / ci.n_launches + var_w / n
        room = shrink**2 * now - var_b / ci.n_launches
        if var_w <= 0 or room <= 0:
            return None
        target = var_w / room
    extra = math.floor(target) + 1 - n
    return max(extra, 1) if extra <= MAX_EXTRA_PAIRS else None


def _extra_launches(ci: RatioCI, shrink: float) -> int | None:
    """Extra launches (same pairs per launch) so that the half-widths shrink by ``shrink``.

    Both variance terms of the mean scale with ``1/L``, and the CI uses a t quantile on
    ``df`` degrees of freedom (the interval's own ``ci.df``, else ``L - 1``), which grow by
    one per added launch, so the half-width at ``L'`` launches is
    ``t[df + L' - L] / t[df] * sqrt(L / L')`` times today's.
    """
    n_launch = ci.n_launches
    df = ci.df if ci.df is not None else n_launch - 1
    if n_launch < 2 or df < 1:
        return None
    more = np.arange(n_launch + 1, n_launch + MAX_EXTRA_LAUNCHES + 1)
    scale = t_width_scale(
        n_blocks=n_launch, df=df, confidence_level=ci.confidence_level, blocks=more
    )
    hit = np.flatnonzero(scale < shrink)
    return int(more[hit[0]] - n_launch) if hit.size else None


def decide(ci: RatioCI, *, margin: float) -> Decision:
    """Apply the adopt / equivalent / worse / inconclusive rule to a TPOT ratio CI.

    ``margin`` is δ in (0, 1), declared before the run. For an inconclusive result the
    decision also carries ``extra_pairs_needed`` (more prompts over the same launches) and,
    with two or more launches, ``extra_launches_needed`` (more launches of the same size),
    each ``None`` when no amount up to the caps would likely decide.
    """
    _check_ci(ci, "ci")
    margin = _check_fraction(margin, "margin", low_open=True)
    word, reason = _classify(ci, margin)
    common = {"margin": margin, "confidence_level": ci.confidence_level}
    if word != "inconclusive":
        return Decision(word, reason, **common)
    if ci.method == "degenerate":
        return Decision(word, f"{reason}; one pair gives no variance estimate", **common)
    need = _needed_shrink(ci, margin)
    if need is None:
        return Decision(word, f"{reason}; the estimate sits on a boundary", **common)
    shrink, target = need
    blocks = ci.method.startswith("blocks")
    # A block interval's t quantile has df = blocks - 1 whatever the pairs per block: more
    # prompts cannot buy degrees of freedom, so only more blocks are advised.
    pairs = None if blocks else _extra_pairs(ci, shrink)
    launches = _extra_launches(ci, shrink)
    plan = _plan_text(pairs, launches, target, unit="blocks" if blocks else "launches")
    return Decision(word, f"{reason}; {plan}", **common, extra_pairs_needed=pairs,
                    extra_launches_needed=launches, target_word=target)  # fmt: skip


def _plan_text(
    pairs: int | None, launches: int | None, target: str, *, unit: str = "launches"
) -> str:
    parts = []
    if pairs is not None:
        parts.append(f"about {pairs} more pairs")
    if launches is not None:
        parts.append(f"about {launches} more {unit}")
    if not parts:
        return f"no practical amount of data would likely reach {target!r}"
    return " or ".join(parts) + f" would likely reach {target!r} if the estimate holds"


# ----------------------------------------------------------------------------- gates


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
        _check_fraction(min_agreement_rate, "min_agreement_rate")
        _check_fraction(agreement_rate, "agreement_rate")
    elif agreement_rate is not None:
        _check_fraction(agreement_rate, "agreement_rate")
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
    control = _check_fraction(control_error_rate, "control_error_rate")
    experiment = _check_fraction(experiment_error_rate, "experiment_error_rate")
    max_increase = _check_fraction(max_error_rate_increase, "max_error_rate_increase")
    counts = (_check_count(control_requests, "control_requests"),
              _check_count(experiment_requests, "experiment_requests"))  # fmt: skip
    level = decision.confidence_level if confidence_level is None else confidence_level
    level = _check_fraction(level, "confidence_level", low_open=True)
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
        gates.append(_latency_gate("ttft", _check_ci(ttft, "ttft"), margin, ttft_min_delta_s,
                                   ttft_control_median_s))  # fmt: skip
    if e2e is not None:
        gates.append(_latency_gate("e2e", _check_ci(e2e, "e2e"), decision.margin))
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


# ------------------------------------------------------------- several experiments


def holm_decide(
    compute_ci: Callable[[Any, float], RatioCI],
    names: Sequence[Hashable],
    *,
    family_confidence: float = 0.95,
    margin: float,
) -> dict[Any, tuple[RatioCI, Decision]]:
    """Decide several experiments against one control with Holm's step-down procedure.

    ``compute_ci(name, confidence_level)`` returns the TPOT :class:`RatioCI` of experiment
    ``name`` at that level (e.g. a closure over
    :func:`speclib.analysis.stats.paired.paired_ratio_ci`).
    Returns ``{name: (ci, decision)}``, each CI at the level its decision was made; see the
    module docstring for the procedure. ``names`` may be any hashable keys, e.g.
    ``(load level, arm)`` pairs when the family spans load levels.
    """
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"`names` must be non-empty and unique (got {names!r})")
    alpha = 1 - _check_fraction(family_confidence, "family_confidence", low_open=True)
    _check_fraction(margin, "margin", low_open=True)
    remaining, out = names, {}
    while remaining:
        level = 1 - alpha / len(remaining)
        results = {n: _check_ci(compute_ci(n, level), "compute_ci(...)") for n in remaining}
        decided = {n: decide(ci, margin=margin) for n, ci in results.items()}
        settled = [n for n in remaining if decided[n].word != "inconclusive"]
        for n in settled if settled else remaining:
            out[n] = (results[n], decided[n])
        remaining = [n for n in remaining if n not in out]
    return {n: out[n] for n in names}
