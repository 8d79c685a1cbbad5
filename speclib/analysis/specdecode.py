"""Speculative decoding: acceptance, reconciliation, output agreement and the speed-up model.

Everything here is a pure function of recorded data; nothing talks to a server.

* **Acceptance per request** (:func:`request_acceptance`) from the response's
  ``metrics.speculative_decoding`` (vLLM ``--per-request-spec-decode-metrics summary``).
  vLLM reports ``draft_acceptance_rate: 0.0`` when nothing was proposed (e.g. n-gram found
  no match); that is missing data, so the rate here is ``None`` and ``no_drafts`` is set.
* **Reconciliation** (:func:`reconcile`) of the per-request sums with the ``/metrics``
  counter deltas of the same window. In vLLM's scheduler every verify step that had draft
  tokens does both ``SpecDecodingStats.observe_draft`` (→ ``vllm:spec_decode_num_drafts``)
  and ``RequestSpecDecodeMetrics.observe`` (→ one histogram entry, so ``num_spec_steps``);
  hence ``num_spec_steps ↔ num_drafts``, ``num_draft_tokens ↔ num_draft_tokens``,
  ``num_accepted_draft_tokens ↔ num_accepted_tokens``, and the histogram's tail sums ↔
  ``num_accepted_tokens_per_pos``.
* **Greedy output agreement** (:func:`greedy_agreement`, :func:`compare_outputs`,
  :func:`summarize_agreement`): speculation must not change greedy output; where it does,
  the first divergence and a short excerpt go into the report.
* **Output classes** (:func:`classify_output`) beside HTTP errors: empty outputs and
  streams cut by an error are failures even when the client saw status 200.
* **The Leviathan et al. (2023) model** (:func:`leviathan_speedup`,
  :func:`expected_tokens_per_step`, :func:`estimate_draft_cost`, :func:`explain_speedup`):
  what speed-up the measured acceptance and draft cost predict, and which lever (cheaper
  draft, better-matched draft, another ``k``) would help most.
* Chunk-level helpers (:func:`tokens_per_chunk_distribution`, :func:`itl_summary`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from speclib.core.prometheus import SpecCounters

__all__ = [
    "OUTPUT_CLASSES",
    "Agreement",
    "AgreementSummary",
    "ChunkDistribution",
    "ItlSummary",
    "Reconciliation",
    "RequestAcceptance",
    "SpeedupExplanation",
    "accepted_per_pos_from_histogram",
    "alpha_from_mean_length",
    "classify_output",
    "compare_outputs",
    "decode_steps",
    "estimate_draft_cost",
    "expected_tokens_per_step",
    "explain_speedup",
    "greedy_agreement",
    "itl_summary",
    "leviathan_speedup",
    "reconcile",
    "request_acceptance",
    "spec_step_time",
    "summarize_agreement",
    "tokens_per_chunk_distribution",
]

OUTPUT_CLASSES = ("ok", "http_error", "empty_output", "truncated_by_error", "implausible")
"""Every value :func:`classify_output` can return (``implausible`` is set by a later check)."""


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Field of a record-like: attribute (RequestRecord, namedtuple) or key (dict, Series).

    Missing values (``None``, NaN, ``pd.NA``) come back as ``default``.
    """
    if isinstance(obj, Mapping) or callable(getattr(obj, "get", None)):
        value = obj.get(name, default)
    else:
        value = getattr(obj, name, default)
    return default if _missing(value) else value


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str | bytes | list | tuple | dict):
        return False
    try:
        return bool(value != value)  # NaN
    except (TypeError, ValueError):  # pd.NA, arrays
        return value.__class__.__name__ == "NAType"


# --------------------------------------------------------------------------- per request


def _as_count(value: Any, name: str) -> int:
    """A non-negative integer (int, or integral float from JSON); else ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"spec field `{name}` must be a non-negative integer (got {value!r})")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"spec field `{name}` must be a non-negative integer (got {value!r})")
    return int(value)


def _field(spec: Mapping[str, Any], key: str) -> int | None:
    value = spec.get(key)
    return None if value is None else _as_count(value, key)


def accepted_per_pos_from_histogram(histogram: Sequence[int]) -> tuple[int, ...]:
    """Steps whose draft at position ``i`` was accepted: ``sum(histogram[i+1:])``.

    ``histogram[j]`` counts verify steps that accepted exactly ``j`` drafts (as vLLM's
    ``acceptance_histogram``), so position ``i`` was accepted in every step with ``j > i``.
    """
    hist = [int(h) for h in histogram]
    return tuple(sum(hist[i + 1 :]) for i in range(max(len(hist) - 1, 0)))


@dataclass(frozen=True)
class RequestAcceptance:
    """Acceptance of one request's drafts.

    ``present`` is False when the request carried no spec metrics (control series, failed
    request, ``n > 1``); ``no_drafts`` is True when it did but nothing was proposed. In both
    cases ``rate`` is ``None``. ``mean_length`` includes the bonus token and is ``None``
    without verify steps.
    """

    present: bool
    num_spec_steps: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    histogram: tuple[int, ...] = ()
    num_spec_tokens: int | None = None
    rate: float | None = None
    mean_length: float | None = None
    no_drafts: bool = False


def request_acceptance(spec: Mapping[str, Any] | None) -> RequestAcceptance:
    """Acceptance from one ``metrics.speculative_decoding`` dict (``None`` → not present).

    Counts are taken from ``num_spec_steps``, ``num_draft_tokens`` and
    ``num_accepted_draft_tokens``; a missing step or accepted count is rebuilt from
    ``acceptance_histogram``. The server's own ``draft_acceptance_rate`` and
    ``mean_acceptance_length`` are not trusted for the no-draft case (vLLM reports 0.0 and
    1.0 there); they are recomputed.
    """
    if spec is None:
        return RequestAcceptance(present=False)
    if not isinstance(spec, Mapping):
        raise TypeError(f"`spec` must be a dict or None (got {type(spec).__name__})")
    raw_hist = spec.get("acceptance_histogram") or ()
    hist = tuple(_as_count(h, "acceptance_histogram") for h in raw_hist)
    steps = _field(spec, "num_spec_steps")
    accepted = _field(spec, "num_accepted_draft_tokens")
    drafted = _field(spec, "num_draft_tokens")
    if steps is None:
        steps = sum(hist)
    if accepted is None:
        accepted = sum(j * c for j, c in enumerate(hist))
    if drafted is None:
        raise ValueError("spec field `num_draft_tokens` is missing")
    return RequestAcceptance(
        present=True,
        num_spec_steps=steps,
        num_draft_tokens=drafted,
        num_accepted=accepted,
        histogram=hist,
        num_spec_tokens=_field(spec, "num_spec_tokens"),
        rate=accepted / drafted if drafted > 0 else None,
        mean_length=1.0 + accepted / steps if steps > 0 else None,
        no_drafts=drafted == 0,
    )


# --------------------------------------------------------------------------- reconciliation


@dataclass(frozen=True)
class Reconciliation:
    """Per-request sums against the server's counter deltas over the same window.

    ``diff_*`` are ``server − requests``: positive means the server counted drafts that no
    recorded response accounts for. ``matches`` compares within ``rel_tol`` (relative to
    the server's count; 0 = exact). ``explanation`` is ``None`` when everything matches.
    """

    n_requests: int
    n_with_metrics: int
    requests: SpecCounters
    server: SpecCounters
    diff_drafts: int
    diff_draft_tokens: int
    diff_accepted_tokens: int
    diff_per_pos: tuple[int, ...] | None
    matches: bool
    explanation: str | None


def _sum_requests(specs: Sequence[Mapping[str, Any] | None]) -> tuple[SpecCounters, int]:
    accs = [request_acceptance(s) for s in specs]
    present = [a for a in accs if a.present]
    width = max((len(a.histogram) for a in present), default=0)
    per_pos = [0] * max(width - 1, 0)
    for a in present:
        for i, c in enumerate(accepted_per_pos_from_histogram(a.histogram)):
            per_pos[i] += c
    sums = SpecCounters(
        num_drafts=sum(a.num_spec_steps for a in present),
        num_draft_tokens=sum(a.num_draft_tokens for a in present),
        num_accepted_tokens=sum(a.num_accepted for a in present),
        accepted_per_pos=tuple(per_pos),
        present=bool(present),
    )
    return sums, len(present)


def _padded(values: tuple[int, ...], width: int) -> tuple[int, ...]:
    return (*values, *([0] * (width - len(values))))


def _within(diff: int, reference: int, rel_tol: float) -> bool:
    return abs(diff) <= rel_tol * abs(reference)


def _explain(
    req: SpecCounters, srv: SpecCounters, diffs: Sequence[int], n_req: int, n_with: int
) -> str:
    if not srv.present:
        return (
            "the server exposes no vllm:spec_decode_* counters: speculation is off on it, or "
            "the snapshots come from another server (e.g. the control)"
        )
    if srv.num_drafts == 0 and req.num_drafts > 0:
        return (
            "the server counters did not move while responses report drafts: the server runs "
            "with --disable-log-stats (per-request metrics do not depend on it), or the "
            "snapshots come from another server"
        )
    reasons: list[str] = []
    if n_with < n_req:
        reasons.append(
            f"{n_req - n_with} of {n_req} request(s) carried no per-request spec metrics "
            "(failed or aborted requests, n>1 requests, or a server started without "
            "--per-request-spec-decode-metrics); the server counted their drafts anyway"
        )
    if any(d > 0 for d in diffs):
        reasons.append(
            "the server counted more than the responses report: outside traffic on the "
            "server, n>1 requests, requests the client abandoned before their final chunk, "
            "or requests missing from the list (warm-up requests also move the counters and "
            "must be counted or excluded: pass the spec of every request sent between the "
            "two snapshots), or the 'after' snapshot was taken before the server had "
            "recorded the last step (wait briefly after the last response)"
        )
    if any(d < 0 for d in diffs):
        reasons.append(
            "the responses report more than the server counted: the list includes requests "
            "sent outside the window (before the 'before' snapshot or after the 'after' "
            "one) or duplicated records"
        )
    return "; ".join(reasons) or "per-position counts disagree with the histograms"


def reconcile(
    per_request_specs: Iterable[Mapping[str, Any] | None],
    counters: SpecCounters,
    *,
    rel_tol: float = 0.0,
) -> Reconciliation:
    """Check the per-request spec metrics against the ``/metrics`` deltas of one window.

    ``per_request_specs`` must hold the ``spec`` of *every* request sent between the two
    snapshots, warm-up requests included, with ``None`` for requests that returned none.
    ``rel_tol`` (≥ 0) is the allowed ``|difference| / server count``.
    """
    if not (isinstance(rel_tol, int | float) and math.isfinite(rel_tol) and rel_tol >= 0):
        raise ValueError(f"`rel_tol` must be a finite number >= 0 (got {rel_tol!r})")
    specs = list(per_request_specs)
    req, n_with = _sum_requests(specs)
    d_drafts = counters.num_drafts - req.num_drafts
    d_tokens = counters.num_draft_tokens - req.num_draft_tokens
    d_acc = counters.num_accepted_tokens - req.num_accepted_tokens
    checks = [
        (d_drafts, counters.num_drafts),
        (d_tokens, counters.num_draft_tokens),
        (d_acc, counters.num_accepted_tokens),
    ]
    d_pos: tuple[int, ...] | None = None
    if counters.accepted_per_pos:  # absent on servers that do not export them
        width = max(len(counters.accepted_per_pos), len(req.accepted_per_pos))
        srv_pos = _padded(counters.accepted_per_pos, width)
        d_pos = tuple(
            s - r for s, r in zip(srv_pos, _padded(req.accepted_per_pos, width), strict=True)
        )
        checks += list(zip(d_pos, srv_pos, strict=True))
    matches = counters.present and all(_within(d, ref, rel_tol) for d, ref in checks)
    explanation = None
    if not matches:
        diffs = [d for d, _ in checks]
        explanation = _explain(req, counters, diffs, len(specs), n_with)
    return Reconciliation(
        n_requests=len(specs),
        n_with_metrics=n_with,
        requests=req,
        server=counters,
        diff_drafts=d_drafts,
        diff_draft_tokens=d_tokens,
        diff_accepted_tokens=d_acc,
        diff_per_pos=d_pos,
        matches=matches,
        explanation=explanation,
    )


# --------------------------------------------------------------------------- agreement


@dataclass(frozen=True)
class Agreement:
    """Whether one prompt's greedy output is the same with and without speculation.

    ``unit`` says what ``first_divergence`` and the lengths count: ``"tokens"`` when both
    sides had token ids, else ``"chars"``. When one output is a prefix of the other the
    divergence is at the shorter length. ``char_divergence`` locates the difference in the
    text (for the excerpts): ``context_before`` is the shared text just before it,
    ``control_after``/``experiment_after`` what each side says from there.
    """

    exact_match: bool
    unit: Literal["tokens", "chars"]
    first_divergence: int | None
    control_length: int
    experiment_length: int
    char_divergence: int | None = None
    context_before: str = ""
    control_after: str = ""
    experiment_after: str = ""


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def greedy_agreement(
    control_text: str,
    experiment_text: str,
    *,
    control_tokens: Sequence[int] | None = None,
    experiment_tokens: Sequence[int] | None = None,
    excerpt_chars: int = 40,
) -> Agreement:
    """Compare one prompt's control and experiment outputs (greedy sampling).

    Token ids are compared when both are given, else characters. Excerpts hold up to
    ``excerpt_chars`` characters each side of the first differing character.
    """
    if excerpt_chars < 0:
        raise ValueError(f"`excerpt_chars` must be >= 0 (got {excerpt_chars!r})")
    ctext, etext = control_text or "", experiment_text or ""
    if control_tokens is not None and experiment_tokens is not None:
        unit: Literal["tokens", "chars"] = "tokens"
        a, b = list(control_tokens), list(experiment_tokens)
    else:
        unit = "chars"
        a, b = ctext, etext  # type: ignore[assignment]
    same = a == b
    pos = None if same else _common_prefix(a, b)
    cpos = None if ctext == etext else _common_prefix(ctext, etext)

    def after(s: str, start: int) -> str:
        stop = start + excerpt_chars
        return s[start:stop] + ("…" if stop < len(s) else "")

    before = ctrl_after = exp_after = ""
    if cpos is not None:
        start = cpos - excerpt_chars
        before = ("…" if start > 0 else "") + ctext[max(start, 0) : cpos]
        ctrl_after, exp_after = after(ctext, cpos), after(etext, cpos)
    return Agreement(
        exact_match=same,
        unit=unit,
        first_divergence=pos,
        control_length=len(a),
        experiment_length=len(b),
        char_divergence=cpos,
        context_before=before,
        control_after=ctrl_after,
        experiment_after=exp_after,
    )


def compare_outputs(
    control_records: Iterable[Any],
    experiment_records: Iterable[Any],
    *,
    excerpt_chars: int = 40,
) -> dict[str, Agreement]:
    """Agreement per ``prompt_id`` present in both series.

    For each side the first successful (``ok`` and ``classify_output == "ok"``) record of
    phase ``"measure"`` per prompt is used; greedy output must be the same for every repeat
    anyway. Records may be :class:`~speclib.core.records.RequestRecord` or dict-likes.
    """

    def first_ok(records: Iterable[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for rec in records:
            if _get(rec, "phase", "measure") != "measure" or classify_output(rec) != "ok":
                continue
            out.setdefault(str(_get(rec, "prompt_id")), rec)
        return out

    ctrl, exp = first_ok(control_records), first_ok(experiment_records)
    result: dict[str, Agreement] = {}
    for pid in ctrl:
        if pid not in exp:
            continue
        c, e = ctrl[pid], exp[pid]
        result[pid] = greedy_agreement(
            _text(c),
            _text(e),
            control_tokens=_get(c, "token_ids"),
            experiment_tokens=_get(e, "token_ids"),
            excerpt_chars=excerpt_chars,
        )
    return result


def _text(rec: Any) -> str:
    text = _get(rec, "text", "")
    return text if isinstance(text, str) else ""


@dataclass(frozen=True)
class AgreementSummary:
    """Agreement over prompts. ``unit`` is ``"mixed"`` if some were compared by tokens."""

    n_compared: int
    n_exact: int
    n_diverged: int
    exact_match_rate: float | None
    median_first_divergence: float | None
    unit: str


def summarize_agreement(
    agreements: Iterable[Agreement] | Mapping[str, Agreement],
) -> AgreementSummary:
    """Exact-match rate and median first-divergence position over prompts."""
    items = list(agreements.values() if isinstance(agreements, Mapping) else agreements)
    n = len(items)
    exact = sum(a.exact_match for a in items)
    positions = [a.first_divergence for a in items if a.first_divergence is not None]
    units = {a.unit for a in items}
    return AgreementSummary(
        n_compared=n,
        n_exact=exact,
        n_diverged=n - exact,
        exact_match_rate=exact / n if n else None,
        median_first_divergence=float(statistics.median(positions)) if positions else None,
        unit=units.pop() if len(units) == 1 else ("mixed" if units else "tokens"),
    )


# --------------------------------------------------------------------------- output class


def _tokens_out(rec: Any) -> int | None:
    n = _get(rec, "output_tokens")
    if n is not None:
        return int(n)
    chunks = _get(rec, "chunk_tokens")
    if chunks is not None and len(chunks) > 0:
        return int(sum(chunks))
    return None


def classify_output(rec: Any, *, implausible: bool = False) -> str:
    """Failure class of one record-like (one of :data:`OUTPUT_CLASSES`).

    * ``"http_error"``: the request failed before any output: an error status, or no
      response at all (connection refused, timeout);
    * ``"truncated_by_error"``: the response started (status 200 or tokens arrived) and
      then failed, or it finished with ``finish_reason`` ``"error"``/``"abort"``;
    * ``"empty_output"``: succeeded but produced no token and no text;
    * ``"implausible"``: succeeded but a later check (e.g. log-probs) flagged the text,
      passed in as ``implausible=True``;
    * ``"ok"`` otherwise.
    """
    ok = bool(_get(rec, "ok", False))
    status = _get(rec, "status")
    n_tokens = _tokens_out(rec)
    text = _get(rec, "text", "")
    text = text if isinstance(text, str) else ""
    got_output = bool(text) or bool(n_tokens)
    if not ok:
        started = status is not None and 200 <= int(status) < 300
        return "truncated_by_error" if (started or got_output) else "http_error"
    if _get(rec, "finish_reason") in ("error", "abort"):
        return "truncated_by_error"
    if not got_output:
        return "empty_output"
    return "implausible" if implausible else "ok"


# --------------------------------------------------------------------------- Leviathan model


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


def decode_steps(*, output_tokens: int, num_spec_steps: int, num_accepted: int) -> int:
    """Engine steps after the first token: verify steps plus plain steps without drafts.

    A verify step yields ``1 + accepted`` tokens; steps where the proposer offered nothing
    (n-gram without a match) yield one token and are not in ``num_spec_steps``.
    """
    plain = (output_tokens - 1) - (num_spec_steps + num_accepted)
    return num_spec_steps + max(plain, 0)


def spec_step_time(
    *, e2e_s: float, ttft_s: float, output_tokens: int, num_spec_steps: int, num_accepted: int
) -> float | None:
    """Mean time of one decode step of a speculative request: ``(E2E − TTFT) / steps``."""
    steps = decode_steps(
        output_tokens=output_tokens, num_spec_steps=num_spec_steps, num_accepted=num_accepted
    )
    if steps <= 0:
        return None
    return (e2e_s - ttft_s) / steps


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
    (e.g. from :func:`spec_step_time`) or ``spec_tpot`` and ``mean_acceptance_length``
    (step time ≈ TPOT × tokens per step). On CPU the target is compute-bound, so verifying
    ``k + 1`` positions costs more than one decode step; that extra cost lands in ``c``,
    which is therefore larger than the draft/target size ratio. The result may be slightly
    negative from timing noise; it is returned as measured.
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


# --------------------------------------------------------------------------- chunks and ITL


@dataclass(frozen=True)
class ChunkDistribution:
    """How many output tokens each streamed chunk carried, over many requests.

    ``sizes[i]`` tokens per chunk were seen ``counts[i]`` times. Without speculation every
    content chunk carries one token; under speculation up to ``k + 1``.
    """

    sizes: tuple[int, ...]
    counts: tuple[int, ...]
    n_chunks: int
    mean: float | None
    share_multi_token: float | None


def tokens_per_chunk_distribution(
    chunk_tokens: Iterable[Sequence[int] | None],
) -> ChunkDistribution:
    """Distribution of tokens per chunk over the ``chunk_tokens`` of many requests."""
    tally: dict[int, int] = {}
    for chunks in chunk_tokens:
        for n in chunks or ():
            tally[int(n)] = tally.get(int(n), 0) + 1
    sizes = tuple(sorted(tally))
    counts = tuple(tally[s] for s in sizes)
    total = sum(counts)
    return ChunkDistribution(
        sizes=sizes,
        counts=counts,
        n_chunks=total,
        mean=sum(s * c for s, c in zip(sizes, counts, strict=True)) / total if total else None,
        share_multi_token=sum(c for s, c in zip(sizes, counts, strict=True) if s > 1) / total
        if total
        else None,
    )


@dataclass(frozen=True)
class ItlSummary:
    """Gaps between token-bearing chunks of one request (seconds)."""

    n_gaps: int
    median_gap_s: float | None
    p90_gap_s: float | None
    median_gap_per_token_s: float | None


def _quantile(values: Sequence[float], q: float) -> float:
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def itl_summary(chunk_offsets_s: Sequence[float], chunk_tokens: Sequence[int]) -> ItlSummary:
    """Inter-chunk latency of one request, and the same gap divided by the chunk's tokens.

    ITL is not comparable between a control and a speculative series: without speculation
    each chunk is one token and a gap is one decode step; under speculation a chunk carries
    ``1 + accepted`` tokens and a gap is one *verify* step, longer than a plain step but
    amortised over several tokens. Compare TPOT (or end-to-end time) across series; use
    these numbers only to describe the stream's burstiness within one series.
    ``median_gap_per_token_s`` divides each gap by the token count of the chunk that ended it.
    """
    if len(chunk_offsets_s) != len(chunk_tokens):
        raise ValueError(
            "`chunk_offsets_s` and `chunk_tokens` must have the same length "
            f"(got {len(chunk_offsets_s)} and {len(chunk_tokens)})"
        )
    gaps = [b - a for a, b in itertools.pairwise(chunk_offsets_s)]
    if not gaps:
        return ItlSummary(n_gaps=0, median_gap_s=None, p90_gap_s=None, median_gap_per_token_s=None)
    per_token = [g / n for g, n in zip(gaps, chunk_tokens[1:], strict=True) if n > 0]
    return ItlSummary(
        n_gaps=len(gaps),
        median_gap_s=float(statistics.median(gaps)),
        p90_gap_s=_quantile(gaps, 0.9),
        median_gap_per_token_s=float(statistics.median(per_token)) if per_token else None,
    )
