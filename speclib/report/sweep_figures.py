"""The tuning sweep's figure: measured TPOT ratio against the swept value, and why.

:func:`sweep_frame` collects, from a run's analysis, one row per arm of a sweep family and
load level: its TPOT ratio to the control with the interval of the verdict table, its
verdict, whether it is the recommended value (:mod:`speclib.analysis.load.recommend`), and the
measured decomposition its comparison carries (tokens per step and step cost, see
:mod:`speclib.analysis.speculation.why`). :func:`plot_sweep` draws it: per load level (one row of
panels), the ratio against the value with one line per family (method), reference lines at
1 and 1 − δ, and beside it the two measured factors of the speed-up at each value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.run_analysis import RunAnalysis
from speclib.params.sweep import sweep_sort_key
from speclib.report.figure_base import (
    FigureWithCaption,
    new_figure,
    no_data,
    require_columns,
    series_palette,
)

__all__ = ["SWEEP_COLUMNS", "plot_sweep", "sweep_figure", "sweep_frame"]

SWEEP_COLUMNS = (
    "family", "method", "arm", "level", "load", "x", "value", "estimate", "ci_low", "ci_high",
    "word", "recommended", "tokens_per_step", "step_cost",
)  # fmt: skip
"""Columns of :func:`sweep_frame` (``x`` is the value drawn on the horizontal axis)."""


def _x(value: Mapping[str, Any], position: int) -> float:
    """The swept value itself when it is one number, else the value's rank in the family."""
    if len(value) == 1:
        v = next(iter(value.values()))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return float(position)


def sweep_frame(an: RunAnalysis) -> pd.DataFrame:
    """One row per arm of a sweep family and load level (empty without a sweep)."""
    params = an.params
    picked = {(r.family, r.level): r.arm for r in an.recommendations}
    rows = []
    for family, members in params.sweep_families.items():
        values = {m: params.series_by_name(m).sweep_value or {} for m in members}
        ranked = sorted(members, key=lambda m: sweep_sort_key(values[m]))
        for c in an.comparisons:
            if c.experiment not in values:
                continue
            ci = c.cis.get("tpot_s")
            d = c.explanation.decomposition if c.explanation is not None else None
            value = values[c.experiment]
            rows.append(
                {
                    "family": family, "method": c.method, "arm": c.experiment,
                    "level": c.level, "load": c.load,
                    "x": _x(value, ranked.index(c.experiment)),
                    "value": ", ".join(f"{k}={v}" for k, v in value.items()),
                    "estimate": ci.estimate if ci else math.nan,
                    "ci_low": ci.ci_low if ci else math.nan,
                    "ci_high": ci.ci_high if ci else math.nan,
                    "word": c.word,
                    "recommended": picked.get((family, c.level)) == c.experiment,
                    "tokens_per_step": d.tokens_per_step if d else math.nan,
                    "step_cost": d.step_cost if d else math.nan,
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))


def _ratio_panel(ax, sub: pd.DataFrame, pal: Mapping[str, str], margin: float) -> None:
    ax.axhline(1.0, color="0.2", lw=1, ls="--", label="no change")
    ax.axhline(1 - margin, color="0.2", lw=1, ls=":", label=f"1 − δ = {1 - margin:g}")
    finite = [1.0, 1 - margin]
    for family, rows in sub.groupby("family", sort=False):
        rows = rows.sort_values("x")
        x, est = rows["x"].to_numpy(float), rows["estimate"].to_numpy(float)
        lo, hi = rows["ci_low"].to_numpy(float), rows["ci_high"].to_numpy(float)
        ok = np.isfinite(lo) & np.isfinite(hi) & (lo > 0)
        label = f"{family} ({rows['method'].iloc[0]})"
        ax.plot(x, est, color=pal[family], marker="o", label=label)
        ax.errorbar(x[ok], est[ok], yerr=[est[ok] - lo[ok], hi[ok] - est[ok]], fmt="none",
                    ecolor=pal[family], capsize=3)  # fmt: skip
        picked = rows["recommended"].to_numpy(bool)
        ax.scatter(x[picked], est[picked], s=160, facecolors="none", edgecolors=pal[family],
                   linewidths=2, zorder=3, label=f"{family}: recommended")  # fmt: skip
        finite += [v for v in (*est, *lo[ok], *hi[ok]) if np.isfinite(v)]
    span = max(finite) - min(finite)
    ax.set_ylim(max(0.0, min(finite) - 0.05 * span), max(finite) + 0.05 * span)
    ax.set_ylabel("the traffic's TPOT ratio arm / control")
    ax.legend(fontsize="small")


def _why_panel(ax, sub: pd.DataFrame, pal: Mapping[str, str]) -> None:
    drawn = False
    for family, rows in sub.groupby("family", sort=False):
        rows = rows.sort_values("x")
        x = rows["x"].to_numpy(float)
        for col, style, marker, what in (
            ("tokens_per_step", "-", "o", "tokens per step"),
            ("step_cost", "--", "s", "step cost"),
        ):
            y = rows[col].to_numpy(float)
            ok = np.isfinite(y)
            if ok.any():
                ax.plot(x[ok], y[ok], ls=style, marker=marker, color=pal[family],
                        label=f"{family}: {what}")  # fmt: skip
                drawn = True
    if not drawn:
        no_data(ax, "no measured decomposition (needs c=1 streams)")
        return
    ax.axhline(1.0, color="0.2", lw=1, ls="--")
    ax.set_ylabel("factor vs control (unitless)")
    ax.legend(fontsize="small")


def plot_sweep(
    frame: pd.DataFrame, *, margin: float, xlabel: str = "swept value"
) -> FigureWithCaption:
    """Measured TPOT ratio against the swept value (left) and its decomposition (right),
    one row of panels per load level, one colour per sweep family.

    ``frame`` is :func:`sweep_frame`'s; ``margin`` is δ (``analysis.margin``).
    """
    require_columns(frame, SWEEP_COLUMNS, "plot_sweep")
    levels = sorted(frame["level"].unique()) or [0]
    fig, axes = new_figure(2, len(levels), width=5.6, height=3.8)
    pal = series_palette(list(dict.fromkeys(frame["family"])), control="")
    for row, level in enumerate(levels):
        sub = frame[frame["level"] == level]
        left, right = axes[row, 0], axes[row, 1]
        if sub.empty:
            no_data(left)
            no_data(right)
            continue
        load = sub["load"].iloc[0]
        _ratio_panel(left, sub, pal, margin)
        _why_panel(right, sub, pal)
        left.set_title(f"TPOT ratio vs {xlabel} (load {load})")
        right.set_title(f"Why: tokens per step and step cost (load {load})")
        for ax in (left, right):
            ax.set_xlabel(xlabel)
            xs = sorted(set(sub["x"]))
            ax.set_xticks(xs, [f"{v:g}" for v in xs])
    caption = (
        f"Left: measured traffic's TPOT ratio (mean TPOT) of each swept arm to the control of "
        f"its own block, with "
        f"the verdict table's interval, one line per sweep family; below the dotted line "
        f"(1 − δ = {1 - margin:g}) an arm can pay, a ring marks the recommended value. Right: "
        "the measured decomposition of the same arms, on the typical request's scale (geometric "
        "means: speed-up = tokens per step ÷ step "
        "cost; solid: tokens per verify step, dashed: a step's time over a plain step's)."
    )
    return FigureWithCaption(fig, caption)


def sweep_figure(an: RunAnalysis) -> FigureWithCaption | None:
    """The sweep figure of a run, or None when the run has no sweep."""
    frame = sweep_frame(an)
    if frame.empty:
        return None
    keys = {k for m in an.params.sweep_families.values() for s in m
            for k in (an.params.series_by_name(s).sweep_value or {})}  # fmt: skip
    label = "k (num_speculative_tokens)" if keys == {"num_speculative_tokens"} else "swept value"
    return plot_sweep(frame, margin=an.params.analysis.margin, xlabel=label)
