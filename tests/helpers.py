"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import psutil

__all__ = [
    "fake_servers",
    "fake_servers_left",
    "kit_cache_with_facts",
    "process_gone",
    "servers_on_port",
    "vllm_server_pids",
]

_FAKE_VLLM = Path(__file__).resolve().with_name("fake_vllm.py")
_WORKER = "PYTEST_XDIST_WORKER"  # set by pytest-xdist in each worker and inherited by children


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


def fake_servers() -> list[psutil.Process]:
    """Live ``tests/fake_vllm.py`` servers started by this pytest process (or its xdist worker).

    Under ``pytest -n``, another worker's servers are running too; each server inherits its
    worker's ``PYTEST_XDIST_WORKER``, so only ours are counted (all of them when serial).
    Only this checkout's stand-in counts: another checkout's test run on a shared machine
    has workers of the same names (one of its servers failed a full run here, 2026-12-06).
    """
    ours = os.environ.get(_WORKER)
    mine = f"{_FAKE_VLLM} --model"
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if mine not in " ".join(proc.info["cmdline"] or []):
                continue
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(_WORKER) == ours:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def fake_servers_left(timeout_s: float = 15.0) -> list[int]:
    """Pids of this worker's fake servers still alive after waiting up to ``timeout_s``
    for them to exit (``[]``: all gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p.pid for p in fake_servers()]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


def kit_cache_with_facts(folder: Path) -> Path:
    """``folder`` as a fresh kit cache (``$SPECLIB_CACHE``) that already holds the installed
    vLLM's facts the kit reads before a run (its ``SpeculativeConfig`` schema and its
    server's flags), copied from this machine's cache (read there first when missing). A run
    pointed at it reads them instead of importing vLLM in two child processes (~60 s of a
    2-core machine); anything else it caches starts empty."""
    from speclib.demo.cache import default_cache_dir
    from speclib.vllm_facts.cli_flags import installed_cli_flags
    from speclib.vllm_facts.spec_schema import installed_spec_schema

    assert installed_cli_flags().flags is not None and installed_spec_schema().schema is not None
    for kind in ("vllm-cli", "vllm-schema"):
        shutil.copytree(default_cache_dir() / kind, folder / kind, dirs_exist_ok=True)
    return folder


def stand_in_checkpoint(folder, config: dict | None = None):
    """A folder a speculative config may name: a ``config.json`` (``config``, default
    empty) and one whole, tiny safetensors file, as the kit checks before any server (the
    stand-in servers never load it)."""
    import json
    import struct
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or {}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    return folder
