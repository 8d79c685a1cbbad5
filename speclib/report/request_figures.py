"""Figures of the per-request latencies: their distributions and the paired per-prompt ratios.

Each function takes the per-request DataFrame (:data:`~speclib.report.figure_base.RECORD_COLUMNS`)
and returns a captioned figure: latency ECDFs per series (one legend for the figure) and the
paired per-prompt ratio coloured by prompt category with the mean ratio's CI on its own
column; :func:`paired_prompt_ratios` gives the per-prompt ratios it draws (the acceptance
figure of :mod:`speclib.report.spec_figures` uses them too). How the requests streamed and
when they ran is drawn in :mod:`speclib.report.stream_figures`. Nothing is computed here
beyond grouping and plotting: pairs come from :func:`speclib.analysis.frames.pair_frame`, CIs
from :mod:`speclib.analysis.stats.paired`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from speclib.analysis.frames import pair_frame
from speclib.report.figure_base import (
    METRIC_UNITS,
    UNCATEGORISED,
    FigureWithCaption,
    category_palette,
    finite,
    measured,
    new_figure,
    no_data,
    require_columns,
    resolve_palette,
    series_order,
)

__all__ = ["paired_prompt_ratios", "plot_latency_ecdf", "plot_paired_ratio"]


def plot_latency_ecdf(
    df: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
    metrics: Sequence[str] = ("ttft_s", "tpot_s", "e2e_s"),
) -> FigureWithCaption:
    """ECDF of TTFT, TPOT and end-to-end latency per series (successful measured requests)."""
    unknown = [m for m in metrics if m not in METRIC_UNITS]
    if unknown:
        raise ValueError(f"`metrics` must be among {list(METRIC_UNITS)} (got {unknown})")
    require_columns(df, ["series", *metrics], "plot_latency_ecdf")
    data = measured(df)
    order = series_order(df["series"], control)
    pal = resolve_palette(palette, order, control)
    fig, axes = new_figure(len(metrics), width=3.6)
    counts = data.groupby("series").size()
    handles: dict[str, object] = {}
    for ax, metric in zip(axes[0], metrics, strict=True):
        label, unit, scale = METRIC_UNITS[metric]
        for name in order:
            vals = finite(data.loc[data["series"] == name, metric]) * scale
            if vals.empty:
                continue
            sns.ecdfplot(x=vals.to_numpy(), ax=ax, color=pal[name], label=name)
            handles.setdefault(name, ax.get_lines()[-1])
        if not ax.has_data():
            no_data(ax)
        ax.set_xlabel(f"{label} ({unit})")
        ax.set_ylabel("share of requests")
        ax.set_title(label)
    drawn = [s for s in order if s in handles]
    if drawn:  # one legend for the figure, outside the panels
        fig.legend(
            [handles[s] for s in drawn],
            drawn,
            title="series",
            loc="outside right upper",
            fontsize="small",
        )
    fig.suptitle("Latency distributions per series")
    ns = ", ".join(f"{s} n={int(counts.get(s, 0))}" for s in order)
    caption = (
        "How is each arm's latency distributed? Empirical CDFs of per-request latency over "
        f"successful measured requests ({ns}); a curve further left is faster."
    )
    return FigureWithCaption(fig, caption)


def paired_prompt_ratios(
    df: pd.DataFrame, *, experiment: str, control: str = "control", metric: str = "tpot_s"
) -> pd.DataFrame:
    """Per prompt: median ``metric`` of each series and the ratio experiment / control.

    Uses the pairs of :func:`speclib.analysis.frames.pair_frame` (same replicate, level,
    prompt and repeat, both successful) of the measured phase, pooled over replicates and
    repeats, and only pairs where both values are finite and positive. Columns:
    ``prompt_id``, ``category``, ``control``, ``experiment``, ``ratio``; sorted by ratio.
    """
    require_columns(df, ["series", "prompt_id", metric], "paired_prompt_ratios")
    cols = ["prompt_id", "category", "control", "experiment", "ratio"]
    if control == experiment:
        return pd.DataFrame(columns=cols)
    defaults = {"ok": True, "replicate": 0, "repeat": 0, "category": None}
    data = measured(df).assign(**{k: v for k, v in defaults.items() if k not in df.columns})
    pairs = pair_frame(data, control=control, experiment=experiment).pairs
    if f"{metric}_c" not in pairs.columns:
        raise ValueError(f"paired_prompt_ratios: `metric` {metric!r} is not a paired column")
    c = pd.to_numeric(pairs[f"{metric}_c"], errors="coerce").astype(float)
    e = pd.to_numeric(pairs[f"{metric}_e"], errors="coerce").astype(float)
    pairs = pairs.assign(control=c, experiment=e)
    pairs = pairs[np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)]
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    out = pairs.groupby("prompt_id")[["control", "experiment"]].median()
    out["ratio"] = out["experiment"] / out["control"]
    out = out.reset_index()
    out["category"] = out["prompt_id"].map(pairs.groupby("prompt_id")["category"].first())
    return out[cols].sort_values("ratio", kind="stable").reset_index(drop=True)


_MARKERS = ("o", "s", "^", "v", "P", "X", "*")  # per category, with its colour


def plot_paired_ratio(
    df: pd.DataFrame,
    *,
    experiment: str,
    ci: tuple[float, float],
    estimate: float | None = None,
    control: str = "control",
    metric: str = "tpot_s",
    palette: Mapping[str, str] | None = None,
    confidence_level: float | None = None,
    typical: float | None = None,
) -> FigureWithCaption:
    """Per-prompt ratio experiment / control of ``metric``, coloured by prompt category, and
    the overall ratio with its CI drawn apart, as one more column right of the prompts.

    ``ci`` and ``estimate`` are the traffic's ratio (the verdict's: the arm's mean over the
    control's, :mod:`speclib.core.estimand`) with its interval, ``typical`` the typical
    request's (the geometric mean of the ratios drawn), drawn as a line of its own; they
    are drawn, not recomputed;
    ``confidence_level`` (e.g. 0.975 after a Holm adjustment) is named in the legend and
    caption. The interval is that of the mean ratio, not a range for single prompts, so it
    is drawn on the mean's own column. Points below the line at 1 are prompts where the
    experiment is faster. ``palette`` colours the series; categories get their own colours.
    """
    lo, hi = (float(x) for x in ci)
    if not (0 <= lo <= hi):
        raise ValueError(f"`ci` must be (low, high) with 0 <= low <= high (got {ci!r})")
    bounded = lo > 0 and np.isfinite(hi)  # (0, inf): the interval could not be formed
    ratios = paired_prompt_ratios(df, experiment=experiment, control=control, metric=metric)
    ratios = ratios.assign(category=ratios["category"].fillna(UNCATEGORISED).astype(str))
    pal = resolve_palette(palette, [control, experiment], control)
    label = METRIC_UNITS.get(metric, (metric, "", 1.0))[0]
    level = f"{round(confidence_level * 100, 1):g} % " if confidence_level else ""
    fig, axes = new_figure(width=7.5)
    ax = axes[0, 0]
    ax.axhline(1.0, color="0.2", lw=1, ls="--", label="no change")
    x_mean = len(ratios) + 0.5
    if estimate is not None:
        ax.axhline(estimate, color=pal[experiment], lw=1, ls=":")
        err = [[estimate - lo], [hi - estimate]] if bounded and lo <= estimate <= hi else None
        ax.errorbar(
            [x_mean],
            [estimate],
            yerr=err,
            color=pal[experiment],
            marker="D",
            ms=7,
            capsize=5,
            lw=2,
            zorder=4,
            label=f"the traffic's ratio {estimate:.3f}"
            + (f"\n{level}CI [{lo:.3f}, {hi:.3f}]" if err else ""),
        )
    if typical is not None:
        ax.axhline(typical, color="0.5", lw=1, ls="-.",
                   label=f"typical request\n(geometric mean) {typical:.3f}")  # fmt: skip
    elif bounded:
        ax.vlines([x_mean], lo, hi, color=pal[experiment], lw=2, label=f"{level}CI of the mean")
    # every category of the records, sorted, so a category keeps its colour across figures
    known = df["category"].dropna().astype(str) if "category" in df.columns else pd.Series()
    categories = sorted(set(known) | set(ratios["category"]))
    cat_colors = category_palette(categories)
    if ratios.empty:
        ax.text(0.5, 0.5, "no paired prompts", ha="center", transform=ax.transAxes)
    else:
        x = np.arange(len(ratios))
        for cat in categories:
            m = (ratios["category"] == cat).to_numpy()
            if not m.any():
                continue
            ax.scatter(
                x[m],
                ratios["ratio"][m],
                color=cat_colors[cat],
                marker=_MARKERS[categories.index(cat) % len(_MARKERS)],
                s=28,
                zorder=3,
                label=cat,
            )
        names = list(ratios["prompt_id"].astype(str)) if len(ratios) <= 30 else [""] * len(x)
        ticks = [*x, x_mean] if estimate is not None or bounded else list(x)
        mean_tick = ["all prompts"] if len(ticks) > len(x) else []
        ax.set_xticks(ticks, [*names, *mean_tick], rotation=60, ha="right", fontsize="small")
    ax.set_xlabel("prompt (sorted by ratio); right: the mean over prompts")
    ax.set_ylabel(f"{label} ratio {experiment} / {control} (unitless)")
    ax.set_title(f"Paired per-prompt {label}: {experiment} vs {control}")
    ax.legend(
        title="prompt category",
        fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0,
    )
    per_cat = "; ".join(
        f"{cat} {g['ratio'].median():.2f} (n={len(g)})"
        for cat, g in ratios.groupby("category", sort=False)
    )
    est = (
        f"the traffic's ratio {estimate:.3f} (mean {label} of {experiment} over {control}'s, "
        "every prompt once)"
        if estimate is not None
        else ""
    )
    geo = (
        f" The dash-dotted line is the typical request's ratio {typical:.3f}, the geometric "
        "mean of the points: where they spread, it is not what the traffic gets."
        if typical is not None
        else ""
    )
    caption = (
        f"Does the speed-up hold per prompt and per category? Each point is one prompt's median "
        f"{label} of {experiment} divided by that of {control} (n={len(ratios)} prompts), "
        f"coloured by category; below 1 means {experiment} is faster. "
        + (f"Median ratio per category: {per_cat}. " if per_cat else "")
        + (
            f"Right column: {est or 'the mean ratio'} with the {level}confidence interval "
            f"[{lo:.3f}, {hi:.3f}] of that ratio, not a range for single prompts, which spread "
            "wider."
            if bounded
            else f"Right column: {est + ', ' if est else ''}without an interval: one launch "
            "per arm gives none (see the verdict)."
        )
        + geo
    )
    return FigureWithCaption(fig, caption)
