"""Unit tests of speclib.analysis.verdict.resolution: the A/A arm read as a bench check.

The A/A intervals come from the block analysis itself (:func:`block_analysis` on pairs
whose block means are chosen exactly), so the blocks needed can be checked against a hand
computation from the block SD with ``scipy.stats.t`` at ``df = blocks - 1``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from speclib.analysis.verdict.resolution import (
    MAX_BLOCKS,
    bench_check,
    blocks_for,
    calibration,
    half_width,
)
from speclib.analysis.verdict.tpot_verdict import block_analysis, with_pairs
from speclib.core.reasons import Code

pytestmark = pytest.mark.unit

MARGIN = 0.05


def aa_ci(block_log_ratios, *, pairs=8, confidence=0.95):
    """The A/A arm's block interval when its block means are exactly ``block_log_ratios``."""
    rows = []
    for b, d in enumerate(block_log_ratios):
        for i in range(pairs):
            control = 0.02 * (1 + 0.1 * i)
            rows.append({"tpot_s_c": control, "tpot_s_e": control * math.exp(d),
                         "block": f"r{b}", "replicate": b})  # fmt: skip
    frame = pd.DataFrame(rows)
    found = block_analysis({"aa": frame}, aa_arm="aa", confidence_level=confidence)
    return with_pairs(found.aa, frame)


def by_hand(block_log_ratios, target, confidence=0.95):
    """Smallest total blocks m with t[m - 1] * s / sqrt(m) <= log(1 + target), s held."""
    s = np.std(block_log_ratios, ddof=1)
    q = 0.5 + confidence / 2
    m = len(block_log_ratios)
    while stats.t.ppf(q, m - 1) * s / math.sqrt(m) > math.log1p(target):
        m += 1
    return m


def test_resolution_is_the_log_half_width_at_blocks_minus_one_df():
    d = [0.06, -0.06, 0.0]
    check = bench_check(aa_ci(d), margin=MARGIN)
    h = stats.t.ppf(0.975, 2) * np.std(d, ddof=1) / math.sqrt(3)
    assert check.df == 2 and check.n_blocks == 3
    assert check.resolution == pytest.approx(math.expm1(h), rel=1e-9)
    assert check.block_sd_log == pytest.approx(np.std(d, ddof=1), rel=1e-9)
    said = check.reason()
    assert said.code is Code.BENCH_CHECK and said["resolution"] == check.resolution


def test_blocks_needed_match_a_hand_computation_with_the_t_quantile():
    d = [0.06, -0.06, 0.0]  # s = 0.06: ±16.1 % after 3 blocks
    check = bench_check(aa_ci(d), margin=MARGIN)
    need = by_hand(d, MARGIN)
    # t[8] * 0.06 / 3 = 0.0461 <= log 1.05 = 0.0488, t[7] * 0.06 / sqrt(8) = 0.0502 is not
    assert need == 9
    assert check.blocks_needed == need and check.more_blocks == need - 3
    assert (check.reason()["more_blocks"], check.reason()["blocks_needed"]) == (need - 3, need)
    decision = check.decision()
    assert decision.extra_launches_needed == need - 3 and decision.target_word == "equivalent"
    # with the df held at today's 2 instead of growing with the blocks, the plan would ask
    fixed_df = next(
        m for m in range(3, 100) if stats.t.ppf(0.975, 2) * 0.06 / math.sqrt(m) <= math.log(1.05)
    )
    assert fixed_df == 28  # 28 blocks, not 9


def test_aa_planning_text_never_predicts_adopt_or_worse_nor_more_pairs():
    rng = np.random.default_rng(4)
    seen = set()
    for _ in range(300):
        blocks = int(rng.integers(2, 7))
        d = rng.normal(0, rng.choice([0.005, 0.03, 0.1, 0.4]), blocks)
        check = bench_check(aa_ci(d), margin=MARGIN)
        decision = check.decision()
        seen.add(check.word)
        assert decision.reason.code is Code.BENCH_CHECK  # a bench check, never the rule's plan
        assert "extra_pairs" not in decision.reason and "target" not in decision.reason
        assert decision.extra_pairs_needed is None
        assert decision.target_word in (None, "equivalent")
    assert {"equivalent", "inconclusive"} <= seen


def test_the_check_says_when_it_is_already_equivalent_or_shows_a_false_effect():
    fine = bench_check(aa_ci([0.01, -0.01, 0.005]), margin=MARGIN)
    assert fine.word == "equivalent" and fine.more_blocks is None
    assert not fine.excludes_one and not fine.false_effect
    assert fine.decision().extra_launches_needed is None
    slower = bench_check(aa_ci([0.02, 0.03, 0.025]), margin=MARGIN)  # inside (1, 1 + δ)
    assert slower.word == "equivalent" and slower.excludes_one and not slower.false_effect
    assert slower.reason()["excludes_one"] and slower.reason()["word"] == "equivalent"
    broken = bench_check(aa_ci([0.2, 0.22, 0.21]), margin=MARGIN)
    assert broken.false_effect and broken.word == "worse"
    assert broken.reason()["false_effect"]
    assert broken.decision().extra_launches_needed is None


def test_not_reachable_with_one_block_or_too_much_noise():
    one = bench_check(aa_ci([0.1]), margin=MARGIN)
    assert one.resolution is None and one.blocks_needed is None
    assert one.df == 0 and one.reason()["resolution"] is None
    assert half_width(aa_ci([0.1])) is None
    wild = bench_check(aa_ci([2.0, -2.0, 2.0]), margin=MARGIN)
    assert wild.blocks_needed is None and wild.reason()["max_blocks"] == MAX_BLOCKS


def test_blocks_for_is_validated_and_returns_today_when_met():
    assert blocks_for(0.01, n_blocks=4, df=3, confidence_level=0.95, target=0.05) == 4
    assert blocks_for(0.5, n_blocks=1, df=0, confidence_level=0.95, target=0.05) is None
    with pytest.raises(ValueError, match="`target`"):
        blocks_for(0.1, n_blocks=3, df=2, confidence_level=0.95, target=0)
    with pytest.raises(ValueError, match="`half_width_log`"):
        blocks_for(-1.0, n_blocks=3, df=2, confidence_level=0.95, target=0.1)
    with pytest.raises(ValueError, match="`ci` must be a RatioInterval"):
        bench_check((0.9, 1.1), margin=MARGIN)


def test_calibration_reports_the_target_reached_or_the_blocks_it_would_need():
    d = [0.06, -0.06, 0.0, 0.0]  # t[3] * 0.049 / 2 = 0.078: ±8.1 %
    done = calibration([aa_ci(d)], target=0.10)
    assert done.reached and done.blocks == 4 and done.reason().code is Code.CALIBRATION
    short = [0.06, -0.06, 0.0]
    found = calibration([aa_ci(short)], target=0.10)
    assert not found.reached and found.blocks_needed == by_hand(short, 0.10) == 5
    assert found.reason()["blocks_needed"] == 5
    coarse = calibration([aa_ci(d), aa_ci(short)], target=0.10)  # the coarsest level counts
    assert not coarse.reached and coarse.blocks == 3


def test_stopping_on_the_width_makes_the_stopped_interval_slightly_optimistic():
    """The claim of the module docstring: a calibration that stops once the half-width is
    at most ±10 % (3 to 6 blocks, 95 %) covers the true ratio 1 in about 92-95 % of runs."""
    rng = np.random.default_rng(7)
    runs, target = 20_000, 0.10
    for sd, low in ((0.03, 0.94), (0.1, 0.91)):
        d = rng.normal(0.0, sd, (runs, 6))
        covered = np.zeros(runs, bool)
        open_ = np.ones(runs, bool)
        for m in range(3, 7):
            mean, s = d[:, :m].mean(axis=1), d[:, :m].std(axis=1, ddof=1)
            h = stats.t.ppf(0.975, m - 1) * s / math.sqrt(m)
            stop = open_ & ((np.expm1(h) <= target) | (m == 6))
            covered[stop] = np.abs(mean[stop]) <= h[stop]
            open_ &= ~stop
        assert low <= covered.mean() <= 0.96, (sd, covered.mean())
