"""Reading a chat-completion stream: SSE splitting, and folding each event into an accumulator.

:class:`SseSplitter` cuts a byte stream into SSE ``data`` payloads across arbitrary read
boundaries; :func:`handle_event` folds one payload into an :class:`Accumulator` (text,
reasoning text, tokens per chunk and their arrival offsets, usage, spec-decode metrics,
the server's own per-request timing, finish reason) and raises :class:`StreamFailure`
when the stream itself reports a failure.
Nothing here touches the network or a clock: arrival times are passed in.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Accumulator",
    "SseSplitter",
    "StreamFailure",
    "error_message",
    "excerpt",
    "handle_event",
    "http_error_text",
]

ERROR_EXCERPT_CHARS = 300


class SseSplitter:
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
        """The payloads completed by ``chunk``, each with its dating position."""
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


class StreamFailure(Exception):
    """A request failed in a way the stream itself reported (``kind``, message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(eq=False)
class Accumulator:
    """Mutable accumulator for one request; what it holds survives any failure.

    ``t0``/``t_start`` start as the moment the request was handed to the transport and
    move to the moment its bytes were written to the socket (:meth:`mark_sent`).
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
    server_timing: dict[str, float] | None = None
    error_kind: str | None = None
    error: str | None = None

    def mark_sent(self) -> None:
        """Stamp the send: called by the transport just before it writes the request."""
        self.t0, self.t_start, self.sent = time.perf_counter(), time.time(), True

    def fail(self, kind: str, message: str) -> None:
        """Record a failure; the first one wins."""
        if self.error is None:
            self.error_kind, self.error = kind, message


def excerpt(text: str, limit: int = ERROR_EXCERPT_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters (with an ellipsis)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_message(payload: Any) -> str:
    """The human part of an OpenAI/vLLM error object, else the JSON itself."""
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
    return json.dumps(payload)


def http_error_text(status: int, body: bytes) -> str:
    """``HTTP <status>: <the server's message>`` for a non-200 response."""
    text = body.decode("utf-8", "replace")
    with contextlib.suppress(ValueError):
        text = error_message(json.loads(text))
    return f"HTTP {status}: {excerpt(text)}" if text.strip() else f"HTTP {status}"


def handle_event(acc: Accumulator, t: float, data: bytes) -> bool:
    """Fold one SSE payload that arrived at ``t`` into ``acc``; return True on ``[DONE]``."""
    if data == b"[DONE]":
        acc.done_offset = t - acc.t0
        return True
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise StreamFailure("bad_event", f"undecodable event: {excerpt(repr(data), 120)}") from exc
    if not isinstance(obj, dict):
        raise StreamFailure("bad_event", f"unexpected event: {excerpt(repr(data), 120)}")
    if obj.get("error"):
        raise StreamFailure("error_event", f"error event: {excerpt(error_message(obj))}")
    previous = acc.output_tokens
    usage = obj.get("usage")
    if isinstance(usage, dict):
        acc.prompt_tokens = usage.get("prompt_tokens", acc.prompt_tokens)
        acc.output_tokens = usage.get("completion_tokens", acc.output_tokens)
        spec = _spec_of(usage)
        acc.spec = spec if spec is not None else acc.spec
    spec = _spec_of(obj)
    acc.spec = spec if spec is not None else acc.spec
    timing = _timing_of(obj)
    acc.server_timing = timing if timing is not None else acc.server_timing
    choices = obj.get("choices")
    if choices:
        _handle_choice(acc, t, choices[0], usage, previous)
    return False


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    metrics = obj.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        return metrics["speculative_decoding"]
    return None


def _timing_of(obj: Mapping[str, Any]) -> dict[str, float] | None:
    """The server's own per-request timing (vLLM ``--enable-per-request-metrics``): the
    numeric fields of ``metrics`` (``time_to_first_token_ms``, ``mean_itl_ms``, …)."""
    metrics = obj.get("metrics")
    if not isinstance(metrics, dict):
        return None
    out = {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    return out or None


def _handle_choice(
    acc: Accumulator, t: float, choice: Mapping[str, Any], usage: Any, previous: int | None
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
