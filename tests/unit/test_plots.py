"""Unit tests of the report figures: each figure renders from a small synthetic frame.

Covers speclib.report.figure_base, .request_figures, .stream_figures and .spec_figures.
"""

from __future__ import annotations

import base64

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from speclib.core.prometheus import SpecCounters
from speclib.report.figure_base import RECORD_COLUMNS, FigureWithCaption, series_palette
from speclib.report.request_figures import (
    paired_prompt_ratios,
    plot_latency_ecdf,
    plot_paired_ratio,
)
from speclib.report.spec_figures import (
    plot_acceptance,
    plot_acceptance_vs_speedup,
    plot_memory,
    plot_speedup_vs_load,
)
from speclib.report.stream_figures import plot_timeline, plot_tokens_per_chunk

pytestmark = pytest.mark.unit

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SERIES = ("control", "draft", "ngram")


@pytest.fixture(scope="module")
def records() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = []
    speed = {"control": 1.0, "draft": 0.7, "ngram": 1.05}
    chunk = {"control": 1, "draft": 3, "ngram": 2}
    for s_i, series in enumerate(SERIES):
        for rep in range(2):
            t0 = 1_700_000_000.0 + 1000 * s_i + 300 * rep
            for j, pid in enumerate(["warm0", "p1", "p2", "p3", "p4"]):
                tpot = 0.01 * speed[series] * (1 + 0.1 * j) * rng.uniform(0.95, 1.05)
                ttft = 0.05 * rng.uniform(0.9, 1.1)
                n = 32
                ok = not (series == "ngram" and pid == "p4" and rep == 1)
                rate = None if series == "control" else (None if pid == "p3" else 0.2 * j)
                rows.append(
                    {
                        "series": series,
                        "replicate": rep,
                        "launch_id": f"{series}-{rep}",
                        "prompt_id": pid,
                        "repeat": 0,
                        "category": "code" if j % 2 else "chat",
                        "phase": "warmup" if pid == "warm0" else "measure",
                        "ok": ok,
                        "ttft_s": ttft if ok else None,
                        "tpot_s": tpot if ok else None,
                        "e2e_s": ttft + tpot * (n - 1) if ok else None,
                        "output_tokens": n if ok else None,
                        "t_start": t0 + 0.2 * j,
                        "chunk_tokens": [1] + [chunk[series]] * ((n - 1) // chunk[series])
                        if ok
                        else [],
                        "spec_rate": rate,
                        "spec_mean_len": None if rate is None else 1 + 4 * rate,
                    }
                )
    return pd.DataFrame(rows)


def _check(result: FigureWithCaption) -> None:
    assert isinstance(result, FigureWithCaption)
    fig, caption = result
    assert isinstance(fig, Figure)
    assert isinstance(caption, str) and caption and "\n" not in caption
    axes = fig.get_axes()
    assert axes
    assert any(ax.has_data() for ax in axes)
    titled = fig.get_suptitle() or any(ax.get_title() or ax.get_title("left") for ax in axes)
    assert titled
    assert all(ax.get_xlabel() or not ax.has_data() for ax in axes)
    png = result.to_png(dpi=40)
    assert png.startswith(PNG_MAGIC) and len(png) > 1000


def test_frame_has_the_documented_columns(records: pd.DataFrame) -> None:
    assert set(RECORD_COLUMNS) <= set(records.columns)


def test_series_palette_is_stable_and_control_is_neutral() -> None:
    pal = series_palette(["draft", "control", "ngram"])
    again = series_palette(["control", "draft", "ngram"])
    assert pal == again
    assert pal["control"] == "#949494"
    assert len(set(pal.values())) == 3
    assert series_palette(["x"], control="base")["base"] == "#949494"


def test_latency_ecdf(records: pd.DataFrame) -> None:
    result = plot_latency_ecdf(records)
    _check(result)
    assert len(result.figure.get_axes()) == 3
    assert "control n=8" in result.caption and "ngram n=7" in result.caption
    with pytest.raises(ValueError, match="metrics"):
        plot_latency_ecdf(records, metrics=("itl_s",))
    with pytest.raises(ValueError, match="tpot_s"):
        plot_latency_ecdf(records.drop(columns="tpot_s"))


def test_paired_ratio(records: pd.DataFrame) -> None:
    ratios = paired_prompt_ratios(records, experiment="draft")
    assert list(ratios["prompt_id"]) and "warm0" not in set(ratios["prompt_id"])
    assert len(ratios) == 4
    assert (ratios["ratio"] < 0.8).all()
    assert list(ratios.columns) == ["prompt_id", "category", "control", "experiment", "ratio"]
    result = plot_paired_ratio(records, experiment="draft", ci=(0.66, 0.74), estimate=0.7)
    _check(result)
    assert "[0.660, 0.740]" in result.caption
    named = plot_paired_ratio(
        records, experiment="draft", ci=(0.66, 0.74), estimate=0.7, confidence_level=0.975
    )
    assert "97.5 % confidence interval [0.660, 0.740]" in named.caption
    assert paired_prompt_ratios(records, experiment="nope").empty
    with pytest.raises(ValueError, match="ci"):
        plot_paired_ratio(records, experiment="draft", ci=(0.9, 0.8))


def test_acceptance_panels() -> None:
    draft = SpecCounters(30, 120, 80, (28, 23, 18, 11))
    nodraft = SpecCounters(0, 0, 0, (0, 0, 0, 0))
    _check(plot_acceptance(draft))
    result = plot_acceptance({"draft": draft, "ngram": nodraft})
    _check(result)
    assert "ngram: no drafts proposed" in result.caption
    empty = plot_acceptance({"ngram": nodraft})
    assert isinstance(empty.figure, Figure)
    assert empty.to_png(dpi=30).startswith(PNG_MAGIC)


def test_acceptance_vs_speedup(records: pd.DataFrame) -> None:
    result = plot_acceptance_vs_speedup(records)
    _check(result)
    assert "tokens its decode steps carried" in result.caption and "×" not in result.caption
    # a prompt whose every step carried one token got no draft: drawn, and marked
    nodraft = records.copy()
    undrafted = (nodraft["series"] == "ngram") & (nodraft["prompt_id"] == "p2")
    nodraft.loc[undrafted, "chunk_tokens"] = pd.Series([[1] * 32] * int(undrafted.sum())).values
    marked = plot_acceptance_vs_speedup(nodraft)
    assert "× marks the 1 prompt(s) that got no draft" in marked.caption
    labels = [t.get_text() for t in marked.figure.axes[0].get_legend().get_texts()]
    assert "ngram: no draft" in labels and "control" not in labels


def test_tokens_per_chunk(records: pd.DataFrame) -> None:
    result = plot_tokens_per_chunk(records)
    _check(result)
    assert "draft: mean" in result.caption


def test_timeline(records: pd.DataFrame) -> None:
    result = plot_timeline(records)
    _check(result)
    assert len(result.figure.get_axes()) == 3
    assert "1 failed request(s)" in result.caption


def test_memory() -> None:
    t = np.arange(0, 60, 5.0)
    samples = pd.concat(
        [
            pd.DataFrame(
                {
                    "series": s,
                    "launch_id": f"{s}-0",
                    "t": 1.7e9 + t,
                    "rss_bytes": (2.7 + 0.1 * i) * 2**30 * np.minimum(1, t / 30 + 0.5),
                }
            )
            for i, s in enumerate(SERIES)
        ]
    )
    result = plot_memory(samples)
    _check(result)
    assert "control 2.70 GiB" in result.caption


def test_speedup_vs_load() -> None:
    frame = pd.DataFrame(
        {
            "series": ["draft"] * 3 + ["ngram"] * 3,
            "concurrency": [1, 2, 4] * 2,
            "estimate": [0.7, 0.8, 0.95, 1.0, 1.02, 1.05],
            "ci_low": [0.65, 0.74, 0.9, 0.97, 0.99, 1.0],
            "ci_high": [0.75, 0.86, 1.0, 1.03, 1.05, 1.1],
        }
    )
    result = plot_speedup_vs_load(frame)
    _check(result)
    ax = result.figure.axes[0]
    assert ax.get_yscale() == "log" and "cut at the edge" not in result.caption
    low, high = ax.get_ylim()
    assert low <= 0.65 and high >= 1.1


def test_speedup_vs_load_cuts_unbounded_intervals_and_says_so() -> None:
    # Two launches per arm: the two-stage CI uses Student t with 1 df and can span 0.01-48.
    frame = pd.DataFrame(
        {
            "series": ["draft", "draft"],
            "concurrency": [1, 4],
            "estimate": [0.6, 0.68],
            "ci_low": [0.115, 0.009],
            "ci_high": [3.3, 48.5],
        }
    )
    result = plot_speedup_vs_load(frame)
    low, high = result.figure.axes[0].get_ylim()
    assert (low, high) == pytest.approx((0.25, 4.0))  # the estimates stay readable
    assert "cut at the edge" in result.caption and "verdict table" in result.caption


def test_figure_with_caption_html() -> None:
    result = plot_acceptance(SpecCounters(3, 6, 3, (2, 1)))
    html = result._repr_html_()
    assert html.startswith("<figure>") and "figcaption" in html


def test_figure_html_is_sharp_and_described() -> None:
    result = plot_acceptance(SpecCounters(3, 6, 3, (2, 1)))
    html = result.to_html(dpi=150)
    width_in = result.figure.get_figwidth()
    assert f'width="{round(width_in * 100)}"' in html
    assert 'alt="Speculative acceptance (server counters). How often' in html
    assert html.count("<figcaption>") == 1
    png = base64.b64decode(html.split("base64,")[1].split('"')[0])
    assert int.from_bytes(png[16:20], "big") == round(width_in * 150)  # PNG IHDR width


def test_acceptance_without_per_position_counters_says_so() -> None:
    result = plot_acceptance({"ngram": SpecCounters(60, 180, 120, ())})
    assert "no drafts proposed" not in result.caption
    assert "ngram: rate 0.67, mean length 3.00 (no per-position counters" in result.caption
    texts = [t.get_text() for ax in result.figure.get_axes() for t in ax.texts]
    assert "no per-position counters in /metrics" in texts


def test_memory_below_one_gib_is_in_mib() -> None:
    samples = pd.DataFrame(
        {
            "series": "control",
            "launch_id": "control-r0",
            "t": [0.0, 1.0, 2.0],
            "rss_bytes": [30 * 2**20, 36 * 2**20, 38 * 2**20],
        }
    )
    result = plot_memory(samples)
    assert "control 38 MiB" in result.caption
    ax = result.figure.get_axes()[0]
    assert ax.get_ylabel() == "resident memory (MiB)"
    low, high = ax.get_ylim()
    assert 25 < low <= 30 and 38 <= high < 42  # the data's range, not 0 to the peak
    assert f"starts at {low:.0f} MiB, not 0" in result.caption
