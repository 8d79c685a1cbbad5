"""The cells of the verdict table (:mod:`speclib.app.verdicts`): one value of one
comparison of ``summary.json`` as short text.

:func:`ratio_cell` writes a TPOT ratio with its interval and the interval's level,
:func:`ms_cell` the median TPOT of control and arm in ms, :func:`gate_marks` the gates as
marks where "not assessed" is never a tick (:func:`gate_legend` says what the marks mean),
:func:`short_reason` one phrase of at most :data:`REASON_WIDTH` characters for a verdict.
:data:`MAX_LINE` and :func:`fit` bound every line the terminal shows. Pure functions.
"""

from __future__ import annotations

import math
from typing import Any

from speclib.core.wording import STATUS_MARKS

__all__ = [
    "GATE_MARKS",
    "MAX_LINE",
    "REASON_WIDTH",
    "fit",
    "gate_legend",
    "gate_marks",
    "is_finite_number",
    "ms_cell",
    "ratio_cell",
    "short_reason",
]

MAX_LINE = 160
"""No line of the display or of the end output is longer than this (logs stay readable)."""


def fit(line: str, width: int = MAX_LINE) -> str:
    """``line``, cut to ``width`` characters with "…" when it is longer."""
    return line if len(line) <= width else line[: width - 1] + "…"


GATE_MARKS = STATUS_MARKS
"""The mark of a gate status in the verdict table; "not assessed" never reads as a pass."""

_GATE_WORDS = {"pass": "pass", "fail": "FAIL", "not assessed": "NOT ASSESSED"}
REASON_WIDTH = 60
"""The verdict table's reason is one short phrase; the full reasons are in summary.json."""


def _gate_status(g: dict[str, Any]) -> str:
    return g.get("status") or ("pass" if g.get("passed") else "fail")


def gate_marks(gates: list[dict[str, Any]] | None) -> str:
    """The gates of a verdict as marks, e.g. "✘bench –ttft ✔e2e" ("–" without gates);
    :func:`gate_legend` says what each mark means."""
    if not gates:
        return "–"
    return " ".join(f"{GATE_MARKS.get(_gate_status(g), '?')}{g.get('name')}" for g in gates)


def gate_legend(gate_lists: list[list[dict[str, Any]] | None]) -> str:
    """What the marks used in ``gate_lists`` mean, e.g. "gates: ✔ pass · – NOT ASSESSED (no
    evidence either way, never a pass)" ("" when no row has gates)."""
    used = {_gate_status(g) for gates in gate_lists for g in gates or []}
    marks = [f"{GATE_MARKS[s]} {_GATE_WORDS[s]}" for s in GATE_MARKS if s in used]
    marks += [f"? {s.upper()}" for s in sorted(used - set(GATE_MARKS))]
    if not marks:
        return ""
    note = " (no evidence either way, never a pass)" if "not assessed" in used else ""
    return "gates: " + " · ".join(marks) + note


def is_finite_number(x: Any) -> bool:
    """Whether ``x`` is a finite int or float (a bool is not a number here)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def ratio_cell(ratio: Any, ci: Any, level: Any) -> str:
    """A TPOT ratio, its interval and the interval's level: ``×0.550 [0.450, 0.670] 97.5 %``
    (an unbounded end reads ``∞``; "–" without a ratio)."""
    if not (is_finite_number(ratio) and ratio > 0):
        return "–"
    text = f"×{ratio:.3f}"
    lo, hi = [*ci, None, None][:2] if ci else (None, None)
    if is_finite_number(lo):
        text += f" [{lo:.3f}, {f'{hi:.3f}' if is_finite_number(hi) else '∞'}]"
        if is_finite_number(level):
            text += f" {100 * level:.4g} %"
    return text


def ms_cell(control_s: Any, experiment_s: Any) -> str:
    """Median TPOT of the control and the arm in ms: ``30.99 → 15.48``."""
    ms = [f"{1e3 * x:.2f}" if is_finite_number(x) else "–" for x in (control_s, experiment_s)]
    return "–" if ms == ["–", "–"] else " → ".join(ms)


def _tpot_df(c: dict[str, Any]) -> Any:
    return ((c.get("metrics") or {}).get("tpot") or {}).get("df")


def short_reason(c: dict[str, Any]) -> str:
    """One phrase (≤ :data:`REASON_WIDTH` characters) for the verdict of comparison ``c`` of
    ``summary.json``: the bench, a failed gate, or where the TPOT interval lies."""
    word, gates = c.get("decision"), c.get("gates") or []
    failed = [str(g.get("name")) for g in gates if _gate_status(g) == "fail"]
    reasons = c.get("reasons") or []
    if word == "failed":
        return fit(reasons[0] if reasons else "every launch failed", REASON_WIDTH)
    if word == "untrustworthy":
        bench = next((g for g in gates if g.get("name") == "bench"), {})
        detail = str(bench.get("detail") or "")
        what = detail and f": {detail.split(':', 1)[0]} failed"
        if detail.startswith("the A/A arm"):
            what = ": the A/A arm shows a false effect"
        return fit(f"bench untrustworthy{what}", REASON_WIDTH)
    if failed:
        return fit(f"gate{'s' * (len(failed) > 1)} {', '.join(failed)} failed", REASON_WIDTH)
    tpot = c.get("tpot_decision") or word
    ci = c.get("tpot_ratio_ci") or [None, None]
    if word == "inconclusive" and tpot == "adopt":
        return "faster by > δ, but correctness unknown"
    if tpot == "adopt":
        return "time per token cut by > δ"
    if tpot == "worse":
        return "slower than the control (lower bound > 1)"
    if tpot == "equivalent":
        if is_finite_number(ci[0]) and ci[0] > 1:
            return "within ±δ, but measurably slower"
        if is_finite_number(ci[1]) and ci[1] < 1:
            return "faster, but by less than δ"
        return "within ±δ of the control"
    if not is_finite_number(c.get("tpot_ratio")):
        return "no valid pairs"
    df = _tpot_df(c)
    if df == 0 or not is_finite_number(ci[1]):
        return "one block: no interval (run ≥ 2 blocks)"
    text = "interval too wide" + ("" if df is None else f" (df {df})")
    more = c.get("extra_launches_needed")
    pairs = c.get("extra_pairs_needed")
    if more:
        text += f"; ~{more} more block{'s' * (more != 1)} may decide"
    elif pairs:
        text += f"; ~{pairs} more pairs may decide"
    return fit(text, REASON_WIDTH)
