"""Figures drawn from the per-request records: latency, paired per-prompt ratios, the stream.

Each function takes the per-request DataFrame (:data:`~speclib.report.figure_base.RECORD_COLUMNS`)
and returns a captioned figure: latency ECDFs per series (one legend for the figure), the
paired per-prompt ratio coloured by prompt category with the mean ratio's CI on its own
column, tokens per streamed chunk, the request timeline (:func:`requests_overlap` tells
whether it has anything to show beyond the send order), and TPOT over time per block for the
drift diagnostics. Nothing is computed here beyond grouping and plotting: pairs come from
:func:`speclib.analysis.frames.pair_frame`, CIs from :mod:`speclib.analysis.stats.paired`, chunk
sizes from :mod:`speclib.analysis.spec.chunks`, change points from
:mod:`speclib.analysis.health.drift`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from speclib.analysis.frames import pair_frame
from speclib.analysis.spec.chunks import tokens_per_chunk_distribution
from speclib.report.figure_base import (
    ERROR_COLOR,
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

__all__ = [
    "paired_prompt_ratios",
    "plot_drift",
    "plot_latency_ecdf",
    "plot_paired_ratio",
    "plot_timeline",
    "plot_tokens_per_chunk",
    "requests_overlap",
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
) -> FigureWithCaption:
    """Per-prompt ratio experiment / control of ``metric``, coloured by prompt category, and
    the overall ratio with its CI drawn apart, as one more column right of the prompts.

    ``ci`` (and ``estimate``, the geometric-mean ratio) come from
    :func:`speclib.analysis.stats.paired.paired_ratio_ci`; they are drawn, not recomputed;
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
            label=f"geometric-mean ratio {estimate:.3f}"
            + (f"\n{level}CI of the mean [{lo:.3f}, {hi:.3f}]" if err else ""),
        )
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
    est = f"geometric-mean ratio {estimate:.3f}" if estimate is not None else ""
    caption = (
        f"Does the speed-up hold per prompt and per category? Each point is one prompt's median "
        f"{label} of {experiment} divided by that of {control} (n={len(ratios)} prompts), "
        f"coloured by category; below 1 means {experiment} is faster. "
        + (f"Median ratio per category: {per_cat}. " if per_cat else "")
        + (
            f"Right column: {est or 'the mean ratio'} with the {level}confidence interval "
            f"[{lo:.3f}, {hi:.3f}] of that mean, not a range for single prompts, which spread "
            "wider."
            if bounded
            else f"Right column: {est + ', ' if est else ''}without an interval: one launch "
            "per arm gives none (see the verdict)."
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
        "How many tokens does one streamed chunk carry? Without speculation one; under "
        "speculation the accepted drafts plus one, so the time between chunks is not TPOT. "
        f"{means or 'No chunks recorded'}."
    )
    return FigureWithCaption(fig, caption)


def requests_overlap(df: pd.DataFrame, *, tolerance_s: float = 1e-3) -> bool:
    """Whether any request was sent while another of its launch was still streaming.

    False for a closed loop at concurrency 1: then the timeline shows no concurrency and no
    queueing, only the order of requests, which the drift figure shows as well.
    """
    require_columns(df, ["t_start", "e2e_s"], "requests_overlap")
    launch = df["launch_id"].astype(str) if "launch_id" in df.columns else pd.Series("", df.index)
    start = pd.to_numeric(df["t_start"], errors="coerce").astype(float)
    end = start + pd.to_numeric(df["e2e_s"], errors="coerce").astype(float)
    d = pd.DataFrame({"launch": launch, "start": start, "end": end}).dropna()
    for _, g in d.sort_values("start", kind="stable").groupby("launch", sort=False):
        busy_until = g["end"].cummax().shift()
        if (g["start"] < busy_until - tolerance_s).any():
            return True
    return False


def plot_timeline(
    df: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Each request as a bar from send to end of stream, one panel per series with data.

    Time is relative to the first request of each server launch (``launch_id``), and the
    launches of a series are stacked, so overlapping bars show concurrency and growing
    bars show queueing. Warm-up requests are pale; failed requests are marked with ×.
    A series with no request to draw (no send time) gets no panel.
    """
    require_columns(df, ["series", "t_start", "e2e_s"], "plot_timeline")
    has_t = np.isfinite(pd.to_numeric(df["t_start"], errors="coerce").astype(float))
    order = series_order(df.loc[has_t, "series"], control)
    pal = resolve_palette(palette, series_order(df["series"], control), control)
    left_out = [s for s in series_order(df["series"], control) if s not in order]
    fig, axes = new_figure(1, max(len(order), 1), width=8.0, height=2.6)
    n_fail = 0
    for ax, name in zip(axes[:, 0], order or [None], strict=False):
        if name is None:
            no_data(ax, "no request with a send time")
            continue
        sub = df[(df["series"] == name) & has_t].copy()
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
        ax.legend(fontsize="x-small", loc="lower right")
    fig.suptitle("Request timeline per series")
    caption = (
        "Did requests overlap or queue? Each bar is one request from send to end of stream; "
        "launches of a series are stacked (grey lines). Overlaps show concurrency, bars that "
        "start together but end staggered show queueing."
        + (f" {n_fail} failed request(s) marked ×." if n_fail else "")
        + (f" No panel for {', '.join(left_out)}: no request was sent." if left_out else "")
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
    """Per-request TPOT in time order, one panel per replicate block, one colour per arm.

    A line joins only requests of one arm sent one after the other in one launch: where the
    other arms ran in between (the interleaved design's slots) or a new launch began, the
    line breaks. Only positive TPOTs are drawn: a TPOT of 0 (every token read at once) is
    no speed level; the caption says how many were left out. ``drift`` is
    :func:`speclib.analysis.health.drift.drift_table`; a launch with a significant change point gets
    a dotted vertical line at the shift. ``sentence`` (from
    :func:`speclib.analysis.health.drift.drift_sentence`) names the shifts and whether the design
    cancelled them.
    """
    require_columns(df, ["series", "t_start", "tpot_s", "replicate"], "plot_drift")
    d = measured(df)
    tpot = pd.to_numeric(d["tpot_s"], errors="coerce").astype(float)
    n_nonpositive = int((np.isfinite(tpot) & (tpot <= 0)).sum())
    d = d[np.isfinite(tpot) & (tpot > 0)]
    d = d[np.isfinite(pd.to_numeric(d["t_start"], errors="coerce").astype(float))]
    level = d["level"] if "level" in d.columns else pd.Series(0, index=d.index)
    names = [
        f"r{r}" + (f"/l{lv}" if lv else "") for r, lv in zip(d["replicate"], level, strict=True)
    ]
    d = d.assign(
        _block=names,
        _t=pd.to_numeric(d["t_start"]).astype(float),
        _ms=pd.to_numeric(d["tpot_s"]).astype(float) * 1e3,
        _launch=d["launch_id"].astype(str) if "launch_id" in d.columns else "",
    )
    blocks = list(dict.fromkeys(d.sort_values(["replicate", "_t"])["_block"]))
    order = series_order(d["series"], control)
    pal = resolve_palette(palette, order, control)
    fig, axes = new_figure(1, max(len(blocks), 1), width=8.0, height=2.4)
    for ax, block in zip(axes[:, 0], blocks or [None], strict=False):
        if block is None:
            no_data(ax, "no positive TPOT")
            continue
        sub = d[d["_block"] == block].sort_values("_t", kind="stable")
        key = sub["series"].astype(str) + "\0" + sub["_launch"]
        sub = sub.assign(_run=(key != key.shift()).cumsum(), _x=sub["_t"] - sub["_t"].min())
        for name in order:
            s = sub[sub["series"] == name]
            for i, (_, seg) in enumerate(s.groupby("_run", sort=True)):
                ax.plot(
                    seg["_x"],
                    seg["_ms"],
                    marker=".",
                    lw=1,
                    color=pal[name],
                    label=name if i == 0 else None,
                )
            hit = drift[(drift["arm"] == name) & (drift["block"] == block)] if len(drift) else drift
            if len(hit) and bool(hit.iloc[0]["shift"]) and hit.iloc[0]["at_request"] is not None:
                at, x = int(hit.iloc[0]["at_request"]), s["_x"].to_numpy(float)
                if 0 < at < len(x):
                    ax.axvline(x[at], color=pal[name], ls=":", lw=1.2)  # first after the shift
        ax.set_title(f"block {block}", fontsize=9, loc="left")
        ax.set_ylabel("TPOT (ms)")
    if blocks:
        handles, labels = axes[0, 0].get_legend_handles_labels()
        for ax in axes[1:, 0]:  # an arm may appear in a later block only
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles, labels = [*handles, h], [*labels, lab]
        fig.legend(handles, labels, title="arm", fontsize="small", loc="outside right upper")
    axes[-1, 0].set_xlabel("time since the block's first measured request (s)")
    fig.suptitle("TPOT over time, per block and arm (drift diagnostics)")
    dropped = (
        f" {n_nonpositive} request(s) with a TPOT of 0 or less (all tokens read at once) are "
        "left out: they measure the read, not the server's speed."
        if n_nonpositive
        else ""
    )
    caption = (
        "Did the machine's speed shift during the run, and did the design cancel it? "
        "Per-request TPOT in send order; a line joins requests of one arm sent back to back "
        "and breaks where other arms ran. Dotted lines mark a regime shift found by Pettitt's "
        "change-point test in that launch. In the interleaved design the arms alternate, so "
        f"a shift of the machine hits every arm at once and cancels in the pairs. {sentence}"
        + dropped
    )
    return FigureWithCaption(fig, caption)
