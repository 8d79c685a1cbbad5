"""What a run or an analysis hands back to its caller: its log lines as it goes
(:func:`log_to_stderr` unless the caller passes its own), then where its outputs are and
which launches failed (:class:`RunResult`), or why it produced no report (:class:`RunFailed`)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunFailed", "RunResult", "log_to_stderr"]


class RunFailed(RuntimeError):
    """The run could not produce a report; the message says which step and why."""


@dataclass(frozen=True)
class RunResult:
    """Where the outputs of a run are, and which launches failed."""

    run_dir: Path
    report: Path
    summary: Path
    failed_launches: tuple[str, ...]


def log_to_stderr(msg: str) -> None:
    """A log line of the run on stderr, with the time: ``[speclib 12:34:56] msg``."""
    print(f"[speclib {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
