"""Unit tests of speclib.analysis.stats.block_intervals: simulated interleaved runs with known
truth,
edge cases.

The simulation is the interleaved design measured on the 2-core vLLM machine. In each run
and replicate block every arm (row 0 is the control) gets a fresh server, and requests
alternate between the arms prompt by prompt. The log TPOT of one request is

    prompt base (log-normal; the same prompts in every block, cancelled by pairing)
    + block drift (shared by all arms of a block)
    + log(true ratio of the arm)
    + instance effect (one draw per server and block, SD ``instance_sd``: one number for
      every arm, or one per arm with the control first)
    + regime shift (a -35 % level lasting 12 of the 24 request rounds, starting at a random
      slot of the interleaved sequence, so it hits all arms alike)
    + request noise (SD ``noise_sd``).

Every rng is seeded; the whole file runs in a few seconds.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.stats.block_intervals import ONE_BLOCK_NOTE, block_ratio_cis
from speclib.analysis.stats.block_summary import BlockSummary, block_summary, summarize_blocks
from speclib.analysis.stats.margin_rule import classify
from speclib.core.reasons import Code

pytestmark = pytest.mark.unit

N_RUNS = 800
N_PROMPTS = 24
INSTANCE_SD, NOISE_SD = 0.05, 0.08
SHIFT, SHIFT_ROUNDS = math.log(0.65), 12
MARGIN = 0.05


def simulate_blocks(
    rng: np.random.Generator,
    *,
    runs: int,
    blocks: int,
    ratios: tuple[float, ...],
    n_prompts: int = N_PROMPTS,
    instance_sd: float | tuple[float, ...] = INSTANCE_SD,
    noise_sd: float = NOISE_SD,
) -> tuple[np.ndarray, np.ndarray]:
    """Pair log-ratios ``(runs, blocks, arms, prompts)`` of the non-control arms, and raw logs.

    ``ratios[i]`` is the true TPOT ratio of non-control arm i to the control. Returns the
    pair log-ratios and the raw log TPOT ``(runs, blocks, 1 + arms, prompts)``; request
    ``p`` of arm ``a`` runs at slot ``p * (1 + arms) + a`` of its block.
    """
    n_arm = 1 + len(ratios)
    shape = (runs, blocks, n_arm, n_prompts)
    base = rng.normal(math.log(0.05), 0.5, (runs, 1, 1, n_prompts))
    drift = rng.normal(0, 0.05, (runs, blocks, 1, 1))
    theta = np.log(np.r_[1.0, ratios])[None, None, :, None]
    sd = np.broadcast_to(np.asarray(instance_sd, dtype=float), (n_arm,))[:, None]
    instance = rng.normal(0, 1, (runs, blocks, n_arm, 1)) * sd
    slot = np.arange(n_prompts)[None, :] * n_arm + np.arange(n_arm)[:, None]
    start = rng.integers(0, (n_prompts - SHIFT_ROUNDS) * n_arm + 1, (runs, blocks, 1, 1))
    regime = SHIFT * ((slot >= start) & (slot < start + SHIFT_ROUNDS * n_arm))
    log_tpot = base + drift + theta + instance + regime + rng.normal(0, noise_sd, shape)
    return log_tpot[:, :, 1:] - log_tpot[:, :, :1], log_tpot


def summaries(log_ratio: np.ndarray, names: tuple[str, ...]) -> list[BlockSummary]:
    """One :class:`BlockSummary` per simulated run (vectorised means and variances)."""
    mean = log_ratio.mean(axis=-1).transpose(0, 2, 1)
    var = log_ratio.var(axis=-1, ddof=1).transpose(0, 2, 1)
    n = np.full(mean.shape[1:], log_ratio.shape[-1], dtype=np.int64)
    blocks = tuple(range(mean.shape[-1]))
    return [BlockSummary(names, blocks, m, n, v) for m, v in zip(mean, var, strict=True)]


def interval_table(seed: int, *, blocks: int, ratios, names, aa, reference="control", **kw):
    """``(runs, arms, 2)`` array of log-scale intervals, in the order of ``names``."""
    lr, _ = simulate_blocks(np.random.default_rng(seed), runs=N_RUNS, blocks=blocks,
                            ratios=ratios, **kw)  # fmt: skip
    out = np.empty((N_RUNS, len(names), 2))
    for r, summary in enumerate(summaries(lr, names)):
        res = block_ratio_cis(summary, aa_arm=aa, reference=reference)
        cis = {**res.arms, **({aa: res.aa} if aa else {})}
        out[r] = [[cis[a].ci_low, cis[a].ci_high] for a in names]
    return out


def covers(table: np.ndarray, ratios) -> np.ndarray:
    """Per-arm coverage of the true ratios."""
    truth = np.asarray(ratios)[None, :]
    return ((table[..., 0] <= truth) & (truth <= table[..., 1])).mean(axis=0)


# ----------------------------------------------------------------------- simulations


@pytest.mark.parametrize("blocks", [2, 3, 4])
@pytest.mark.parametrize("with_aa", [False, True])
def test_block_ci_covers_near_nominal(blocks, with_aa):
    """(a) 95 % intervals cover the true ratio in 92-98 % of 800 simulated runs."""
    ratios, names = (1.0, 0.7), ("ngram", "draft")
    if with_aa:
        ratios, names = (*ratios, 1.0), (*names, "aa")
    table = interval_table(10 + blocks, blocks=blocks, ratios=ratios, names=names,
                           aa="aa" if with_aa else None)  # fmt: skip
    coverage = covers(table, ratios)
    assert np.all(np.abs(coverage - 0.95) <= 0.03), coverage


@pytest.mark.parametrize("blocks", [2, 3, 4])
def test_controls_reference_covers_and_is_narrower(blocks):
    """With the aa arm as a second control the interval stays exact and gets narrower."""
    ratios, names = (0.8, 1.0), ("ngram", "aa")
    kw = {"blocks": blocks, "ratios": ratios, "names": names, "aa": "aa"}
    both = interval_table(20 + blocks, reference="controls", **kw)
    assert abs(covers(both, ratios)[0] - 0.95) <= 0.03
    one = interval_table(20 + blocks, reference="control", **kw)
    width = np.log(both[:, 0, 1] / both[:, 0, 0]), np.log(one[:, 0, 1] / one[:, 0, 0])
    assert np.mean(width[0] ** 2) < 0.85 * np.mean(width[1] ** 2)  # about 0.75 in theory


@pytest.mark.parametrize("blocks", [2, 3, 8])
@pytest.mark.parametrize("reference", ["control", "controls"])
def test_noisier_arms_still_cover(blocks, reference):
    """Arms with 1x, 2x, 3x the control's instance variance each cover 92-98 % (a pooled
    variance covered 0.89-0.92 for the noisy arms, at 2 and at 8 blocks alike)."""
    ratios, names = (0.85, 0.85, 0.85, 1.0), ("one", "two", "three", "aa")
    sd = INSTANCE_SD * np.sqrt([1.0, 1.0, 2.0, 3.0, 1.0])
    table = interval_table(90 + blocks, blocks=blocks, ratios=ratios, names=names, aa="aa",
                           reference=reference, instance_sd=tuple(sd))  # fmt: skip
    coverage = covers(table, ratios)
    assert np.all(np.abs(coverage - 0.95) <= 0.03), coverage


@pytest.mark.parametrize("blocks", [2, 3, 4])
def test_false_decisions_under_ratio_one_stay_below_alpha(blocks):
    """(b) With a true ratio of 1 neither "adopt" nor "worse" comes out more than α."""
    ratios, names = (1.0, 1.0), ("ngram", "aa")
    table = interval_table(30 + blocks, blocks=blocks, ratios=ratios, names=names, aa="aa")
    words = [classify(lo, hi, margin=MARGIN).word for lo, hi in table[:, 0]]
    false = np.mean([w in ("adopt", "worse") for w in words])
    assert false <= 0.05 + 0.015, false


def test_naive_prompt_level_interval_undercovers_with_one_launch_per_arm():
    """(c) One launch per arm + a prompt-level paired interval covers far below 95 %."""
    lr, _ = simulate_blocks(np.random.default_rng(40), runs=N_RUNS, blocks=1, ratios=(1.0,))
    pairs = lr[:, 0, 0]
    mean, se = pairs.mean(axis=-1), pairs.std(axis=-1, ddof=1) / math.sqrt(N_PROMPTS)
    half = 2.069 * se  # t[23, 0.975]
    naive = np.mean(np.abs(mean) <= half)
    false_worse = np.mean(mean - half > 0)
    assert naive < 0.6, naive
    assert false_worse > 0.15, false_worse
    summary = summaries(lr, ("ngram",))[0]
    ci = block_ratio_cis(summary).arms["ngram"]
    assert (ci.ci_low, ci.ci_high, ci.df) == (0.0, math.inf, 0)


def test_power_adopts_ratio_point_six_with_three_blocks():
    """(d) A true ratio of 0.6 is adopted in almost every run with B = 3 (24 prompts); with
    B = 2 the arm's own variance has one df (t = 12.7) and only about half the runs adopt."""
    ratios, names = (0.6, 1.0), ("ngram", "aa")
    for blocks, minimum in ((2, 0.4), (3, 0.97)):
        for reference in ("control", "controls"):
            table = interval_table(50, blocks=blocks, ratios=ratios, names=names, aa="aa",
                                   reference=reference)  # fmt: skip
            adopted = np.mean(
                [classify(lo, hi, margin=MARGIN).word == "adopt" for lo, hi in table[:, 0]]
            )
            assert adopted >= minimum, (blocks, reference, adopted)


def test_regime_shift_cancels_in_the_paired_block_means():
    """The -35 % regime shift moves raw TPOT but not the block mean of the log-ratios."""
    rng = np.random.default_rng(60)
    lr, log_tpot = simulate_blocks(rng, runs=200, blocks=1, ratios=(1.0,), instance_sd=0.0)
    raw_spread = np.std(log_tpot[:, 0, 0].mean(axis=-1) - np.log(0.05))
    paired = lr[:, 0, 0].mean(axis=-1)
    assert np.std(paired) < 0.03 < raw_spread  # noise only: sqrt(2) * 0.08 / sqrt(24) = 0.023


# -------------------------------------------------------------------- exact values


def test_complete_design_estimates_equal_block_means():
    means = {"ngram": [-0.2, -0.3, -0.25], "aa": [0.02, -0.01, 0.0], "draft": [0.1, 0.05, 0.12]}
    n = {k: [24, 24, 24] for k in means}
    res = block_ratio_cis(block_summary(means, n_pairs=n), aa_arm="aa")
    assert res.arms["ngram"].estimate == pytest.approx(math.exp(np.mean(means["ngram"])))
    assert res.aa.estimate == pytest.approx(math.exp(np.mean(means["aa"])))
    assert res.df == (4 - 1) * (3 - 1)  # the pooled fit (diagnostic)
    assert res.arms["ngram"].df == res.aa.df == 3 - 1  # each arm: its own blocks - 1
    both = block_ratio_cis(block_summary(means, n_pairs=n), aa_arm="aa", reference="controls")
    contrast = np.subtract(means["ngram"], np.divide(means["aa"], 2))
    assert both.arms["ngram"].estimate == pytest.approx(math.exp(contrast.mean()))
    half = 4.30265273 * np.std(contrast, ddof=1) / math.sqrt(3)  # t[2, 0.975]
    assert math.log(both.arms["ngram"].ci_high) == pytest.approx(contrast.mean() + half)
    assert both.arms["ngram"].reference == "controls" and both.arms["draft"].df == 2
    assert both.arms["ngram"].label == "blocks (own-arm paired t vs mean of control and aa, df=2)"
    assert both.aa.ci_low == pytest.approx(res.aa.ci_low)


def test_one_experiment_two_blocks_matches_the_paired_t_interval():
    d = np.array([-0.21, -0.15])
    res = block_ratio_cis(block_summary({"x": d}, n_pairs={"x": [10, 10]}))
    ci = res.arms["x"]
    half = 12.7062047 * np.std(d, ddof=1) / math.sqrt(2)
    assert (ci.df, ci.n_blocks, ci.n_pairs) == (1, 2, 20)
    assert math.log(ci.ci_low) == pytest.approx(d.mean() - half)
    assert math.log(ci.ci_high) == pytest.approx(d.mean() + half)


def test_components_and_heterogeneity():
    rng = np.random.default_rng(70)
    lr, _ = simulate_blocks(rng, runs=1, blocks=4, ratios=(0.8, 1.0))
    res = block_ratio_cis(summaries(lr, ("ngram", "aa"))[0], aa_arm="aa")
    ci = res.arms["ngram"].blocks
    assert ci.se_within_log > 0 and ci.se_log > 0
    assert 0 <= ci.instance_share <= 1
    assert ci.more_blocks_help is (ci.instance_share > 0.5)
    assert ci.own_df == 3 and 0 <= ci.heterogeneity_p <= 1
    assert res.var_instance is not None and res.sigma2 > 0
    assert json.dumps(res.to_dict())


def test_summarize_blocks_matches_numpy():
    rng = np.random.default_rng(80)
    lr = rng.normal(size=60)
    arm = np.repeat(["ngram", "aa"], 30)
    block = np.tile(np.repeat(["b1", "b2", "b3"], 10), 2)
    s = summarize_blocks(lr, arm=arm, block=block)
    assert s.arms == ("aa", "ngram") and s.blocks == ("b1", "b2", "b3")
    assert s.mean[1, 2] == pytest.approx(lr[20:30].mean())
    assert s.pair_var[0, 0] == pytest.approx(np.var(lr[30:40], ddof=1))
    assert s.n_pairs.tolist() == [[10, 10, 10], [10, 10, 10]]


def test_arm_missing_in_a_block_is_fitted_by_least_squares():
    means = {"ngram": [-0.2, np.nan, -0.25], "draft": [0.1, 0.05, 0.12]}
    n = {"ngram": [24, 0, 24], "draft": [24, 24, 24]}
    res = block_ratio_cis(block_summary(means, n_pairs=n))
    assert res.arms["ngram"].n_blocks == 2 and res.df == 8 - (3 + 2)  # cells - rank
    assert res.arms["ngram"].df == 1 and res.arms["draft"].df == 2
    assert 0 < res.arms["ngram"].ci_low < res.arms["ngram"].ci_high < math.inf


def test_a_noisy_arm_gets_a_wider_interval_than_a_quiet_one():
    """Same blocks, same mean: the arm whose block means scatter more gets the wider interval
    (with one pooled variance both had the same width)."""
    means = {"quiet": [-0.20, -0.22, -0.18], "noisy": [-0.05, -0.35, -0.20]}
    n = {k: [6, 6, 6] for k in means}
    res = block_ratio_cis(block_summary(means, n_pairs=n))
    quiet, noisy = res.arms["quiet"], res.arms["noisy"]
    assert quiet.estimate == pytest.approx(noisy.estimate)
    assert math.log(noisy.ci_high / noisy.ci_low) > 5 * math.log(quiet.ci_high / quiet.ci_low)
    assert noisy.blocks.se_log == pytest.approx(np.std(means["noisy"], ddof=1) / math.sqrt(3))


@pytest.mark.parametrize("reference", ["control", "controls"])
def test_an_arms_interval_ignores_another_arms_noise(reference):
    """Making one experiment arm noisier leaves every other arm's interval unchanged."""
    base = {"ngram": [-0.20, -0.25, -0.18], "aa": [0.01, -0.02, 0.00]}
    n = {"ngram": [6, 5, 7], "aa": [6, 5, 7], "draft": [6, 5, 7]}
    quiet = block_ratio_cis(block_summary({**base, "draft": [-0.1, -0.12, -0.11]}, n_pairs=n),
                            aa_arm="aa", reference=reference)  # fmt: skip
    loud = block_ratio_cis(block_summary({**base, "draft": [0.4, -0.6, 0.1]}, n_pairs=n),
                           aa_arm="aa", reference=reference)  # fmt: skip
    for name in ("ngram",):
        a, b = quiet.arms[name], loud.arms[name]
        assert (a.ci_low, a.ci_high, a.df) == pytest.approx((b.ci_low, b.ci_high, b.df))
    assert quiet.aa.ci_high == pytest.approx(loud.aa.ci_high)
    assert loud.arms["draft"].blocks.se_log > 10 * quiet.arms["draft"].blocks.se_log


# ------------------------------------------------------------------- degenerate data


def test_one_block_without_aa_cannot_decide():
    s = block_summary({"ngram": [-0.4]}, n_pairs={"ngram": [24]}, pair_var={"ngram": [0.01]})
    res = block_ratio_cis(s)
    ci = res.arms["ngram"]
    assert (ci.ci_low, ci.ci_high, ci.df, ci.decidable) == (0.0, math.inf, 0, False)
    assert ci.note == ONE_BLOCK_NOTE == res.note and ci.note.code is Code.NO_DF
    assert classify(ci.ci_low, ci.ci_high, margin=MARGIN).word == "inconclusive"
    assert ci.to_dict()["ci_high"] is None and ci.to_dict()["decidable"] is False


def test_one_block_with_aa_still_cannot_decide():
    """The aa arm does not reveal the experiment's own instance variance: one block, 0 df."""
    s = block_summary({"ngram": [-0.4], "aa": [0.01]}, n_pairs={"ngram": [24], "aa": [24]})
    for reference in ("control", "controls"):
        res = block_ratio_cis(s, aa_arm="aa", reference=reference)
        assert res.arms["ngram"].df == 0 and not res.arms["ngram"].decidable
        assert res.note == ONE_BLOCK_NOTE and res.aa.df == 0


def test_all_equal_block_means_warn_and_give_zero_width_not_nan():
    s = block_summary({"ngram": [-0.1, -0.1], "aa": [0.0, 0.0]}, n_pairs={"ngram": [5, 5],
                      "aa": [5, 5]}, pair_var={"ngram": [0.0, 0.0], "aa": [0.0, 0.0]})  # fmt: skip
    with pytest.warns(DegenerateDataWarning, match="zero width"):
        res = block_ratio_cis(s, aa_arm="aa")
    ci = res.arms["ngram"]
    assert ci.ci_low == pytest.approx(ci.estimate) == pytest.approx(ci.ci_high)
    assert ci.estimate == pytest.approx(math.exp(-0.1))
    assert ci.blocks.instance_share is None and ci.note is not None
    flat = json.dumps(res.to_dict())
    assert "NaN" not in flat


def test_no_warning_on_ordinary_data():
    s = block_summary({"x": [-0.1, -0.2, -0.15]}, n_pairs={"x": [5, 5, 5]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        block_ratio_cis(s)


# ------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"confidence_level": 1.0}, "`confidence_level`"),
        ({"reference": "both"}, "`reference`"),
        ({"aa_arm": "bb"}, "`aa_arm`"),
        ({"reference": "controls"}, "needs `aa_arm`"),
    ],
)
def test_options_are_validated(kwargs, match):
    s = block_summary({"x": [0.1, 0.2], "aa": [0.0, 0.1]}, n_pairs={"x": [3, 3], "aa": [3, 3]})
    with pytest.raises(ValueError, match=match):
        block_ratio_cis(s, **kwargs)


def test_inputs_are_validated():
    with pytest.raises(ValueError, match="`summary`"):
        block_ratio_cis({"x": [0.1]})
    with pytest.raises(ValueError, match="`means`"):
        block_summary({}, n_pairs={})
    with pytest.raises(ValueError, match="same, non-zero number of blocks"):
        block_summary({"x": [0.1, 0.2], "y": [0.1]}, n_pairs={"x": [3, 3], "y": [3]})
    with pytest.raises(ValueError, match="`n_pairs`"):
        block_summary({"x": [0.1, 0.2]}, n_pairs={"x": [3]})
    with pytest.raises(ValueError, match="`n_pairs`"):
        block_summary({"x": [0.1]}, n_pairs={"y": [3]})
    with pytest.raises(ValueError, match="`pair_var`"):
        block_summary({"x": [0.1]}, n_pairs={"x": [3]}, pair_var={"x": [-1.0]})
    with pytest.raises(ValueError, match="no pairs in any block"):
        block_ratio_cis(block_summary({"x": [np.nan]}, n_pairs={"x": [0]}))
    with pytest.raises(ValueError, match="finite means"):
        block_ratio_cis(block_summary({"x": [np.nan]}, n_pairs={"x": [4]}))
    with pytest.raises(ValueError, match="`log_ratio`"):
        summarize_blocks([0.1, np.nan], arm=["a", "a"], block=[0, 1])
    with pytest.raises(ValueError, match="`arm`"):
        summarize_blocks([0.1, 0.2], arm=["a"], block=[0, 1])
    with pytest.raises(ValueError, match="`block`"):
        summarize_blocks([0.1, 0.2], arm=["a", "a"], block=[0, None])
