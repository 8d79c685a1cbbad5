"""Absolute numbers behind a ratio: p50/p90 in ms and per-stream tokens/s, positive only."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from speclib.analysis.verdict.absolute import absolute_summary


def _pairs() -> pd.DataFrame:
    tc = np.array([0.010, 0.011, 0.012, 0.013, 0.0, np.nan])  # a zero and a NaN TPOT
    te = np.array([0.005, 0.006, 0.006, 0.007, 0.008, 0.009])
    return pd.DataFrame(
        {
            "tpot_s_c": tc,
            "tpot_s_e": te,
            "ttft_s_c": [0.02] * 6,
            "ttft_s_e": [0.03] * 6,
            "output_tokens_c": [48] * 6,
            "output_tokens_e": [48] * 6,
            "e2e_s_c": [0.5] * 6,
            "e2e_s_e": [0.25] * 6,
        }
    )


def test_quantiles_use_positive_finite_values_only():
    out = absolute_summary(_pairs())
    ctl, exp = out["control"], out["experiment"]
    assert ctl["n"] == exp["n"] == 6
    assert ctl["tpot"]["n"] == 4  # the zero and the NaN are not speeds
    assert ctl["tpot"]["p50_ms"] == pytest.approx(11.5)
    assert ctl["tpot"]["p90_ms"] == pytest.approx(
        1e3 * np.quantile([0.01, 0.011, 0.012, 0.013], 0.9)
    )
    assert exp["tpot"]["p50_ms"] == pytest.approx(6.5)
    assert ctl["ttft"]["p50_ms"] == pytest.approx(20.0) and exp["ttft"]["p90_ms"] == pytest.approx(
        30
    )
    assert ctl["tokens_per_s"] == pytest.approx(96.0) and exp["tokens_per_s"] == pytest.approx(192)


def test_missing_columns_and_no_pairs_give_none_not_zero():
    out = absolute_summary(pd.DataFrame({"tpot_s_c": [], "tpot_s_e": []}))
    assert out["control"]["tpot"]["p50_ms"] is None and out["control"]["tokens_per_s"] is None
    assert out["experiment"]["ttft"] == {"p50_ms": None, "p90_ms": None, "n": 0}
    with pytest.raises(ValueError, match="DataFrame"):
        absolute_summary([1, 2])  # type: ignore[arg-type]
    assert not math.isnan(absolute_summary(_pairs())["control"]["tpot"]["p50_ms"])
