"""Supervisor between the kit and one server process group: nothing outlives the kit.

The kit never starts a server directly: it starts ``python -m speclib.serve.supervisor``
with pipes on stdin and stdout, and this small process starts the server as its child in a
new process group (in the kit's session, so the server's niceness ranks it below the kit's
client: :mod:`speclib.serve.priority`). The supervisor stops the server's whole tree — its process
group, and every descendant, including one that left the group — when

- its stdin pipe reaches end of file: the kit closed it, or died (even by SIGKILL, which
  runs no cleanup code in the kit; the kernel closes the pipe anyway);
- it receives SIGTERM, SIGINT or SIGHUP, or its parent changes (the kit died while a
  forked child kept a copy of the pipe);
- it reads ``stop GRACE_S`` on stdin (the kit's normal stop, with its grace period).

It marks itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a grandchild orphaned
by its parent's exit (an engine process whose API server died) re-parents to the supervisor
instead of to init, and is still found and killed. When the server's leader exits on its
own, the rest of its tree is stopped and the supervisor exits *with the server's status*:
the same exit code, or killed by the same signal, so the kit's ``Popen.returncode`` of the
supervisor is the server's. The supervisor itself never outlives the server.

Protocol. stdin, first line: JSON ``{"argv": [...], "env": {...}, "grace_s": float,
"nice": int}`` (``env`` is the server's whole environment, so a secret never appears on a
command line; ``grace_s`` is the SIGTERM-to-SIGKILL delay for every stop not asked with its
own; ``nice`` the niceness the server starts with, inherited by all it starts).
stdout: one JSON line, ``{"pid": N}`` once the server runs, or
``{"errno": ..., "strerror": ..., "filename": ...}`` when it could not be executed (the
supervisor then exits 127). The server's stdout and stderr are the supervisor's stderr
(the launch's log file); the supervisor notes why it stopped there too. Linux-first: the
prctl calls are skipped where libc has none; psutil (a dependency) walks the descendants.

Both ends of the protocol live here, since they change together: :func:`start_supervised`
and :func:`stop_supervised` are the kit's side (used by :mod:`speclib.serve.process`),
:func:`main` the supervisor's.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Supervised",
    "SupervisorConfig",
    "SupervisorError",
    "main",
    "reap_children",
    "start_supervised",
    "stop_supervised",
    "stop_tree",
]

# A new process group, not a new session: a terminal's Ctrl-C (sent to the foreground
# group) does not reach the supervisor or the server, and both stay in the kit's session and
# so in its scheduler autogroup, where the server's niceness ranks it below the kit's client
# (a new session would get an autogroup of its own, weighed equally with the client's
# whatever the niceness: see speclib.serve.priority).
_NEW_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
)
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.5
_KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class SupervisorConfig:
    """What the kit sends on the first line of stdin."""

    argv: tuple[str, ...]
    env: dict[str, str] | None = field(default=None, repr=False)
    grace_s: float = 5.0
    nice: int = 0

    @classmethod
    def from_line(cls, line: bytes) -> SupervisorConfig:
        data = json.loads(line)
        return cls(
            argv=tuple(data["argv"]),
            env=data.get("env"),
            grace_s=float(data.get("grace_s", 5.0)),
            nice=int(data.get("nice", 0)),
        )

    def to_line(self) -> bytes:
        data = {"argv": self.argv, "env": self.env, "grace_s": self.grace_s, "nice": self.nice}
        return (json.dumps(data) + "\n").encode()


# --- the kit's side ---------------------------------------------------------------------


class SupervisorError(RuntimeError):
    """The supervisor died or went silent before it could report the server's pid."""

    def __init__(self, message: str, *, returncode: int | None):
        super().__init__(message)
        self.returncode = returncode


@dataclass(frozen=True)
class Supervised:
    """A command running under a supervisor.

    ``process`` is the supervisor, a direct child of the kit: its return code is the
    command's (same exit code, or negative signal number). ``pid`` is the command's own pid,
    the leader of its process group — what memory sampling and pidfiles refer to.
    """

    process: subprocess.Popen[bytes]
    pid: int


def _supervisor_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the speclib package
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _read_report(proc: subprocess.Popen[bytes], timeout_s: float) -> dict[str, Any] | None:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    return json.loads(data.split(b"\n", 1)[0])


def start_supervised(
    argv: tuple[str, ...],
    *,
    env: dict[str, str],
    log: Any,
    grace_s: float = 5.0,
    nice: int = 0,
    report_timeout_s: float = 60.0,
) -> Supervised:
    """Start ``argv`` under a supervisor, output to the open binary file ``log``.

    ``nice`` (0–19) lowers the command's CPU priority: every process and thread it starts
    inherits it, so on a shared host the server it measures starves the kit's client less
    often.

    Returns once the command runs. Raises :class:`OSError` (as :class:`subprocess.Popen`
    would) when the command cannot be executed, and :class:`SupervisorError` when the
    supervisor itself fails.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclib.serve.supervisor"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=_supervisor_env(),
        **_NEW_GROUP,  # like the server: a terminal's Ctrl-C does not reach it
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(SupervisorConfig(argv=argv, env=env, grace_s=grace_s, nice=nice).to_line())
        proc.stdin.flush()
        report = _read_report(proc, report_timeout_s)
    except (OSError, ValueError):
        report = None
    except BaseException:  # Ctrl-C while starting: the supervisor stops what it started
        _dismiss(proc)
        raise
    if report is not None and "pid" in report:
        return Supervised(process=proc, pid=int(report["pid"]))
    _dismiss(proc)
    if report is not None and "errno" in report:
        raise OSError(report["errno"], report["strerror"], report["filename"])
    raise SupervisorError(
        f"the server supervisor exited with code {proc.returncode} before starting the server",
        returncode=proc.returncode,
    )


def stop_supervised(sup: Supervised, *, grace_s: float) -> int | None:
    """Ask the supervisor to stop the command's tree (SIGTERM, ``grace_s``, SIGKILL) and
    wait for it; return the command's return code. If the supervisor does not answer, its
    tree is killed from here."""
    proc = sup.process
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.write(f"stop {grace_s}\n".encode())
            proc.stdin.flush()
    try:
        _close_and_wait(proc, timeout_s=grace_s + _KILL_WAIT_S + 10.0)
    except subprocess.TimeoutExpired:
        _kill_everything(sup)
    return proc.returncode


def _dismiss(proc: subprocess.Popen[bytes]) -> None:
    """Close the supervisor's pipes (it stops the server's tree) and wait; kill if stuck."""
    try:
        _close_and_wait(proc, timeout_s=_KILL_WAIT_S + 10.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _close_and_wait(proc: subprocess.Popen[bytes], *, timeout_s: float) -> None:
    for pipe in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            if pipe is not None:
                pipe.close()
    proc.wait(timeout=timeout_s)


def _kill_everything(sup: Supervised) -> None:
    import psutil

    procs = []
    for root in (sup.process.pid, sup.pid):
        with contextlib.suppress(psutil.Error):
            procs += psutil.Process(root).children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sup.pid, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    sup.process.kill()
    sup.process.wait()


# --- the supervisor's side --------------------------------------------------------------


def _prctl(option: int, arg: int) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, arg, 0, 0, 0)


def _server_preexec(nice: int) -> None:  # runs in the server between fork and exec
    os.setpgid(0, 0)  # its own process group, in the kit's session (see _NEW_GROUP)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the supervisor SIGKILLed: the server goes too
    if nice:
        os.nice(nice)  # inherited by every process and thread the server starts


def reap_children() -> list[tuple[int, int]]:
    """Collect every exited child (subreaper: adopted orphans too); ``(pid, status)`` each."""
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, status))


def _live_descendants() -> list[Any]:
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    live = []
    for kid in kids:
        with contextlib.suppress(psutil.Error):
            if kid.status() != psutil.STATUS_ZOMBIE:
                live.append(kid)
    return live


def _signal_tree(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for proc in _live_descendants():
        with contextlib.suppress(Exception):
            proc.send_signal(sig)


def stop_tree(pgid: int, *, grace_s: float, on_reap: Callable[[int, int], None]) -> None:
    """SIGTERM the group ``pgid`` and every descendant of this process, SIGKILL survivors
    after ``grace_s``; reap them all, passing each ``(pid, status)`` to ``on_reap``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, _KILL_WAIT_S)):
        _signal_tree(pgid, sig)
        deadline = time.monotonic() + wait_s
        while True:
            for pid, status in reap_children():
                on_reap(pid, status)
            if not _live_descendants():
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _exit_like(status: int | None) -> None:
    """Exit with the server's wait status: the same code, or killed by the same signal."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    if status is None:
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGSEGV mirrored: no core
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _note(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    sys.stderr.write(f"# speclib supervisor {stamp}: {message}\n")
    sys.stderr.flush()


def _report(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _start_server(cfg: SupervisorConfig) -> int:
    try:
        proc = subprocess.Popen(
            list(cfg.argv),
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(),
            stderr=subprocess.STDOUT,
            env=cfg.env,
            preexec_fn=functools.partial(_server_preexec, cfg.nice),
        )
    except OSError as exc:
        _report({"errno": exc.errno, "strerror": exc.strerror, "filename": exc.filename})
        os._exit(127)
    proc.returncode = 0  # reaped with os.waitpid below; keep Popen from waiting on it
    _report({"pid": proc.pid})
    sys.stdout.close()
    return proc.pid


class _Watch:
    """The supervisor's loop state: why to stop, and the server's wait status once reaped."""

    def __init__(self, server_pid: int, grace_s: float):
        self.server_pid = server_pid
        self.grace_s = grace_s
        self.status: int | None = None
        self.reason: str | None = None
        self.parent = os.getppid()
        self.buffer = b""

    def on_reap(self, pid: int, status: int) -> None:
        if pid == self.server_pid:
            self.status = status

    def read_stdin(self) -> None:
        data = os.read(0, 4096)
        if not data:
            self.reason = self.reason or "stdin closed (the kit exited or died)"
            return
        self.feed(data)

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            words = line.decode(errors="replace").split()
            if words[:1] == ["stop"]:
                with contextlib.suppress(IndexError, ValueError):
                    self.grace_s = float(words[1])
                self.reason = self.reason or "stop requested by the kit"

    def check(self) -> None:
        for pid, status in reap_children():
            self.on_reap(pid, status)
        if self.status is not None:
            code = os.waitstatus_to_exitcode(self.status)
            self.reason = self.reason or f"the server exited (return code {code})"
        if os.getppid() != self.parent:
            self.reason = self.reason or "the kit died (parent changed)"


def _read_line(fd: int) -> tuple[bytes, bytes]:
    """The first line on ``fd`` (unbuffered, so nothing after it is lost) and what followed."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 4096)
        if not chunk:
            return b"", b""
        data += chunk
    line, rest = data.split(b"\n", 1)
    return line, rest


def _wakeup_pipe() -> int:
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    return rfd


def main() -> None:
    """Run the supervisor (``python -m speclib.serve.supervisor``); never returns."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    line, rest = _read_line(0)
    if not line:
        _note("stdin closed before the configuration line; nothing started")
        os._exit(1)
    cfg = SupervisorConfig.from_line(line)
    hits: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: hits.append(signum))
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select below
    wake = _wakeup_pipe()
    watch = _Watch(_start_server(cfg), cfg.grace_s)
    watch.feed(rest)
    while watch.reason is None:
        ready, _, _ = select.select([0, wake], [], [], _POLL_S)
        if wake in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake, 512)
        if 0 in ready:
            watch.read_stdin()
        if hits:
            watch.reason = watch.reason or f"got {signal.Signals(hits[0]).name}"
        watch.check()
    _note(f"{watch.reason}; stopping the server's process tree (pid {watch.server_pid})")
    stop_tree(watch.server_pid, grace_s=watch.grace_s, on_reap=watch.on_reap)
    _exit_like(watch.status)


if __name__ == "__main__":
    main()
