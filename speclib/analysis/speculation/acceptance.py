"""Speculative acceptance: per request, and reconciled with the server's ``/metrics`` counters.

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
* **Totals over launches** (:func:`sum_counters`): the counter deltas of several launches
  of one series added up.

Pure functions of recorded data; nothing talks to a server.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speclib.core.prometheus import SpecCounters

__all__ = [
    "Reconciliation",
    "RequestAcceptance",
    "accepted_per_pos_from_histogram",
    "reconcile",
    "request_acceptance",
    "sum_counters",
]


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


# --------------------------------------------------------------------------- totals


def sum_counters(counters: Sequence[SpecCounters]) -> SpecCounters | None:
    """The counter deltas of several launches added up (``None`` for no launch).

    Per-position counts are added position by position; a launch with fewer positions
    counts 0 for the missing ones.
    """
    if not counters:
        return None
    width = max(len(c.accepted_per_pos) for c in counters)
    per_pos = [
        sum(c.accepted_per_pos[i] if i < len(c.accepted_per_pos) else 0 for c in counters)
        for i in range(width)
    ]
    return SpecCounters(
        num_drafts=sum(c.num_drafts for c in counters),
        num_draft_tokens=sum(c.num_draft_tokens for c in counters),
        num_accepted_tokens=sum(c.num_accepted_tokens for c in counters),
        accepted_per_pos=tuple(per_pos),
        present=any(c.present for c in counters),
    )
