"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import psutil

__all__ = ["servers_on_port", "vllm_server_pids"]


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


def servers_on_port(port: int) -> list[int]:
    """Pids of vLLM processes started with ``--port port`` (ours, even if others run)."""
    out = []
    for pid in vllm_server_pids():
        try:
            cmd = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        if "--port" in cmd and cmd[cmd.index("--port") + 1 : cmd.index("--port") + 2] == [
            str(port)
        ]:
            out.append(pid)
    return out
