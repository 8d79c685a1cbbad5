"""Unit tests of the report-figure fixes of issue #21 ("Figure defects", per-category figure).

Each test builds a small synthetic frame shaped like a real run (interleaved arms in slots,
concurrency 1, late reads with a TPOT of 0, memory at 2.7–3.0 GiB, an A/A arm without
drafts) and checks the drawn figure itself: its lines, points, legends, limits and caption.
Covers speclib.report.request_figures, .stream_figures, .spec_figures, .evidence and
speclib.analysis.health.drift.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from speclib.analysis.health.drift import drift_sentence, drift_table
from speclib.core.prometheus import SpecCounters
from speclib.report.evidence import chunk_figures, timeline_figures
from speclib.report.figure_base import FigureWithCaption
from speclib.report.request_figures import plot_latency_ecdf, plot_paired_ratio
from speclib.report.spec_figures import (
    plot_acceptance,
    plot_acceptance_vs_speedup,
    plot_memory,
    plot_output_logprob,
    plot_speedup_vs_load,
)
from speclib.report.stream_figures import (
    plot_drift,
    plot_timeline,
    plot_tokens_per_chunk,
    requests_overlap,
)

pytestmark = pytest.mark.unit

ARMS = ("control", "draft", "aa")
CATEGORIES = ("known", "repeat", "unseen")
SLOT = 3  # requests per arm before the next arm's turn (the interleaved design's slots)


def _run(*, concurrency_one: bool = True, zero_tpot: int = 0) -> pd.DataFrame:
    """One block r0 at c=1: arms take turns in slots of 3 prompts, 9 prompts per arm.

    ``zero_tpot`` requests of the draft arm (its last ones) read every token at once: TPOT 0.
    """
    rng = np.random.default_rng(3)
    speed = {"control": 1.0, "draft": 0.6, "aa": 1.0}
    prompts = [f"{c}-{i:03d}" for i in range(3) for c in CATEGORIES]
    rows, t = [], 1_700_000_000.0
    for start in range(0, len(prompts), SLOT):
        for arm in ARMS:
            for pid in prompts[start : start + SLOT]:
                cat = pid.split("-")[0]
                gain = 0.4 if (arm == "draft" and cat != "unseen") else 1.0
                tpot = 0.02 * (1.0 if arm != "draft" else speed[arm] / 0.6 * gain)
                tpot *= rng.uniform(0.95, 1.05)
                e2e = 0.05 + 31 * tpot
                rate = None if arm != "draft" else (0.8 if cat != "unseen" else 0.1)
                rows.append(
                    {
                        "series": arm,
                        "replicate": 0,
                        "level": 0,
                        "launch_id": f"{arm}-r0",
                        "prompt_id": pid,
                        "repeat": 0,
                        "category": cat,
                        "phase": "measure",
                        "ok": True,
                        "ttft_s": 0.05,
                        "tpot_s": tpot,
                        "e2e_s": e2e,
                        "output_tokens": 32,
                        "t_start": t,
                        "chunk_tokens": [1] * 32 if arm != "draft" else [1] + [3] * 10,
                        "spec_rate": rate,
                        "spec_mean_len": None if rate is None else 1 + 4 * rate,
                    }
                )
                t += e2e + 0.01 if concurrency_one else e2e / 3  # c>1: the next starts early
            t += 2.0  # the next arm's turn
    df = pd.DataFrame(rows)
    if zero_tpot:
        idx = df.index[df["series"] == "draft"][-zero_tpot:]
        df.loc[idx, "tpot_s"] = 0.0
    return df


def _data_lines(fig: Figure) -> list[Line2D]:
    """Lines drawn from data points (marker "."), not reference lines."""
    return [ln for ax in fig.get_axes() for ln in ax.get_lines() if ln.get_marker() == "."]


def _labels_with_data(fig: Figure) -> set[str]:
    """Labels of the artists that draw something (points, line vertices, bars)."""
    out: set[str] = set()
    for ax in fig.get_axes():
        for ln in ax.get_lines():
            if len(ln.get_xdata()):
                out.add(ln.get_label())
        for coll in ax.collections:
            points = coll.get_offsets() if isinstance(coll, PathCollection) else coll.get_paths()
            if len(points):
                out.add(coll.get_label())
        for cont in ax.containers:
            if isinstance(cont, BarContainer) and len(cont.patches):
                out.add(cont.get_label())
            if isinstance(cont, ErrorbarContainer) and len(cont.lines[0].get_xdata()):
                out.add(cont.get_label())
    return out


def _legend_texts(fig: Figure) -> list[str]:
    legends = [ax.get_legend() for ax in fig.get_axes() if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for leg in legends for t in leg.get_texts()]


# ------------------------------------------------------------------ 1. drift figure


def test_drift_lines_break_where_other_arms_ran() -> None:
    df = _run()
    drift = drift_table(df, control="control", arms=["draft", "aa"])
    fig = plot_drift(df, drift, sentence=drift_sentence(drift)).figure
    lines = _data_lines(fig)
    assert len(lines) == len(ARMS) * 3  # three slots per arm
    for a in lines:
        lo, hi = np.min(a.get_xdata()), np.max(a.get_xdata())
        for b in lines:
            if b.get_color() != a.get_color():
                xs = np.asarray(b.get_xdata(), dtype=float)
                assert not ((xs > lo) & (xs < hi)).any(), "a line spans another arm's turn"


def test_drift_never_plots_a_non_positive_tpot_and_says_how_many_were_left_out() -> None:
    df = _run(zero_tpot=3)
    df.loc[df.index[df["series"] == "aa"][0], "tpot_s"] = -0.001
    drift = drift_table(df, control="control", arms=["draft", "aa"])
    result = plot_drift(df, drift, sentence=drift_sentence(drift))
    ys = np.concatenate(
        [np.asarray(ln.get_ydata(), dtype=float) for ln in _data_lines(result.figure)]
    )
    assert ys.size == len(df) - 4 and (ys > 0).all()
    assert "4 request(s) with a TPOT of 0 or less" in result.caption


def test_drift_table_ignores_zero_tpot_reads() -> None:
    # 9 requests at ~5.6 ms, then 6 late reads with TPOT 0: no "regime shift 5.6 → 0.0 ms".
    df = _run()
    df = df[df["series"] == "control"].copy()
    extra = df.iloc[:6].assign(
        prompt_id=[f"late-{i}" for i in range(6)],
        t_start=df["t_start"].max() + np.arange(1, 7),
        tpot_s=0.0,
    )
    level = np.random.default_rng(0).uniform(0.0054, 0.0058, len(df))
    df = pd.concat([df.assign(tpot_s=level), extra], ignore_index=True)
    table = drift_table(df, control="control", arms=[])
    assert table["n"].tolist() == [9]
    assert not table["shift"].any()
    assert (table["after_ms"] > 0).all() and (table["before_ms"] > 0).all()
    assert "→ 0.0" not in drift_sentence(table)


# ------------------------------------------------------------------ 2. timeline at c=1


def test_requests_overlap_only_above_concurrency_one() -> None:
    assert not requests_overlap(_run(concurrency_one=True))
    assert requests_overlap(_run(concurrency_one=False))


def _analysis(df: pd.DataFrame, *, drift: bool = True, counters: bool = False) -> SimpleNamespace:
    """The few fields of RunAnalysis the figure groups read."""
    spec = SpecCounters(30, 120, 80, (28, 23, 18, 11)) if counters else None
    return SimpleNamespace(
        records=df,
        control="control",
        params=SimpleNamespace(arms=[SimpleNamespace(name=a) for a in ARMS]),
        drift=drift_table(df, control="control", arms=["draft", "aa"]) if drift else pd.DataFrame(),
        launch_metrics=[SimpleNamespace(series="draft", spec=spec)],
    )


def test_timeline_is_left_out_at_concurrency_one_where_the_drift_figure_shows_the_order() -> None:
    at_c1 = timeline_figures(_analysis(_run()))
    assert [f.title for f in at_c1] == ["TPOT over time, per block and arm (drift diagnostics)"]
    loaded = timeline_figures(_analysis(_run(concurrency_one=False)))
    assert loaded[0].title == "Request timeline per series"
    no_drift = timeline_figures(_analysis(_run(), drift=False))
    assert [f.title for f in no_drift] == ["Request timeline per series"]


def test_timeline_has_no_empty_panel() -> None:
    df = _run(concurrency_one=False)
    df.loc[df["series"] == "aa", "t_start"] = np.nan  # never sent
    result = plot_timeline(df)
    axes = result.figure.get_axes()
    assert len(axes) == 2 and all(ax.has_data() for ax in axes)
    assert "No panel for aa" in result.caption


# ------------------------------------------------------------------ 3. memory axis


def test_memory_axis_follows_the_data_not_zero() -> None:
    t = np.arange(0, 60, 5.0)
    samples = pd.concat(
        [
            pd.DataFrame(
                {
                    "series": s,
                    "launch_id": f"{s}-r0",
                    "t": 1.7e9 + t,
                    "rss_bytes": (2.7 + 0.15 * i + 0.002 * t) * 2**30,
                }
            )
            for i, s in enumerate(["control", "draft", "aa"])
        ]
    )
    result = plot_memory(samples)
    ax = result.figure.get_axes()[0]
    low, high = ax.get_ylim()
    assert 2.5 < low < 2.7 and 3.12 < high < 3.3
    assert ax.get_ylabel() == "resident memory (GiB)"
    assert re.search(r"The axis starts at 2\.\d\d GiB, not 0\.", result.caption)


# ------------------------------------------------------------------ 4. no repeated figure


def test_tokens_per_chunk_is_left_out_when_the_acceptance_histogram_shows_it() -> None:
    df = _run()
    assert chunk_figures(_analysis(df, counters=True)) == []
    (alone,) = chunk_figures(_analysis(df, counters=False))
    assert alone.title == "Tokens per streamed chunk"


# ------------------------------------------------------------------ 5. legends list drawn series


def test_legends_list_only_series_with_points() -> None:
    df = _run()
    no_rss = pd.DataFrame(
        {
            "series": ["control", "control", "aa"],
            "t": [0.0, 1.0, 0.0],
            "rss_bytes": [3e9, 3e9, None],
        }
    )
    failed = df.assign(ok=df["ok"] & (df["series"] != "aa"))
    figures = {
        "acceptance_vs_speedup": plot_acceptance_vs_speedup(df),  # aa has no drafts
        "memory": plot_memory(no_rss),
        "ecdf": plot_latency_ecdf(failed),
        "chunks": plot_tokens_per_chunk(failed),
    }
    for name, result in figures.items():
        texts = _legend_texts(result.figure)
        assert texts, name
        assert "aa" not in texts, name
        assert set(texts) <= _labels_with_data(result.figure), name


# ------------------------------------------------------------------ 6. one ECDF legend


def test_latency_ecdf_has_one_legend_outside_the_panels() -> None:
    result = plot_latency_ecdf(_run())
    fig = result.figure
    assert [ax.get_legend() for ax in fig.get_axes()] == [None] * 3
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(ARMS)
    fig.draw_without_rendering()  # lay the figure out
    box = fig.legends[0].get_window_extent()
    assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.get_axes())


# ------------------------------------------------------------------ 7. paired ratio


def test_paired_ratio_colours_points_by_category_and_draws_the_ci_on_the_mean() -> None:
    df = _run()
    result = plot_paired_ratio(
        df, experiment="draft", ci=(0.5, 0.62), estimate=0.56, confidence_level=0.95
    )
    ax = result.figure.get_axes()[0]
    points = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets())]
    assert sorted(c.get_label() for c in points) == sorted(CATEGORIES)
    colours = {tuple(np.round(c.get_facecolor()[0], 3)) for c in points}
    assert len(colours) == len(CATEGORIES)
    texts = _legend_texts(result.figure)
    assert set(CATEGORIES) <= set(texts)
    assert any("95 % CI of the mean" in t for t in texts)
    (bar,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    n_prompts = sum(len(c.get_offsets()) for c in points)
    assert bar.lines[0].get_xdata()[0] > n_prompts - 1  # its own column, right of the prompts
    segment = bar.lines[2][0].get_segments()[0]
    assert sorted(segment[:, 1]) == pytest.approx([0.5, 0.62])
    assert "95 % confidence interval [0.500, 0.620] of that ratio" in result.caption
    assert "not a range for single prompts" in result.caption
    assert re.search(r"known 0\.\d\d \(n=3\)", result.caption)


def test_paired_ratio_category_colours_agree_across_comparisons() -> None:
    df = _run()

    def colours(experiment: str) -> dict[str, tuple]:
        ax = plot_paired_ratio(df, experiment=experiment, ci=(0.0, np.inf)).figure.get_axes()[0]
        return {
            c.get_label(): tuple(c.get_facecolor()[0])
            for c in ax.collections
            if isinstance(c, PathCollection) and len(c.get_offsets())
        }

    assert colours("draft") == colours("aa")


# ------------------------------------------------------------------ 8. captions ask a question


def _all_figures() -> dict[str, FigureWithCaption]:
    df = _run()
    drift = drift_table(df, control="control", arms=["draft", "aa"])
    load = pd.DataFrame(
        {
            "series": ["draft", "draft"],
            "concurrency": [1, 4],
            "estimate": [0.6, 0.7],
            "ci_low": [0.55, 0.6],
            "ci_high": [0.65, 0.8],
        }
    )
    scores = pd.DataFrame({"series": ["control", "draft"], "mean_logprob": [-1.0, -1.1]})
    memory = pd.DataFrame({"series": "control", "t": [0.0, 1.0], "rss_bytes": [3e9, 3.1e9]})
    return {
        "ecdf": plot_latency_ecdf(df),
        "paired": plot_paired_ratio(df, experiment="draft", ci=(0.5, 0.6), estimate=0.55),
        "load": plot_speedup_vs_load(load),
        "acceptance": plot_acceptance(SpecCounters(30, 120, 80, (28, 23, 18, 11))),
        "acceptance_vs_speedup": plot_acceptance_vs_speedup(df),
        "chunks": plot_tokens_per_chunk(df),
        "timeline": plot_timeline(df),
        "drift": plot_drift(df, drift, sentence=drift_sentence(drift)),
        "memory": plot_memory(memory),
        "sampling": plot_output_logprob(scores),
    }


@pytest.mark.parametrize("name", list(_all_figures()))
def test_every_caption_opens_with_its_question(name: str) -> None:
    caption = _all_figures()[name].caption
    question = caption.split("?")[0]
    assert "?" in caption and "." not in question and len(question) < 90, caption
    assert question[0].isupper()
