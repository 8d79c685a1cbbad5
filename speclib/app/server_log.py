"""What a vLLM server's log says about its start, for the live progress display.

:func:`start_phase` says which of :data:`START_PHASES` (starting Python, reading the config,
…, opening the port) a log has reached, from the lines vLLM writes at each step;
:data:`READY_MARK` is uvicorn's line once the API server is up; :func:`last_message` is the
log's last vLLM message as ``Process: message`` without colours. This is the one place
that knows vLLM's log wording: a vLLM release that words its start differently changes
this module, not the run-folder watcher (:mod:`speclib.app.progress`).
"""

from __future__ import annotations

import re
from pathlib import Path

from speclib.serve.logtail import tail

__all__ = ["READY_MARK", "START_PHASES", "last_message", "start_phase"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
START_PHASES = (
    "starting Python",
    "reading the config",
    "starting the engine",
    "loading weights",
    "allocating the KV cache",
    "warming up",
    "opening the port",
)
"""A vLLM server's start, in order; :func:`start_phase` says which one a log has reached."""

# (phase index, what in a log line marks it): the last phase any line reaches wins
_PHASE_MARKS = (
    (1, re.compile(r"non-default args|Resolved architecture|Using max model len")),
    (2, re.compile(r"Initializing a V1 LLM engine|OpenMP thread binding")),
    (3, re.compile(r"Starting to load model|Loading weights|Loading safetensors")),
    (4, re.compile(r"Loading weights took|KV cache size|for KV cache|KV cache layout")),
    (5, re.compile(r"init engine \(profile|[Ww]arming up|[Cc]apturing")),
    (6, re.compile(r"Starting vLLM server on|Available routes|Application startup")),
)


def start_phase(log_text: str) -> str:
    """The start phase a server's log has reached (one of :data:`START_PHASES`)."""
    reached = 0
    for line in log_text.splitlines():
        for index, mark in _PHASE_MARKS:
            if index > reached and mark.search(line):
                reached = index
    return START_PHASES[reached]


READY_MARK = b"Application startup complete"  # uvicorn's line once the API server is up
_VLLM_PREFIX = re.compile(
    r"^\(([^)]*?)(?: pid=\d+)?\)\s+[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s*"
)


def last_message(path: Path, max_bytes: int = 4096) -> str:
    """The server log's last vLLM log message, as ``Process: message`` without colours
    (the last non-empty line when there is none: a traceback, a warning's source line)."""
    text = tail(path, lines=max_bytes, max_bytes=max_bytes)
    lines = [_ANSI.sub("", x).strip() for x in text.splitlines()]
    lines = [x for x in lines if x and not x.startswith("# argv")]
    for line in reversed(lines):
        m = _VLLM_PREFIX.match(line)
        if m and line[m.end() :].strip():
            return f"{m.group(1)}: {line[m.end() :].strip()}"
    return lines[-1] if lines else ""
