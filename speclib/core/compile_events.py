"""Kernels and graphs vLLM compiled, read from its log with the time each one was logged.

vLLM 0.26 logs a Triton kernel it compiles while serving ("Triton kernel JIT compilation
during inference: NAME. This causes a latency spike"), and torch.compile logs each graph it
compiles ("Compiling a graph for …", "torch.compile took …"). A request that was in flight
while one of these ran can take a compile's time as its own: one such stall inside a level
of a few seconds moved a draft arm's TPOT by a third on an H100 (issue 46). This module
finds those lines and their times; :mod:`speclib.analysis.health.compile_windows` says
which measured requests overlap them.

vLLM stamps its lines ``MM-DD HH:MM:SS`` in the server's local time, to the second and
without a year: :func:`compile_events` turns them into epoch seconds with the year and the
UTC offset of the machine that ran the server (``manifest.json`` ``clock``), and each event
covers the whole second it was logged in.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass

from speclib.core.logtext import plain

__all__ = ["CompileEvent", "compile_events", "overlaps"]

_STAMP = re.compile(
    r"^(?:\([^)]*\)\s+)?[A-Z]+\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\s+\[[^\]]*\]\s*"
)
_KINDS = (
    ("triton-jit", re.compile(r"Triton kernel JIT compilation during inference:\s*(\w+)")),
    ("torch-compile", re.compile(r"(Compiling a graph for [^,.]*)")),
)


@dataclass(frozen=True)
class CompileEvent:
    """One compile vLLM logged: the second it was logged in (epoch seconds, start of that
    second), its kind (``triton-jit`` or ``torch-compile``) and what was compiled."""

    t: float
    kind: str
    what: str

    def to_dict(self) -> dict[str, object]:
        return {"t": self.t, "kind": self.kind, "what": self.what}


def compile_events(lines: Iterable[str], *, year: int, utc_offset_s: float) -> list[CompileEvent]:
    """Every compile line of a vLLM log (``lines``) with its time, in log order.

    ``year``: the year the server ran (vLLM's stamp has none; a log that passes New Year's
    Eve is read with the next year from January on); ``utc_offset_s``: the server machine's
    offset of local time from UTC in seconds (its stamps are local)."""
    out: list[CompileEvent] = []
    last_month = None
    for raw in lines:
        line = plain(raw).strip()
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        month, day, hour, minute, second = (int(g) for g in stamp.groups())
        if last_month == 12 and month == 1:
            year += 1
        last_month = month
        rest = line[stamp.end() :]
        for kind, pattern in _KINDS:
            found = pattern.search(rest)
            if found:
                local = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)
                out.append(CompileEvent(local.timestamp() - utc_offset_s, kind, found.group(1)))
                break
    return out


def overlaps(event: CompileEvent, start: float, end: float) -> bool:
    """Whether ``event`` (the whole second it was logged in) overlaps ``[start, end]``."""
    return event.t <= end and event.t + 1.0 > start
