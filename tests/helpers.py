"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import time

import psutil

__all__ = ["process_gone", "servers_on_port", "vllm_server_pids"]


def process_gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether ``pid`` exited (or is a zombie no one reaped) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


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
