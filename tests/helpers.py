"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import psutil

__all__ = ["vllm_server_pids"]


def vllm_server_pids() -> list[int]:
    """Pids of any vLLM API server (or its engine processes) running on this machine."""
    pids = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        if "vllm.entrypoints.openai.api_server" in cmd or (proc.info["name"] or "").startswith(
            "VLLM::"
        ):
            pids.append(proc.pid)
    return pids
