"""Figures of how the requests streamed and when they ran: chunks, the timeline, drift.

Each function takes the per-request DataFrame (:data:`~speclib.report.figure_base.RECORD_COLUMNS`)
and returns a captioned figure: tokens per streamed chunk, the request timeline
(:func:`requests_overlap` tells whether it has anything to show beyond the send order), and
TPOT over time per block for the drift diagnostics. They show the course of the run, not
its outcome (the latency and paired-ratio figures are in :mod:`speclib.report.request_figures`).
Nothing is computed here beyond grouping and plotting: chunk sizes come from
:mod:`speclib.analysis.speculation.chunks`, change points from :mod:`speclib.analysis.health.drift`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from speclib.analysis.speculation.chunks import tokens_per_chunk_distribution
from speclib.report.figure_base import (
    ERROR_COLOR,
    FigureWithCaption,
    measured,
    new_figure,
    no_data,
    require_columns,
    resolve_palette,
    series_order,
)

__all__ = ["plot_drift", "plot_timeline", "plot_tokens_per_chunk", "requests_overlap"]


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
