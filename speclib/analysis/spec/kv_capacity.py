"""The KV-cache capacity each arm's server had, read from its own start log.

A draft model takes memory the target's KV cache would have had: on the CPU demo the
draft arm's server reported 29,056 tokens of KV cache against the control's 32,768. vLLM
says it once per start (``CPU KV cache size: 32,768 tokens`` / ``GPU KV cache size: …``);
:func:`kv_cache_tokens` reads that line from a log's text and :func:`kv_capacity` gives the
median over each series' launches (None where no launch logged it: an external server, a
start that failed). Pure functions of the run folder's logs.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from typing import Any

from speclib.core.rundir import RunDir

__all__ = ["kv_cache_tokens", "kv_capacity"]

_KV = re.compile(r"\b(?:CPU|GPU|XPU|TPU)? ?KV cache size: ([\d,]+) tokens")


def kv_cache_tokens(log_text: str) -> int | None:
    """The KV-cache capacity (tokens) a vLLM start log reports; the last one if several."""
    found = _KV.findall(log_text)
    return int(found[-1].replace(",", "")) if found else None


def kv_capacity(rd: RunDir, statuses: Iterable[dict[str, Any]]) -> dict[str, int | None]:
    """``{series: median KV-cache tokens over its launches}`` from each launch's log."""
    per: dict[str, list[int]] = {}
    for s in statuses:
        per.setdefault(str(s.get("series")), [])
        try:
            text = rd.launch_files(str(s["launch_id"])).server_log.read_text(errors="replace")
        except (OSError, KeyError):
            continue
        tokens = kv_cache_tokens(text)
        if tokens is not None:
            per[str(s.get("series"))].append(tokens)
    return {k: int(statistics.median(v)) if v else None for k, v in per.items()}
