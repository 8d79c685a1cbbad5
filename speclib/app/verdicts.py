"""The verdicts at the end of ``speclib run`` / ``speclib analyze``, in the manner of ``vllm
bench serve``'s result block.

:func:`print_verdicts` prints ``summary.json`` between rules of ``=``: a table with one line
per experiment and load level (:func:`table_rows`: median TPOT of control and arm in ms, the
TPOT ratio with its interval and the interval's level, the verdict, one short reason, the
gates as marks; the cells come from :mod:`speclib.app.verdict_cells`), then the lines under
the table (:func:`~speclib.app.verdict_lines.end_lines`: the A/A arm's bench check, the
TPOT ratio per turn, bench trust, a calibration's result); the full reasons stay in
``summary.json`` and the report. No line is longer than
:data:`~speclib.app.verdict_cells.MAX_LINE`. :func:`outcome_json` gives the verdicts as one
JSON object. Pure functions of ``summary.json`` (and the run result), except the printing.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from speclib.app.verdict_cells import (
    MAX_LINE,
    REASON_WIDTH,
    fit,
    gate_marks,
    ms_cell,
    ratio_cell,
    short_reason,
)
from speclib.app.verdict_lines import end_lines

__all__ = [
    "outcome_json",
    "print_verdicts",
    "recommendation_rows",
    "table_rows",
    "verdict_rows",
]


def verdict_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdict of every comparison in ``summary.json``: experiment, load, TPOT ratio and
    its CI, decision and reasons (the shape of ``--json``'s ``verdicts``)."""
    keys = ("experiment", "load", "tpot_ratio", "tpot_ratio_ci", "decision", "reasons")
    return [{k: c.get(k) for k in keys} for c in summary.get("comparisons", [])]


def recommendation_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The "recommended" row of every sweep family and load level in ``summary.json``, in
    the shape of :func:`verdict_rows` (the decision is the value, or "no k pays")."""
    words = {"no_k_pays": "no k pays", "undecided": "undecided", "no_data": "no data"}
    rows = []
    for r in summary.get("recommendations", []):
        value = r.get("value")
        word = ", ".join(f"{k}={v}" for k, v in value.items()) if value else None
        ci = [r.get("ci_low"), r.get("ci_high")]
        rows.append(
            {
                "experiment": f"recommended: {r.get('family')}",
                "load": r.get("load"),
                "tpot_ratio": r.get("ratio"),
                "tpot_ratio_ci": ci if None not in ci else None,
                "decision": word or words.get(r.get("outcome"), "–"),
                "reasons": [r.get("reason") or ""],
            }
        )
    return rows


_RECOMMEND_REASONS = {
    "no_k_pays": "no arm of the family is adopt",
    "undecided": "arms that pay are not shown within δ of the best",
    "no_data": "no arm of the family has valid pairs",
}


def _row(c: dict[str, Any], **cells: Any) -> dict[str, str]:
    """The cells of one table row from comparison ``c``; ``cells`` override its values."""
    v = {
        "arm": c.get("experiment"),
        "load": c.get("load"),
        "ratio": c.get("tpot_ratio"),
        "ci": c.get("tpot_ratio_ci"),
        "verdict": c.get("decision"),
        **cells,
    }
    return {
        "arm": str(v["arm"]),
        "load": str(v["load"]),
        "ms": ms_cell(c.get("median_tpot_control_s"), c.get("median_tpot_experiment_s")),
        "ratio": ratio_cell(v["ratio"], v["ci"], c.get("confidence_level")),
        "verdict": str(v["verdict"]),
        "reason": v.get("reason") or c.get("short_reason") or short_reason(c),
        "gates": gate_marks(c.get("gates")) if c else "–",
    }


def table_rows(summary: dict[str, Any]) -> list[dict[str, str]]:
    """The rows of the verdict table, as cells: every experiment at every load level, then
    every sweep family's recommendation (the A/A arm is not among them:
    :func:`bench_check_line` says what it shows)."""
    comps = summary.get("comparisons") or []
    rows = [_row(c) for c in comps if c.get("role") != "aa"]
    recs = summary.get("recommendations") or []
    for r, rec in zip(recs, recommendation_rows(summary), strict=True):
        picked = [
            c
            for c in comps
            if (c.get("experiment"), c.get("load")) == (r.get("arm"), r.get("load"))
        ]
        why = (
            _RECOMMEND_REASONS.get(r.get("outcome"))
            or f"{r.get('arm')}: adopt, within δ of the best"
        )
        rows.append(
            _row(
                picked[0] if picked else {},
                arm=rec["experiment"],
                load=rec["load"],
                ratio=rec["tpot_ratio"],
                ci=rec["tpot_ratio_ci"],
                verdict=rec["decision"],
                reason=fit(why, REASON_WIDTH),
            )
        )
    return rows


_REASON_MIN = 16
"""The narrowest the reason column gets when the table is cut to the width."""

_COLUMNS = (
    ("arm", "arm"),
    ("load", "load"),
    ("ms", "TPOT ms ctrl → arm"),
    ("ratio", "TPOT ratio [CI] level"),
    ("verdict", "verdict"),
    ("reason", "reason"),
    ("gates", "gates"),
)
_COLOUR = {
    "mixed": "magenta",
    "adopt": "green",
    "reject": "red",
    "failed": "red",
    "untrustworthy": "red",
}
_MARK_COLOUR = {"✔": "green", "✘": "red", "–": "yellow", "?": "yellow"}


def _read_summary(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError):
        return {}


def _table(rows: list[dict[str, str]], title: str, width: int) -> Any:
    """The rich table of :func:`table_rows`, one line per row; when it is wider than
    ``width``, the reason column gives way first (cut with "…", down to
    :data:`_REASON_MIN` characters)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def build(reason_width: int | None) -> Table:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True)  # fmt: skip
        for key, name in _COLUMNS:
            table.add_column(name, no_wrap=True, overflow="ellipsis",
                             max_width=reason_width if key == "reason" else None)  # fmt: skip
        for r in rows:
            cells = [Text(r[key], no_wrap=True, overflow="ellipsis") for key, _ in _COLUMNS]
            cells[4].stylize(_COLOUR.get(r["verdict"], "yellow"))
            for at, mark in enumerate(r["gates"]):
                if mark in _MARK_COLOUR and (at == 0 or r["gates"][at - 1] == " "):
                    cells[6].stylize(_MARK_COLOUR[mark], at, at + 1)
            table.add_row(*cells)
        return table

    table, reason = build(None), max(len(r["reason"]) for r in rows)
    while reason > _REASON_MIN and Console(width=10_000).measure(table).maximum > width:
        reason -= 1
        table = build(reason)
    return table


def _plain_lines(renderable: Any, width: int) -> list[str]:
    """``renderable`` as plain text lines at most ``width`` wide, trailing blanks removed."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False).print(renderable)
    return [line.rstrip() for line in buf.getvalue().splitlines()]


def print_verdicts(summary_path: Path, *, stream: TextIO | None = None) -> None:
    """The end of ``speclib run``/``analyze`` on ``stream``, in the manner of ``vllm bench
    serve``'s result block: a table with one line per experiment and load level (median
    TPOT in ms of control and arm, the TPOT ratio with its interval and level, the verdict,
    one short reason and the gates' marks), then :func:`end_lines` (the A/A arm's bench
    check, bench trust), between rules of ``=``. No line is wider than :data:`MAX_LINE`:
    plain text in logs and pipes, rich colours on a terminal; the full reasons are in
    ``summary.json`` and the report."""
    from rich.console import Console

    summary = _read_summary(summary_path)
    console = Console(file=stream or sys.stdout, highlight=False)
    plain = not console.is_terminal
    width = min(MAX_LINE if plain and "COLUMNS" not in os.environ else console.width, MAX_LINE)
    if not summary.get("comparisons"):
        print("no comparison in the summary", file=console.file, flush=True)
        return
    rows = table_rows(summary)
    margin = (summary.get("analysis") or {}).get("margin")
    title = "verdicts: median TPOT in ms, control → arm; TPOT ratio = arm / control" + (
        "" if margin is None else f"; the rule's margin δ = ±{100 * margin:.3g} %"
    )
    table = _table(rows, title, width) if rows else None
    head = _plain_lines(table, width) if table else ["no experiment arm (an A/A calibration run)"]
    tail = end_lines(summary)
    rule = "=" * min(max(len(x) for x in head + tail), width)
    if table is not None and not plain:
        console.width = width
        console.print(rule, markup=False)
        console.print(table)
    else:
        print("\n".join([rule, *head]), file=console.file)
    print("\n".join([*tail, rule]), file=console.file, flush=True)


def outcome_json(result: Any) -> str:
    """One JSON object: the paths of a run's outputs and the verdict rows of its summary."""
    return json.dumps(
        {
            "run_dir": str(result.run_dir),
            "report": str(result.report),
            "summary": str(result.summary),
            "failed_launches": list(result.failed_launches),
            "verdicts": verdict_rows(_read_summary(result.summary)),
        }
    )
