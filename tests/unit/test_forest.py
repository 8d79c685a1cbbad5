"""The forest plot: one row per arm, the A/A arm last, unbounded intervals said."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from speclib.report.forest import FOREST_COLUMNS, plot_forest


def _frame() -> pd.DataFrame:
    rows = [
        ("draft-k4", "draft-k4", "experiment", 0.55, 0.45, 0.67, 0.975, "adopt"),
        ("ngram-k4", "ngram-k4", "experiment", 0.98, 0.90, 1.07, 0.975, "inconclusive"),
        ("A/A (bench check)", "aa", "aa", 1.01, 0.96, 1.06, 0.95, "inconclusive"),
    ]
    return pd.DataFrame(rows, columns=list(FOREST_COLUMNS))


def test_every_row_is_drawn_with_its_verdict_and_the_band():
    fig, caption = plot_forest(_frame(), margin=0.05)
    ax, right = fig.get_axes()
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "draft-k4",
        "ngram-k4",
        "A/A (bench check)",
    ]
    assert [t.get_text() for t in right.get_yticklabels()] == [
        "ADOPT",
        "INCONCLUSIVE",
        "INCONCLUSIVE",
    ]
    band = [p for p in ax.patches if p.get_x() == pytest.approx(0.95)]
    assert band and band[0].get_width() == pytest.approx(0.10)
    lo, hi = ax.get_xlim()
    assert lo < 0.45 and hi > 1.07 and ax.get_xscale() == "log"
    assert "95 % and 97.5 %" in caption and "±5 %" in caption and "A/A" in caption


def test_the_levels_are_written_as_the_table_writes_them():
    df = _frame()
    df["level"] = [0.9972127, 0.9972127, 0.9944254]  # spent by run until decided's looks
    _fig, caption = plot_forest(df, margin=0.05)
    assert "at 99.4 % and 99.7 % confidence" in caption


def test_an_interval_without_degrees_of_freedom_is_said_unbounded():
    df = _frame()
    df.loc[1, ["ci_low", "ci_high"]] = [0.0, math.inf]
    fig, _ = plot_forest(df, margin=0.05)
    _, right = fig.get_axes()
    assert right.get_yticklabels()[1].get_text() == "INCONCLUSIVE (unbounded)"
    lo, hi = fig.get_axes()[0].get_xlim()
    assert lo > 0 and math.isfinite(hi)  # drawn to the edge, not to 0 or infinity


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="margin"):
        plot_forest(_frame(), margin=0)
    with pytest.raises(ValueError, match="missing columns"):
        plot_forest(_frame().drop(columns="word"), margin=0.05)
    _fig, caption = plot_forest(_frame().iloc[0:0], margin=0.05)
    assert caption.startswith("No arm")
