"""Reading vLLM's server logs: a line without terminal colours and without vLLM's prefix.

vLLM prefixes each log line with the process (``(EngineCore pid=…)``), the level, the time
and the source file (``INFO 12-02 15:16:05 [core.py:133]``) and colours them with ANSI
escapes. :func:`plain` strips the colours (no file the kit writes from a log holds ANSI
escapes); :func:`message` strips the prefix too, leaving what vLLM said.
"""

from __future__ import annotations

import re

__all__ = ["ANSI", "LOG_PREFIX", "message", "plain"]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LOG_PREFIX = re.compile(r"^(?:\([^)]*\)\s+)?[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s*")


def plain(line: str) -> str:
    """``line`` without terminal colour codes."""
    return ANSI.sub("", line)


def message(line: str) -> str:
    """What vLLM said on ``line``: no colours, no process/level/time/source prefix."""
    return LOG_PREFIX.sub("", plain(line).strip())
