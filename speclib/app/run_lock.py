"""Which kit process owns a run folder now: the run lock, and the refusal that names it.

A run folder has one owner at a time: the ``speclib run`` that writes it (attached or
detached, for the whole run, its analysis included) or a ``speclib analyze`` of it. The
owner holds an exclusive ``flock`` on ``RUN_DIR/run.lock`` and writes into the file who it
is (pid, start time, host, command). The kernel releases the lock when the owner dies, however
it dies, so "the owner is gone" is exact: never a guess from a pid that may be reused.

:func:`hold_run` takes the lock for a block of code (re-entrant within one process: the
analysis a run ends with runs under the run's own lock) and otherwise refuses with
:class:`RunFolderBusy`, naming the live owner; :func:`require_free` looks without taking it
(a run checks its folder before it touches anything; ``run --detach`` before it starts its
child). Only a process that holds the lock may
reap servers a dead owner left behind (``run --resume``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from speclib.core.fspaths import resolved
from speclib.core.rundir import RunDir

__all__ = ["Owner", "RunFolderBusy", "hold_run", "live_owner", "require_free"]

_HELD: dict[Path, list[Any]] = {}
"""The locks this process holds: lock path → [open file descriptor, depth]."""


class RunFolderBusy(ValueError):
    """The run folder cannot be owned now: another live kit process owns it (a run, or an
    analysis of it), or its lock cannot be written (a read-only folder)."""


@dataclass(frozen=True)
class Owner:
    """The kit process that holds (or last held) a run folder's lock."""

    pid: int
    started: float  # the process's start time (seconds since the epoch)
    host: str
    command: tuple[str, ...]
    purpose: str  # "run" or "analyze"

    @classmethod
    def me(cls, purpose: str) -> Owner:
        """This process."""
        import psutil

        started = psutil.Process().create_time()
        return cls(os.getpid(), started, platform.node(), tuple(sys.argv), purpose)

    @classmethod
    def read(cls, text: str) -> Owner | None:
        """The owner a lock file names (None: empty or not the kit's)."""
        try:
            data = json.loads(text)
            return cls(
                int(data["pid"]),
                float(data["started"]),
                str(data["host"]),
                tuple(str(a) for a in data["command"]),
                str(data.get("purpose") or "run"),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def line(self) -> str:
        """``a speclib run (pid 123 on host, started 2026-12-06 10:00:00 UTC: speclib run …)``."""
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        command = " ".join(self.command)
        command = command if len(command) <= 120 else command[:117] + "..."
        what = "an analysis" if self.purpose == "analyze" else "a run"
        return f"{what} (pid {self.pid} on {self.host}, started {when}: {command})"


def _busy(rd: RunDir, owner: Owner | None) -> RunFolderBusy:
    who = owner.line() if owner else "another process (it wrote no name)"
    if owner is not None and owner.host != platform.node():
        stop = f"it runs on {owner.host}: wait for it to end there"
    elif owner is not None:
        stop = f"wait for it to end, or stop it: kill {owner.pid}"
    else:
        stop = "wait for it to end"
    return RunFolderBusy(
        f"{rd.root} is in use by {who}; nothing was touched. A run folder has one owner at "
        f"a time: {stop}, then try again"
    )


def _try_lock(path: Path) -> int | None:
    """An open descriptor of ``path`` holding its exclusive lock, or None when another
    process holds it. The file is created if needed; one that was replaced while we waited
    is opened again (so two processes never each hold a lock on a different file)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder unlinked it as we opened it: take the new one


def live_owner(rd: RunDir) -> Owner | None:
    """The live process that owns ``rd`` now (None: nobody, or this process). Creates
    nothing: a folder without a lock file has no owner."""
    path = rd.run_lock
    if resolved(path) in _HELD or not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return Owner.read(path.read_text("utf-8", errors="replace")) or Owner(
                0, 0.0, "?", (), "run"
            )
        return None
    finally:
        os.close(fd)


def require_free(rd: RunDir) -> None:
    """Raise :class:`RunFolderBusy` naming the live owner of ``rd``, if it has one."""
    if (owner := live_owner(rd)) is not None:
        raise _busy(rd, owner)


@contextlib.contextmanager
def hold_run(rd: RunDir, purpose: str) -> Iterator[Owner | None]:
    """Own ``rd`` for the block (its folder created if needed); yield the owner a dead
    process left named in the lock (None: none, or this process held it already).

    Raises :class:`RunFolderBusy` naming the live owner, touching nothing else. Re-entrant
    within a process. Leaving the block releases the lock and removes the file."""
    path = rd.run_lock
    key = resolved(path)
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield None
        finally:
            _HELD[key][1] -= 1
        return
    require_free(rd)
    try:
        rd.root.mkdir(parents=True, exist_ok=True)
        fd = _try_lock(path)
    except OSError as exc:
        raise RunFolderBusy(
            f"{rd.root}: cannot take the run folder's lock ({exc.strerror}); a run or an "
            "analysis writes into its folder, so it must be writable (copy it elsewhere)"
        ) from None
    if fd is None:
        raise _busy(rd, Owner.read(path.read_text("utf-8", errors="replace")))
    key = resolved(path)
    try:
        previous = Owner.read(os.pread(fd, 1 << 16, 0).decode("utf-8", errors="replace"))
        me = json.dumps(asdict(Owner.me(purpose))).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
        _HELD[key] = [fd, 1]
    except BaseException:
        os.close(fd)
        raise
    try:
        yield previous
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            path.unlink()  # while still locked: a waiter finds its file gone and retries
        os.close(fd)
