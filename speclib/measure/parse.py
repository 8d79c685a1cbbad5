"""Turning finished responses into accumulated results, without delaying the streams still open.

A transport hands back a :class:`FinishedResponse` (status, de-framed body, the stamp of
every read). :func:`parse_steps` splits its body into SSE events, dates each event by the
read that completed its ``data:`` line and folds it into an
:class:`~speclib.measure.sse.Accumulator`, yielding after every event.
:class:`ResponseParser` runs those steps for all finished responses in one task on the
event loop and yields to the loop every quarter millisecond, so a burst of finishing
streams cannot hold up the arrival stamps of the streams still running.
:func:`describe_failure` names an exception raised while exchanging a request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from speclib.measure.sse import (
    Accumulator,
    SseSplitter,
    StreamFailure,
    excerpt,
    handle_event,
    http_error_text,
)

__all__ = ["FinishedResponse", "ResponseParser", "describe_failure", "parse_steps"]

PARSE_SLICE_S = 0.00025  # the parser yields to the loop after this much work
SSE_SLICE_BYTES = 16384  # bytes of a finished body split into events at a time


class FinishedResponse(Protocol):
    """What a transport reports about one response once it is over.

    ``status``/``t_headers``: the status line and when the headers arrived (None if no
    response came); ``body``: the de-framed body; ``arrivals``: (body length after a read,
    that read's ``perf_counter()`` stamp) per network read; ``end``: ``complete``,
    ``cut``, ``lost``, ``bad_http``, ``timeout`` or another failure, ``detail`` saying why.
    """

    status: int | None
    t_headers: float | None
    body: bytearray
    arrivals: list[tuple[int, float]]
    end: str | None
    detail: str


class ResponseParser:
    """Works through finished responses one SSE event at a time, on the event loop.

    Jobs are generators that yield after each event; the parser runs them in arrival
    order and yields to the loop whenever a slice of ``PARSE_SLICE_S`` is used up, so the
    protocol keeps stamping the reads of the streams still open.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._jobs: collections.deque[tuple[Iterator[None], asyncio.Future[None], float]] = (
            collections.deque()
        )
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.max_lag = 0.0

    def submit(self, steps: Iterator[None]) -> asyncio.Future[None]:
        """Queue a job; the future resolves when it is done (or holds its exception)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self._jobs.append((steps, fut, time.perf_counter()))
        if self._task is None:
            self._task = self._loop.create_task(self._run())
        elif self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        return fut

    async def _run(self) -> None:
        jobs = self._jobs
        while True:
            while not jobs:
                self._wake = self._loop.create_future()
                await self._wake
            t_slice = time.perf_counter()
            while jobs and time.perf_counter() - t_slice < PARSE_SLICE_S:
                steps, fut, t_in = jobs[0]
                try:
                    next(steps)
                except StopIteration:
                    jobs.popleft()
                    self.max_lag = max(self.max_lag, time.perf_counter() - t_in)
                    if not fut.done():
                        fut.set_result(None)
                except Exception as exc:  # a parsing bug fails that request, not the run
                    jobs.popleft()
                    if not fut.done():
                        fut.set_exception(exc)
            await asyncio.sleep(0)

    async def close(self) -> None:
        """Stop the parser task (jobs still queued are dropped)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _arrival_times(arrivals: list[tuple[int, float]]) -> Callable[[int], float]:
    """Date a body position by the read that delivered its byte ``pos - 1``."""
    i = 0

    def at(pos: int) -> float:
        nonlocal i
        while i < len(arrivals) - 1 and arrivals[i][0] < pos:
            i += 1
        return arrivals[i][1]

    return at


def parse_steps(acc: Accumulator, resp: FinishedResponse, timeout_s: float) -> Iterator[None]:
    """Fold a finished response into ``acc``, yielding after each SSE event."""
    if resp.status is None:
        if resp.end == "timeout":
            acc.fail("timeout", f"timeout: no response within {timeout_s:g} s")
        elif resp.end == "bad_http":
            acc.fail("http", f"bad response: {resp.detail}")
        else:
            acc.fail("connection", resp.detail or "connection failed")
        return
    acc.status = resp.status
    if resp.t_headers is not None:
        acc.headers_offset = resp.t_headers - acc.t0
    if resp.status != 200:
        acc.fail("http", http_error_text(resp.status, bytes(resp.body)))
        return
    at = _arrival_times(resp.arrivals) if resp.arrivals else (lambda pos: resp.t_headers)
    splitter = SseSplitter()
    body = resp.body
    for start in range(0, len(body), SSE_SLICE_BYTES):
        for pos, data in splitter.feed(bytes(body[start : start + SSE_SLICE_BYTES])):
            try:
                if handle_event(acc, at(pos), data):
                    return
            except StreamFailure as exc:
                acc.fail(exc.kind, str(exc))
                return
            yield
    if resp.end == "complete":
        for pos, data in splitter.close():
            try:
                if handle_event(acc, at(pos), data):
                    return
            except StreamFailure as exc:
                acc.fail(exc.kind, str(exc))
                return
    if resp.end == "timeout":
        acc.fail("timeout", f"timeout: no complete response within {timeout_s:g} s")
    elif resp.end == "cut":
        acc.fail("cut", f"stream cut: {resp.detail}")
    elif resp.end != "complete":
        acc.fail("connection", f"stream failed: {resp.detail or resp.end}")
    else:
        acc.fail("no_done", "stream ended without [DONE]")


def describe_failure(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """(``error_kind``, message) for an exception raised while exchanging a request."""
    if isinstance(exc, StreamFailure):
        return exc.kind, str(exc)
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout", f"timeout: no connection within {timeout_s:g} s"
    if isinstance(exc, OSError):
        return "connection", f"{type(exc).__name__}: {excerpt(str(exc), 200)}"
    return "client", f"{type(exc).__name__}: {excerpt(str(exc), 200)}"
