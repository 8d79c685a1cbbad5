"""Figures of what speculation gains and costs: acceptance, load, memory, sampling.

Acceptance from the ``/metrics`` counters (:class:`~speclib.core.prometheus.SpecCounters`),
tokens per decode step against speed-up per prompt (every step, drafted or not), the paired
ratio with its CI at each concurrency level, server memory over time, and the sampling
check's per-output log-probabilities. Each function returns a captioned figure; statistics
come in, they are drawn, not recomputed (a prompt's steps are read by
:mod:`speclib.analysis.speculation.drafting`).
Each figure is one piece of one concept, what speculation gains or costs; the load figure
carries its own log ratio axis and break-even marks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns

from speclib.analysis.speculation.drafting import request_drafting
from speclib.core.prometheus import SpecCounters
from speclib.report.figure_base import (
    METRIC_UNITS,
    FigureWithCaption,
    measured,
    new_figure,
    no_data,
    require_columns,
    resolve_palette,
    series_order,
)
from speclib.report.request_figures import paired_prompt_ratios

__all__ = [
    "plot_acceptance",
    "plot_acceptance_vs_speedup",
    "plot_memory",
    "plot_output_logprob",
    "plot_speedup_vs_load",
]


def plot_acceptance(
    counters: SpecCounters | Mapping[str, SpecCounters],
    *,
    palette: Mapping[str, str] | None = None,
    control: str = "control",
) -> FigureWithCaption:
    """Accepted drafts per verify step (histogram) and acceptance by draft position.

    Both panels come from the ``/metrics`` deltas: the histogram is rebuilt from the
    per-position counters (:attr:`SpecCounters.histogram`).
    """
    by_series = {"experiment": counters} if isinstance(counters, SpecCounters) else dict(counters)
    order = series_order(list(by_series), control)
    pal = resolve_palette(palette, order, control)
    fig, axes = new_figure(2, width=5.2)
    ax_h, ax_p = axes[0]
    with_data = [s for s in order if by_series[s].histogram is not None]
    width = 0.8 / max(len(with_data), 1)
    notes: list[str] = []
    for name in order:
        sc = by_series[name]
        hist, rates = sc.histogram, sc.per_position_rate
        if sc.num_drafts > 0 and not sc.accepted_per_pos:
            notes.append(
                f"{name}: rate {sc.acceptance_rate or 0:.2f}, mean length "
                f"{sc.mean_acceptance_length:.2f} (no per-position counters in /metrics)"
            )
            continue
        if hist is None or rates is None:
            notes.append(f"{name}: no drafts proposed")
            continue
        share = np.asarray(hist, dtype=float) / max(sc.num_drafts, 1)
        j = np.arange(len(hist))
        ax_h.bar(
            j + (with_data.index(name) - (len(with_data) - 1) / 2) * width,
            share,
            width=width,
            color=pal[name],
            label=name,
        )
        ax_p.plot(np.arange(1, len(rates) + 1), rates, marker="o", color=pal[name], label=name)
        rate = sc.acceptance_rate
        notes.append(
            f"{name}: rate {rate:.2f}, mean length {sc.mean_acceptance_length:.2f}"
            if rate is not None
            else f"{name}: mean length {sc.mean_acceptance_length:.2f}"
        )
    if not with_data:
        drafted = any(by_series[s].num_drafts > 0 for s in order)
        message = "no per-position counters in /metrics" if drafted else "no drafts proposed"
        no_data(ax_h, message)
        no_data(ax_p, message)
    else:
        ax_h.set_xticks(range(max(len(by_series[s].histogram or ()) for s in with_data)))
        ax_h.legend(title="series", fontsize="small")
        ax_p.set_xticks(range(1, max(len(by_series[s].accepted_per_pos) for s in with_data) + 1))
        ax_p.set_ylim(0, 1.02)
        ax_p.legend(title="series", fontsize="small")
    ax_h.set_xlabel("draft tokens accepted in a verify step (count)")
    ax_h.set_ylabel("share of verify steps")
    ax_h.set_title("Accepted drafts per step")
    ax_p.set_xlabel("draft position (1 = first draft token)")
    ax_p.set_ylabel("share of steps accepting this position")
    ax_p.set_title("Acceptance by draft position")
    fig.suptitle("Speculative acceptance (server counters)")
    caption = (
        "How often are drafts accepted, and at which position? Left: share of verify steps "
        "that accepted j draft tokens (a streamed chunk then carries j + 1 tokens, so the "
        "time between chunks is not TPOT); right: share of steps whose draft at each position "
        "was accepted (drops with position). " + "; ".join(notes) + "."
    )
    return FigureWithCaption(fig, caption)


def _prompt_steps(sub: pd.DataFrame) -> pd.DataFrame:
    """Per prompt of one series: tokens per decode step from the streams (every step,
    drafted or not) and whether any of its requests got drafts
    (:func:`speclib.analysis.speculation.drafting.request_drafting`)."""
    specs = sub["spec"] if "spec" in sub else [None] * len(sub)
    rows = []
    for pid, chunks, spec in zip(sub["prompt_id"], sub["chunk_tokens"], specs, strict=True):
        if not isinstance(chunks, list | tuple | np.ndarray):
            continue
        r = request_drafting(chunks, spec if isinstance(spec, dict) else None)
        rows.append((pid, r.decode_steps, r.stream_accepted, r.drafted))
    frame = pd.DataFrame(rows, columns=["prompt_id", "steps", "accepted", "drafted"])
    out = frame.groupby("prompt_id").agg(
        steps=("steps", "sum"), accepted=("accepted", "sum"), drafted=("drafted", "any")
    )
    out = out[out["steps"] > 0]
    return out.assign(tokens_per_step=(out["steps"] + out["accepted"]) / out["steps"])


def plot_acceptance_vs_speedup(
    df: pd.DataFrame,
    *,
    control: str = "control",
    experiments: Sequence[str] | None = None,
    metric: str = "tpot_s",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Per prompt: tokens per decode step from the stream (x; every step, drafted or not)
    against speed-up control / experiment (y); prompts that got no draft marked ×."""
    require_columns(
        df, ["series", "prompt_id", "chunk_tokens", metric], "plot_acceptance_vs_speedup"
    )
    names = [s for s in series_order(df["series"], control) if s != control]
    if experiments is not None:
        names = [s for s in names if s in set(experiments)]
    pal = resolve_palette(palette, [control, *names], control)
    label = METRIC_UNITS.get(metric, (metric, "", 1.0))[0]
    data = measured(df)
    if "ok" in data:
        data = data[data["ok"].astype(bool)]
    fig, axes = new_figure(width=6.4)
    ax = axes[0, 0]
    ax.axhline(1.0, color="0.2", lw=1, ls="--")
    n_points, n_nodraft = 0, 0
    for name in names:
        steps = _prompt_steps(data[data["series"] == name])
        if steps.empty or not steps["drafted"].any():
            continue  # a plain server (the A/A arm) or nothing streamed: no point, no legend
        ratios = paired_prompt_ratios(df, experiment=name, control=control, metric=metric)
        if ratios.empty:
            continue
        x = ratios["prompt_id"].map(steps["tokens_per_step"]).astype(float)
        drafted = ratios["prompt_id"].map(steps["drafted"]).fillna(False).astype(bool)
        keep = np.isfinite(x)
        y = 1.0 / ratios["ratio"]
        yes, no = keep & drafted, keep & ~drafted
        n_points += int(keep.sum())
        n_nodraft += int(no.sum())
        ax.scatter(x[yes], y[yes], color=pal[name], s=26, label=name)
        if no.any():
            ax.scatter(x[no], y[no], color=pal[name], s=40, marker="x", label=f"{name}: no draft")
    if n_points == 0:
        no_data(ax, "no speculative prompt with both a speed-up and a stream")
    else:
        ax.legend(title="series", fontsize="small")
    ax.set_xlabel("tokens per decode step of the prompt (stream; every step, drafted or not)")
    ax.set_ylabel(f"{label} speed-up ({control} / experiment, ×)")
    ax.set_title("Tokens per step vs speed-up per prompt")
    caption = (
        "Does a prompt's speed-up follow what its steps yield? "
        f"Each point is one prompt of one speculative series (n={n_points}): the tokens its "
        "decode steps carried on average, read from the stream (1 where no draft was "
        f"accepted), against its {label} speed-up over {control}; above the dashed line "
        "speculation wins."
        + (
            f" × marks the {n_nodraft} prompt(s) that got no draft at all: vLLM's acceptance "
            "counters do not see their steps."
            if n_nodraft
            else ""
        )
    )
    return FigureWithCaption(fig, caption)


def plot_memory(
    samples: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Server resident memory over time per series (one line per launch if ``launch_id``).

    The y axis spans the data, not 0 to the peak: servers of one model differ by a few
    per cent, which an axis from 0 flattens; the caption names where the axis starts.
    """
    require_columns(samples, ["series", "t", "rss_bytes"], "plot_memory")
    rss_all = pd.to_numeric(samples["rss_bytes"], errors="coerce").astype(float)
    data = samples[np.isfinite(rss_all)]
    order = series_order(data["series"], control)
    pal = resolve_palette(palette, series_order(samples["series"], control), control)
    fig, axes = new_figure(width=7.0)
    ax = axes[0, 0]
    peaks: list[str] = []
    top = rss_all[np.isfinite(rss_all)].max() if len(data) else np.nan
    unit, scale = ("GiB", 2**30) if not np.isfinite(top) or top >= 2**30 else ("MiB", 2**20)
    fmt = "{:.2f}" if unit == "GiB" else "{:.0f}"
    for name in order:
        sub = data[data["series"] == name]
        groups = sub.groupby(sub["launch_id"].astype(str)) if "launch_id" in sub else [("", sub)]
        peak = 0.0
        for i, (_, g) in enumerate(groups):
            t = pd.to_numeric(g["t"], errors="coerce").to_numpy(dtype=float)
            rss = pd.to_numeric(g["rss_bytes"], errors="coerce").to_numpy(dtype=float) / scale
            idx = np.argsort(t)
            ax.plot(
                t[idx] - np.nanmin(t),
                rss[idx],
                color=pal[name],
                lw=1.3,
                label=name if i == 0 else None,
            )
            peak = max(peak, float(np.nanmax(rss)) if len(rss) else 0.0)
        peaks.append(f"{name} {fmt.format(peak)} {unit}")
    baseline = ""
    if order:
        lo, hi = float(data["rss_bytes"].min()) / scale, float(data["rss_bytes"].max()) / scale
        pad = max((hi - lo) * 0.15, hi * 0.01)
        bottom = max(lo - pad, 0.0)
        ax.set_ylim(bottom, hi + pad)
        baseline = f" The axis starts at {fmt.format(bottom)} {unit}, not 0."
        ax.legend(title="series", fontsize="small")
    else:
        no_data(ax)
    ax.set_xlabel("time since the launch's first sample (s)")
    ax.set_ylabel(f"resident memory ({unit})")
    ax.set_title("Server memory over time")
    caption = (
        "How much memory does each arm's server take? Resident set size of the server process "
        "tree, sampled over each launch; peak: "
        + (", ".join(peaks) or "no samples")
        + "."
        + baseline
    )
    return FigureWithCaption(fig, caption)


def plot_speedup_vs_load(
    frame: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
    ylabel: str = "TPOT ratio experiment / control (unitless)",
    margin: float | None = None,
    break_evens: Sequence[Any] = (),
) -> FigureWithCaption:
    """Paired ratio with its CI against the concurrency level, one line per series.

    ``frame`` has one row per (series, concurrency) with columns ``series``,
    ``concurrency``, ``estimate``, ``ci_low`` and ``ci_high`` (ratios experiment / control,
    as :func:`speclib.analysis.stats.paired.paired_ratio_ci` gives them). With ``margin`` the ±δ
    band is shaded; each of ``break_evens`` (:class:`~speclib.analysis.load.breakeven.BreakEven`
    on the concurrency axis) marks its break-even (dotted line) and its interval (a bar
    on the no-change line, an arrow where it is open).
    """
    require_columns(
        frame, ["series", "concurrency", "estimate", "ci_low", "ci_high"], "plot_speedup_vs_load"
    )
    order = [s for s in series_order(frame["series"], control) if s != control]
    pal = resolve_palette(palette, [control, *order], control)
    fig, axes = new_figure(width=6.4)
    ax = axes[0, 0]
    ax.axhline(1.0, color="0.2", lw=1, ls="--", label="no change")
    if margin:
        ax.axhspan(1 - margin, 1 + margin, color="0.85", alpha=0.5, lw=0, label=f"±δ ({margin:g})")
    levels: set[int] = set()
    lo_all, hi_all = [1.0], [1.0]
    for name in order:
        sub = frame[frame["series"] == name].sort_values("concurrency")
        x = pd.to_numeric(sub["concurrency"]).to_numpy(dtype=float)
        est = pd.to_numeric(sub["estimate"]).to_numpy(dtype=float)
        lo = pd.to_numeric(sub["ci_low"]).to_numpy(dtype=float)
        hi = pd.to_numeric(sub["ci_high"]).to_numpy(dtype=float)
        ax.fill_between(x, lo, hi, color=pal[name], alpha=0.18, lw=0)
        ax.errorbar(
            x, est, yerr=[est - lo, hi - est], color=pal[name], marker="o", capsize=3, label=name
        )
        levels.update(int(v) for v in x)
        lo_all += [v for v in (*lo, *est) if np.isfinite(v) and v > 0]
        hi_all += [v for v in (*hi, *est) if np.isfinite(v) and v > 0]
    marked = _mark_break_evens(ax, break_evens, pal, levels)
    cut = False
    if levels:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(levels), [str(v) for v in sorted(levels)])
        cut = _ratio_axis(ax, min(lo_all), max(hi_all))
        ax.legend(title="series", fontsize="small")
    else:
        no_data(ax)
    ax.set_xlabel("concurrent requests (count)")
    ax.set_ylabel(ylabel)
    ax.set_title("Speculation under load")
    caption = (
        "Does the speed-up hold as the load rises? "
        "Paired ratio experiment / control at each concurrency level with its confidence "
        "interval (band and bars), on a log scale (×2 and ÷2 are the same distance); below the "
        "dashed line the experiment is faster."
    )
    if margin:
        caption += " The grey band is ±δ: inside it a change is too small to count."
    if marked:
        caption += (
            " A dotted vertical line marks an arm's break-even (its ratio reaching 1, "
            "interpolated between levels), the bar at the bottom its interval (an arrow: "
            "open beyond the measured range): " + "; ".join(marked) + "."
        )
    if cut:
        caption += (
            f" Intervals wider than {1 / _RATIO_SPAN:g}–{_RATIO_SPAN:g} are cut at the edge "
            "(their bounds are in the verdict table): too few launches or prompts to bound them."
        )
    return FigureWithCaption(fig, caption)


def _mark_break_evens(
    ax: Any, break_evens: Sequence[Any], pal: Mapping[str, str], levels: set[int]
) -> list[str]:
    """Draw each break-even on the concurrency axis (a dotted line at the estimate, its
    interval as a bar near the bottom, one row per arm); return its text per arm."""
    from matplotlib.transforms import blended_transform_factory

    along = blended_transform_factory(ax.transData, ax.transAxes)
    out = []
    for row, be in enumerate(b for b in break_evens if b.axis == "concurrency"):
        if be.series not in pal:
            continue
        out.append(be.text)
        colour = pal[be.series]
        if be.estimate is not None:
            ax.axvline(be.estimate, color=colour, lw=1.2, ls=":")
        lo = be.loads[0] if be.low_open else be.low
        hi = be.loads[-1] if be.high_open else be.high
        if lo is None or hi is None:
            continue
        y = 0.05 + 0.045 * row
        ax.plot([lo, hi], [y, y], color=colour, lw=4, alpha=0.7, solid_capstyle="butt",
                transform=along)  # fmt: skip
        if be.high_open:
            ax.annotate("", xy=(hi * 1.3, y), xytext=(hi, y), xycoords=along,
                        arrowprops={"arrowstyle": "->", "color": colour})  # fmt: skip
        if be.low_open:
            ax.annotate("", xy=(lo / 1.3, y), xytext=(lo, y), xycoords=along,
                        arrowprops={"arrowstyle": "->", "color": colour})  # fmt: skip
        levels.update(int(v) for v in be.loads)
    return out


_RATIO_SPAN = 4.0  # the load figure shows ratios within [1/4, 4]


def _ratio_axis(ax: Any, low: float, high: float) -> bool:
    """Log y axis around 1 that holds ``[low, high]`` up to ±``_RATIO_SPAN``; True if cut."""
    from matplotlib.ticker import FixedLocator, NullLocator

    bottom = max(low / 1.1, 1 / _RATIO_SPAN)
    top = min(high * 1.1, _RATIO_SPAN)
    ax.set_yscale("log")
    ax.set_ylim(bottom, top)
    grid = (0.25, 0.33, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0)
    ticks = [t for t in grid if bottom <= t <= top]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    return low < 1 / _RATIO_SPAN or high > _RATIO_SPAN


def plot_output_logprob(
    scores: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
    threshold: float | None = None,
) -> FigureWithCaption:
    """Per-output mean log-probability under the target (served without speculation).

    ``scores`` has one row per scored output with columns ``series`` and ``mean_logprob``
    (nats/token). A correct speculative sampler leaves the output distribution unchanged, so
    each series' cloud should sit where the control's does; ``threshold`` (the degenerate
    cut-off) is drawn when given.
    """
    require_columns(scores, ["series", "mean_logprob"], "plot_output_logprob")
    data = scores.assign(_v=pd.to_numeric(scores["mean_logprob"], errors="coerce"))
    data = data[np.isfinite(data["_v"].astype(float))]
    order = series_order(data["series"], control)
    pal = resolve_palette(palette, order, control)
    fig, axes = new_figure(width=6.4)
    ax = axes[0, 0]
    if data.empty:
        no_data(ax)
    else:
        sns.stripplot(
            data=data,
            x="_v",
            y="series",
            hue="series",
            order=order,
            palette=pal,
            ax=ax,
            legend=False,
            size=4,
            jitter=0.25,
        )
        sns.boxplot(
            data=data,
            x="_v",
            y="series",
            order=order,
            ax=ax,
            showfliers=False,
            boxprops={"facecolor": "none"},
            whis=(5, 95),
        )
        if threshold is not None:
            ax.axvline(threshold, color="0.2", ls="--", lw=1, label="degenerate below")
            ax.legend(fontsize="small", loc="lower left")
    ax.set_xlabel("mean log-probability per output token under the target (nats/token)")
    ax.set_ylabel("series")
    ax.set_title("Sampling check: are outputs as likely as the control's?")
    caption = (
        "Does speculation change what the model samples? "
        "Each dot is one output scored by the target without speculation; a series far left "
        "of the control produces text the target finds implausible (broken sampling), "
        "whatever its speed."
    )
    return FigureWithCaption(fig, caption)
