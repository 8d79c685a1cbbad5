"""Drift diagnostics: regime shifts in each launch's TPOT, and whether the design cancelled them.

On the kit's CPU machines a server's speed can shift regime inside one launch (TPOT 22–24 ms
for 9 requests, then 14–17 ms for 12, then back). Arms measured one after the other then
compare the effect with the machine's mood. :func:`drift_table` runs Pettitt's change-point
test (:mod:`speclib.analysis.stats.changepoint`) on every launch's positive per-request TPOT (a
TPOT of 0 means every token was read at once: it measures the read, not a speed) in time order
and, for each experiment, on its paired log-ratios against the control in time order within
the block. A shift in the raw series that is absent from the paired one was **cancelled**
by the design (the arms alternated, so the shift hit both sides of every pair); a shift in
the paired series was not. Pure function of the records frame.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.frames import pair_frame
from speclib.analysis.stats.changepoint import pettitt_test, shift_cancelled

__all__ = ["drift_sentence", "drift_table"]

_COLUMNS = [
    "block",
    "arm",
    "n",
    "shift",
    "pvalue",
    "at_request",
    "before_ms",
    "after_ms",
    "paired_shift",
    "cancelled",
]


def _ok_measured(df: pd.DataFrame) -> pd.DataFrame:
    d = df[df["ok"].astype(bool)]
    if "phase" in d.columns:
        d = d[d["phase"] == "measure"]
    tpot = pd.to_numeric(d["tpot_s"], errors="coerce").astype(float)
    return d[np.isfinite(tpot) & (tpot > 0)]  # a TPOT of 0 (all tokens read at once) is no level


def _row(block: Any, arm: str, raw: pd.DataFrame, paired: pd.DataFrame | None) -> dict:
    tpot = raw.sort_values("t_start")["tpot_s"].to_numpy(float)
    lr = np.empty(0)
    if paired is not None and len(paired) >= 2:
        ordered = paired.sort_values("t_start_e")
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(ordered["tpot_s_e"].to_numpy(float) / ordered["tpot_s_c"].to_numpy(float))
        lr = lr[np.isfinite(lr)]  # a pair with a one-token output has no TPOT
    if lr.size >= 2:
        both = shift_cancelled(raw=tpot, paired=lr)
        cp, paired_shift, cancelled = both.raw, both.paired.significant, both.cancelled
    else:
        cp, paired_shift, cancelled = pettitt_test(tpot), None, None
    return {
        "block": block,
        "arm": arm,
        "n": int(tpot.size),
        "shift": bool(cp.significant),
        "pvalue": float(cp.pvalue),
        "at_request": cp.index,
        "before_ms": None if cp.before_median is None else cp.before_median * 1e3,
        "after_ms": None if cp.after_median is None else cp.after_median * 1e3,
        "paired_shift": paired_shift,
        "cancelled": cancelled,
    }


def drift_table(df: pd.DataFrame, *, control: str, arms: list[str]) -> pd.DataFrame:
    """One row per replicate block and arm (control included): the change-point test of its
    TPOT in time order, and for non-control arms whether the paired series shifted too."""
    d = _ok_measured(df)
    rows = []
    for (block, level), sub in d.groupby(["replicate", "level"], sort=True):
        for arm in [control, *arms]:
            raw = sub[sub["series"] == arm]
            if len(raw) < 2:
                continue
            paired = None
            if arm != control:
                pairs = pair_frame(sub, control=control, experiment=arm).pairs
                if "t_start_e" in pairs.columns:
                    paired = pairs
            rows.append(_row(f"r{block}" + (f"/l{level}" if level else ""), arm, raw, paired))
    return pd.DataFrame(rows, columns=_COLUMNS)


def drift_sentence(table: pd.DataFrame) -> str:
    """The figure caption's verdict: which launches shifted, and whether it was cancelled."""
    shifted = table[table["shift"].astype(bool)] if len(table) else table
    if not len(shifted):
        return "No regime shift was detected in any launch (Pettitt's test, 5 %)."
    parts = []
    for _, r in shifted.iterrows():
        text = (
            f"{r['arm']} in block {r['block']}: TPOT {r['before_ms']:.1f} → "
            f"{r['after_ms']:.1f} ms after request {r['at_request']} (p = {r['pvalue']:.3g})"
        )
        if r["cancelled"] is True:
            text += ", cancelled by the design (its pairs did not shift)"
        elif r["paired_shift"] is True:
            text += ", NOT cancelled (its pairs shifted too)"
        parts.append(text)
    return "Regime shifts: " + "; ".join(parts) + "."
