"""A stand-in for the vLLM endpoints that output scoring uses, for fast tests only.

A real HTTP server (aiohttp) on ``127.0.0.1`` answering the way vLLM 0.32 does:

* ``POST /tokenize`` with ``messages`` (chat template applied: ``[BOS, ...bytes+10..., 2]``)
  or with ``prompt`` (the bytes of the text + 10, no special tokens);
* ``POST /v1/completions`` with a token-id ``prompt``, ``max_tokens: 1`` and
  ``prompt_logprobs: 0``: ``choices[0].prompt_logprobs`` is ``[null, {"<id>": {"logprob",
  "rank", "decoded_token"}}, ...]``, one entry per prompt token, the first ``null``;
* ``GET /health``, ``GET /v1/models`` and a minimal non-streaming ``/v1/chat/completions``
  (the kit's readiness probe).

The "model" gives token ``t`` the log-prob :func:`logprob_of` (``t < 500``: plausible,
−0.1 to −0.55; ``500 <= t < 900``: garbage, about −5), so tests can predict every score;
with ``prompt_logprobs: K`` every position also lists the top ``K`` of :data:`DIST` (tokens
100–104, the only ones that form a normalised distribution).
Scripted failures: token 999 anywhere in a completion prompt → HTTP 400 (as vLLM answers a
prompt longer than the context); token 998 → an entry without that token; a message
containing ``"untokenizable"`` → HTTP 500 from ``/tokenize``.

Thread mode: ``with ScorerServer() as srv: srv.url``. Process mode (what
``server.launcher`` starts): ``python tests/fake_scorer.py --model M --host H --port P``;
like vLLM it exits 1 when given ``--speculative-config`` — scoring must never run under
speculation, and a test fails loudly if it does.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import socket
import sys
import threading
from collections import Counter
from typing import Any

from aiohttp import web

__all__ = ["BOS", "DIST", "EOT", "ScorerServer", "logprob_of", "make_app", "tokenize_text"]

BOS, EOT = 1, 2
CALLS = web.AppKey("calls", Counter)
INFLIGHT = web.AppKey("inflight", dict)
ERROR_TOKEN, MALFORMED_TOKEN = 999, 998


DIST = {100: 0.5, 101: 0.2, 102: 0.15, 103: 0.1, 104: 0.05}
"""The stand-in's top tokens and their probabilities, the same at every position."""


def logprob_of(token: int) -> float:
    """The stand-in model's log-prob of ``token`` at any position."""
    if token in DIST:
        return math.log(DIST[token])
    if token < 500:
        return -0.1 - 0.05 * (token % 10)
    return -5.0 - 0.01 * (token % 10)


def tokenize_text(text: str) -> list[int]:
    """Token ids of plain text (no special tokens)."""
    return [b + 10 for b in text.encode("utf-8")]


def _chat_ids(messages: list[dict[str, Any]]) -> list[int]:
    ids = [BOS]
    for m in messages:
        ids += [*tokenize_text(f"<{m['role']}>{m['content']}"), EOT]
    return ids


def make_app(
    *, model: str = "fake-scorer", api_key: str | None = None, delay_s: float = 0.0
) -> web.Application:
    """The aiohttp application; ``app[CALLS]`` counts requests per path."""
    app = web.Application()
    calls: Counter[str] = Counter()
    inflight = {"now": 0, "max": 0}
    app[CALLS], app[INFLIGHT] = calls, inflight

    def authorized(request: web.Request) -> bool:
        return api_key is None or request.headers.get("Authorization") == f"Bearer {api_key}"

    async def tokenize(request: web.Request) -> web.Response:
        calls["/tokenize"] += 1
        if not authorized(request):
            return web.json_response({"error": {"message": "Unauthorized"}}, status=401)
        body = await request.json()
        if "messages" in body:
            if any("untokenizable" in m["content"] for m in body["messages"]):
                return web.json_response({"error": {"message": "template failed"}}, status=500)
            ids = _chat_ids(body["messages"])
        else:
            ids = tokenize_text(body["prompt"])
        return web.json_response({"count": len(ids), "max_model_len": 1024, "tokens": ids})

    async def completions(request: web.Request) -> web.Response:
        calls["/v1/completions"] += 1
        if not authorized(request):
            return web.json_response({"error": {"message": "Unauthorized"}}, status=401)
        inflight["now"] += 1
        inflight["max"] = max(inflight["max"], inflight["now"])
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            body = await request.json()
        finally:
            inflight["now"] -= 1
        prompt = body["prompt"]
        if body.get("prompt_logprobs") is None or body.get("max_tokens") != 1:
            return web.json_response({"error": {"message": "bad scoring request"}}, status=422)
        if ERROR_TOKEN in prompt:
            msg = "This model's maximum context length is 1024 tokens."
            return web.json_response({"error": {"message": msg}}, status=400)
        k = int(body["prompt_logprobs"])
        top = sorted(DIST, key=DIST.__getitem__, reverse=True)[:k]
        plp: list[Any] = [None]
        for t in prompt[1:]:
            shown = t + 1 if t == MALFORMED_TOKEN else t
            rank_t = top.index(t) + 1 if t in top else len(DIST) + 1
            entry = {str(shown): {"logprob": logprob_of(t), "rank": rank_t, "decoded_token": "x"}}
            for rank, u in enumerate(top, 1):
                entry[str(u)] = {"logprob": logprob_of(u), "rank": rank, "decoded_token": "d"}
            plp.append(entry)
        choice = {
            "index": 0,
            "text": "x",
            "logprobs": None,
            "finish_reason": "length",
            "prompt_logprobs": plp,
            "prompt_token_ids": None,
        }
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": 1,
            "total_tokens": len(prompt) + 1,
        }
        return web.json_response(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": model,
                "choices": [choice],
                "usage": usage,
            }
        )

    async def chat(request: web.Request) -> web.Response:
        calls["/v1/chat/completions"] += 1
        msg = {"role": "assistant", "content": "x"}
        return web.json_response(
            {"choices": [{"index": 0, "message": msg, "finish_reason": "length"}]}
        )

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": model, "object": "model"}]})

    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    return app


class ScorerServer:
    """The stand-in in a daemon thread of the test process, on an ephemeral port."""

    def __init__(self, **kwargs: Any) -> None:
        self.app = make_app(**kwargs)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def calls(self) -> Counter[str]:
        return self.app[CALLS]

    @property
    def max_inflight(self) -> int:
        return int(self.app[INFLIGHT]["max"])

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self.app)
        self._loop.run_until_complete(self._runner.setup())
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> ScorerServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name")
    p.add_argument("--speculative-config")
    args, _ = p.parse_known_args(argv)
    print("fake scorer argv:", argv, flush=True)
    if args.speculative_config is not None:
        print("ERROR: scoring server started with --speculative-config", flush=True)
        return 1
    app = make_app(model=args.served_model_name or args.model)
    web.run_app(app, host=args.host, port=args.port, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
