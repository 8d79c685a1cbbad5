"""Unit tests of speclib.analysis.stats.changepoint: Pettitt's test and the cancellation check.

The regime pattern is the one measured on the 2-core vLLM machine: TPOT 22–24 ms for 9
requests, 14–17 ms for 12, then 23–24 ms. Every rng is seeded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from speclib.analysis.stats.changepoint import (
    MIN_SERIES_LENGTH,
    pettitt_test,
    shift_cancelled,
)

pytestmark = pytest.mark.unit


def measured_like(rng: np.random.Generator) -> np.ndarray:
    """Per-request TPOT (s) with the measured regime dip."""
    return np.r_[
        rng.uniform(0.022, 0.024, 9), rng.uniform(0.014, 0.017, 12), rng.uniform(0.023, 0.024, 24)
    ]


def interleaved_pair(rng: np.random.Generator, *, shared: bool, n: int = 45):
    """Control TPOT and paired log-ratios in time order; the dip hits both arms or one."""
    dip = np.where((np.arange(n) >= 9) & (np.arange(n) < 21), np.log(0.65), 0.0)
    base = rng.normal(np.log(0.023), 0.03, n)  # TPOT barely depends on the prompt
    control = base + dip + rng.normal(0, 0.05, n)
    experiment = base + np.log(0.8) + (dip if shared else 0.0) + rng.normal(0, 0.05, n)
    return np.exp(control), experiment - control


def test_detects_the_measured_regime_dip():
    cp = pettitt_test(measured_like(np.random.default_rng(1)))
    assert cp.significant and cp.pvalue < 0.01
    assert cp.index in (9, 21)
    low, high = sorted([cp.before_median, cp.after_median])
    assert 0.014 <= low <= 0.02 and 0.022 <= high <= 0.024
    assert json.dumps(cp.to_dict())


def test_finds_a_single_step_where_it_is():
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(20, 1, 30), rng.normal(15, 1, 20)]
    cp = pettitt_test(x)
    assert abs(cp.index - 30) <= 3 and cp.significant  # Pettitt leans towards the middle
    k = cp.index
    assert cp.before_mean == pytest.approx(x[:k].mean())
    assert cp.relative_change == pytest.approx(np.median(x[k:]) / np.median(x[:k]) - 1)


def test_statistic_matches_the_double_sum_definition():
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0])
    n = x.size
    u = [sum(np.sign(x[i] - x[j]) for i in range(t) for j in range(t, n)) for t in range(1, n)]
    cp = pettitt_test(x)
    assert cp.statistic == max(abs(v) for v in u)
    assert cp.index == 1 + int(np.argmax(np.abs(u)))


def test_false_alarm_rate_on_stationary_noise_is_at_most_alpha():
    rng = np.random.default_rng(3)
    rejects = [pettitt_test(rng.lognormal(-3.8, 0.1, 45)).significant for _ in range(600)]
    assert np.mean(rejects) <= 0.05 + 0.015


def test_permutation_p_value_agrees_with_the_approximation():
    x = measured_like(np.random.default_rng(4))
    asym = pettitt_test(x)
    perm = pettitt_test(x, method="permutation", n_resamples=2000, rng=np.random.default_rng(5))
    assert perm.index == asym.index and perm.significant
    noise = np.random.default_rng(6).normal(size=30)
    p_asym = pettitt_test(noise).pvalue
    p_perm = pettitt_test(noise, method="permutation", n_resamples=2000,
                          rng=np.random.default_rng(7)).pvalue  # fmt: skip
    assert abs(p_asym - p_perm) < 0.25


def test_short_and_constant_series_have_no_shift():
    short = pettitt_test([1.0, 2.0, 3.0])
    assert (short.significant, short.index, short.pvalue) == (False, None, 1.0)
    assert str(MIN_SERIES_LENGTH) in short.note
    flat = pettitt_test(np.full(20, 0.02))
    assert (flat.significant, flat.pvalue, flat.note) == (False, 1.0, "constant series")
    assert json.dumps(flat.to_dict())


def test_interleaving_cancels_a_shared_shift():
    raw, paired = interleaved_pair(np.random.default_rng(8), shared=True)
    check = shift_cancelled(raw=raw, paired=paired)
    assert check.raw.significant and not check.paired.significant
    assert check.cancelled and "cancelled" in check.reason
    assert json.dumps(check.to_dict())


def test_a_shift_in_one_arm_only_is_not_cancelled():
    raw, paired = interleaved_pair(np.random.default_rng(9), shared=False)
    check = shift_cancelled(raw=raw, paired=paired)
    assert check.raw.significant and check.paired.significant
    assert not check.cancelled and "not cancelled" in check.reason


def test_no_raw_shift_means_nothing_to_cancel():
    rng = np.random.default_rng(10)
    check = shift_cancelled(raw=rng.lognormal(-3.8, 0.05, 40), paired=rng.normal(0, 0.05, 40))
    assert not check.cancelled and "no significant shift" in check.reason


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"series": [1.0, np.nan, 2.0, 3.0]}, "`series`"),
        ({"series": [[1.0, 2.0]]}, "`series`"),
        ({"series": [1.0] * 5, "alpha": 0}, "`alpha`"),
        ({"series": [1.0] * 5, "method": "exact"}, "`method`"),
        ({"series": [1.0] * 5, "method": "permutation"}, "`rng`"),
        ({"series": [1.0] * 5, "method": "permutation", "n_resamples": 0}, "`n_resamples`"),
    ],
)
def test_inputs_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pettitt_test(**kwargs)
    with pytest.raises(ValueError, match="`paired`"):
        shift_cancelled(raw=[1.0, 2.0, 3.0, 4.0], paired=["a"])
