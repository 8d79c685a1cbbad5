"""What ``speclib run`` and ``speclib analyze`` show in the terminal.

A :class:`Display` is the runner's ``log`` callback plus a :class:`~speclib.app.progress.
RunWatcher` on the run folder. Three kinds, chosen by :func:`open_display`:

- **live** (stderr is a terminal): a panel redrawn in place by ``rich`` — the phase, each
  starting server's elapsed time and last log line, requests done/total of the block with a
  bar and an ETA, failures so far — with the log lines and events printed above it;
- **plain** (CI, pipes, papermill): the log lines and events, a line at each phase change
  inside a block and at most one progress line every :data:`PLAIN_EVERY_S` seconds; never a
  carriage return or a cursor move;
- **quiet**: failures only.

At the end the runner prints the verdicts (:mod:`speclib.app.verdicts`). No line of the
display is longer than :data:`~speclib.app.verdicts.MAX_LINE`. :func:`interrupted_line`
says in one line what an interruption stopped and what it kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from speclib.app.progress import RunEvent, RunState, RunWatcher
from speclib.app.server_log import START_PHASES
from speclib.app.verdicts import MAX_LINE, fit
from speclib.core.rundir import RunDir

__all__ = [
    "MAX_LINE",
    "PLAIN_EVERY_S",
    "Display",
    "LiveDisplay",
    "describe",
    "interrupted_line",
    "open_display",
]

PLAIN_EVERY_S = 10.0
_ERROR_WORDS = ("FAILED", "failed", "error")


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def _stamp(msg: str) -> str:
    return f"[speclib {time.strftime('%H:%M:%S')}] {msg}"


def describe(state: RunState) -> str:
    """One line for a state: ``block r0 (1 of 3): 12/40 requests, 1 failed, ETA 0:31``."""
    where = f"block {state.block} ({state.block_index} of {state.n_blocks})"
    if state.phase == "setup":
        return f"setup: environment, models, manifest ({_clock(state.phase_s)})"
    if state.phase in ("analysis", "report"):
        what = "statistics, figures" if state.phase == "analysis" else "writing report.html"
        return f"{state.phase}: {what} ({_clock(state.phase_s)})"
    if state.block is None:
        return f"finishing: recording launches ({_clock(state.phase_s)})"
    if state.phase == "starting":
        n = len(state.arms)
        return f"{where}: starting {n} server{'s' * (n != 1)} ({_clock(state.phase_s)})"
    if state.phase == "warmup":
        return f"{where}: warming up ({_clock(state.phase_s)})"
    total = "?" if state.total is None else state.total
    text = f"{where}: {state.done}/{total} requests"
    if state.level:
        text += f" at {state.level}"
    text += f", {state.failed} failed"
    if state.not_attempted:
        text += f", {state.not_attempted} not attempted"
    if state.phase == "finishing":
        return text + "; stopping servers"
    return text + ("" if state.eta_s is None else f", ETA {_clock(state.eta_s)}")


def _starting_note(state: RunState) -> str:
    """`` — 2/4 ready · loading weights`` while servers start: how many are ready and the
    phase of the least advanced one (a phase, not a copy of vLLM's log line)."""
    if state.phase != "starting" or not state.starting:
        return ""
    n = len(state.arms)
    behind = min(state.starting, key=lambda s: START_PHASES.index(s.phase))
    return f" — {n - len(state.starting)}/{n} ready · {behind.phase}"


class Display:
    """Plain lines: the base of every display (also the ``log`` callback of the runner)."""

    def __init__(self, run_dir: str | Path, *, stream: TextIO | None = None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.watcher = RunWatcher(run_dir, on_event=self.event)
        self._lock = threading.Lock()
        self._said: set[str] = set()
        self._last_key: tuple[str | None, str] | None = None
        self._last_line = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Display:
        self._thread = threading.Thread(target=self._loop, name="speclib-display", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._tick()

    def _loop(self) -> None:
        while not self._stop.wait(self.watcher.interval_s):
            self._tick()

    def _tick(self) -> None:
        with contextlib.suppress(Exception):  # a progress display never stops a run
            self.show(self.watcher.poll())

    def write(self, text: str) -> None:
        with self._lock:
            print(fit(text), file=self.stream, flush=True)

    def log(self, msg: str) -> None:
        """The runner's log callback: every line (failures only when quiet)."""
        if self.quiet and not any(w in msg for w in _ERROR_WORDS):
            return
        if self._once(msg):
            self.write(_stamp(msg))

    def event(self, ev: RunEvent) -> None:
        """A line from the watcher: a failure, or a block's servers being ready."""
        if (ev.error or not self.quiet) and self._once(ev.text):
            self.write(_stamp(ev.text))

    def _once(self, text: str) -> bool:
        """False for a launch failure already shown (the watcher and the runner both see it)."""
        if not text.startswith("FAILED "):
            return True
        key = text.split(":", 1)[0]
        with self._lock:
            seen = key in self._said
            self._said.add(key)
        return not seen

    def show(self, state: RunState) -> None:
        """Plain mode: a line when a block's phase changes, else one every 10 s at most."""
        if self.quiet:
            return
        key = (state.block, state.phase)
        now = time.monotonic()
        changed = key != self._last_key and state.phase in ("measuring", "finishing")
        self._last_key = key
        due = state.block is not None and now - self._last_line >= PLAIN_EVERY_S
        if (changed and state.block is not None) or due:
            self._last_line = now
            self.write(fit(_stamp(describe(state) + _starting_note(state))))


class LiveDisplay(Display):
    """A panel redrawn in place on a terminal (rich), lines printed above it."""

    def __init__(self, run_dir: str | Path, *, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.spinner import Spinner

        super().__init__(run_dir, stream=stream)
        self.console = Console(file=self.stream, highlight=False)
        self.console.width = min(self.console.width, MAX_LINE)  # wide terminals too
        self.spinner = Spinner("dots", style="cyan")
        self.state = self.watcher.state
        self.live: Any = None

    def __enter__(self) -> Display:
        from rich.live import Live

        self.live = Live(
            console=self.console,
            get_renderable=self._render,
            refresh_per_second=4,
            transient=True,
        )
        self.live.start()
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self.live is not None:
            self.live.stop()

    def write(self, text: str) -> None:
        style = "red" if any(w in text for w in _ERROR_WORDS) else None
        with self._lock:
            self.console.print(fit(text), style=style, markup=False, soft_wrap=True)

    def show(self, state: RunState) -> None:
        self.state = state

    def _render(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        state = self.state
        head = Table.grid(padding=(0, 1))
        self.spinner.update(text=Text(describe(state), overflow="ellipsis", no_wrap=True))
        if state.phase in ("measuring", "finishing") and state.total:
            head.add_row(self.spinner, ProgressBar(state.total, state.done, width=24))
        else:
            head.add_row(self.spinner)
        rows: list[Any] = [head]
        for s in state.starting:
            line = Text(
                f"   {s.launch_id:<14} {_clock(s.elapsed_s):>6}  {s.phase:<24}", style="dim"
            )
            line.append(s.last_line)
            line.no_wrap, line.overflow = True, "ellipsis"
            rows.append(line)
        return Group(*rows)


def open_display(run_dir: str | Path, *, quiet: bool = False) -> Display:
    """Live on a terminal (stderr), plain lines elsewhere, failures only when ``quiet``."""
    stream = sys.stderr
    live = stream.isatty() and os.environ.get("TERM") != "dumb"
    if quiet or not live:
        return Display(run_dir, stream=stream, quiet=quiet)
    return LiveDisplay(run_dir, stream=stream)


def interrupted_line(run_dir: str | Path, *, analysis: bool = False) -> str:
    """One line: what an interruption stopped and what it kept in ``run_dir``."""
    rd = RunDir.at(run_dir)
    if analysis:
        return f"interrupted: analysis stopped; the records in {rd.root} are unchanged"
    if not rd.launches.is_dir():
        return f"interrupted during setup: no server had started ({rd.root})"
    left = [p for p in rd.pidfiles() if p.exists()]
    stopped = "servers stopped" if not left else f"check for servers left: {left}"
    n_records = 0
    if rd.requests.exists():
        with rd.requests.open("rb") as fh:
            n_records = sum(1 for line in fh if line.strip())
    n_done = sum(1 for s in rd.statuses() if s.get("ok"))
    return (
        f"interrupted: {stopped}; kept {n_records} request record(s) and {n_done} finished "
        f"launch(es) in {rd.root}; continue with: speclib run --resume {rd.root}"
    )
