"""Measured memory: sample the server's process tree RSS (and GPU memory when present).

A background thread samples every ``interval_s`` the resident set size summed over the
server process and all its descendants, and, when ``nvidia-smi`` exists, used memory per
GPU. Samples are appended to a JSONL file as they are taken, so the report can show peak and
mean per series and memory over time — measured, not announced.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "MemorySampler",
    "MemorySummary",
    "gpu_memory_used",
    "gpu_process_bytes",
    "nvidia_smi_rows",
    "tree_pids",
    "tree_rss_bytes",
    "tree_sum",
]


def tree_sum(pid: int, measure: Callable[[Any], float]) -> float | None:
    """``measure(process)`` summed over ``pid`` and all its descendants (None when gone);
    a descendant that exits meanwhile counts 0."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += measure(proc)
    return total


def tree_rss_bytes(pid: int) -> int | None:
    """RSS of ``pid`` plus all its descendants, in bytes (None when the process is gone)."""
    total = tree_sum(pid, lambda proc: proc.memory_info().rss)
    return None if total is None else int(total)


def nvidia_smi_rows(
    query: str, *, nounits: bool = False, timeout: float = 5, of: str = "gpu"
) -> list[list[str]] | None:
    """``nvidia-smi --query-gpu=QUERY`` (``of="compute-apps"``: one row per process on a
    GPU) as rows of fields; None without an NVIDIA GPU (or when the tool fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    fmt = "csv,noheader,nounits" if nounits else "csv,noheader"
    try:
        out = subprocess.run(
            [exe, f"--query-{of}={query}", f"--format={fmt}"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.split(", ") for line in out.strip().splitlines() if line.strip()]


def gpu_memory_used() -> list[int] | None:
    """Used memory per GPU in bytes from ``nvidia-smi``; None when there is no NVIDIA GPU."""
    rows = nvidia_smi_rows("memory.used", nounits=True)
    if rows is None:
        return None
    return [int(float(r[0])) * 1024 * 1024 for r in rows if r and r[0].strip()]


def gpu_process_bytes(pids: set[int]) -> int | None:
    """GPU memory used by the processes ``pids`` together (``nvidia-smi
    --query-compute-apps``); None without an NVIDIA GPU or when none of them holds any."""
    rows = nvidia_smi_rows("pid,used_memory", nounits=True, of="compute-apps") if pids else None
    total, seen = 0, False
    for fields in rows or []:
        try:
            pid, mib = int(fields[0].strip()), float(fields[1].strip())
        except (IndexError, ValueError):
            continue
        if pid in pids:
            total += int(mib * 1024 * 1024)
            seen = True
    return total if seen else None


def tree_pids(pid: int) -> set[int]:
    """``pid`` and all its descendants (empty when it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return {pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.Error:
        return set()


@dataclass(frozen=True)
class MemorySummary:
    """Peak and mean of the samples of one series launch; ``gpu_process_peak_bytes`` is
    the GPU memory held by the server's own processes (NVIDIA only), ``gpu_peak_bytes``
    the whole of each GPU (every server on it)."""

    n_samples: int
    rss_peak_bytes: int | None
    rss_mean_bytes: float | None
    gpu_peak_bytes: list[int] | None
    gpu_process_peak_bytes: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "n_samples": self.n_samples,
            "rss_peak_bytes": self.rss_peak_bytes,
            "rss_mean_bytes": self.rss_mean_bytes,
            "gpu_peak_bytes": self.gpu_peak_bytes,
            "gpu_process_peak_bytes": self.gpu_process_peak_bytes,
        }


class MemorySampler:
    """Context manager sampling a process tree's memory into a JSONL file."""

    def __init__(self, pid: int, path: Path, *, label: dict[str, object], interval_s: float = 0.5):
        self.pid = pid
        self.path = path
        self.label = label
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rss: list[int] = []
        self._gpu_peak: list[int] | None = None
        self._gpu_process_peak: int | None = None
        self._use_gpu = shutil.which("nvidia-smi") is not None

    def __enter__(self) -> MemorySampler:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="speclib-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _sample(self, fh: TextIO) -> None:
        rss = tree_rss_bytes(self.pid)
        gpu = gpu_memory_used() if self._use_gpu else None
        mine = gpu_process_bytes(tree_pids(self.pid)) if self._use_gpu else None
        if rss is not None:
            self._rss.append(rss)
        if gpu is not None:
            prev = self._gpu_peak or [0] * len(gpu)
            self._gpu_peak = [max(a, b) for a, b in zip(prev, gpu, strict=False)]
        if mine is not None:
            self._gpu_process_peak = max(mine, self._gpu_process_peak or 0)
        row = {
            **self.label,
            "t": time.time(),
            "rss_bytes": rss,
            "gpu_used_bytes": gpu,
            "gpu_process_bytes": mine,
        }
        fh.write(json.dumps(row) + "\n")
        fh.flush()

    def _run(self) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            while True:
                self._sample(fh)
                if self._stop.wait(self.interval_s):
                    break

    def summary(self) -> MemorySummary:
        rss = self._rss
        return MemorySummary(
            n_samples=len(rss),
            rss_peak_bytes=max(rss) if rss else None,
            rss_mean_bytes=sum(rss) / len(rss) if rss else None,
            gpu_peak_bytes=self._gpu_peak,
            gpu_process_peak_bytes=self._gpu_process_peak,
        )
