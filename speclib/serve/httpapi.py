"""Control-plane HTTP: the one place that calls a server's non-measured endpoints
(``/health``, ``/metrics``, ``/v1/models``, ``/tokenize``, ``/reset_prefix_cache``, a
readiness probe, the scorer's completions).

The measured chat requests do not go through here: the timing client in
:mod:`speclib.measure` encodes its own request bytes before any clock starts, and shares
only the auth header with this module (:func:`speclib.core.auth.auth_headers`). Everything
here is stdlib (``urllib``), synchronous and bounded by a timeout. The API key is passed in
by the caller (read from the environment variable the params name) and only ever placed in a
request header. The analysis never imports this module (an import-linter contract).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from speclib.core.auth import auth_headers

__all__ = [
    "HTTPError",
    "fetch_metrics",
    "get_json",
    "http_ok",
    "post_json",
    "request_bytes",
    "reset_prefix_cache",
    "served_model",
    "server_root",
]

HTTPError = urllib.error.HTTPError


def server_root(base_url: str) -> str:
    """``http://host:port`` of a base URL given with or without ``/v1[/chat/completions]``."""
    root = base_url.rstrip("/")
    for suffix in ("/chat/completions", "/v1"):
        root = root.removesuffix(suffix)
    return root


def request_bytes(
    url: str,
    *,
    api_key: str | None = None,
    body: Mapping[str, Any] | bytes | None = None,
    method: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, bytes, str]:
    """One request; returns ``(status, body, charset)``. HTTP errors raise :data:`HTTPError`,
    connection problems ``urllib.error.URLError`` / ``OSError``."""
    hdrs = {**auth_headers(api_key), **(headers or {})}
    data = None
    if isinstance(body, bytes):
        data = body
    elif body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        charset = resp.headers.get_content_charset() or "utf-8"
        return resp.status, resp.read(), charset


def get_json(url: str, *, api_key: str | None = None, timeout: float = 10.0) -> Any:
    """GET ``url`` and decode its JSON body."""
    return json.loads(request_bytes(url, api_key=api_key, timeout=timeout)[1])


def post_json(
    url: str, body: Mapping[str, Any], *, api_key: str | None = None, timeout: float = 60.0
) -> Any:
    """POST ``body`` as JSON to ``url`` and decode the JSON answer."""
    return json.loads(request_bytes(url, api_key=api_key, body=body, timeout=timeout)[1])


def http_ok(
    url: str,
    *,
    body: Mapping[str, Any] | None = None,
    api_key: str | None = None,
    timeout: float = 5.0,
) -> bool:
    """True when ``url`` answers 200 (GET, or POST of ``body``); never raises."""
    try:
        return request_bytes(url, api_key=api_key, body=body, timeout=timeout)[0] == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def fetch_metrics(base_url: str, *, api_key: str | None = None, timeout: float = 10) -> str:
    """GET ``<base_url>/metrics`` and return the Prometheus text; HTTP errors raise."""
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"`base_url` must start with http:// or https:// (got {base_url!r})")
    _, raw, charset = request_bytes(
        base_url.rstrip("/") + "/metrics",
        api_key=api_key,
        headers={"Accept": "text/plain"},
        method="GET",
        timeout=timeout,
    )
    return raw.decode(charset, errors="replace")


def served_model(base_url: str, *, api_key: str | None = None, timeout: float = 10.0) -> str:
    """The model id a server serves (its first ``/v1/models`` entry)."""
    data = get_json(server_root(base_url) + "/v1/models", api_key=api_key, timeout=timeout)
    return str(data["data"][0]["id"])


def reset_prefix_cache(base_url: str, *, api_key: str | None = None) -> str:
    """``POST /reset_prefix_cache`` (vLLM dev mode); returns what happened, never raises."""
    try:
        status, _, _ = request_bytes(
            server_root(base_url) + "/reset_prefix_cache",
            api_key=api_key,
            body=b"",
            method="POST",
            timeout=30,
        )
        return f"reset: HTTP {status}"
    except Exception as exc:
        return f"reset failed: {type(exc).__name__}: {exc}"
