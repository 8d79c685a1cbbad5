"""Measured requests that were in flight while their server compiled a kernel or a graph.

Each launch's server log says when vLLM compiled something
(:func:`speclib.core.compile_events.compile_events`). The kit warms every server up at
each load level's own concurrency first, so a compile should fall in a warm-up; one that
falls inside a measured request's window (send to last byte) can have stalled it, and
every request in flight then. :func:`mark_compiles` leaves such requests out of the TPOT
comparison with the reason :data:`REASON` (they stay in the records and the exclusion table,
never dropped silently); :func:`compile_table` lists every compile per launch and how many
measured requests it touched, for ``summary.json`` and the report.

Pure functions of the records and of the launches' files.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclib.core.compile_events import CompileEvent, compile_events, overlaps
from speclib.core.rundir import RunDir

__all__ = ["REASON", "compile_table", "launch_compiles", "mark_compiles"]

REASON = "a kernel compiled during it"


def _clock(manifest: dict[str, Any]) -> tuple[int, float]:
    """The year and UTC offset (s) of the machine that ran the servers, from the manifest's
    ``created_at`` (``%Y-%m-%dT%H:%M:%S%z``); this machine's own when it is missing."""
    try:
        when = dt.datetime.strptime(str(manifest["created_at"]), "%Y-%m-%dT%H:%M:%S%z")
    except (KeyError, ValueError):
        when = dt.datetime.now().astimezone()
    offset = when.utcoffset()
    return when.year, offset.total_seconds() if offset is not None else 0.0


def launch_compiles(run_dir: str | Path) -> dict[str, list[CompileEvent]]:
    """Per launch id, the compiles its server logged (launches without a log: none)."""
    rd = RunDir.at(run_dir)
    year, offset = _clock(rd.read_manifest())
    out: dict[str, list[CompileEvent]] = {}
    for status in rd.statuses():
        lid = str(status.get("launch_id") or "")
        log = rd.launch_files(lid).server_log if lid else None
        if log is None or not log.is_file():
            continue
        with log.open(encoding="utf-8", errors="replace") as fh:
            out[lid] = compile_events(fh, year=year, utc_offset_s=offset)
    return out


def _windows(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    start = pd.to_numeric(df["t_start"], errors="coerce").to_numpy(dtype=float)
    done = pd.to_numeric(df.get("done_offset_s"), errors="coerce").to_numpy(dtype=float)
    return start, start + np.nan_to_num(done, nan=0.0)


def _touched(df: pd.DataFrame, events: dict[str, list[CompileEvent]]) -> np.ndarray:
    """Per row, whether a compile of its launch overlaps its window."""
    hit = np.zeros(len(df), dtype=bool)
    if df.empty or not events or "t_start" not in df:
        return hit
    start, end = _windows(df)
    lids = df["launch_id"].astype(str).to_numpy()
    for i, lid in enumerate(lids):
        hit[i] = any(overlaps(e, start[i], end[i]) for e in events.get(lid, ()))
    return hit


def mark_compiles(df: pd.DataFrame, events: dict[str, list[CompileEvent]]) -> pd.DataFrame:
    """A copy of ``df`` (after :func:`~speclib.analysis.health.instrument.apply_instrument`)
    whose requests in flight during a compile of their server are left out of the TPOT
    comparison: ``tpot_excluded`` = :data:`REASON` (where no other reason was given first)
    and ``tpot_s`` NaN."""
    if df.empty:
        return df
    out = df.copy()
    hit = _touched(out, events) & out["tpot_excluded"].isna().to_numpy()
    out.loc[hit, "tpot_excluded"] = REASON
    out.loc[hit, "tpot_s"] = np.nan
    return out


def compile_table(df: pd.DataFrame, events: dict[str, list[CompileEvent]]) -> list[dict[str, Any]]:
    """Per launch with compiles: each compile, whether it fell inside a measured request
    (and in how many, at which load levels) or outside them (start, warm-up, pauses)."""
    rows = []
    start, end = _windows(df) if len(df) and "t_start" in df else (np.array([]), np.array([]))
    lids = df["launch_id"].astype(str).to_numpy() if len(df) else np.array([])
    levels = df["level"].to_numpy() if len(df) else np.array([])
    for lid, found in sorted(events.items()):
        mine = lids == lid
        for e in found:
            inside = mine & (e.t <= end) & (e.t + 1.0 > start) if len(lids) else mine
            touched = sorted({int(x) for x in levels[inside]}) if inside.any() else []
            rows.append(
                {
                    "launch_id": lid,
                    **e.to_dict(),
                    "measured_requests": int(inside.sum()),
                    "levels": touched,
                    "where": "measured requests (left out)" if touched else "outside them",
                }
            )
    return rows
