"""Measurement error of a client against the stand-in server's true send times (pure functions).

The stand-in server (:mod:`tests.fakeserver`) logs, per request, when it received the
request (``t_recv``) and when it handed each event to the kernel. On Linux
``time.perf_counter`` is ``CLOCK_MONOTONIC`` in every process, so those times compare
directly with what a client stamped. Each client is judged against the truth of what it
claims to measure:

- the kit: TTFT to the first chunk that carried a token, E2E to ``[DONE]``,
  TPOT = (E2E − TTFT) / (tokens − 1);
- ``vllm bench serve``: TTFT to the first chunk with ``choices`` (the role chunk), latency
  to the last chunk with ``choices`` (the finish chunk), TPOT with the same formula.

True times run from the server's receipt of the request, so everything the client does
between its own start stamp and the request reaching the server counts as error, as does
everything between an event leaving the server and the client stamping it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ErrorStats",
    "RequestError",
    "Truth",
    "bench_errors",
    "kit_errors",
    "summarize",
    "truth_of",
]


@dataclass(frozen=True)
class Truth:
    """True times of one exchange (server clock = client clock), seconds."""

    key: str
    t_recv: float
    t_role: float  # first event with choices (role chunk; first token chunk without one)
    t_first_token: float
    t_last_choice: float  # last event with choices (finish chunk, else last token chunk)
    t_done: float
    n_tokens: int
    n_events: int
    lateness_s: float  # median lateness of token chunks against the script (server load)


def _text_key(key: str) -> str:
    """The prompt text of an exchange key (vllm bench sends content as a list of parts)."""
    if not key.startswith("[{"):
        return key
    try:
        parts = json.loads(key)
    except ValueError:
        return key
    texts = [p.get("text") for p in parts if isinstance(p, dict)]
    return "".join(texts) if all(isinstance(t, str) for t in texts) else key


def truth_of(exchange: Any) -> Truth | None:
    """The :class:`Truth` of a finished ``tests.fakeserver.Exchange`` (None if incomplete)."""
    events = exchange.events
    tokens = [e for e in events if e.n_tokens > 0]
    choices = [e for e in events if e.kind in ("role", "token", "finish")]
    done = [e for e in events if e.kind == "done"]
    if not tokens or not done or exchange.outcome != "done":
        return None
    late = [e.t_sent - e.t_due for e in tokens if e.t_due is not None]
    return Truth(
        key=_text_key(exchange.key),
        t_recv=exchange.t_recv,
        t_role=choices[0].t_sent,
        t_first_token=tokens[0].t_sent,
        t_last_choice=choices[-1].t_sent,
        t_done=done[0].t_sent,
        n_tokens=sum(e.n_tokens for e in tokens),
        n_events=len(events),
        lateness_s=statistics.median(late) if late else 0.0,
    )


@dataclass(frozen=True)
class RequestError:
    """Measured minus true, seconds, for one request; ``*_true`` are the true values.

    ``send_lag_s`` is the server's receipt minus the client's start stamp;
    ``recv_lag_s`` the client's first-token stamp minus the server's send of it.
    """

    ttft: float
    ttft_true: float
    tpot: float
    tpot_true: float
    e2e: float
    e2e_true: float
    send_lag_s: float
    recv_lag_s: float
    queue_s: float
    n_events: int


def _error(
    truth: Truth,
    *,
    start: float,
    ttft: float,
    end: float,
    first_true: float,
    end_true: float,
    queue_s: float,
) -> RequestError:
    n = truth.n_tokens
    tpot = (end - ttft) / (n - 1)
    tpot_true = (end_true - first_true) / (n - 1)
    return RequestError(
        ttft=ttft - (first_true - truth.t_recv),
        ttft_true=first_true - truth.t_recv,
        tpot=tpot - tpot_true,
        tpot_true=tpot_true,
        e2e=end - (end_true - truth.t_recv),
        e2e_true=end_true - truth.t_recv,
        send_lag_s=truth.t_recv - start,
        recv_lag_s=start + ttft - first_true,
        queue_s=queue_s,
        n_events=truth.n_events,
    )


def kit_errors(records: Iterable[Any], truths: Mapping[str, Truth]) -> list[RequestError]:
    """Errors of the kit's records (``prompt_id`` is the exchange key); failures skipped."""
    from speclib.core.records import e2e_s, ttft_s

    out = []
    for rec in records:
        truth = truths.get(rec.prompt_id)
        ttft, e2e = ttft_s(rec), e2e_s(rec)
        if truth is None or ttft is None or e2e is None or truth.n_tokens < 2:
            continue
        out.append(
            _error(
                truth,
                start=rec.t_send_mono,
                ttft=ttft,
                end=e2e,
                first_true=truth.t_first_token,
                end_true=truth.t_done,
                queue_s=rec.queue_wait_s,
            )
        )
    return out


def bench_errors(
    requests: Sequence[Any], keys: Sequence[str], exchanges: Iterable[Any]
) -> list[RequestError]:
    """Errors of ``vllm bench serve``'s per-request detail (``BenchRequest``, file order).

    ``keys[i]`` is the prompt of request ``i``. A key can have several exchanges (the
    bench's readiness probe re-sends the first prompt): request ``i`` is paired with the
    first exchange of its key received after its start stamp.
    """
    by_key: dict[str, list[Truth]] = {}
    for ex in exchanges:
        truth = truth_of(ex)
        if truth is not None:
            by_key.setdefault(truth.key, []).append(truth)
    for lst in by_key.values():
        lst.sort(key=lambda t: t.t_recv)
    out = []
    for req, key in zip(requests, keys, strict=False):
        if not req.ok or req.start_time is None or req.ttft_s is None or req.latency_s is None:
            continue
        truth = next((t for t in by_key.get(key, ()) if t.t_recv >= req.start_time), None)
        if truth is None or truth.n_tokens < 2:
            continue
        out.append(
            _error(
                truth,
                start=req.start_time,
                ttft=req.ttft_s,
                end=req.latency_s,
                first_true=truth.t_role,
                end_true=truth.t_last_choice,
                queue_s=req.queue_s or 0.0,
            )
        )
    return out


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    pos = 0.99 * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class ErrorStats:
    """One run's error distribution: medians and p99 over requests (ms and %)."""

    n: int
    ttft_med_ms: float
    ttft_p99_ms: float
    ttft_med_pct: float
    tpot_med_ms: float
    tpot_p99_ms: float
    tpot_med_pct: float
    tpot_p99_pct: float
    e2e_med_ms: float
    e2e_p99_ms: float
    send_lag_med_ms: float
    recv_lag_med_ms: float
    queue_med_ms: float
    events: int


def summarize(errors: Sequence[RequestError]) -> ErrorStats:
    """Medians and p99 of ``errors``; raises ``ValueError`` when there are none."""
    if not errors:
        raise ValueError("no paired requests to summarize")

    def col(name: str) -> list[float]:
        return [getattr(e, name) for e in errors]

    med = statistics.median
    tpot_pct = [100 * e.tpot / e.tpot_true for e in errors]
    tpot_abs_pct = [abs(p) for p in tpot_pct]
    return ErrorStats(
        n=len(errors),
        ttft_med_ms=1000 * med(col("ttft")),
        ttft_p99_ms=1000 * _p99(col("ttft")),
        ttft_med_pct=med(100 * e.ttft / e.ttft_true for e in errors),
        tpot_med_ms=1000 * med(col("tpot")),
        tpot_p99_ms=1000 * _p99([abs(v) for v in col("tpot")]),
        tpot_med_pct=med(tpot_pct),
        tpot_p99_pct=_p99(tpot_abs_pct),
        e2e_med_ms=1000 * med(col("e2e")),
        e2e_p99_ms=1000 * _p99(col("e2e")),
        send_lag_med_ms=1000 * med(col("send_lag_s")),
        recv_lag_med_ms=1000 * med(col("recv_lag_s")),
        queue_med_ms=1000 * med(col("queue_s")),
        events=sum(col("n_events")),
    )
