"""A run's bookkeeping: its outcome, shared context and tally, the sink thread, the lag probe.

:class:`RunOutcome` is how a run went beyond its records. :class:`RunContext` holds what
every record of the run shares and keeps the running tally that decides an abort.
:func:`to_record` turns a request's :class:`~speclib.measure.sse.Accumulator` into a
:class:`~speclib.core.records.RequestRecord`. :class:`SinkThread` hands records to the
caller's sink from one background thread, so a slow disk never delays the event loop;
:class:`LagProbe` measures how late a 10 ms timer runs on the loop.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from speclib.core.records import LAG_PERIOD_S, RequestRecord
from speclib.measure.request import RequestSpec
from speclib.measure.sse import Accumulator

__all__ = [
    "SATURATION_SHARE",
    "LagProbe",
    "Progress",
    "RunContext",
    "RunOutcome",
    "Sink",
    "SinkThread",
    "to_record",
]

SATURATION_SHARE = 0.9  # event-loop CPU / wall above this: the client, not the server, limits

Sink = Callable[[RequestRecord], None]
Progress = Callable[[int], None]


@dataclass(frozen=True)
class RunOutcome:
    """How a run went, beyond the records themselves.

    ``not_attempted`` holds the prompt ids of specs never sent (after an abort), and
    ``not_attempted_index`` their positions in ``specs`` (to recover repeat and category).
    ``cpu_s`` is the process's CPU time during the run (all threads, so a fake server
    running in a thread counts too); ``loop_cpu_s`` that of the event-loop thread alone,
    which decides ``saturated`` (loop CPU / wall > 0.9): then measured latencies include
    client queueing and should not be trusted. ``event_loop`` names the loop
    implementation (``asyncio`` or ``uvloop``); ``stamp_source`` says where chunk arrival
    times were taken, as the transport names it (the kit's own: ``protocol``, as each
    network read arrived, before parsing).
    ``connections`` counts the TCP connections opened (one per slot when reuse works);
    ``queue_wait_max_s`` is the longest client-side wait between a request being due and
    being sent; ``parse_lag_max_s`` the longest a finished response waited for the parser.
    ``loop_lag_p99_s`` / ``loop_lag_max_s``: how late a 10 ms probe timer ran on the event
    loop (p99, max). Arrival stamps can be late by about as much, so a large value means
    the client was starved of CPU (by itself or by other processes) even when it was not
    ``saturated``. ``client_pid`` is the process that ran the client (set where the outcome
    is made, so it survives being sent from the client worker); ``client_process`` says
    which process that was: ``in-process`` (the caller's), ``worker`` (the kit's client
    worker, :mod:`speclib.measure.worker`) or ``in-process (worker failed: …)``.
    """

    n_ok: int
    n_failed: int
    n_not_attempted: int
    not_attempted: tuple[str, ...]
    not_attempted_index: tuple[int, ...]
    aborted: bool
    aborted_reason: str | None
    wall_s: float
    cpu_s: float
    loop_cpu_s: float
    saturated: bool
    event_loop: str
    stamp_source: str
    connections: int = 0
    queue_wait_max_s: float = 0.0
    parse_lag_max_s: float = 0.0
    loop_lag_p99_s: float = 0.0
    loop_lag_max_s: float = 0.0
    client_process: str = "in-process"
    client_pid: int = field(default_factory=os.getpid)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples as lists), e.g. for a launch's ``status.json``."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


class SinkThread:
    """Calls ``sink`` in order from one background thread; keeps the first error."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._queue: queue.SimpleQueue[RequestRecord | None] = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="speclib-sink", daemon=True)
        self._thread.start()

    def put(self, rec: RequestRecord) -> None:
        """Queue ``rec`` for the sink (never blocks)."""
        self._queue.put(rec)

    def close(self) -> None:
        """Wait until every queued record went to the sink, then stop the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (rec := self._queue.get()) is not None:
            if self.error is not None:
                continue
            try:
                self._sink(rec)
            except BaseException as exc:  # re-raised by run_requests in the caller's thread
                self.error = exc


@dataclass(eq=False)
class RunContext:
    """What every record of the run shares, plus the run's running tally."""

    series: str
    replicate: int
    launch_id: str
    phase: str
    concurrency: int
    api_key: str | None
    max_error_rate: float | None
    min_requests_before_abort: int
    progress: Progress | None
    n_ok: int = 0
    n_failed: int = 0
    aborted_reason: str | None = None

    def scrub(self, text: str) -> str:
        """``text`` with the API key replaced by ``<api-key>``."""
        return text.replace(self.api_key, "<api-key>") if self.api_key else text

    def count(self, rec: RequestRecord, sink_error: BaseException | None) -> None:
        """Tally a finished record; set ``aborted_reason`` when the run must stop."""
        if rec.ok:
            self.n_ok += 1
        else:
            self.n_failed += 1
        done = self.n_ok + self.n_failed
        if sink_error is not None and self.aborted_reason is None:
            self.aborted_reason = f"sink failed: {type(sink_error).__name__}: {sink_error}"
        rate = self.max_error_rate
        if (
            self.aborted_reason is None
            and rate is not None
            and done >= self.min_requests_before_abort
            and self.n_failed / done > rate
        ):
            self.aborted_reason = (
                f"failure share {self.n_failed}/{done} = {self.n_failed / done:.2f} "
                f"exceeds max_error_rate {rate:g}"
            )
        if self.progress is not None:
            self._report_progress(self.progress)

    def _report_progress(self, progress: Progress) -> None:
        """Tell ``progress`` one more request finished; a broken callback is dropped."""
        try:
            progress(1)
        except Exception as exc:
            self.progress = None
            warnings.warn(
                f"progress callback failed ({type(exc).__name__}: {exc}); run continues without it",
                RuntimeWarning,
                stacklevel=2,
            )


class LagProbe:
    """A timer that ticks every ``LAG_PERIOD_S`` and records how late each tick ran."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self.lags: list[float] = []

    def start(self) -> None:
        """Start ticking."""
        self._due = time.perf_counter() + LAG_PERIOD_S
        self._handle = self._loop.call_later(LAG_PERIOD_S, self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.lags.append(max(0.0, now - self._due))
        self._due = now + LAG_PERIOD_S
        self._handle = self._loop.call_later(LAG_PERIOD_S, self._tick)

    def stop(self) -> tuple[float, float]:
        """(p99, max) lag in seconds."""
        if self._handle is not None:
            self._handle.cancel()
        if not self.lags:
            return 0.0, 0.0
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], ordered[-1]


def to_record(acc: Accumulator, spec: RequestSpec, ctx: RunContext, due: float) -> RequestRecord:
    """The record of one request: ``ok`` only with status 200, ``[DONE]`` and no failure;
    ``queue_wait_s`` runs from ``due`` to the send."""
    ok = acc.error is None and acc.status == 200 and acc.done_offset is not None
    extra: dict[str, Any] = {}
    if acc.reasoning:
        extra["reasoning_text"] = "".join(acc.reasoning)
    if acc.error_kind is not None:
        extra["error_kind"] = acc.error_kind
    return RequestRecord(
        series=ctx.series,
        replicate=ctx.replicate,
        prompt_id=spec.prompt_id,
        ok=ok,
        error=None if ok else ctx.scrub(acc.error or "incomplete response"),
        launch_id=ctx.launch_id,
        repeat=spec.repeat,
        phase=ctx.phase,
        category=spec.category,
        turn=spec.turn,
        concurrency=ctx.concurrency,
        status=acc.status,
        t_start=acc.t_start,
        t_send_mono=acc.t0,
        queue_wait_s=max(0.0, acc.t0 - due),
        headers_offset_s=acc.headers_offset,
        done_offset_s=acc.done_offset,
        chunk_offsets_s=tuple(acc.offsets),
        chunk_tokens=tuple(acc.tokens),
        token_ids=tuple(acc.token_ids) if acc.token_ids is not None else None,
        prompt_tokens=acc.prompt_tokens,
        output_tokens=acc.output_tokens,
        finish_reason=acc.finish_reason,
        text="".join(acc.text),
        spec=acc.spec,
        server_timing=acc.server_timing,
        extra=extra,
    )
