"""Executing the kit's notebooks with papermill, and the signals that stop them.

:func:`execute_notebook` runs one notebook of ``speclib/notebooks`` (package data) into the
run folder with its parameters injected. The kernel talks to this process over unix sockets
(no TCP port, so ipykernel has no reason to warn about unencrypted TCP) and writes its own
output to ``<notebook>.kernel.log``. :func:`signal_guard` turns SIGTERM into SystemExit so
every ``finally`` (server stop) runs, and passes the first SIGINT or SIGTERM on to the
kernel executing now as an interrupt, so its cell stops its servers and writes their status.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["NOTEBOOKS_DIR", "execute_notebook", "signal_guard"]

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
_KERNELS: list[Any] = []  # the kernel manager of the notebook executing now
_PASSED_ON: list[int] = []  # signals passed on to that kernel as an interrupt


def execute_notebook(
    name: str, out_path: Path, parameters: dict[str, Any], *, cwd: Path | None = None
) -> None:
    """Execute ``notebooks/<name>.ipynb`` into ``out_path`` with papermill.

    The kernel runs in its own session, so a terminal's Ctrl-C does not reach it: under
    :func:`signal_guard`, a SIGINT or SIGTERM of this process is passed on to the kernel as
    an interrupt; its cell stops its servers, writes their status and fails with
    KeyboardInterrupt, raised here as :class:`KeyboardInterrupt`, so an interrupted run
    stops instead of going on with the next launch (and the kernel is never shut down in
    the middle of a cell). The kernel's own stdout and stderr go to
    ``<notebook>.kernel.log`` beside ``out_path``, not to the terminal.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out_path.parent.mkdir(parents=True, exist_ok=True)
    sockets = Path(tempfile.mkdtemp(prefix="speclib-kernel-"))  # short: unix socket paths
    kernel_log = out_path.with_name(f"{out_path.stem}.kernel.log")
    _PASSED_ON.clear()
    try:
        pm.execute_notebook(
            str(NOTEBOOKS_DIR / f"{name}.ipynb"),
            str(out_path),
            parameters=parameters,
            cwd=str(cwd or out_path.parent),
            progress_bar=False,
            log_output=False,
            kernel_name="python3",
            kernel_manager_class=_ipc_kernel_manager(sockets, kernel_log),
        )
    except PapermillExecutionError as exc:
        if exc.ename == "KeyboardInterrupt":
            raise KeyboardInterrupt(f"{name} interrupted") from exc
        raise
    except Exception as exc:  # e.g. the kernel died of the interrupt before its cell ended
        if _PASSED_ON:
            raise KeyboardInterrupt(f"{name} interrupted") from exc
        raise
    finally:
        _KERNELS.clear()
        shutil.rmtree(sockets, ignore_errors=True)


def _ipc_kernel_manager(folder: Path, log_path: Path) -> type:
    """A kernel manager whose kernel talks over unix sockets in ``folder``, not TCP, and
    writes its own output to ``log_path``.

    The kernel then never listens on a network port, and ipykernel has no reason to warn
    that it runs "over TCP without encryption". The started manager is kept in
    ``_KERNELS`` for :func:`_interrupt_kernel`.
    """
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import Unicode

    class IpcKernelManager(AsyncKernelManager):
        transport = Unicode("ipc")
        ip = Unicode(str(folder / "kernel"))

        async def start_kernel(self, **kw: Any) -> None:
            with log_path.open("ab") as fh:  # the kernel keeps its own copy of the file
                kw.setdefault("stdout", fh)
                kw.setdefault("stderr", fh)
                await super().start_kernel(**kw)
            _KERNELS.append(self)

    return IpcKernelManager


def _interrupt_kernel() -> bool:
    """Send SIGINT to the process group of the kernel executing now; False if none runs."""
    sent = False
    for km in _KERNELS:
        pgid = getattr(km.provisioner, "pgid", None)
        if pgid:
            try:
                os.killpg(pgid, signal.SIGINT)
                sent = True
            except OSError:
                continue
    return sent


def signal_guard() -> tuple[Callable[[], None], Callable[[], bool]]:
    """Turn SIGTERM into SystemExit so every ``finally`` (server stop) runs, and remember
    SIGINT: a Ctrl-C whose KeyboardInterrupt a library swallowed still stops the run at the
    next launch. Returns ``(restore, interrupted)``.

    The first SIGINT or SIGTERM while a notebook kernel executes is passed on to the kernel
    instead (see :func:`execute_notebook`); a second one acts at once.
    """
    hit: list[int] = []

    def pass_on(signum: int) -> bool:
        first = not hit
        hit.append(signum)
        if first and _interrupt_kernel():
            _PASSED_ON.append(signum)
            return True
        return False

    def on_term(signum: int, frame: Any) -> None:
        if not pass_on(signum):
            raise SystemExit(128 + signum)

    def on_int(signum: int, frame: Any) -> None:
        if not pass_on(signum):
            signal.default_int_handler(signum, frame)

    try:
        previous = signal.signal(signal.SIGTERM, on_term), signal.signal(signal.SIGINT, on_int)
    except ValueError:  # not the main thread
        return (lambda: None), (lambda: False)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])

    return restore, lambda: bool(hit)
