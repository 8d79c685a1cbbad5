"""Figures drawn from the per-request records: latency, paired per-prompt ratios, the stream.

Each function takes the per-request DataFrame (:data:`~speclib.report.figure_base.RECORD_COLUMNS`)
and returns a captioned figure: latency ECDFs per series, the paired per-prompt ratio with
the overall CI, tokens per streamed chunk, and the request timeline. Nothing is computed here
beyond grouping and plotting: pairs come from :func:`speclib.analysis.frames.pair_frame`,
CIs from :mod:`speclib.analysis.stats`, chunk sizes from :mod:`speclib.analysis.chunks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from speclib.analysis.chunks import tokens_per_chunk_distribution
from speclib.analysis.frames import pair_frame
from speclib.report.figure_base import (
    ERROR_COLOR,
    METRIC_UNITS,
    FigureWithCaption,
    finite,
    measured,
    new_figure,
    no_data,
    require_columns,
    resolve_palette,
    series_order,
)

__all__ = [
    "paired_prompt_ratios",
    "plot_drift",
    "plot_latency_ecdf",
    "plot_paired_ratio",
    "plot_timeline",
    "plot_tokens_per_chunk",
]


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
    fig, axes = new_figure(len(metrics), width=3.9)
    counts = data.groupby("series").size()
    for ax, metric in zip(axes[0], metrics, strict=True):
        label, unit, scale = METRIC_UNITS[metric]
        drawn = False
        for name in order:
            vals = finite(data.loc[data["series"] == name, metric]) * scale
            if vals.empty:
                continue
            sns.ecdfplot(x=vals.to_numpy(), ax=ax, color=pal[name], label=name)
            drawn = True
        if not drawn:
            no_data(ax)
        ax.set_xlabel(f"{label} ({unit})")
        ax.set_ylabel("share of requests")
        ax.set_title(label)
        if drawn:
            ax.legend(title="series", fontsize="small")
    fig.suptitle("Latency distributions per series")
    ns = ", ".join(f"{s} n={int(counts.get(s, 0))}" for s in order)
    caption = (
        "Empirical CDFs of per-request latency over successful measured requests "
        f"({ns}); a curve further left is faster."
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
) -> FigureWithCaption:
    """Per-prompt ratio experiment / control of ``metric``, with the overall CI as a band.

    ``ci`` (and ``estimate``) come from
    :func:`speclib.analysis.stats.paired_ratio_ci`; they are drawn, not recomputed;
    ``confidence_level`` (e.g. 0.975 after a Holm adjustment) is named in the caption.
    Points below the line at 1 are prompts where the experiment is faster.
    """
    lo, hi = (float(x) for x in ci)
    if not (0 <= lo <= hi):
        raise ValueError(f"`ci` must be (low, high) with 0 <= low <= high (got {ci!r})")
    bounded = lo > 0 and np.isfinite(hi)  # (0, inf): the interval could not be formed
    ratios = paired_prompt_ratios(df, experiment=experiment, control=control, metric=metric)
    pal = resolve_palette(palette, [control, experiment], control)
    label = METRIC_UNITS.get(metric, (metric, "", 1.0))[0]
    fig, axes = new_figure(width=7.5)
    ax = axes[0, 0]
    if bounded:
        span = f"CI [{lo:.3f}, {hi:.3f}]"
        ax.axhspan(lo, hi, color=pal[experiment], alpha=0.18, lw=0, label=span)
    if estimate is not None:
        ax.axhline(estimate, color=pal[experiment], lw=1.5, label=f"estimate {estimate:.3f}")
    ax.axhline(1.0, color="0.2", lw=1, ls="--", label="no change")
    if ratios.empty:
        ax.text(0.5, 0.5, "no paired prompts", ha="center", transform=ax.transAxes)
    else:
        x = np.arange(len(ratios))
        ax.scatter(x, ratios["ratio"], color=pal[experiment], s=22, zorder=3, label="prompt")
        if len(ratios) <= 30:
            ax.set_xticks(
                x, ratios["prompt_id"].astype(str), rotation=60, ha="right", fontsize="small"
            )
        else:
            ax.set_xticks([])
    ax.set_xlabel("prompt (sorted by ratio)")
    ax.set_ylabel(f"{label} ratio {experiment} / {control} (unitless)")
    ax.set_title(f"Paired per-prompt {label}: {experiment} vs {control}")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    est = f"estimate {estimate:.3f}, " if estimate is not None else ""
    level = f"{round(confidence_level * 100, 1):g} % " if confidence_level else ""
    caption = (
        f"Median {label} of {experiment} divided by that of {control}, per prompt "
        f"(n={len(ratios)} prompts); below 1 means {experiment} is faster. "
        + (
            f"Band: {est}{level}confidence interval [{lo:.3f}, {hi:.3f}] of the paired ratio."
            if bounded
            else f"No band: {est}but one launch per arm gives no interval (see the verdict)."
        )
    )
    return FigureWithCaption(fig, caption)


def plot_tokens_per_chunk(
    df: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Share of streamed chunks by the number of tokens they carried, per series."""
    require_columns(df, ["series", "chunk_tokens"], "plot_tokens_per_chunk")
    data = measured(df)
    order = series_order(df["series"], control)
    pal = resolve_palette(palette, order, control)
    dists = {
        s: tokens_per_chunk_distribution(
            c if isinstance(c, list | tuple | np.ndarray) else ()
            for c in data.loc[data["series"] == s, "chunk_tokens"]
        )
        for s in order
    }
    shown = [s for s in order if dists[s].n_chunks]
    fig, axes = new_figure(width=6.4)
    ax = axes[0, 0]
    width = 0.8 / max(len(shown), 1)
    for i, name in enumerate(shown):
        d = dists[name]
        share = np.asarray(d.counts, dtype=float) / d.n_chunks
        ax.bar(
            np.asarray(d.sizes) + (i - (len(shown) - 1) / 2) * width,
            share,
            width=width,
            color=pal[name],
            label=name,
        )
    if shown:
        ax.set_xticks(sorted({s for n in shown for s in dists[n].sizes}))
        ax.legend(title="series", fontsize="small")
    else:
        no_data(ax)
    ax.set_xlabel("tokens carried by one streamed chunk (count)")
    ax.set_ylabel("share of chunks")
    ax.set_title("Tokens per streamed chunk")
    means = "; ".join(
        f"{s}: mean {dists[s].mean:.2f} over {dists[s].n_chunks} chunks" for s in shown
    )
    caption = (
        "Without speculation each chunk carries one token; under speculation a chunk carries "
        f"the accepted drafts plus one. {means or 'No chunks recorded'}."
    )
    return FigureWithCaption(fig, caption)


def plot_timeline(
    df: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Each request as a bar from send to end of stream, one panel per series.

    Time is relative to the first request of each server launch (``launch_id``), and the
    launches of a series are stacked, so overlapping bars show concurrency and growing
    bars show queueing. Warm-up requests are pale; failed requests are marked with ×.
    """
    require_columns(df, ["series", "t_start", "e2e_s"], "plot_timeline")
    order = series_order(df["series"], control)
    pal = resolve_palette(palette, order, control)
    fig, axes = new_figure(1, max(len(order), 1), width=8.0, height=2.6)
    n_fail = 0
    for ax, name in zip(axes[:, 0], order or [None], strict=False):
        if name is None:
            no_data(ax)
            continue
        sub = df[df["series"] == name].copy()
        launch = sub["launch_id"].astype(str) if "launch_id" in sub.columns else ""
        sub = sub.assign(_launch=launch, _t=pd.to_numeric(sub["t_start"], errors="coerce"))
        sub = sub.sort_values(["_launch", "_t"], kind="stable")
        sub["_t0"] = sub.groupby("_launch")["_t"].transform("min")
        rel = (sub["_t"] - sub["_t0"]).to_numpy(dtype=float)
        dur = pd.to_numeric(sub["e2e_s"], errors="coerce").to_numpy(dtype=float)
        ok = sub["ok"].fillna(False).astype(bool).to_numpy() if "ok" in sub.columns else None
        warm = (
            (sub["phase"].astype(str) == "warmup").to_numpy()
            if "phase" in sub.columns
            else np.zeros(len(sub), dtype=bool)
        )
        y = np.arange(len(sub))
        good = np.isfinite(dur) & np.isfinite(rel)
        for is_warm, alpha in ((False, 0.9), (True, 0.3)):
            m = good & (warm == is_warm)
            if m.any():
                ax.barh(
                    y[m],
                    dur[m],
                    left=rel[m],
                    height=0.8,
                    color=pal[name],
                    alpha=alpha,
                    label="warm-up" if is_warm else "measured",
                )
        failed = ~good if ok is None else (~ok | ~good)
        if failed.any():
            n_fail += int(failed.sum())
            ax.scatter(
                rel[failed], y[failed], marker="x", color=ERROR_COLOR, zorder=3, label="failed"
            )
        bounds = np.flatnonzero(sub["_launch"].to_numpy()[1:] != sub["_launch"].to_numpy()[:-1])
        for b in bounds:
            ax.axhline(b + 0.5, color="0.5", lw=0.6)
        ax.set_ylabel("request (by start)")
        ax.set_xlabel("time since the launch's first request (s)")
        ax.set_title(name, loc="left", color=pal[name])
        if len(sub):
            ax.legend(fontsize="x-small", loc="lower right")
        else:
            no_data(ax)
    fig.suptitle("Request timeline per series")
    caption = (
        "Each bar is one request from send to end of stream; launches of a series are "
        "stacked (grey lines). Overlaps show concurrency, bars that start together but end "
        "staggered show queueing." + (f" {n_fail} failed request(s) marked ×." if n_fail else "")
    )
    return FigureWithCaption(fig, caption)


def plot_drift(
    df: pd.DataFrame,
    drift: pd.DataFrame,
    *,
    sentence: str,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Per-request TPOT in time order, one panel per replicate block, one line per arm.

    ``drift`` is :func:`speclib.analysis.drift.drift_table`; a launch with a significant
    change point gets a dotted vertical line at the shift. ``sentence`` (from
    :func:`speclib.analysis.drift.drift_sentence`) names the shifts and whether the design
    cancelled them.
    """
    require_columns(df, ["series", "t_start", "tpot_s", "replicate"], "plot_drift")
    d = measured(df)
    d = d[np.isfinite(pd.to_numeric(d["tpot_s"], errors="coerce"))]
    blocks = sorted(d["replicate"].unique())
    order = series_order(d["series"], control)
    pal = resolve_palette(palette, order, control)
    fig, axes = new_figure(1, max(len(blocks), 1), width=8.0, height=2.4)
    for ax, block in zip(axes[:, 0], blocks or [None], strict=False):
        if block is None:
            no_data(ax)
            continue
        sub = d[d["replicate"] == block]
        t0 = float(pd.to_numeric(sub["t_start"]).min())
        for name in order:
            s = sub[sub["series"] == name].sort_values("t_start")
            if not len(s):
                continue
            x = pd.to_numeric(s["t_start"]).to_numpy(float) - t0
            y = pd.to_numeric(s["tpot_s"]).to_numpy(float) * 1e3
            ax.plot(x, y, marker=".", lw=1, color=pal[name], label=name)
            hit = drift[(drift["arm"] == name) & (drift["block"] == f"r{block}")]
            if len(hit) and bool(hit.iloc[0]["shift"]) and hit.iloc[0]["at_request"] is not None:
                at = int(hit.iloc[0]["at_request"])
                if 0 < at < len(x):
                    ax.axvline(x[at], color=pal[name], ls=":", lw=1.2)
        ax.set_title(f"block r{block}", fontsize=9, loc="left")
        ax.set_ylabel("TPOT (ms)")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("time since the block's first measured request (s)")
    fig.suptitle("TPOT over time, per block and arm (drift diagnostics)")
    caption = (
        "Per-request TPOT in send order; dotted lines mark a regime shift found by Pettitt's "
        "change-point test in that launch. In the interleaved design the arms alternate, so "
        f"a shift of the machine hits every arm at once and cancels in the pairs. {sentence}"
    )
    return FigureWithCaption(fig, caption)
