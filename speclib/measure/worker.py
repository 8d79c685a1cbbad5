"""The load generator in its own small process: the client worker, the caller's side.

Measured on a busy 2-core machine: the client, run inside the Jupyter kernel next to the
kit's sampler threads and ipykernel's own, was not scheduled in time and read whole streams
late (every chunk of a stream in one network read). So the kit runs
:func:`~speclib.measure.request_loop.run_requests_sync` in the client worker,
``python -m speclib.measure.worker_process``, a process that does nothing else: its event
loop shares the GIL with no one, and the loop-lag probe
(:class:`~speclib.measure.run_bookkeeping.LagProbe`) measures that loop.

:class:`ClientWorker` is the caller's side: ``run(**kwargs, sink=..., progress=...)`` takes
the keyword arguments of :func:`~speclib.measure.request_loop.run_requests_sync` and calls
``sink(record)`` in the caller as each record arrives, so the caller still appends every
record as its request finishes. :func:`shared_worker` keeps one worker per process (started
on first use, restarted if it died, closed at exit); :func:`run_requests_isolated` runs in
it and falls back to running in process, saying so in the outcome's ``client_process``,
when no worker can be started.

The worker is started with :class:`subprocess.Popen` (not :mod:`multiprocessing`, which
misbehaves inside Jupyter kernels) in the caller's session and process group: never a
session leader, so it shares the kit's scheduler autogroup, where the servers' niceness
ranks them below the client (:mod:`speclib.serve.priority`). A terminal's Ctrl-C reaches it
too and is ignored there: the caller decides (it kills the worker, whose requests are then
dropped like cancelled ones, and re-raises). It never outlives the caller.

The worker's side, the protocol between the two and its framing are in
:mod:`speclib.measure.worker_process`. Import-light: no vLLM, no torch, no pandas.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from speclib.measure.request_loop import run_requests_sync
from speclib.measure.run_bookkeeping import Progress, RunOutcome, Sink
from speclib.measure.worker_process import Frames, frame

__all__ = [
    "ClientWorker",
    "ClientWorkerError",
    "ClientWorkerGoneError",
    "ClientWorkerStartError",
    "close_shared_worker",
    "run_requests_isolated",
    "shared_worker",
]

_START_TIMEOUT_S = 60.0  # python start-up and `import speclib.measure` on a busy machine
_CLOSE_WAIT_S = 5.0
_RETRY_START_S = 300.0  # after a failed start, run in process this long before trying again


class ClientWorkerError(RuntimeError):
    """The client worker failed: a job raised there (``kind`` names the exception type,
    ``remote_traceback`` is its traceback text), or the worker exited during a run."""

    def __init__(self, message: str, *, kind: str | None = None, remote_traceback: str = ""):
        super().__init__(message)
        self.kind = kind
        self.remote_traceback = remote_traceback


class ClientWorkerStartError(ClientWorkerError):
    """The client worker could not be started (or did not report ready in time)."""


class ClientWorkerGoneError(ClientWorkerError):
    """The client worker had exited before it got the job: nothing of the run happened."""


# --- the caller's side ------------------------------------------------------------------


def _worker_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the speclib package
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


class ClientWorker:
    """A running client worker process; one job at a time (concurrent callers wait).

    Starting it waits until the worker reports ready (``start_timeout_s``) and raises
    :class:`ClientWorkerStartError` when it cannot. Use it as a context manager, or call
    :meth:`close`.
    """

    def __init__(self, *, start_timeout_s: float = _START_TIMEOUT_S) -> None:
        self._lock = threading.Lock()
        self.owner_pid = os.getpid()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "speclib.measure.worker_process"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=_worker_env(),
                close_fds=True,
            )  # no start_new_session: the worker stays in the caller's session and group
        except OSError as exc:
            raise ClientWorkerStartError(f"could not start the client worker: {exc}") from exc
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._frames = Frames(self._proc.stdout.fileno())
        try:
            hello = self._frames.read(time.monotonic() + start_timeout_s)
        except Exception as exc:  # EOFError, TimeoutError, or not our protocol at all
            self.close(timeout_s=1.0)
            why = (
                f"did not report ready within {start_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"exited with code {self._proc.returncode} before it was ready "
                "(its stderr is the caller's)"
            )
            raise ClientWorkerStartError(f"the client worker {why}") from None
        except BaseException:
            self.close(timeout_s=1.0)
            raise
        if not (isinstance(hello, tuple) and hello[:1] == ("ready",)):
            self.close(timeout_s=1.0)
            raise ClientWorkerStartError(f"the client worker said {hello!r} instead of ready")
        self.pid: int = hello[1]

    def __enter__(self) -> ClientWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def alive(self) -> bool:
        """Whether the worker process is still running."""
        return self._proc.poll() is None

    def run(self, *, sink: Sink, progress: Progress | None = None, **kwargs: Any) -> RunOutcome:
        """:func:`~speclib.measure.request_loop.run_requests_sync` in the worker.

        ``kwargs`` are that function's (``sink`` and ``progress`` aside) and must pickle
        (``TypeError`` here if not; the worker never sees them).
        ``sink(record)`` is called here as each record arrives; if it raises, the worker
        stops sending and, once its in-flight requests ended, that exception is re-raised
        here (as in process). ``progress(n)`` is called as finishes are reported; a
        broken one is dropped with a warning. An exception in the worker is raised as
        :class:`ClientWorkerError` naming it; so is the worker's death mid-run (the records
        already handed to ``sink`` stay). An interrupt (or any error of this side) kills
        the worker, whose in-flight requests are dropped, and is re-raised.
        """
        with self._lock:
            if not self.alive():
                raise ClientWorkerGoneError(
                    f"the client worker (pid {self.pid}) has exited "
                    f"with code {self._proc.returncode}"
                )
            try:
                job = frame(("job", kwargs, progress is not None))
            except Exception as exc:  # pickle raises PicklingError, AttributeError, TypeError
                raise TypeError(
                    f"the run's arguments cannot be sent to the client worker: {exc}"
                ) from exc
            try:
                self._write(job)
                outcome, sink_error = self._collect(sink, progress)
            except ClientWorkerError:  # the job failed there, or the worker is gone
                raise
            except BaseException:  # an interrupt mid-run: the worker's state is unknown
                self._kill()
                raise
        if sink_error is not None:  # the run ended cleanly after the sink failed
            raise sink_error
        assert outcome is not None
        return outcome

    def close(self, *, timeout_s: float = _CLOSE_WAIT_S) -> None:
        """Close the worker's stdin (it exits) and wait for it; kill it if it lingers."""
        if os.getpid() != self.owner_pid:  # a forked copy: the worker is not ours to stop
            return
        for pipe in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._kill()

    def _kill(self) -> None:
        with contextlib.suppress(OSError):
            self._proc.kill()
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()

    def _write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:  # ValueError: the pipe was closed
            raise ClientWorkerGoneError(
                f"the client worker (pid {self.pid}) is gone: {exc}"
            ) from exc

    def _collect(
        self, sink: Sink, progress: Progress | None
    ) -> tuple[RunOutcome | None, Exception | None]:
        """Messages until the job's end: the outcome (None if the job failed after the
        sink did) and the sink's first error."""
        sink_error: Exception | None = None
        started = False
        while True:
            try:
                message = self._frames.read()
            except EOFError:
                try:
                    code = self._proc.wait(timeout=_CLOSE_WAIT_S)
                except subprocess.TimeoutExpired:  # closed its stdout yet lives on
                    self._kill()
                    code = self._proc.returncode
                error = ClientWorkerError if started else ClientWorkerGoneError
                when = "during a run" if started else "before it started the run"
                raise error(
                    f"the client worker (pid {self.pid}) exited with code {code} {when}"
                ) from None
            kind = message[0]
            if kind == "started":
                started = True
            elif kind == "record" and sink_error is None:
                try:
                    sink(message[1])
                except Exception as exc:
                    sink_error = exc
                    with contextlib.suppress(ClientWorkerGoneError):  # then EOF comes next
                        self._write(frame(("stop", f"{type(exc).__name__}: {exc}")))
            elif kind == "progress" and progress is not None:
                progress = _report_progress(progress, message[1])
            elif kind == "outcome":
                return message[1], sink_error
            elif kind == "error":
                if sink_error is not None:  # the worker failed because the sink did
                    return None, sink_error
                _, name, text, remote_tb = message
                raise ClientWorkerError(
                    f"the client worker failed: {name}: {text}\n{remote_tb}",
                    kind=name,
                    remote_traceback=remote_tb,
                )


def _report_progress(progress: Progress, n: int) -> Progress | None:
    try:
        progress(n)
    except Exception as exc:
        warnings.warn(
            f"progress callback failed ({type(exc).__name__}: {exc}); run continues without it",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return progress


# --- one shared worker per process --------------------------------------------------------

_shared: ClientWorker | None = None
_shared_lock = threading.Lock()
_start_failure: tuple[float, str] | None = None  # (time.monotonic(), why) of the last failure
_atexit_registered = False


def shared_worker() -> ClientWorker:
    """This process's client worker, started on first use and again if it died.

    Closed at interpreter exit. Raises :class:`ClientWorkerStartError` when it cannot start;
    after a failure, for the next five minutes, without trying again.
    """
    global _shared, _start_failure, _atexit_registered
    with _shared_lock:
        if _shared is not None and _shared.owner_pid == os.getpid() and _shared.alive():
            return _shared
        if _shared is not None:
            _shared.close(timeout_s=1.0)
            _shared = None
        if _start_failure is not None and time.monotonic() - _start_failure[0] < _RETRY_START_S:
            raise ClientWorkerStartError(_start_failure[1])
        try:
            _shared = ClientWorker()
        except ClientWorkerStartError as exc:
            _start_failure = (time.monotonic(), str(exc))
            raise
        _start_failure = None
        if not _atexit_registered:
            atexit.register(close_shared_worker)
            _atexit_registered = True
        return _shared


def close_shared_worker() -> None:
    """Stop this process's shared client worker, if one runs (also run at exit), and
    forget a failed start: the next :func:`shared_worker` tries again."""
    global _shared, _start_failure
    with _shared_lock:
        _start_failure = None
        if _shared is not None:
            _shared.close()
            _shared = None


def _forget_shared_in_child() -> None:
    """After ``os.fork``: the child forgets the parent's worker and points its copies of
    the worker's pipes at ``/dev/null``, so it never talks to that worker nor keeps its
    stdin open (the fd numbers stay valid for the file objects that still hold them)."""
    global _shared, _shared_lock
    _shared_lock = threading.Lock()
    if _shared is None:
        return
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR)
        for pipe in (_shared._proc.stdin, _shared._proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                if pipe is not None:
                    os.dup2(null, pipe.fileno(), inheritable=False)
        os.close(null)
    _shared = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared_in_child)


def run_requests_isolated(**kwargs: Any) -> RunOutcome:
    """:func:`~speclib.measure.request_loop.run_requests_sync` in the shared client worker.

    Same arguments (``sink`` and ``progress`` are called in this process) and the same
    result; the outcome's ``client_process`` is ``worker``. When no worker can be started,
    the run happens in this process and ``client_process`` reads ``in-process (worker
    failed: <why>)``. A worker found dead before it got the job is replaced once.
    """
    try:
        return _shared_or_in_process(kwargs)
    except ClientWorkerGoneError:  # it died between runs; nothing was sent: start another
        return _shared_or_in_process(kwargs)


def _shared_or_in_process(kwargs: dict[str, Any]) -> RunOutcome:
    try:
        worker = shared_worker()
    except ClientWorkerStartError as exc:
        outcome = run_requests_sync(**kwargs)
        return replace(outcome, client_process=f"in-process (worker failed: {exc})")
    try:
        return worker.run(**kwargs)
    except ClientWorkerGoneError:
        _discard_shared(worker)
        raise


def _discard_shared(worker: ClientWorker) -> None:
    global _shared
    with _shared_lock:
        if _shared is worker:
            _shared = None
    worker.close(timeout_s=1.0)
