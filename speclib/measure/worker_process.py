"""The client worker process: the worker's side of :mod:`speclib.measure.worker`, and the
framing both sides use.

:class:`~speclib.measure.worker.ClientWorker` runs this module as
``python -m speclib.measure.worker_process``, a process that does nothing but run
:func:`~speclib.measure.request_loop.run_requests_sync`, one job after another (:func:`main`).
It ignores SIGINT (the caller decides what an interrupt does) and never outlives the
caller: it exits when its stdin reaches end of file (the caller closed it, or died, even by
SIGKILL) or when its parent changes (the caller died while a forked child kept a copy of
the pipe). Its own stdout is redirected to its stderr (the caller's), so a stray print
cannot corrupt the protocol.

Protocol: length-prefixed pickles (8-byte big-endian length, then the pickle: :func:`frame`
writes one, :class:`Frames` reads them) over the worker's stdin and stdout, private pipes
between this module and :mod:`speclib.measure.worker`. To the worker: ``("job", kwargs,
want_progress)`` and ``("stop", reason)`` (the caller's sink failed: the worker's sink then
fails too, so the run stops sending as it would in process). From the worker: ``("ready",
pid)`` once; then per job ``("started",)`` before the first request goes out (a worker that
dies before it is replaced and the job retried: nothing was sent), ``("record", record)``
for each record, ``("progress", n)`` when asked, and a final ``("outcome", RunOutcome)`` or
``("error", type name, message, traceback text)``. The API key travels inside the job,
never on a command line or in a file.

The framing lives here, not with the caller, so that the worker process loads only what it
runs. Import-light: no vLLM, no torch, no pandas.
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import signal
import struct
import threading
import time
import traceback
from dataclasses import replace
from typing import Any

from speclib.measure.request_loop import run_requests_sync

__all__ = ["Frames", "frame", "main"]

_HEADER = struct.Struct(">Q")
_READ_SIZE = 1 << 16
_POLL_S = 0.5  # how often the worker checks that its parent is still the caller


# --- framing (both sides) -----------------------------------------------------------------


def frame(message: Any) -> bytes:
    """``message`` as one frame: its pickle, preceded by the pickle's length."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class Frames:
    """Length-prefixed pickles read from a file descriptor (unbuffered: nothing is lost
    to a buffer that ``select`` cannot see)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()

    def read(self, deadline: float | None = None) -> Any:
        """The next message; ``EOFError`` at end of file, ``TimeoutError`` past
        ``deadline`` (``time.monotonic()``; a partial message stays buffered)."""
        self._fill(_HEADER.size, deadline)
        (size,) = _HEADER.unpack_from(self._buf)
        end = _HEADER.size + size
        self._fill(end, deadline)
        data = bytes(self._buf[_HEADER.size : end])
        del self._buf[:end]
        return pickle.loads(data)

    def _fill(self, n: int, deadline: float | None) -> None:
        while len(self._buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(self.fd, max(_READ_SIZE, n - len(self._buf)))
            if not chunk:
                raise EOFError
            self._buf += chunk


# --- the worker's side --------------------------------------------------------------------
class _Outbox:
    """Messages to the caller, written by one thread: neither the event loop nor the sink
    thread ever waits for the pipe. A closed pipe (the caller died) ends the worker."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="speclib-outbox", daemon=True)
        self._thread.start()

    def put(self, message: Any) -> None:
        """Queue ``message`` (never blocks)."""
        self._queue.put(message)

    def flush(self) -> None:
        """Wait until everything queued so far was written."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()

    def _run(self) -> None:
        while True:
            message = self._queue.get()
            if isinstance(message, threading.Event):
                message.set()
                continue
            data = memoryview(frame(message))
            try:
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError:  # BrokenPipeError: no one is listening any more
                os._exit(0)


class _Inbox:
    """Reads the caller's messages on its own thread: jobs are queued for the main thread,
    a ``stop`` marks the current job; end of file or a new parent ends the worker."""

    def __init__(self, fd: int) -> None:
        self.jobs: queue.SimpleQueue[tuple[dict[str, Any], bool]] = queue.SimpleQueue()
        self.stop_reason: str | None = None
        self._frames = Frames(fd)
        self._parent = os.getppid()
        threading.Thread(target=self._run, name="speclib-inbox", daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                message = self._frames.read(time.monotonic() + _POLL_S)
            except TimeoutError:
                if os.getppid() != self._parent:
                    os._exit(0)  # the caller died; a forked child of it holds the pipe
                continue
            except (EOFError, OSError):
                os._exit(0)  # the caller closed the pipe, or died
            if message[0] == "job":
                self.jobs.put((message[1], message[2]))
            elif message[0] == "stop":
                self.stop_reason = message[1]


def _run_job(kwargs: dict[str, Any], want_progress: bool, inbox: _Inbox, out: _Outbox) -> None:
    inbox.stop_reason = None

    def sink(rec: Any) -> None:
        if inbox.stop_reason is not None:
            raise RuntimeError(f"the caller's sink failed: {inbox.stop_reason}")
        out.put(("record", rec))

    def progress(n: int) -> None:
        out.put(("progress", n))

    out.put(("started",))
    out.flush()  # the caller knows before any request goes out: a death before is retried
    try:
        outcome = run_requests_sync(
            **kwargs, sink=sink, progress=progress if want_progress else None
        )
    except BaseException as exc:
        out.put(("error", type(exc).__name__, str(exc), traceback.format_exc()))
    else:
        out.put(("outcome", replace(outcome, client_process="worker")))
    out.flush()


def main() -> None:
    """The worker: report ready, then run jobs one after another until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides what an interrupt does
    out = _Outbox(os.dup(1))
    os.dup2(2, 1)  # a stray print goes to stderr, never into the protocol
    inbox = _Inbox(0)
    out.put(("ready", os.getpid()))
    while True:
        kwargs, want_progress = inbox.jobs.get()
        _run_job(kwargs, want_progress, inbox, out)


if __name__ == "__main__":
    main()
