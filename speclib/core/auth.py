"""The API key's request header: the one place that says how a key is sent to a server.

Both the control-plane calls (:mod:`speclib.serve.httpapi`) and the timing client
(:mod:`speclib.measure.transport`, which encodes its own request bytes) take it from here. The
key is passed in by the caller (read from the environment variable the params name) and only
ever placed in this header.
"""

from __future__ import annotations

__all__ = ["auth_headers"]


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}`` when a key is set, else ``{}``."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
