"""Unit tests of speclib.analysis.stats.sequential: spending values, the rule, simulated error
rates.

The simulations reuse the interleaved-design simulator of ``test_blocks.py`` (prompt
bases, block drift, instance effects, a -35 % regime shift hitting all arms alike,
request noise): each run has up to four blocks of one experiment, an aa arm and the
control, and looks after 2, 3 and 4 blocks at the levels of the O'Brien–Fleming-type plan.
A decision is false when its claim is untrue of the true ratio: at ratio 1 "adopt" and
"worse"; at ``1 - δ`` every decision (the boundary belongs to neither side); at ``1 + δ``
"adopt" and "equivalent".
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import numpy as np
import pytest

from speclib.analysis.stats.block_intervals import block_ratio_cis
from speclib.analysis.stats.paired import paired_ratio_ci
from speclib.analysis.stats.sequential import (
    SpendingPlan,
    first_decisive_look,
    interval_word,
    obrien_fleming_spending,
    spending_plan,
)
from speclib.analysis.verdict.decision import decide
from tests.unit.test_blocks import simulate_blocks, summaries

pytestmark = pytest.mark.unit

N_RUNS = 1000
MARGIN = 0.05
ALPHA = 0.05
FALSE_WORDS = {
    1.0: {"adopt", "worse"},
    1 - MARGIN: {"adopt", "equivalent", "worse"},
    1 + MARGIN: {"adopt", "equivalent"},
}


def _first_blocks(summary, blocks: int):
    """The summary of the first ``blocks`` blocks only (what a look after them sees)."""
    return dataclasses.replace(
        summary, blocks=summary.blocks[:blocks], mean=summary.mean[:, :blocks],
        n_pairs=summary.n_pairs[:, :blocks], pair_var=summary.pair_var[:, :blocks],
    )  # fmt: skip


@functools.cache
def sequential_words(seed: int, ratio: float, *, reference="control", naive=False) -> list[str]:
    """Decision of each simulated run: the first decisive look of up to 4 blocks (cached)."""
    plan = spending_plan(4, min_blocks=2, alpha=ALPHA)
    levels = [1 - ALPHA] * len(plan.looks) if naive else plan.confidence_levels
    lr, _ = simulate_blocks(np.random.default_rng(seed), runs=N_RUNS, blocks=4,
                            ratios=(ratio, 1.0))  # fmt: skip
    words = []
    for summary in summaries(lr, ("ngram", "aa")):
        intervals = []
        for blocks, level in zip(plan.looks, levels, strict=True):
            part = _first_blocks(summary, blocks)
            ci = block_ratio_cis(part, aa_arm="aa", reference=reference, confidence_level=level)
            intervals.append((ci.arms["ngram"].ci_low, ci.arms["ngram"].ci_high))
            result = first_decisive_look(intervals, plan=plan, margin=MARGIN)
            if result.final:
                break
        words.append(result.word)
    return words


# ----------------------------------------------------------------------- simulations


@pytest.mark.parametrize("ratio", sorted(FALSE_WORDS))
def test_sequential_looks_keep_false_decisions_below_alpha(ratio):
    """(e) Up to 4 blocks, looks at 2, 3, 4: false decisions in at most α (+ MC slack)."""
    words = sequential_words(300, ratio)
    false = np.mean([w in FALSE_WORDS[ratio] for w in words])
    assert false <= ALPHA + 0.015, (ratio, false)


def test_sequential_looks_with_the_aa_arm_as_second_control():
    words = sequential_words(200, 1 - MARGIN, reference="controls")
    assert np.mean([w in FALSE_WORDS[1 - MARGIN] for w in words]) <= ALPHA + 0.015


def test_repeated_nominal_looks_err_more_than_spending():
    """Looking at plain 95 % intervals after every block errs more often than the plan."""
    spent = np.mean([w in FALSE_WORDS[1.0] for w in sequential_words(300, 1.0)])
    naive = np.mean([w in FALSE_WORDS[1.0] for w in sequential_words(300, 1.0, naive=True)])
    assert naive > spent


def test_sequential_looks_adopt_a_large_speedup_early():
    words = sequential_words(400, 0.6)
    assert np.mean([w == "adopt" for w in words]) >= 0.9


# --------------------------------------------------------------------- the plan


def test_obrien_fleming_spending_values():
    a = obrien_fleming_spending([0.0, 0.25, 0.5, 0.75, 1.0], alpha=0.05)
    assert a[0] == 0.0 and a[-1] == pytest.approx(0.05)
    assert np.all(np.diff(a) > 0)
    assert a[2] == pytest.approx(0.0055746, abs=1e-7)  # 2 - 2 Φ(1.959964 / sqrt(0.5))


def test_spending_plan_for_four_blocks():
    plan = spending_plan(4, min_blocks=2, alpha=0.05)
    assert plan.looks == (2, 3, 4) and plan.information == (0.5, 0.75, 1.0)
    assert plan.alpha_spent == pytest.approx((0.005575, 0.018051, 0.026375), abs=1e-5)
    assert sum(plan.alpha_spent) == pytest.approx(0.05)
    assert plan.level_at(4) == pytest.approx(1 - plan.alpha_spent[-1])
    assert spending_plan(2, min_blocks=2).confidence_levels == pytest.approx((0.95,))
    assert json.dumps(plan.to_dict())


def test_first_decisive_look_stops_at_the_first_decision():
    plan = spending_plan(4)
    inf = math.inf
    go_on = first_decisive_look([(0.0, inf)], plan=plan, margin=MARGIN)
    assert (go_on.word, go_on.final, go_on.blocks) == ("inconclusive", False, 2)
    assert "add a block" in go_on.reason
    hit = first_decisive_look([(0.5, 1.2), (0.7, 0.9), (1.1, 1.2)], plan=plan, margin=MARGIN)
    assert (hit.word, hit.look, hit.blocks, hit.final) == ("adopt", 1, 3, True)
    assert hit.confidence_level == plan.confidence_levels[1]
    assert hit.alpha_spent == pytest.approx(plan.cumulative_alpha[1])
    end = first_decisive_look([(0.5, 1.2)] * 3, plan=plan, margin=MARGIN)
    assert (end.word, end.final, end.look) == ("inconclusive", True, 2)
    assert "last planned look" in end.reason


@pytest.mark.parametrize(
    ("low", "high", "word"),
    [
        (0.70, 0.90, "adopt"),
        (0.96, 1.04, "equivalent"),
        (1.01, 1.04, "equivalent"),
        (1.01, 1.20, "worse"),
        (0.90, 1.10, "inconclusive"),
        (0.0, math.inf, "inconclusive"),
    ],
)
def test_interval_word_matches_decide(low, high, word):
    assert interval_word(low, high, margin=MARGIN) == word
    rng = np.random.default_rng(0)
    c = rng.lognormal(-3, 0.3, 30)
    ci = paired_ratio_ci(c, c * rng.lognormal(0, 0.05, 30), rng=rng, n_resamples=200)
    ci = dataclasses.replace(ci, ci_low=low, ci_high=high, estimate=min(max(1.0, low), high))
    assert decide(ci, margin=MARGIN).word == word


# ------------------------------------------------------------------------ validation


def test_inputs_are_validated():
    plan = spending_plan(3)
    with pytest.raises(ValueError, match="`alpha`"):
        spending_plan(3, alpha=1.5)
    with pytest.raises(ValueError, match="`max_blocks`"):
        spending_plan(0)
    with pytest.raises(ValueError, match="`min_blocks`"):
        spending_plan(3, min_blocks=4)
    with pytest.raises(ValueError, match="`min_blocks` must be at least 2"):
        spending_plan(3, min_blocks=1)
    with pytest.raises(ValueError, match="`t`"):
        obrien_fleming_spending([1.2])
    with pytest.raises(ValueError, match="`margin`"):
        interval_word(0.9, 1.1, margin=0)
    with pytest.raises(ValueError, match="`low`"):
        interval_word(1.1, 0.9, margin=MARGIN)
    with pytest.raises(ValueError, match="`plan`"):
        first_decisive_look([(0.9, 1.1)], plan=None, margin=MARGIN)
    with pytest.raises(ValueError, match="`intervals`"):
        first_decisive_look([(0.9, 1.1)] * 3, plan=plan, margin=MARGIN)
    with pytest.raises(ValueError, match="`intervals\\[0\\]`"):
        first_decisive_look([(0.9,)], plan=plan, margin=MARGIN)
    with pytest.raises(ValueError, match="`blocks`"):
        plan.level_at(1)
    assert isinstance(plan, SpendingPlan)


# ------------------------------------------------------ the family and frozen looks


def _pairs(block_log_ratios, n=6, seed=0):
    """Pairs with the control whose replicate ``b`` has mean log-ratio ``block_log_ratios[b]``."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    frames = []
    for b, d in enumerate(block_log_ratios):
        noise = rng.normal(0, 0.01, n)
        noise -= noise.mean()
        c = np.full(n, 0.05)
        frames.append(pd.DataFrame({"tpot_s_c": c, "tpot_s_e": c * np.exp(d + noise),
                                    "replicate": b, "prompt_id": np.arange(n)}))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def test_holm_runs_over_every_arm_and_load_level():
    """Two arms at two load levels are one family of four: the first Holm round is at
    1 - α/4 for every comparison, and the family is said in words."""
    from speclib.analysis.verdict.tpot_verdict import decide_family

    arms = {"a": _pairs([-0.5, -0.52, -0.49]), "b": _pairs([-0.3, -0.31, -0.29], seed=1)}
    found = decide_family({0: arms, 1: arms}, experiments=["a", "b"], aa_arm=None,
                          confidence=0.95, margin=MARGIN)  # fmt: skip
    for level in (0, 1):
        for arm in ("a", "b"):
            ci, decision = found[level].experiments[arm]
            assert decision.word == "adopt"
            assert ci.confidence_level == pytest.approx(1 - 0.05 / 4)
    assert "over 4 comparisons: 2 arms × 2 load levels" in found[0].family
    assert "A/A arm is not in the family" in found[0].family


def test_a_decision_at_an_early_look_is_frozen():
    """Adopted at look 1 (2 blocks), the arm keeps that decision and its interval at that
    look's level, although all four blocks together would be inconclusive."""
    from speclib.analysis.verdict.tpot_verdict import decide_family

    plan = spending_plan(4, min_blocks=2, alpha=ALPHA)
    arms = {"x": _pairs([-0.40, -0.401, 0.6, -0.9])}
    looks = list(zip(plan.looks, plan.confidence_levels, strict=True))
    frozen = decide_family({0: arms}, experiments=["x"], aa_arm=None, confidence=0.95,
                           margin=MARGIN, looks=looks)[0]  # fmt: skip
    ci, decision = frozen.experiments["x"]
    assert decision.word == "adopt" and frozen.looks == {"x": 0}
    assert ci.confidence_level == pytest.approx(plan.confidence_levels[0])
    assert ci.n_launches == 2 and ci.df == 1
    at_once = decide_family({0: arms}, experiments=["x"], aa_arm=None,
                            confidence=plan.confidence_levels[-1], margin=MARGIN)[0]  # fmt: skip
    assert at_once.experiments["x"][1].word == "inconclusive"


# ------------------------------------------- run until decided: a cap and a time budget

BUDGET_RUNS = 500
GPU_SD = (0.003, 0.05)  # control, speculative arm: launch to launch on one H100
CPU_SD = (0.035, 0.13)  # the 2-core CPU demo's


@functools.cache
def budgeted(seed: int, ratio: float, instance_sd: tuple[float, float], *, naive=False):
    """Final ``(word, low, high)`` of runs that look after 2..6 blocks (the cap 6) at the
    plan's levels, the time budget ending each run after a number of blocks drawn apart
    from its data (uniform 2..6); with ``naive``, every look at 95 %."""
    rng = np.random.default_rng(seed)
    plan = spending_plan(6, min_blocks=2, alpha=ALPHA)
    levels = [1 - ALPHA] * len(plan.looks) if naive else list(plan.confidence_levels)
    lr, _ = simulate_blocks(rng, runs=BUDGET_RUNS, blocks=6, ratios=(ratio,),
                            instance_sd=instance_sd)  # fmt: skip
    budget = rng.integers(2, 7, BUDGET_RUNS)
    out = []
    for summary, last in zip(summaries(lr, ("x",)), budget, strict=True):
        intervals = []
        for blocks, level in zip(plan.looks, levels, strict=True):
            part = _first_blocks(summary, blocks)
            ci = block_ratio_cis(part, confidence_level=level).arms["x"]
            intervals.append((ci.ci_low, ci.ci_high))
            result = first_decisive_look(intervals, plan=plan, margin=MARGIN)
            if result.final or blocks >= last:
                break
        out.append((result.word, *intervals[result.look]))
    return out


@pytest.mark.parametrize(("ratio", "sd"), [(1 - MARGIN, GPU_SD), (1.0, CPU_SD), (1.0, GPU_SD)])
def test_spending_by_the_cap_holds_when_a_budget_ends_the_run(ratio, sd):
    """GPU-like (arm ±5 %, control ±0.3 %) and CPU-like instance noise, a budget ending runs
    between the first look and the cap: the final interval covers the true ratio at least
    at the nominal level and false decisions stay below α (+ Monte Carlo slack)."""
    found = budgeted(560, ratio, sd)
    cover = np.mean([lo <= ratio <= hi for _, lo, hi in found])
    false = np.mean([w in FALSE_WORDS[ratio] for w, _, _ in found])
    assert cover >= 1 - ALPHA - 0.015, cover
    assert false <= ALPHA + 0.015, false


def test_looks_at_95_percent_each_would_fail_that_check():
    """The same runs looked at with plain 95 % intervals: coverage and false decisions both
    miss (what the spending is for, and proof that the check above can fail)."""
    found = budgeted(560, 1 - MARGIN, GPU_SD, naive=True)
    cover = np.mean([lo <= 1 - MARGIN <= hi for _, lo, hi in found])
    false = np.mean([w in FALSE_WORDS[1 - MARGIN] for w, _, _ in found])
    assert cover < 1 - ALPHA - 0.015 and false > ALPHA + 0.015, (cover, false)


def test_blocks_to_decide_is_where_the_projected_half_width_first_fits():
    """×1.30 over 3 blocks (df 2), block SD held: the answer is the first block count whose
    t half-width at the plan's level (same Holm share) is below log 1.30 ("worse")."""
    from scipy import stats

    from speclib.analysis.stats.sequential import blocks_to_decide

    plan = spending_plan(5, min_blocks=3, alpha=ALPHA)
    share, sd = 1 / 3, 0.30  # the interval was Holm's first step of three
    a_now = plan.alpha_spent[0] * share
    half_now = stats.t.isf(a_now / 2, 2) * sd / math.sqrt(3)
    found = blocks_to_decide(estimate=1.30, ci_high=1.30 * math.exp(half_now), df=2,
                             confidence_level=1 - a_now, family_alpha=plan.alpha_spent[0],
                             margin=MARGIN, plan=plan)  # fmt: skip
    by_hand = next(
        b for b in range(4, 100)
        if stats.t.isf((plan.alpha_spent[plan.looks.index(b)] if b <= 5 else
                        spending_plan(b, min_blocks=3).alpha_spent[-1]) * share / 2, b - 1)
        * sd / math.sqrt(b) < math.log(1.30)
    )  # fmt: skip
    assert found == (by_hand, "worse") and by_hand > 3


def test_blocks_to_decide_says_when_nothing_would():
    from speclib.analysis.stats.sequential import blocks_to_decide, decision_distance

    plan = spending_plan(4, min_blocks=2)
    opts = {"confidence_level": 0.99, "family_alpha": 0.01, "margin": MARGIN, "plan": plan}
    assert blocks_to_decide(estimate=1.2, ci_high=math.inf, df=0, **opts) == (None, None)
    at_margin = blocks_to_decide(estimate=1 - MARGIN, ci_high=1.2, df=3, **opts)
    assert at_margin == (None, None)  # at 1 − δ no width decides: adopt, equivalent or worse
    near = blocks_to_decide(estimate=0.9499, ci_high=1.2, df=3, **opts)
    assert near == (None, "adopt")  # 0.01 % below 1 − δ: not within 100 blocks
    assert decision_distance(0.8, margin=MARGIN) == (pytest.approx(math.log(0.95 / 0.8)),
                                                     "adopt")  # fmt: skip
    assert decision_distance(1.0, margin=MARGIN)[1] == "equivalent"
    with pytest.raises(ValueError, match="`estimate`"):
        decision_distance(-1.0, margin=MARGIN)
    with pytest.raises(ValueError, match="`df`"):
        blocks_to_decide(estimate=1.2, ci_high=1.5, df=-1, **opts)
