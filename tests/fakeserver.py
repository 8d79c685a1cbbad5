"""A scripted stand-in for vLLM's OpenAI chat endpoint, for tests and fidelity benchmarks.

:class:`FakeServer` is a real HTTP server on ``127.0.0.1`` (ephemeral port) that answers
``POST /v1/chat/completions`` by replaying a :class:`Script`: a role chunk, token chunks
of scripted sizes at scripted times (time to first token, then a fixed step), a
``finish_reason`` chunk, a usage chunk with ``choices: []`` and optional
``metrics.speculative_decoding``, then ``[DONE]``. A script can also fail the way real
servers do: an HTTP error status with a JSON body, a connection cut mid-stream, an
``{"error": ...}`` event inside the stream, or a hang.

The script for a request is chosen by the content of the request's last message (its
*key*), falling back to a default script. Every exchange is logged with the true
``time.perf_counter()`` at which the request arrived and each event was handed to the
kernel, so tests can compare what a client measured against what was sent. On Linux
``perf_counter`` is ``CLOCK_MONOTONIC``, shared by all processes, so the log is
comparable with the client's clock in both modes: ``mode="thread"`` (an event loop in a
daemon thread of the test process; fine for functional tests) and ``mode="process"`` (a
child process; use it for timing benchmarks at high concurrency, where a server thread
would compete with the client for the GIL).

Also served: ``GET /health`` (200), ``GET /v1/models`` and ``GET /metrics`` (Prometheus
text with vLLM-style spec-decode counters summed over the served scripts). Control
endpoints under ``/_fake/`` (scripts, log, reset) make the process mode scriptable.

Run standalone: ``python tests/fakeserver.py [--port N] [--scripts FILE.json]``; it prints
``PORT <n>`` on stdout once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

__all__ = [
    "Exchange",
    "FakeServer",
    "Script",
    "SentEvent",
    "token_id",
    "token_text",
]

MODEL = "fake-model"
HANG_LIMIT_S = 3600.0
_POLL_S = 0.02


def token_text(i: int) -> str:
    """Text of the i-th output token of every script (so tests can predict the text)."""
    return f"t{i} "


def token_id(i: int) -> int:
    """Id of the i-th output token of every script."""
    return 1000 + i


@dataclass(frozen=True)
class Script:
    """How the server answers one request. Times are seconds; counts are token chunks.

    Token chunk ``i`` is sent at ``arrival + ttft_s + i * step_s`` (an absolute schedule,
    so sleeps do not drift). ``tokens_per_chunk`` is an int, or a tuple giving the size of
    each chunk in turn (the last size repeats), as under speculative decoding. The first
    ``reasoning_tokens`` tokens go out as ``delta.reasoning_content`` instead of content.
    """

    n_tokens: int = 8
    tokens_per_chunk: int | tuple[int, ...] = 1
    ttft_s: float = 0.0
    step_s: float = 0.0
    prompt_tokens: int = 7
    role_chunk: bool = True
    finish_reason: str | None = "length"
    finish_in_last_chunk: bool = False  # vLLM may put finish_reason on the last token chunk
    send_token_ids: bool = True  # only if the request asked (return_token_ids)
    spec: Mapping[str, Any] | None = None  # metrics.speculative_decoding of the usage chunk
    send_spec: bool = True  # False: count ``spec`` on /metrics only (no per-request metrics)
    reasoning_tokens: int = 0
    status: int = 200  # != 200: answer with this status and a JSON error body
    error_message: str = "scripted failure"
    error_body: str | None = None  # raw body for an error status (overrides the JSON)
    error_event_after: int | None = None  # send an {"error": ...} event after n chunks
    cut_after: int | None = None  # close the connection after n token chunks
    hang_after: int | None = None  # stop sending after n token chunks, keep the socket
    send_done: bool = True  # end with "data: [DONE]"
    fragment_bytes: int | None = None  # write each event in pieces of this many bytes
    fragment_gap_s: float = 0.002  # pause between pieces, so they arrive in separate reads
    timing_metrics: bool = False  # vLLM's --enable-per-request-metrics: server-side stamps
    load_step_s: float = 0.0  # each chunk's step grows by this per other request in flight
    # (a batch that costs more the larger it is; 0: the absolute schedule above)
    late_read: bool = False  # hold the token chunks and write them at once after the last
    # is due, as a client that is not scheduled in time reads them (the server's own stamps
    # stay on schedule)

    def chunk_sizes(self) -> list[int]:
        """Token count of each token chunk, summing to ``n_tokens``."""
        sizes = (
            (self.tokens_per_chunk,)
            if isinstance(self.tokens_per_chunk, int)
            else tuple(self.tokens_per_chunk)
        )
        if not sizes or min(sizes) < 1:
            raise ValueError(f"`tokens_per_chunk` must be positive, got {self.tokens_per_chunk}")
        out: list[int] = []
        left = self.n_tokens
        while left > 0:
            size = min(sizes[min(len(out), len(sizes) - 1)], left)
            out.append(size)
            left -= size
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["spec"] = dict(self.spec) if self.spec is not None else None
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Script:
        data = dict(data)
        if isinstance(data.get("tokens_per_chunk"), list):
            data["tokens_per_chunk"] = tuple(data["tokens_per_chunk"])
        return cls(**data)


@dataclass(frozen=True)
class SentEvent:
    """One SSE event the server sent: kind, true send time (perf_counter), tokens carried.

    ``t_sent`` is taken just before the write that hands the event's last bytes to the
    kernel, so a client can never see the event earlier (causality), only later.
    ``t_sent - t_due`` shows how late the server itself was (a saturated fake server).

    ``kind`` is one of ``role``, ``token``, ``finish``, ``usage``, ``error``, ``done``.
    """

    kind: str
    t_sent: float
    n_tokens: int = 0
    t_due: float | None = None  # scheduled time of a token chunk (lateness = server load)


@dataclass(frozen=True)
class Exchange:
    """The log of one request: what arrived, what was sent and when (server's clock)."""

    seq: int
    key: str
    headers: dict[str, str]
    body: dict[str, Any]
    t_recv: float
    t_headers: float | None
    events: tuple[SentEvent, ...]
    t_end: float
    outcome: str  # done | no_done | http_error | cut | error_event | hang | client_gone

    @property
    def token_times(self) -> list[float]:
        """True send times of the chunks that carried tokens."""
        return [e.t_sent for e in self.events if e.n_tokens > 0]

    @property
    def token_counts(self) -> list[int]:
        return [e.n_tokens for e in self.events if e.n_tokens > 0]

    @property
    def done_time(self) -> float | None:
        return next((e.t_sent for e in self.events if e.kind == "done"), None)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Exchange:
        data = dict(data)
        data["events"] = tuple(SentEvent(**e) for e in data["events"])
        return cls(**data)


@dataclass
class _State:
    """Scripts, log and in-flight counters; shared with the test thread under a lock."""

    scripts: dict[str, Script]
    default: Script
    metrics_text: str | None = None
    by_substring: tuple[tuple[str, Script], ...] = ()  # a key containing the text: its script
    log: list[Exchange] = field(default_factory=list)
    seq: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script_for(self, key: str) -> Script:
        with self.lock:
            return self.lookup(key)

    def lookup(self, key: str) -> Script:
        """The script of ``key`` (call under the lock): by key, by substring, the default."""
        if key in self.scripts:
            return self.scripts[key]
        return next((s for text, s in self.by_substring if text in key), self.default)


# --------------------------------------------------------------------------- SSE encoding


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(rid: str, choice: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes:
    obj: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [choice] if choice is not None else [],
    }
    if usage is not None:
        obj["usage"] = usage
    return _sse(obj)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _last_message(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content", "")
    return content if isinstance(content, str) else json.dumps(content)


class _Stream:
    """Plays one script on one response, logging each event's true send time."""

    def __init__(
        self, resp: web.StreamResponse, script: Script, body: dict[str, Any], t_recv: float = 0.0
    ) -> None:
        self.resp = resp
        self.script = script
        self.t_recv = t_recv
        self.held: list[bytes] = []  # token chunks held back (late_read)
        self.token_stamps: list[float] = []  # the server's own stamp of each token chunk
        self.rid = f"chatcmpl-fake-{id(self):x}"
        opts = body.get("stream_options") or {}
        self.usage_each = bool(opts.get("continuous_usage_stats"))
        self.usage_final = bool(opts.get("include_usage"))
        self.ids = bool(body.get("return_token_ids")) and script.send_token_ids
        self.events: list[SentEvent] = []
        self.done_tokens = 0

    async def send(
        self, kind: str, data: bytes, n_tokens: int = 0, t_due: float | None = None
    ) -> None:
        """Write one event; its send time is taken just before the write that ends it."""
        if kind == "token":
            self.token_stamps.append(time.perf_counter())
            if self.script.late_read:
                self.held.append(data)
                self.events.append(SentEvent(kind, time.perf_counter(), n_tokens, t_due))
                return
        if self.held:
            data, self.held = b"".join(self.held) + data, []
        size = self.script.fragment_bytes or len(data)
        for start in range(0, len(data) - size, size):
            await self.resp.write(data[start : start + size])
            await asyncio.sleep(self.script.fragment_gap_s)
        last = data[(len(data) - 1) // size * size :]
        t_sent = time.perf_counter()
        await self.resp.write(last)
        self.events.append(SentEvent(kind, t_sent, n_tokens, t_due))

    def usage(self) -> dict[str, int] | None:
        return _usage(self.script.prompt_tokens, self.done_tokens) if self.usage_each else None

    async def role(self) -> None:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}}
        choice["logprobs"] = None
        choice["finish_reason"] = None
        if self.ids:
            choice["prompt_token_ids"] = list(range(1, self.script.prompt_tokens + 1))
        await self.send("role", _chunk(self.rid, choice, self.usage()))

    async def tokens(self, n: int, last: bool, t_due: float) -> None:
        first = self.done_tokens
        self.done_tokens += n
        indices = range(first, first + n)
        text = "".join(token_text(i) for i in indices)
        n_reason = max(0, min(n, self.script.reasoning_tokens - first))
        delta: dict[str, Any] = {}
        if n_reason:
            delta["reasoning_content"] = text[: sum(len(token_text(i)) for i in indices[:n_reason])]
        if n_reason < n:
            delta["content"] = text[len(delta.get("reasoning_content", "")) :]
        finish = self.script.finish_reason if last and self.script.finish_in_last_chunk else None
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if self.ids:
            choice["token_ids"] = [token_id(i) for i in indices]
        await self.send("token", _chunk(self.rid, choice, self.usage()), n, t_due)

    async def finish(self) -> None:
        choice = {"index": 0, "delta": {}, "finish_reason": self.script.finish_reason}
        if self.ids:
            choice["token_ids"] = []
        await self.send("finish", _chunk(self.rid, choice, self.usage()))

    async def final_usage(self) -> None:
        obj: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": MODEL,
            "choices": [],
            "usage": _usage(self.script.prompt_tokens, self.done_tokens),
        }
        metrics: dict[str, Any] = self.timing() if self.script.timing_metrics else {}
        if self.script.spec is not None and self.script.send_spec:
            metrics["speculative_decoding"] = dict(self.script.spec)
        if metrics:
            obj["metrics"] = metrics
        await self.send("usage", _sse(obj))

    def timing(self) -> dict[str, float]:
        """vLLM 0.32's per-request timing metrics, from this server's own stamps."""
        stamps, n = self.token_stamps, self.done_tokens
        if not stamps:
            return {}
        out = {
            "queue_time_ms": 0.0,
            "time_to_first_token_ms": (stamps[0] - self.t_recv) * 1e3,
            "generation_time_ms": (stamps[-1] - stamps[0]) * 1e3,
        }
        if n > 1:
            out["mean_itl_ms"] = (stamps[-1] - stamps[0]) / (n - 1) * 1e3
        return out

    async def error_event(self) -> None:
        err = {"message": self.script.error_message, "type": "InternalServerError", "code": 500}
        await self.send("error", _sse({"error": err}))


async def _sleep_until(target: float) -> None:
    delay = target - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def _hang(request: web.Request) -> None:
    """Keep the connection open without sending, until the client leaves or the limit."""
    deadline = time.perf_counter() + HANG_LIMIT_S
    while time.perf_counter() < deadline:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(_POLL_S)


async def _play(
    request: web.Request, stream: _Stream, t_recv: float, in_flight: Any = lambda: 1
) -> str:
    """Send the script's events; return the exchange's outcome. With ``load_step_s``, each
    step lasts ``step_s + load_step_s * (in_flight() - 1)``, read when the step starts."""
    script = stream.script
    sizes = script.chunk_sizes()
    t_first = t_recv + script.ttft_s
    t_due = t_first
    await _sleep_until(t_first)
    if script.role_chunk:
        await stream.role()
    for i, n in enumerate(sizes):
        if i == script.cut_after:
            request.transport.close()
            return "cut"
        if i == script.hang_after:
            await _hang(request)
            return "hang"
        if i == script.error_event_after:
            await stream.error_event()
            break
        if script.load_step_s:
            if i:
                t_due += script.step_s + script.load_step_s * max(in_flight() - 1, 0)
        else:
            t_due = t_first + i * script.step_s
        await _sleep_until(t_due)
        await stream.tokens(n, last=i == len(sizes) - 1, t_due=t_due)
    else:
        if script.cut_after == len(sizes):
            request.transport.close()
            return "cut"
        if script.hang_after == len(sizes):
            await _hang(request)
            return "hang"
        if script.finish_reason is not None and not script.finish_in_last_chunk:
            await stream.finish()
        if stream.usage_final:
            await stream.final_usage()
    if script.send_done:
        await stream.send("done", b"data: [DONE]\n\n")
    if script.error_event_after is not None and script.error_event_after < len(sizes):
        return "error_event"
    return "done" if script.send_done else "no_done"


def _error_response(script: Script) -> web.Response:
    if script.error_body is not None:
        return web.Response(status=script.status, text=script.error_body)
    err = {
        "message": script.error_message,
        "type": "BadRequestError" if script.status < 500 else "InternalServerError",
        "param": None,
        "code": script.status,
    }
    return web.json_response({"error": err}, status=script.status)


# --------------------------------------------------------------------------- handlers


def _make_app(state: _State) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        t_recv = time.perf_counter()
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        key = _last_message(body)
        script = state.script_for(key)
        with state.lock:
            seq = state.seq
            state.seq += 1
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        t_headers: float | None = None
        stream: _Stream | None = None
        outcome = "client_gone"
        try:
            if script.status != 200:
                outcome = "http_error"
                return _error_response(script)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            t_headers = time.perf_counter()
            stream = _Stream(resp, script, body, t_recv)
            try:
                outcome = await _play(request, stream, t_recv, lambda: state.in_flight)
            except ConnectionError:
                outcome = "client_gone"
            if outcome in ("cut", "hang", "client_gone"):
                raise asyncio.CancelledError  # nothing more can be written; end quietly
            return resp
        finally:
            exchange = Exchange(
                seq=seq,
                key=key,
                headers=dict(request.headers),
                body=body,
                t_recv=t_recv,
                t_headers=t_headers,
                events=tuple(stream.events) if stream else (),
                t_end=time.perf_counter(),
                outcome=outcome,
            )
            with state.lock:
                state.in_flight -= 1
                state.log.append(exchange)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=_metrics_text(state), content_type="text/plain")

    async def get_log(_: web.Request) -> web.Response:
        with state.lock:
            data = {
                "log": [asdict(e) for e in state.log],
                "max_in_flight": state.max_in_flight,
                "in_flight": state.in_flight,
            }
        return web.json_response(data)

    async def set_scripts(request: web.Request) -> web.Response:
        data = await request.json()
        _apply_scripts(state, data)
        return web.json_response({"ok": True})

    async def reset(_: web.Request) -> web.Response:
        with state.lock:
            state.log.clear()
            state.max_in_flight = state.in_flight
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/_fake/log", get_log)
    app.router.add_post("/_fake/scripts", set_scripts)
    app.router.add_post("/_fake/reset", reset)
    return app


def _apply_scripts(state: _State, data: Mapping[str, Any]) -> None:
    with state.lock:
        for key, script in (data.get("scripts") or {}).items():
            state.scripts[key] = Script.from_json(script)
        if data.get("default") is not None:
            state.default = Script.from_json(data["default"])
        if "metrics_text" in data:
            state.metrics_text = data["metrics_text"]


def _metrics_text(state: _State) -> str:
    with state.lock:
        if state.metrics_text is not None:
            return state.metrics_text
        specs = [state.lookup(e.key).spec for e in state.log]
        running = state.in_flight
    drafts = sum(int(s.get("num_spec_steps", 0)) for s in specs if s)
    draft_tokens = sum(int(s.get("num_draft_tokens", 0)) for s in specs if s)
    accepted = sum(int(s.get("num_accepted_draft_tokens", 0)) for s in specs if s)
    label = f'{{model_name="{MODEL}"}}'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{label} {running}",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{label} {drafts}",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{label} {draft_tokens}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{label} {accepted}",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{label} 0",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f"vllm:prefix_cache_hits_total{label} 0",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- serving


async def _serve(state: _State, sock: socket.socket) -> web.AppRunner:
    runner = web.AppRunner(
        _make_app(state), access_log=None, handle_signals=False, shutdown_timeout=0.5
    )
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


def _listening_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class FakeServer:
    """The scripted server, as a context manager or a pytest fixture body.

    >>> with FakeServer({"hi": Script(n_tokens=4, ttft_s=0.05)}) as srv:  # doctest: +SKIP
    ...     url = srv.base_url                      # http://127.0.0.1:<port>
    ...     ...                                     # send requests whose last message is "hi"
    ...     ex = srv.exchange("hi")                 # Exchange with true send times
    """

    def __init__(
        self,
        scripts: Mapping[str, Script] | None = None,
        *,
        default: Script | None = None,
        mode: str = "thread",
        metrics_text: str | None = None,
    ) -> None:
        if mode not in ("thread", "process"):
            raise ValueError(f"`mode` must be 'thread' or 'process', got {mode!r}")
        self.mode = mode
        self._state = _State(dict(scripts or {}), default or Script(), metrics_text)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    # -- lifecycle
    def start(self) -> FakeServer:
        if self.mode == "thread":
            self._start_thread()
        else:
            self._start_process()
        return self

    def _start_thread(self) -> None:
        sock = _listening_socket()
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._runner = self._loop.run_until_complete(_serve(self._state, sock))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fakeserver", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake server did not start within 10 s")

    def _start_process(self) -> None:
        payload = json.dumps(
            {
                "scripts": {k: s.to_json() for k, s in self._state.scripts.items()},
                "default": self._state.default.to_json(),
                "metrics_text": self._state.metrics_text,
            }
        )
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--scripts", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(payload)
        self._proc.stdin.close()
        line = self._proc.stdout.readline()
        if not line.startswith("PORT "):
            self._proc.kill()
            raise RuntimeError(f"fake server process failed to start: {line!r}")
        self.port = int(line.split()[1])

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            loop, runner = self._loop, self._runner
            if runner is not None:
                fut = asyncio.run_coroutine_threadsafe(runner.cleanup(), loop)
                with contextlib.suppress(Exception):
                    fut.result(5)
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(5)
            loop.close()
            self._loop = self._thread = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting and log
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_scripts(
        self,
        scripts: Mapping[str, Script] | None = None,
        *,
        default: Script | None = None,
        metrics_text: str | None = None,
    ) -> None:
        """Add or replace scripts by key (and the default) while the server runs."""
        data: dict[str, Any] = {"scripts": {k: s.to_json() for k, s in (scripts or {}).items()}}
        if default is not None:
            data["default"] = default.to_json()
        if metrics_text is not None:
            data["metrics_text"] = metrics_text
        if self.mode == "thread":
            _apply_scripts(self._state, data)
        else:
            self._control("POST", "/_fake/scripts", data)

    def exchanges(self) -> list[Exchange]:
        """All finished exchanges, in finishing order."""
        if self.mode == "thread":
            with self._state.lock:
                return list(self._state.log)
        return [Exchange.from_json(e) for e in self._control("GET", "/_fake/log")["log"]]

    def exchange(self, key: str) -> Exchange:
        """The one finished exchange whose last message was ``key``."""
        found = [e for e in self.exchanges() if e.key == key]
        if len(found) != 1:
            raise LookupError(f"{len(found)} exchanges with key {key!r}")
        return found[0]

    @property
    def max_in_flight(self) -> int:
        """Most requests the server was handling at once since start or :meth:`reset`."""
        if self.mode == "thread":
            with self._state.lock:
                return self._state.max_in_flight
        return int(self._control("GET", "/_fake/log")["max_in_flight"])

    @property
    def in_flight(self) -> int:
        if self.mode == "thread":
            with self._state.lock:
                return self._state.in_flight
        return int(self._control("GET", "/_fake/log")["in_flight"])

    def reset(self) -> None:
        """Forget the log and the in-flight maximum."""
        if self.mode == "thread":
            with self._state.lock:
                self._state.log.clear()
                self._state.max_in_flight = self._state.in_flight
        else:
            self._control("POST", "/_fake/reset", {})

    def _control(self, method: str, path: str, data: Any = None) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        req = urllib.request.Request(self.base_url + path, data=body, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())


# --------------------------------------------------------------------------- standalone


def main(argv: list[str] | None = None) -> None:
    """Serve until killed; print ``PORT <n>`` once listening."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--scripts", help="JSON file ('-' for stdin): {scripts, default}")
    args = ap.parse_args(argv)
    state = _State({}, Script())
    if args.scripts:
        text = sys.stdin.read() if args.scripts == "-" else open(args.scripts).read()  # noqa: SIM115
        _apply_scripts(state, json.loads(text))
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
    sock = _listening_socket(args.port)

    async def run() -> None:
        await _serve(state, sock)
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
