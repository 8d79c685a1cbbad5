"""A lean stand-in for vLLM's streaming chat endpoint, built to be a sharp reference clock.

:class:`LeanStandIn` plays the same scripts as :class:`tests.fakeserver.FakeServer`
(:class:`~tests.fakeserver.Script`: time to first token, per-step delay, tokens per
chunk, usage chunk with ``metrics.speculative_decoding``) and keeps the same log
(:class:`~tests.fakeserver.Exchange` of :class:`~tests.fakeserver.SentEvent`), but it is
a bare asyncio protocol on uvloop in its own process instead of an aiohttp application.
That matters for a fidelity benchmark: truth runs from the server's receipt of a request,
and aiohttp's request handling (parsing, routing, handler task, ~0.5 ms of CPU a request)
sits before its receipt stamp. With 64 requests arriving at once on two shared cores that
queue grew to tens of milliseconds, and it was charged to the client under test. Here the
receipt is stamped when the first byte of the request reaches the protocol, events are
scheduled on an absolute timeline from that stamp, and each event's true send time is
taken just before the single ``write`` that hands it to the kernel.

It serves ``POST /v1/chat/completions`` (chunked SSE, keep-alive; streamed requests only),
``GET /_fake/log`` and ``POST /_fake/reset``; anything else is a 404 (``vllm bench serve``
then skips its ``/metrics`` snapshots). Run standalone: ``python -m tests.benchmarks.standin``
reads ``{"default": <script>}`` on stdin and prints ``PORT <n>`` once listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.fakeserver import MODEL, Exchange, Script, SentEvent, token_id, token_text

__all__ = ["LeanStandIn"]

_REPO = Path(__file__).resolve().parents[2]
_HEADERS_200 = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _key_of(body: dict[str, Any]) -> str:
    content = ((body.get("messages") or [{}])[-1] or {}).get("content", "")
    if isinstance(content, list):  # vllm bench sends [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else json.dumps(content)


class _State:
    def __init__(self, default: Script) -> None:
        self.default = default
        self.log: list[Exchange] = []
        self.seq = 0


class _Play:
    """Plays one script on one connection, on an absolute timeline from ``t_recv``."""

    def __init__(
        self,
        proto: _Proto,
        state: _State,
        body: dict[str, Any],
        headers: dict[str, str],
        t_recv: float,
    ) -> None:
        self.proto, self.state, self.body, self.headers = proto, state, body, headers
        self.t_recv = t_recv
        self.script = state.default
        self.key = _key_of(body)
        opts = body.get("stream_options") or {}
        self.usage_each = bool(opts.get("continuous_usage_stats"))
        self.usage_final = bool(opts.get("include_usage"))
        self.ids = bool(body.get("return_token_ids"))
        self.rid = f"chatcmpl-lean-{id(self):x}"
        self.sizes = self.script.chunk_sizes()
        self.events: list[SentEvent] = []
        self.sent_tokens = 0
        self.i = 0
        self.timer: asyncio.TimerHandle | None = None
        self.t_headers: float | None = None
        self.seq = state.seq
        state.seq += 1

    def start(self) -> None:
        self.t_headers = time.perf_counter()
        self.proto.transport.write(_HEADERS_200)
        self._at(self.t_recv + self.script.ttft_s, self._first)

    def _at(self, t: float, fn: Any) -> None:
        self.timer = asyncio.get_running_loop().call_later(max(0.0, t - time.perf_counter()), fn)

    def _send(self, kind: str, data: bytes, n_tokens: int = 0, t_due: float | None = None) -> None:
        framed = _frame(data)
        t_sent = time.perf_counter()
        self.proto.transport.write(framed)
        self.events.append(SentEvent(kind, t_sent, n_tokens, t_due))

    def _chunk(self, choice: dict[str, Any] | None, usage: bool) -> bytes:
        obj: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [choice] if choice is not None else [],
        }
        if usage:
            n = self.sent_tokens
            p = self.script.prompt_tokens
            obj["usage"] = {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}
        return _sse(obj)

    def _first(self) -> None:
        if self.proto.closed:
            return
        if self.script.role_chunk:
            choice = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            self._send("role", self._chunk(choice, self.usage_each))
        self._token()

    def _token(self) -> None:
        if self.proto.closed:
            return
        i, n = self.i, self.sizes[self.i]
        first = self.sent_tokens
        self.sent_tokens += n
        idx = range(first, first + n)
        choice: dict[str, Any] = {
            "index": 0,
            "delta": {"content": "".join(token_text(k) for k in idx)},
            "logprobs": None,
            "finish_reason": None,
        }
        if self.ids:
            choice["token_ids"] = [token_id(k) for k in idx]
        t_due = self.t_recv + self.script.ttft_s + i * self.script.step_s
        self._send("token", self._chunk(choice, self.usage_each), n, t_due)
        self.i += 1
        if self.i < len(self.sizes):
            self._at(self.t_recv + self.script.ttft_s + self.i * self.script.step_s, self._token)
        else:
            self._finish()

    def _finish(self) -> None:
        script = self.script
        if script.finish_reason is not None:
            choice = {"index": 0, "delta": {}, "finish_reason": script.finish_reason}
            if self.ids:
                choice["token_ids"] = []
            self._send("finish", self._chunk(choice, self.usage_each))
        if self.usage_final:
            p, n = script.prompt_tokens, self.sent_tokens
            obj: dict[str, Any] = {
                "id": self.rid,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": MODEL,
                "choices": [],
                "usage": {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n},
            }
            if script.spec is not None:
                obj["metrics"] = {"speculative_decoding": dict(script.spec)}
            self._send("usage", _sse(obj))
        self._send("done", b"data: [DONE]\n\n")
        self.proto.transport.write(b"0\r\n\r\n")
        self._log("done")
        self.proto.request_done()

    def abort(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self._log("client_gone")

    def _log(self, outcome: str) -> None:
        self.state.log.append(
            Exchange(
                seq=self.seq,
                key=self.key,
                headers=self.headers,
                body=self.body,
                t_recv=self.t_recv,
                t_headers=self.t_headers,
                events=tuple(self.events),
                t_end=time.perf_counter(),
                outcome=outcome,
            )
        )


class _Proto(asyncio.Protocol):
    """One client connection: parses requests (Content-Length bodies), one at a time."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.buf = bytearray()
        self.t_first: float | None = None
        self.play: _Play | None = None
        self.closed = False
        self.transport: asyncio.Transport = None  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.buf:
            self.t_first = now  # the first byte of the next request
        self.buf += data
        self._next()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if self.play is not None:
            self.play.abort()
            self.play = None

    def request_done(self) -> None:
        self.play = None
        if self.buf:
            self.t_first = time.perf_counter()
            self._next()

    def _next(self) -> None:
        while self.play is None and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(self.buf[:end]).split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().decode("latin-1")] = value.strip().decode("latin-1")
            lower = {k.lower(): v for k, v in headers.items()}
            n = int(lower.get("content-length", "0"))
            if len(self.buf) < end + 4 + n:
                return
            body = bytes(self.buf[end + 4 : end + 4 + n])
            del self.buf[: end + 4 + n]
            t_recv = self.t_first if self.t_first is not None else time.perf_counter()
            self.t_first = time.perf_counter() if self.buf else None
            self._dispatch(method, path, headers, body, t_recv)

    def _reply(self, status: bytes, payload: bytes, ctype: bytes = b"application/json") -> None:
        self.transport.write(
            b"HTTP/1.1 "
            + status
            + b"\r\ncontent-type: "
            + ctype
            + b"\r\ncontent-length: "
            + str(len(payload)).encode()
            + b"\r\nconnection: close\r\n\r\n"
            + payload
        )
        self.transport.close()
        self.closed = True

    def _dispatch(
        self, method: bytes, path: bytes, headers: dict[str, str], body: bytes, t_recv: float
    ) -> None:
        if method == b"POST" and path == b"/v1/chat/completions":
            self.play = _Play(self, self.state, json.loads(body or b"{}"), headers, t_recv)
            self.play.start()
        elif method == b"GET" and path == b"/_fake/log":
            log = [asdict(e) for e in self.state.log]
            self._reply(b"200 OK", json.dumps({"log": log}).encode())
        elif method == b"POST" and path == b"/_fake/reset":
            self.state.log.clear()
            self._reply(b"200 OK", b'{"ok":true}')
        else:
            self._reply(b"404 Not Found", b'{"error":"not found"}')


async def _serve(default: Script) -> None:
    loop = asyncio.get_running_loop()
    state = _State(default)
    server = await loop.create_server(lambda: _Proto(state), "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    await stop
    server.close()


def main() -> None:
    data = json.loads(sys.stdin.read())
    default = Script.from_json(data["default"])
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(_serve(default))
    else:
        uvloop.run(_serve(default))


class LeanStandIn:
    """The lean stand-in in a child process, with the subset of FakeServer's API the
    benchmark uses: ``base_url``, ``pid``, ``exchanges()``, ``reset()``."""

    def __init__(self, *, default: Script) -> None:
        self.default = default
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> LeanStandIn:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
        }
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.standin"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=_REPO,
            env=env,
            start_new_session=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"default": self.default.to_json()}))
        self._proc.stdin.close()
        line = self._proc.stdout.readline()
        if not line.startswith("PORT "):
            self._proc.kill()
            raise RuntimeError(f"lean stand-in failed to start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def exchanges(self) -> list[Exchange]:
        return [Exchange.from_json(e) for e in self._control("GET", "/_fake/log")["log"]]

    def reset(self) -> None:
        self._control("POST", "/_fake/reset")

    def _control(self, method: str, path: str) -> Any:
        req = urllib.request.Request(
            self.base_url + path, data=b"" if method == "POST" else None, method=method
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
