"""Which server configurations have started before on the shared compile cache.

Servers that share a GPU start one after another (:mod:`speclib.run.placement`): a vLLM
server that sizes its KV cache by profiling the GPU counts a neighbour's allocations as its
own. With a KV cache of fixed size (``server.kv_cache_memory_gib``, vLLM's
``--kv-cache-memory-bytes``) vLLM skips that profiling, so the servers could start
together, but for one more thing they share: the compile cache. vLLM writes its compile
cache index (``vllm_compile_cache.py``) with a plain ``open(..., "w")``, and two
configurations can share one cache folder (the draft_model arms at k = 2 and 4 did on the
H200), so a server that reads the index while another one writes it can read half a file.
A server therefore starts together with its neighbours only once its configuration has
started before on the shared cache (it then only reads). This module keeps that record: a
small file per configuration under the shared cache, named by a hash of the server's
arguments (the port left out) and the vLLM version, written once the server was ready.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FOLDER", "config_key", "mark_started", "started_before"]

FOLDER = "speclib-started"  # under the shared vLLM cache root


def config_key(args: Sequence[str], vllm_version: str | None) -> str:
    """A key for one server configuration: its arguments without the port's value, and
    the vLLM version that compiles it (another version compiles afresh)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--port":
            skip = True
            continue
        if not arg.startswith("--port="):
            kept.append(arg)
    text = json.dumps({"args": kept, "vllm": vllm_version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def mark_started(cache_root: Path, key: str, args: Sequence[str]) -> None:
    """Record that a server of this configuration became ready on ``cache_root``."""
    folder = cache_root / FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"args": list(args)}), encoding="utf-8")
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        pass  # without the record the next start is one after another: slower, not wrong


def started_before(cache_root: Path, key: str) -> bool:
    """Whether a server of this configuration has been ready on ``cache_root`` before."""
    return (cache_root / FOLDER / f"{key}.json").is_file()
