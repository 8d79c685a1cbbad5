"""The forest plot: every arm's TPOT ratio with its interval, the ±δ band and the A/A arm.

One row per comparison (experiment × load level) and one for the A/A arm (a second copy of
the control: the bench check, drawn in grey below a rule), on a log ratio axis with 1 and
the ±δ equivalence band marked. The point is the ratio estimate, the bar its interval at
the level it was built at (Holm-adjusted intervals are wider than 95 %; the label says so),
and the verdict word stands at the right of each row. It is the report's first-screen
picture: a decider sees at once which arms are faster, which are inside the band and how
wide the bench's own noise is. :func:`forest_frame` takes the rows from a run's analysis;
:func:`plot_forest` draws any frame of that shape (tests and notebooks build their own).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

from speclib.analysis.run_analysis import RunAnalysis
from speclib.params.experiment import AA_ARM
from speclib.report.conclusion import conf_words
from speclib.report.figure_base import FigureWithCaption, new_figure, resolve_palette

__all__ = ["FOREST_COLUMNS", "forest_figure", "forest_frame", "plot_forest"]

FOREST_COLUMNS = ("label", "series", "role", "estimate", "ci_low", "ci_high", "level", "word")
"""One row per drawn interval: ``role`` is ``"experiment"`` or ``"aa"`` (the bench check);
``level`` is the confidence the interval was built at."""

_GREY = "#7f7f7f"
_TICKS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)


def forest_frame(an: RunAnalysis) -> pd.DataFrame:
    """The rows of :func:`plot_forest` from a run's comparisons (those with a TPOT interval),
    experiments first in the verdict table's order, the A/A arm last."""
    many_loads = len(an.params.workload.levels) > 1
    rows = []
    for c in an.comparisons:
        ci = c.cis.get("tpot_s")
        if ci is None or not math.isfinite(ci.estimate):
            continue
        aa = c.experiment == AA_ARM
        label = "A/A (bench check)" if aa else c.experiment
        if many_loads:
            label += f" @ {c.load}"
        rows.append(
            {
                "label": label,
                "series": c.experiment,
                "role": "aa" if aa else "experiment",
                "estimate": ci.estimate,
                "ci_low": ci.ci_low,
                "ci_high": ci.ci_high,
                "level": ci.confidence_level,
                "word": c.word,
            }
        )
    df = pd.DataFrame(rows, columns=list(FOREST_COLUMNS))
    return pd.concat([df[df["role"] != "aa"], df[df["role"] == "aa"]], ignore_index=True)


def _spaced(ticks: list[float], lo: float, hi: float, most: int = 7) -> list[float]:
    """Ticks no closer than 1/``most`` of the log range (labels never overlap); 1 stays."""
    gap = (math.log(hi) - math.log(lo)) / most
    kept: list[float] = []
    for t in sorted(ticks, key=lambda t: (t != 1.0, abs(math.log(t)))):
        if all(abs(math.log(t) - math.log(k)) >= gap for k in kept):
            kept.append(t)
    return sorted(kept)


def _limits(df: pd.DataFrame, margin: float) -> tuple[float, float]:
    """x limits: every finite bound and the band, padded; infinite bounds are clipped."""
    values = np.r_[df["estimate"], df["ci_low"], df["ci_high"], 1 - margin, 1 + margin]
    values = values[np.isfinite(values) & (values > 0)]
    lo, hi = float(values.min()), float(values.max())
    lo, hi = max(lo, 0.1), min(hi, 10.0)
    pad = (math.log(hi) - math.log(lo)) * 0.08 + 0.02
    return lo * math.exp(-pad), hi * math.exp(pad)


def plot_forest(
    df: pd.DataFrame,
    *,
    margin: float,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Each row's ratio and interval on a log axis, the ±``margin`` band, verdicts at right.

    ``df`` has :data:`FOREST_COLUMNS`. An interval that reaches 0 or infinity (one block: no
    degrees of freedom) is drawn to the edge with an arrow-like open end and "(unbounded)".
    """
    if not 0 < margin < 1:
        raise ValueError(f"`margin` must be in (0, 1) (got {margin!r})")
    missing = [c for c in FOREST_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"forest plot: missing columns {missing}")
    n = len(df)
    fig, axes = new_figure(width=7.0, height=1.0 + 0.36 * max(n, 1))
    ax = axes[0][0]
    ax.set_title(
        "The traffic's TPOT ratio vs control (mean TPOT; below 1 = faster), each arm's interval",
        loc="left",
        fontsize=10,
    )
    if n == 0:
        ax.text(0.5, 0.5, "no arm has a TPOT interval", ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return FigureWithCaption(fig, "No arm has a TPOT interval to draw.")
    pal = resolve_palette(palette, list(df["series"]), control)
    lo, hi = _limits(df, margin)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.axvspan(1 - margin, 1 + margin, color="#d9d9d9", alpha=0.6, lw=0)
    ax.axvline(1.0, color="black", lw=0.8)
    ys = np.arange(n)[::-1]
    for y, row in zip(ys, df.itertuples(index=False), strict=True):
        color = _GREY if row.role == "aa" else pal.get(row.series, "black")
        left = row.ci_low if row.ci_low > lo else lo
        right = row.ci_high if math.isfinite(row.ci_high) and row.ci_high < hi else hi
        ax.plot([left, right], [y, y], color=color, lw=2.4, solid_capstyle="butt")
        ax.plot([row.estimate], [y], "o", color=color, ms=6, zorder=3)
    words = []
    for row in df.itertuples(index=False):
        unbounded = not (row.ci_low > 0 and math.isfinite(row.ci_high))
        words.append(row.word.upper() + (" (unbounded)" if unbounded else ""))
    if (df["role"] == "aa").any() and (df["role"] != "aa").any():
        ax.axhline(ys[(df["role"] != "aa").sum() - 1] - 0.5, color=_GREY, lw=0.6, ls=":")
    ax.set_yticks(ys, list(df["label"]))
    ax.set_ylim(-0.6, n - 0.4)
    right_axis = ax.twinx()  # the verdicts as right-hand tick labels (kept in the layout)
    right_axis.set_ylim(ax.get_ylim())
    right_axis.set_yticks(ys, words)
    right_axis.tick_params(axis="y", length=0, labelsize=8.5)
    right_axis.grid(False)
    ax.set_xlabel("the traffic's TPOT ratio: mean TPOT, experiment / control (log scale)")
    ticks = _spaced([t for t in _TICKS if lo <= t <= hi], lo, hi)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([f"×{t:g}" for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    # as the rest of the report writes a level (one decimal: the table's "99.7 % CI")
    levels = sorted({round(float(v), 3) for v in df["level"]})
    level_text = " and ".join(dict.fromkeys(conf_words(v) for v in levels))
    caption = (
        f"Which arms are faster, and by how much? Dot: the traffic's TPOT ratio to the control "
        f"(the arm's mean TPOT over the control's on the same prompts); bar: "
        f"its interval at {level_text} confidence (the level each was built at, Holm-"
        f"adjusted for the family where wider than 95 %); grey band: ±{100 * margin:g} % "
        "(equivalent). A bar wholly left of 1 is faster, wholly inside the band equivalent. "
        "The A/A row is a second copy of the control: the width of its bar is the bench's "
        "own resolution, and it should cover 1."
    )
    return FigureWithCaption(fig, caption)


def forest_figure(an: RunAnalysis) -> FigureWithCaption:
    """The run's forest plot (``<figure id="speclib-forest">`` in the report)."""
    fig = plot_forest(forest_frame(an), margin=an.params.analysis.margin, control=an.control)
    return dataclasses.replace(fig, anchor="speclib-forest")
