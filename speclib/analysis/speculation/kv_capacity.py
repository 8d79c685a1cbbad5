"""The KV-cache capacity and memory each arm's server had, read from its own start log.

A draft model takes memory the target's KV cache would have had: on the CPU demo the
draft arm's server reported 29,056 tokens of KV cache against the control's 32,768. vLLM
says it once per start (``CPU KV cache size: 32,768 tokens`` / ``GPU KV cache size: …``);
:func:`kv_cache_tokens` reads that line from a log's text and :func:`kv_capacity` gives the
median over each series' launches (None where no launch logged it: an external server, a
start that failed). On a GPU :func:`server_memory` adds, per series, what the log says the
weights took (``Model loading took 9.67 GiB``) and the KV cache (``reserved 8.0 GiB memory
for KV Cache`` with a fixed size, ``Available KV cache memory: … GiB`` when profiled), beside
the peak GPU memory of the server's processes that ``nvidia-smi`` saw (each launch's
``status.json``). Pure functions of the run folder's files.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from typing import Any

from speclib.core.rundir import RunDir

__all__ = ["kv_cache_tokens", "kv_capacity", "log_memory_gib", "server_memory"]

_KV = re.compile(r"\b(?:CPU|GPU|XPU|TPU)? ?KV cache size: ([\d,]+) tokens")
_WEIGHTS = re.compile(r"Model loading took ([\d.]+) ?GiB")
_KV_GIB = re.compile(
    r"reserved ([\d.]+) ?GiB memory for KV Cache|Available KV cache memory: ([\d.]+) ?GiB"
)


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


def log_memory_gib(log_text: str) -> dict[str, float | None]:
    """``weights_gib`` and ``kv_cache_gib`` as a vLLM start log states them (the last of
    each; None where the log does not say: a CPU build states no weights)."""
    weights = _WEIGHTS.findall(log_text)
    kv = [a or b for a, b in _KV_GIB.findall(log_text)]
    return {
        "weights_gib": float(weights[-1]) if weights else None,
        "kv_cache_gib": float(kv[-1]) if kv else None,
    }


def server_memory(rd: RunDir, statuses: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per series: the largest peak GPU memory of its server's processes over its launches
    (``peak_gpu_bytes``, ``nvidia-smi``; None without a GPU) and the median weights and KV
    cache its logs state (GiB)."""
    per: dict[str, dict[str, list[float]]] = {}
    for s in statuses:
        lists = per.setdefault(str(s.get("series")), {"gpu": [], "weights": [], "kv": []})
        peak = (s.get("memory") or {}).get("gpu_process_peak_bytes")
        if peak:
            lists["gpu"].append(float(peak))
        try:
            text = rd.launch_files(str(s["launch_id"])).server_log.read_text(errors="replace")
        except (OSError, KeyError):
            continue
        logged = log_memory_gib(text)
        if logged["weights_gib"] is not None:
            lists["weights"].append(logged["weights_gib"])
        if logged["kv_cache_gib"] is not None:
            lists["kv"].append(logged["kv_cache_gib"])
    return {
        name: {
            "peak_gpu_bytes": int(max(v["gpu"])) if v["gpu"] else None,
            "weights_gib": statistics.median(v["weights"]) if v["weights"] else None,
            "kv_cache_gib": statistics.median(v["kv"]) if v["kv"] else None,
        }
        for name, v in per.items()
    }
