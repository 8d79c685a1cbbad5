"""Running a set of requests: concurrency cap, arrival schedule, abort rule, sync entry point.

:func:`run_requests` sends prepared :class:`~speclib.measure.request.RequestSpec` items
through a transport (by default :class:`~speclib.measure.transport.Http1Transport`) with
at most ``concurrency`` in flight, optionally at scheduled arrival times, and hands one
record per request to the caller's sink as each finishes; :func:`run_requests_sync` does
the same from synchronous code (a notebook cell) on a fresh event loop.

A slot is freed only once its response is parsed and its record handed to the sink, so
right after sending the next request the client has nothing left to do and sleeps: on a
busy machine the server process the request just woke would otherwise wait for a CPU
behind the client's own bookkeeping (measured as ~1 ms of extra TTFT at concurrency 1).
That bookkeeping is client-side queueing and shows in the next request's
``queue_wait_s``, never in a latency.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from speclib.measure.parse import FinishedResponse, ResponseParser, describe_failure, parse_steps
from speclib.measure.request import RequestSpec, chat_url
from speclib.measure.run_bookkeeping import (
    SATURATION_SHARE,
    LagProbe,
    Progress,
    RunContext,
    RunOutcome,
    Sink,
    SinkThread,
    to_record,
)
from speclib.measure.sse import Accumulator
from speclib.measure.transport import Http1Transport

__all__ = ["Transport", "TransportFactory", "run_requests", "run_requests_sync"]


class Transport(Protocol):
    """What :func:`run_requests` needs from an HTTP transport (see
    :class:`~speclib.measure.transport.Http1Transport`, the kit's own).

    ``prepare`` encodes a request body before the clock starts; ``prewarm(n)`` opens up to
    ``n`` connections; ``exchange`` sends one prepared request, calling ``on_send()`` just
    before the bytes go out, and returns the finished response (failures in its ``end``;
    it raises only when no connection could be had); ``close`` closes every connection.
    """

    opened: int
    stamp_source: str

    def prepare(self, body: bytes) -> Any: ...

    async def prewarm(self, n: int) -> None: ...

    async def exchange(
        self, request: Any, timeout_s: float, on_send: Callable[[], None]
    ) -> FinishedResponse: ...

    async def close(self) -> None: ...


# (url, api_key, concurrency) -> a transport; called on the running loop
TransportFactory = Callable[[str, "str | None", int], Transport]


def _validate(
    specs: Sequence[RequestSpec],
    concurrency: int,
    timeout_s: float,
    max_error_rate: float | None,
    min_requests_before_abort: int,
    arrival_offsets_s: Sequence[float] | None,
) -> None:
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"`concurrency` must be a positive integer, got {concurrency!r}")
    if not timeout_s > 0:
        raise ValueError(f"`timeout_s` must be positive, got {timeout_s!r}")
    if max_error_rate is not None and not 0 <= max_error_rate <= 1:
        raise ValueError(f"`max_error_rate` must be in [0, 1] or None, got {max_error_rate!r}")
    if min_requests_before_abort < 1:
        raise ValueError(
            f"`min_requests_before_abort` must be ≥ 1, got {min_requests_before_abort!r}"
        )
    if not all(isinstance(s, RequestSpec) for s in specs):
        raise TypeError("`specs` must contain RequestSpec items")
    if arrival_offsets_s is not None:
        if len(arrival_offsets_s) != len(specs):
            raise ValueError(
                f"`arrival_offsets_s` has {len(arrival_offsets_s)} items for {len(specs)} specs"
            )
        decreasing = any(b < a for a, b in itertools.pairwise(arrival_offsets_s))
        if decreasing or (arrival_offsets_s and arrival_offsets_s[0] < 0):
            raise ValueError("`arrival_offsets_s` must be non-negative and non-decreasing")


async def run_requests(
    *,
    base_url: str,
    specs: Sequence[RequestSpec],
    concurrency: int,
    sink: Sink,
    series: str,
    replicate: int,
    launch_id: str,
    phase: str = "measure",
    timeout_s: float = 300.0,
    api_key: str | None = None,
    max_error_rate: float | None = None,
    min_requests_before_abort: int = 8,
    arrival_offsets_s: Sequence[float] | None = None,
    progress: Progress | None = None,
    transport: TransportFactory = Http1Transport.of,
) -> RunOutcome:
    """Send ``specs`` and hand one record per request to ``sink`` as each finishes.

    At most ``concurrency`` requests are in flight. Without ``arrival_offsets_s`` the run
    is closed-loop: a request is sent as soon as a slot frees, and its ``queue_wait_s`` is
    the client's own delay from the end of the response that freed the slot to the send
    (parsing and recording that response included). With
    ``arrival_offsets_s`` (seconds from the start, one per spec, non-decreasing) request
    ``i`` is due at that offset and ``queue_wait_s`` is how late it was actually sent
    (waiting for a slot included). ``timeout_s`` bounds each request from send to the end
    of its response. ``progress(1)`` is called on the event loop after each finish
    (tqdm's ``update`` fits); if it raises, it is dropped with a warning and the run goes
    on. Connections (one per slot) are opened before the run starts. ``transport`` makes
    the HTTP transport (the kit's own by default; the fidelity benchmark swaps in others).

    Raises only for invalid arguments, or, after the in-flight requests end, the
    exception the sink raised (no new requests are sent once the sink has failed).
    """
    specs = list(specs)
    _validate(
        specs, concurrency, timeout_s, max_error_rate, min_requests_before_abort, arrival_offsets_s
    )
    ctx = RunContext(
        series=series,
        replicate=replicate,
        launch_id=launch_id,
        phase=phase,
        concurrency=concurrency,
        api_key=api_key,
        max_error_rate=max_error_rate,
        min_requests_before_abort=min_requests_before_abort,
        progress=progress,
    )
    loop = asyncio.get_running_loop()
    http = transport(chat_url(base_url), api_key, concurrency)
    requests = [http.prepare(s.body) for s in specs]  # encoded before any clock starts
    parser = ResponseParser(loop)
    probe = LagProbe(loop)
    writer = SinkThread(sink)
    queue_waits: list[float] = []
    try:
        await http.prewarm(min(concurrency, len(specs)))
        probe.start()
        cpu0, loop_cpu0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        try:
            skipped = await _dispatch(
                http,
                parser,
                specs,
                requests,
                ctx,
                writer,
                timeout_s,
                arrival_offsets_s,
                queue_waits,
            )
        finally:
            wall = time.perf_counter() - wall0
            loop_cpu = time.thread_time() - loop_cpu0
            cpu = time.process_time() - cpu0
            lag_p99, lag_max = probe.stop()
    finally:
        await parser.close()
        await http.close()
        writer.close()
    if writer.error is not None:
        raise writer.error
    return RunOutcome(
        n_ok=ctx.n_ok,
        n_failed=ctx.n_failed,
        n_not_attempted=len(skipped),
        not_attempted=tuple(specs[i].prompt_id for i in skipped),
        not_attempted_index=tuple(skipped),
        aborted=ctx.aborted_reason is not None,
        aborted_reason=ctx.aborted_reason,
        wall_s=wall,
        cpu_s=cpu,
        loop_cpu_s=loop_cpu,
        saturated=wall > 0 and loop_cpu / wall > SATURATION_SHARE,
        event_loop=type(loop).__module__.split(".")[0],
        stamp_source=http.stamp_source,
        connections=http.opened,
        queue_wait_max_s=max(queue_waits, default=0.0),
        parse_lag_max_s=parser.max_lag,
        loop_lag_p99_s=lag_p99,
        loop_lag_max_s=lag_max,
    )


async def _dispatch(
    http: Transport,
    parser: ResponseParser,
    specs: list[RequestSpec],
    requests: list[Any],
    ctx: RunContext,
    writer: SinkThread,
    timeout_s: float,
    offsets: Sequence[float] | None,
    queue_waits: list[float],
) -> list[int]:
    """Launch requests under the concurrency cap; return indices never sent."""
    slots = asyncio.Semaphore(ctx.concurrency)
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    ends: collections.deque[float] = collections.deque()  # responses done, slot not reused yet

    async def run(i: int, due: float) -> None:
        acc = Accumulator(t0=time.perf_counter(), t_start=time.time())
        try:
            resp: FinishedResponse | None = None
            try:
                resp = await http.exchange(requests[i], timeout_s, acc.mark_sent)
            except Exception as exc:
                acc.fail(*describe_failure(exc, timeout_s))
            ends.append(time.perf_counter())
            if resp is not None:
                try:
                    await parser.submit(parse_steps(acc, resp, timeout_s))
                except Exception as exc:
                    acc.fail(
                        "client", f"could not parse the response: {describe_failure(exc, 0)[1]}"
                    )
            rec = to_record(acc, specs[i], ctx, due)
            queue_waits.append(rec.queue_wait_s)
            writer.put(rec)
            ctx.count(rec, writer.error)
        finally:
            # Released only now: after a send the client should go idle at once, or the
            # server it just woke waits for a CPU behind the client's own bookkeeping.
            slots.release()

    skipped: list[int] = []
    for i in range(len(specs)):
        if offsets is not None:
            due = start + offsets[i]
            delay = due - time.perf_counter()
            if delay > 0 and ctx.aborted_reason is None:
                await asyncio.sleep(delay)
        await slots.acquire()
        if ctx.aborted_reason is not None:
            slots.release()
            skipped = list(range(i, len(specs)))
            break
        if offsets is None:  # due when the response that freed this slot ended
            due = ends.popleft() if ends else time.perf_counter()
        task = asyncio.create_task(run(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    return skipped


# --------------------------------------------------------------------------- sync entry


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # optional: lower per-event overhead, tighter timestamps
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run_in_new_loop(loop: asyncio.AbstractEventLoop, kwargs: dict[str, Any]) -> RunOutcome:
    try:
        return loop.run_until_complete(run_requests(**kwargs))
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


def run_requests_sync(**kwargs: Any) -> RunOutcome:
    """:func:`run_requests` from synchronous code, e.g. a notebook cell.

    Runs on a fresh event loop (uvloop when installed). If the calling thread already runs
    a loop (a Jupyter kernel does), the run happens in a new thread with its own loop and
    this call blocks until it ends; exceptions propagate, and an interrupt (Ctrl-C, the
    notebook's stop button) cancels the run before it is re-raised. Records already handed
    to the sink stay written.
    """
    loop = _new_loop()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_in_new_loop(loop, kwargs)
    result: list[RunOutcome] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(_run_in_new_loop(loop, kwargs))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="speclib-run", daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:
        with contextlib.suppress(RuntimeError):  # the loop may have closed meanwhile
            loop.call_soon_threadsafe(_cancel_all, loop)
        thread.join()
        raise
    if error:
        raise error[0]
    return result[0]
