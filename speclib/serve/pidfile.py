"""The pidfile of a running server, and reaping the server a killed run left behind.

While a server runs, its run folder holds a small JSON pidfile: the server's pid (the
leader of its process group), its supervisor's pid, the start time, the log file and the
redacted command line. The supervisor (:mod:`speclib.serve.supervisor`) kills the server
when the kit dies, but should the supervisor itself be SIGKILLed the server survives; the
next run then calls :func:`reap_pidfile` (for every launch of a run folder:
:func:`reap_run`), which kills it only if it is provably ours (same command line, or the
surviving members of a process group whose leader is gone) and its supervisor is gone (a
live supervisor means a live run). Only the process that owns the run folder calls it
(:mod:`speclib.app.run_lock`: a run, or ``--resume`` of one whose owner is gone); a pidfile
that is not the kit's JSON is left alone. Linux only: it reads
``/proc``; psutil (a dependency) walks the descendants.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speclib.core.rundir import RunDir

__all__ = ["reap_pidfile", "reap_run", "write_pidfile"]


def write_pidfile(
    path: Path, *, pid: int, supervisor_pid: int, log_path: Path, argv: Sequence[str]
) -> None:
    """Record a started server in ``path`` (atomically); ``argv`` must already be redacted.

    The server leads its own process group, so its pid is also the group's id.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    info = {
        "pid": pid,
        "pgid": pid,
        "supervisor_pid": supervisor_pid,
        "started": time.time(),
        "log": str(log_path),
        "argv": list(argv),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info), encoding="utf-8")
    tmp.replace(path)


def reap_run(rd: RunDir) -> None:
    """Stop every server of the run in ``rd`` that a killed kernel or kit left behind."""
    for pidfile in rd.pidfiles():
        reap_pidfile(pidfile)


def reap_pidfile(pidfile: Path) -> list[int]:
    """Stop a server left by an earlier, killed run (recorded in ``pidfile``); return pids.

    Only a process whose command line is still the one recorded is killed, so a pid reused
    by an unrelated program is left alone. When the recorded leader is already gone, the
    survivors of its process group (e.g. engine processes) are killed: Linux does not reuse
    a pid as long as a process group of that id exists, so they can only be ours.
    """
    try:
        info = json.loads(pidfile.read_text(encoding="utf-8"))
        pid = int(info.get("pid", 0))
        pgid = int(info.get("pgid", pid))
    except (OSError, ValueError, TypeError, AttributeError):  # not a pidfile the kit wrote
        return []
    if _supervised(info.get("supervisor_pid")):
        return []  # its supervisor is alive, so is the run that started it: not ours to stop
    killed: list[int] = []
    if pid > 0 and _cmdline_matches(pid, info.get("argv") or []):
        kids = _descendants(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        for kid in kids:
            with contextlib.suppress(Exception):
                kid.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    elif pgid > 0 and not _pid_alive(pid):
        survivors = _group_members(pgid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        killed += survivors
    with contextlib.suppress(OSError):
        pidfile.unlink()
    return killed


def _supervised(supervisor_pid: Any) -> bool:
    """Whether the server's supervisor (:mod:`speclib.serve.supervisor`) still runs: it
    stops the server itself when its kit goes, so a live one means a live run."""
    if not isinstance(supervisor_pid, int) or supervisor_pid <= 0:
        return False
    try:
        raw = Path(f"/proc/{supervisor_pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"speclib.serve.supervisor" in raw and _state(supervisor_pid) != "Z"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return Path(f"/proc/{pid}/stat").exists() and _state(pid) != "Z"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def _group_members(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry.name)) == pgid:
                    out.append(int(entry.name))
    return out


def _cmdline_matches(pid: int, argv: list[str]) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return bool(argv) and raw.rstrip("\0").split("\0") == list(argv)


def _descendants(pid: int) -> list[Any]:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
