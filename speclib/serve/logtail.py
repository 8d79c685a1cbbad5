"""The end of a log file, and the crash it names: what the kit shows of a log when
something failed.

:func:`tail` reads a log's last lines without terminal colour codes: a server's log (when
it fails to start, :mod:`speclib.serve.process`, or dies in a block,
:mod:`speclib.run.replicate_block`),
but also ``vllm bench serve``'s log and the run's progress log. :func:`root_cause` finds
the line of a server's log that says why it crashed. Both read vLLM's lines through
:mod:`speclib.core.logtext`; :mod:`speclib.serve.process` re-exports them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from speclib.core.logtext import message, plain

__all__ = ["root_cause", "tail"]

_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit)(?::\s*\S.*)?$")
_ARGPARSE = re.compile(r"^[\w./ -]+: error: \S.*$")  # "api_server.py: error: unrecognized …"


def tail(path: Path, *, lines: int = 40, max_bytes: int = 64_000) -> str:
    """The last ``lines`` lines of a log file without terminal colour codes (empty string
    when it does not exist), so no file the kit writes from a log holds ANSI escapes."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(plain(x) for x in data.splitlines()[-lines:])


def root_cause(log_text: str) -> str | None:
    """The last exception line of a server log (``AssertionError: Synthetic acceptance not
    supported …``), or argparse's ``prog: error: unrecognized arguments: …``, without
    vLLM's log prefix: the cause of a crash, not vLLM's pointer
    line ("See stack trace above for the root cause"). None when the log names none."""
    for line in reversed(log_text.splitlines()):
        text = message(line)
        if _EXCEPTION.match(text) or _ARGPARSE.match(text):
            return text
    return None
