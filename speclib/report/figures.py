"""Report figures: one function per figure, each returning a captioned matplotlib Figure.

Every function takes tidy data (a pandas DataFrame with one row per request, or a small
result object) and returns a :class:`FigureWithCaption`: the figure, with a title and axis
units, and a one-line caption that says what is drawn and how to read it. Nothing is
computed here beyond grouping and plotting: statistics come in from :mod:`speclib.analysis.stats`,
counters from :mod:`speclib.core.prometheus`, chunk sizes via :mod:`speclib.analysis.specdecode`.

Figures are built on :class:`matplotlib.figure.Figure` and rendered with Agg; pyplot's
global state is never touched (no ``plt.show``, no backend switch, no figure leak), so the
functions are safe in notebooks, tests and worker processes alike. Colours come from
seaborn's colour-blind-safe palette through :func:`series_palette`, which gives the control
the neutral grey and every other series a fixed colour, so a series looks the same in every
figure when the palette is computed once and passed to each function.

The per-request DataFrame has the columns listed in :data:`RECORD_COLUMNS`; each function
checks only the ones it needs and names any that are missing.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from speclib.analysis.specdecode import tokens_per_chunk_distribution
from speclib.core.prometheus import SpecCounters

__all__ = [
    "RECORD_COLUMNS",
    "FigureWithCaption",
    "paired_prompt_ratios",
    "plot_acceptance",
    "plot_acceptance_vs_speedup",
    "plot_latency_ecdf",
    "plot_memory",
    "plot_paired_ratio",
    "plot_speedup_vs_load",
    "plot_timeline",
    "plot_tokens_per_chunk",
    "series_palette",
]

RECORD_COLUMNS = (
    "series",
    "replicate",
    "launch_id",
    "prompt_id",
    "repeat",
    "category",
    "phase",
    "ok",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "output_tokens",
    "t_start",
    "chunk_tokens",
    "spec_rate",
    "spec_mean_len",
)
"""Columns of the per-request DataFrame (one row per request record)."""

_COLORBLIND = sns.color_palette("colorblind").as_hex()
_NEUTRAL = _COLORBLIND[7]  # grey: reserved for the control
_OTHERS = [c for i, c in enumerate(_COLORBLIND) if i != 7]
_ERROR = _COLORBLIND[3]  # vermilion

_HTML_DPI = 150  # PNG resolution in HTML (displayed at 100 px per figure inch)

_UNITS = {
    "ttft_s": ("TTFT", "ms", 1e3),
    "tpot_s": ("TPOT", "ms", 1e3),
    "e2e_s": ("End-to-end latency", "s", 1.0),
}


@dataclass(frozen=True)
class FigureWithCaption:
    """A figure and its one-line caption; unpacks as ``fig, caption = ...``."""

    figure: Figure
    caption: str

    def __iter__(self) -> Iterator[Any]:
        yield self.figure
        yield self.caption

    def to_png(self, *, dpi: int = 100) -> bytes:
        """The figure as PNG bytes (rendered in memory with Agg)."""
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()

    @property
    def title(self) -> str:
        """The figure's title (its suptitle, else the first axes title)."""
        sup = self.figure.get_suptitle()
        if sup:
            return sup
        titles = [
            t for ax in self.figure.get_axes() for t in (ax.get_title(), ax.get_title("left"))
        ]
        return next((t for t in titles if t), "")

    def to_html(self, *, dpi: int = _HTML_DPI) -> str:
        """``<figure>`` with the PNG embedded and the caption below it.

        The PNG is rendered at ``dpi`` but displayed at 100 px per figure inch (never wider
        than its container), so it stays sharp on high-density screens and in print.
        """
        data = base64.b64encode(self.to_png(dpi=dpi)).decode("ascii")
        width = round(self.figure.get_figwidth() * 100)
        alt = html.escape(f"{self.title}. {self.caption}", quote=True)
        return (
            f'<figure><img src="data:image/png;base64,{data}" '
            f'alt="{alt}" width="{width}" style="max-width:100%;height:auto"/>'
            f"<figcaption>{html.escape(self.caption)}</figcaption></figure>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()


# --------------------------------------------------------------------------- helpers


def series_palette(names: Sequence[str], *, control: str = "control") -> dict[str, str]:
    """Colour per series: the control grey, the others colour-blind-safe colours in order.

    Compute it once from *all* series names of a report and pass it to every figure, so a
    series keeps its colour even in figures that show only some series. Colours repeat
    after nine non-control series.
    """
    out: dict[str, str] = {}
    i = 0
    for name in dict.fromkeys(names):
        if name == control:
            out[name] = _NEUTRAL
        else:
            out[name] = _OTHERS[i % len(_OTHERS)]
            i += 1
    out.setdefault(control, _NEUTRAL)
    return out


def _require(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: DataFrame lacks column(s) {missing} (has {list(df.columns)})")


def _series_order(names: Sequence[str], control: str) -> list[str]:
    uniq = list(dict.fromkeys(str(n) for n in names))
    return ([control] if control in uniq else []) + [n for n in uniq if n != control]


def _palette(
    palette: Mapping[str, str] | None, names: Sequence[str], control: str
) -> dict[str, str]:
    base = series_palette(_series_order(names, control), control=control)
    if palette:
        base.update(palette)
    return base


def _measured(df: pd.DataFrame) -> pd.DataFrame:
    """Successful requests of the measured phase (warm-up and failures excluded)."""
    keep = pd.Series(True, index=df.index)
    if "phase" in df.columns:
        keep &= df["phase"].astype(str) == "measure"
    if "ok" in df.columns:
        keep &= df["ok"].fillna(False).astype(bool)
    return df.loc[keep]


def _figure(ncols: int = 1, nrows: int = 1, *, width: float = 6.4, height: float = 4.0):
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _no_data(ax: Axes, message: str = "no data") -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _finite(values: pd.Series) -> pd.Series:
    out = pd.to_numeric(values, errors="coerce").astype(float)
    return out[np.isfinite(out)]


# --------------------------------------------------------------------------- latency


def plot_latency_ecdf(
    df: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
    metrics: Sequence[str] = ("ttft_s", "tpot_s", "e2e_s"),
) -> FigureWithCaption:
    """ECDF of TTFT, TPOT and end-to-end latency per series (successful measured requests)."""
    unknown = [m for m in metrics if m not in _UNITS]
    if unknown:
        raise ValueError(f"`metrics` must be among {list(_UNITS)} (got {unknown})")
    _require(df, ["series", *metrics], "plot_latency_ecdf")
    data = _measured(df)
    order = _series_order(df["series"], control)
    pal = _palette(palette, order, control)
    fig, axes = _figure(len(metrics), width=3.9)
    counts = data.groupby("series").size()
    for ax, metric in zip(axes[0], metrics, strict=True):
        label, unit, scale = _UNITS[metric]
        drawn = False
        for name in order:
            vals = _finite(data.loc[data["series"] == name, metric]) * scale
            if vals.empty:
                continue
            sns.ecdfplot(x=vals.to_numpy(), ax=ax, color=pal[name], label=name)
            drawn = True
        if not drawn:
            _no_data(ax)
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

    Uses successful measured requests, pooled over replicates and repeats. Prompts missing
    from either series are dropped. Columns: ``prompt_id``, ``category`` (when present),
    ``control``, ``experiment``, ``ratio``; sorted by ratio.
    """
    _require(df, ["series", "prompt_id", metric], "paired_prompt_ratios")
    data = _measured(df)
    data = data.assign(_v=pd.to_numeric(data[metric], errors="coerce").astype(float))
    data = data[np.isfinite(data["_v"]) & (data["_v"] > 0)]
    cols = ["prompt_id", "category", "control", "experiment", "ratio"]
    present = set(data["series"].astype(str))
    if control not in present or experiment not in present or control == experiment:
        return pd.DataFrame(columns=cols)
    table = data.groupby(["prompt_id", "series"])["_v"].median().unstack("series")
    out = table[[control, experiment]].dropna()
    out.columns = ["control", "experiment"]
    out["ratio"] = out["experiment"] / out["control"]
    out = out.reset_index(names="prompt_id")
    if "category" in data.columns:
        cats = data.drop_duplicates("prompt_id").set_index("prompt_id")["category"]
        out["category"] = out["prompt_id"].map(cats)
    else:
        out["category"] = None
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
    if not (0 < lo <= hi):
        raise ValueError(f"`ci` must be (low, high) with 0 < low <= high (got {ci!r})")
    ratios = paired_prompt_ratios(df, experiment=experiment, control=control, metric=metric)
    pal = _palette(palette, [control, experiment], control)
    label = _UNITS.get(metric, (metric, "", 1.0))[0]
    fig, axes = _figure(width=7.5)
    ax = axes[0, 0]
    ax.axhspan(lo, hi, color=pal[experiment], alpha=0.18, lw=0, label=f"CI [{lo:.3f}, {hi:.3f}]")
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
        f"(n={len(ratios)} prompts); below 1 means {experiment} is faster. Band: "
        f"{est}{level}confidence interval [{lo:.3f}, {hi:.3f}] of the paired ratio."
    )
    return FigureWithCaption(fig, caption)


# --------------------------------------------------------------------------- acceptance


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
    order = _series_order(list(by_series), control)
    pal = _palette(palette, order, control)
    fig, axes = _figure(2, width=5.2)
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
        _no_data(ax_h, message)
        _no_data(ax_p, message)
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
        "Left: share of verify steps that accepted j draft tokens; right: share of steps "
        "whose draft at each position was accepted (drops with position). " + "; ".join(notes) + "."
    )
    return FigureWithCaption(fig, caption)


def plot_acceptance_vs_speedup(
    df: pd.DataFrame,
    *,
    control: str = "control",
    experiments: Sequence[str] | None = None,
    metric: str = "tpot_s",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Per prompt: mean draft acceptance rate (x) against speed-up control / experiment (y)."""
    _require(df, ["series", "prompt_id", "spec_rate", metric], "plot_acceptance_vs_speedup")
    names = [s for s in _series_order(df["series"], control) if s != control]
    if experiments is not None:
        names = [s for s in names if s in set(experiments)]
    pal = _palette(palette, [control, *names], control)
    label = _UNITS.get(metric, (metric, "", 1.0))[0]
    data = _measured(df)
    fig, axes = _figure(width=6.4)
    ax = axes[0, 0]
    ax.axhline(1.0, color="0.2", lw=1, ls="--")
    n_points, n_nodraft = 0, 0
    for name in names:
        ratios = paired_prompt_ratios(df, experiment=name, control=control, metric=metric)
        if ratios.empty:
            continue
        sub = data[data["series"] == name]
        rate = (
            sub.assign(_r=pd.to_numeric(sub["spec_rate"], errors="coerce").astype(float))
            .groupby("prompt_id")["_r"]
            .mean()
        )
        x = ratios["prompt_id"].map(rate)
        keep = np.isfinite(x.astype(float))
        n_nodraft += int((~keep).sum())
        n_points += int(keep.sum())
        ax.scatter(x[keep], 1.0 / ratios["ratio"][keep], color=pal[name], s=26, label=name)
    if n_points == 0:
        _no_data(ax, "no prompt with both a speed-up and an acceptance rate")
    else:
        ax.legend(title="series", fontsize="small")
        ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("mean draft acceptance rate of the prompt (accepted / proposed)")
    ax.set_ylabel(f"{label} speed-up ({control} / experiment, ×)")
    ax.set_title("Acceptance vs speed-up per prompt")
    caption = (
        f"Each point is one prompt of one series (n={n_points}): its mean per-request "
        f"acceptance rate against its "
        f"{label} speed-up over {control}; above the dashed line speculation wins."
        + (f" {n_nodraft} prompt(s) with no drafts proposed are not drawn." if n_nodraft else "")
    )
    return FigureWithCaption(fig, caption)


# --------------------------------------------------------------------------- stream shape


def plot_tokens_per_chunk(
    df: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Share of streamed chunks by the number of tokens they carried, per series."""
    _require(df, ["series", "chunk_tokens"], "plot_tokens_per_chunk")
    data = _measured(df)
    order = _series_order(df["series"], control)
    pal = _palette(palette, order, control)
    dists = {
        s: tokens_per_chunk_distribution(
            c if isinstance(c, list | tuple | np.ndarray) else ()
            for c in data.loc[data["series"] == s, "chunk_tokens"]
        )
        for s in order
    }
    shown = [s for s in order if dists[s].n_chunks]
    fig, axes = _figure(width=6.4)
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
        _no_data(ax)
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
    _require(df, ["series", "t_start", "e2e_s"], "plot_timeline")
    order = _series_order(df["series"], control)
    pal = _palette(palette, order, control)
    fig, axes = _figure(1, max(len(order), 1), width=8.0, height=2.6)
    n_fail = 0
    for ax, name in zip(axes[:, 0], order or [None], strict=False):
        if name is None:
            _no_data(ax)
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
            ax.scatter(rel[failed], y[failed], marker="x", color=_ERROR, zorder=3, label="failed")
        bounds = np.flatnonzero(sub["_launch"].to_numpy()[1:] != sub["_launch"].to_numpy()[:-1])
        for b in bounds:
            ax.axhline(b + 0.5, color="0.5", lw=0.6)
        ax.set_ylabel("request (by start)")
        ax.set_xlabel("time since the launch's first request (s)")
        ax.set_title(name, loc="left", color=pal[name])
        if len(sub):
            ax.legend(fontsize="x-small", loc="lower right")
        else:
            _no_data(ax)
    fig.suptitle("Request timeline per series")
    caption = (
        "Each bar is one request from send to end of stream; launches of a series are "
        "stacked (grey lines). Overlaps show concurrency, bars that start together but end "
        "staggered show queueing." + (f" {n_fail} failed request(s) marked ×." if n_fail else "")
    )
    return FigureWithCaption(fig, caption)


# --------------------------------------------------------------------------- resources, load


def plot_memory(
    samples: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
) -> FigureWithCaption:
    """Server resident memory over time per series (one line per launch if ``launch_id``)."""
    _require(samples, ["series", "t", "rss_bytes"], "plot_memory")
    order = _series_order(samples["series"], control)
    pal = _palette(palette, order, control)
    fig, axes = _figure(width=7.0)
    ax = axes[0, 0]
    peaks: list[str] = []
    top = pd.to_numeric(samples["rss_bytes"], errors="coerce").max()
    unit, scale = ("GiB", 2**30) if not np.isfinite(top) or top >= 2**30 else ("MiB", 2**20)
    for name in order:
        sub = samples[samples["series"] == name]
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
        peaks.append(f"{name} {peak:.2f} {unit}" if unit == "GiB" else f"{name} {peak:.0f} {unit}")
    if order:
        ax.legend(title="series", fontsize="small")
        ax.set_ylim(bottom=0)
    else:
        _no_data(ax)
    ax.set_xlabel("time since the launch's first sample (s)")
    ax.set_ylabel(f"resident memory ({unit})")
    ax.set_title("Server memory over time")
    caption = (
        "Resident set size of the server process tree, sampled over each launch; peak: "
        + (", ".join(peaks) or "no samples")
        + "."
    )
    return FigureWithCaption(fig, caption)


def plot_speedup_vs_load(
    frame: pd.DataFrame,
    *,
    control: str = "control",
    palette: Mapping[str, str] | None = None,
    ylabel: str = "TPOT ratio experiment / control (unitless)",
) -> FigureWithCaption:
    """Paired ratio with its CI against the concurrency level, one line per series.

    ``frame`` has one row per (series, concurrency) with columns ``series``,
    ``concurrency``, ``estimate``, ``ci_low`` and ``ci_high`` (ratios experiment / control,
    as :func:`speclib.analysis.stats.paired_ratio_ci` gives them).
    """
    _require(
        frame, ["series", "concurrency", "estimate", "ci_low", "ci_high"], "plot_speedup_vs_load"
    )
    order = [s for s in _series_order(frame["series"], control) if s != control]
    pal = _palette(palette, [control, *order], control)
    fig, axes = _figure(width=6.4)
    ax = axes[0, 0]
    ax.axhline(1.0, color="0.2", lw=1, ls="--", label="no change")
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
    cut = False
    if levels:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(levels), [str(v) for v in sorted(levels)])
        cut = _ratio_axis(ax, min(lo_all), max(hi_all))
        ax.legend(title="series", fontsize="small")
    else:
        _no_data(ax)
    ax.set_xlabel("concurrent requests (count)")
    ax.set_ylabel(ylabel)
    ax.set_title("Speculation under load")
    caption = (
        "Paired ratio experiment / control at each concurrency level with its confidence "
        "interval (band and bars), on a log scale (×2 and ÷2 are the same distance); below the "
        "dashed line the experiment is faster."
    )
    if cut:
        caption += (
            f" Intervals wider than {1 / _RATIO_SPAN:g}–{_RATIO_SPAN:g} are cut at the edge "
            "(their bounds are in the verdict table): too few launches or prompts to bound them."
        )
    return FigureWithCaption(fig, caption)


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
    _require(scores, ["series", "mean_logprob"], "plot_output_logprob")
    data = scores.assign(_v=pd.to_numeric(scores["mean_logprob"], errors="coerce"))
    data = data[np.isfinite(data["_v"].astype(float))]
    order = _series_order(data["series"], control)
    pal = _palette(palette, order, control)
    fig, axes = _figure(width=6.4)
    ax = axes[0, 0]
    if data.empty:
        _no_data(ax)
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
        "Each dot is one output scored by the target without speculation; a series far left "
        "of the control produces text the target finds implausible (broken sampling), "
        "whatever its speed."
    )
    return FigureWithCaption(fig, caption)
