"""Unit tests of speclib.analysis.stats.paired and verdict.decision: simulations with known
truth, edge cases.

Simulated TPOT is log-normal: a per-prompt base (which pairing cancels), a per-launch
offset for each series (launch noise, which pairing does not cancel) and per-request noise.
The true geometric-mean ratio is therefore exactly ``ratio``. Every rng is seeded.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from speclib.analysis.stats.base import DegenerateDataWarning, holm_adjust
from speclib.analysis.stats.clustered import two_stage_interval
from speclib.analysis.stats.paired import RatioCI, paired_ratio_ci, wilcoxon_logratio
from speclib.analysis.verdict.decision import Decision, decide, holm_decide
from speclib.analysis.verdict.gates import (
    E2eGate,
    ErrorGate,
    GateEvidence,
    MemoryGate,
    OutputGate,
    TtftGate,
    apply_gates,
)

pytestmark = pytest.mark.unit

N_SIM = 400
N_RESAMPLES = 1000
LAUNCHES, PER_LAUNCH = 6, 30
LAUNCH_SD, NOISE_SD = 0.03, 0.08  # log-scale sd of a launch offset / of one request


def simulate(rng, *, ratio, launches=LAUNCHES, per_launch=PER_LAUNCH, launch_sd=LAUNCH_SD,
             noise_sd=NOISE_SD):  # fmt: skip
    """One experiment: flat ``control, experiment, clusters`` arrays."""
    shape = (launches, per_launch)
    base = np.exp(rng.normal(np.log(0.05), 0.5, shape))
    control = base * np.exp(
        rng.normal(0, launch_sd, (launches, 1)) + rng.normal(0, noise_sd, shape)
    )
    offset = rng.normal(0, launch_sd, (launches, 1)) + rng.normal(0, noise_sd, shape)
    experiment = base * ratio * np.exp(offset)
    clusters = np.repeat(np.arange(launches), per_launch)
    return control.ravel(), experiment.ravel(), clusters


def run_many(seed, *, ratio, clustered=True, n_sim=N_SIM, **design):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_sim):
        c, e, cl = simulate(rng, ratio=ratio, **design)
        out.append(
            paired_ratio_ci(
                c, e, clusters=cl if clustered else None, n_resamples=N_RESAMPLES, rng=rng
            )
        )
    return out


def coverage(cis, truth):
    return np.mean([ci.ci_low < truth < ci.ci_high for ci in cis])


def rate(cis, word, *, margin):
    return np.mean([decide(ci, margin=margin).word == word for ci in cis])


@pytest.fixture(scope="module")
def launch_noise_runs():
    """The same 400 simulated experiments (true ratio 0.85) analysed with and without launches."""
    two_stage = run_many(1, ratio=0.85, clustered=True)
    one_stage = run_many(1, ratio=0.85, clustered=False)
    return two_stage, one_stage


# --------------------------------------------------------------- simulations with truth


def test_two_stage_ci_covers_true_ratio_at_nominal_rate(launch_noise_runs):
    two_stage, _ = launch_noise_runs
    assert all(ci.method == "two-stage" and ci.n_launches == LAUNCHES for ci in two_stage)
    assert 0.92 <= coverage(two_stage, 0.85) <= 0.98


def test_ignoring_launches_under_covers(launch_noise_runs):
    two_stage, one_stage = launch_noise_runs
    assert all(ci.method == "BCa" for ci in one_stage)
    assert coverage(one_stage, 0.85) < 0.90
    assert coverage(one_stage, 0.85) < coverage(two_stage, 0.85) - 0.05


def test_internal_routine_matches_public_and_covers_in_batch():
    """The batch routine the public function uses, on 400 experiments at once."""
    rng = np.random.default_rng(2)
    shape = (N_SIM, LAUNCHES, PER_LAUNCH)
    launch = rng.normal(0, LAUNCH_SD * math.sqrt(2), (*shape[:2], 1))
    y = math.log(0.85) + launch + rng.normal(0, NOISE_SD * math.sqrt(2), shape)
    sizes = np.full(shape[:2], PER_LAUNCH)
    est, low, high, _ = two_stage_interval(
        y, sizes, confidence_level=0.95, n_resamples=N_RESAMPLES, rng=rng
    )
    assert np.allclose(est, y.mean(axis=(1, 2)))
    assert 0.92 <= np.mean((low < math.log(0.85)) & (math.log(0.85) < high)) <= 0.98
    one = paired_ratio_ci(
        np.ones(y[0].size), np.exp(y[0].ravel()), clusters=np.repeat(np.arange(LAUNCHES), 30),
        n_resamples=N_RESAMPLES, rng=np.random.default_rng(5),
    )  # fmt: skip
    assert one.estimate == pytest.approx(math.exp(est[0]))


def test_unequal_launch_sizes_still_cover():
    """Launches that lost some requests: padded rows, the general (unbalanced) path."""
    rng = np.random.default_rng(17)
    sizes = np.array([30, 24, 30, 18, 27, 30])
    shape = (N_SIM, sizes.size, sizes.max())
    launch = rng.normal(0, LAUNCH_SD * math.sqrt(2), (*shape[:2], 1))
    y = math.log(0.85) + launch + rng.normal(0, NOISE_SD * math.sqrt(2), shape)
    y = np.where(np.arange(shape[2]) < sizes[:, None], y, np.nan)
    batch_sizes = np.broadcast_to(sizes, shape[:2])
    est, low, high, _ = two_stage_interval(
        y, batch_sizes, confidence_level=0.95, n_resamples=N_RESAMPLES, rng=rng
    )
    assert np.allclose(est, np.nanmean(y, axis=(1, 2)))
    assert 0.92 <= np.mean((low < math.log(0.85)) & (math.log(0.85) < high)) <= 0.98
    labels = np.repeat(["a", "b", "c", "d", "e", "f"], sizes)
    ci = paired_ratio_ci(
        np.ones(sizes.sum()), np.exp(y[0][~np.isnan(y[0])]), clusters=labels, rng=rng
    )
    assert ci.n_launches == 6 and ci.n_pairs == sizes.sum()
    assert ci.ci_low < ci.estimate < ci.ci_high


def test_no_true_effect_is_rarely_adopted():
    cis = run_many(3, ratio=1.0, n_sim=200)
    assert rate(cis, "adopt", margin=0.02) <= 0.05
    assert rate(cis, "adopt", margin=0.05) <= 0.05


def test_a_speedup_exactly_at_the_margin_is_rarely_adopted_unless_launches_are_ignored():
    """At truth 1 - δ "adopt" is a false positive: ≤ 2.5 % by design for the two-stage CI."""
    two_stage = run_many(16, ratio=0.95, n_sim=200)
    one_stage = run_many(16, ratio=0.95, n_sim=200, clustered=False)
    assert rate(two_stage, "adopt", margin=0.05) <= 0.05
    assert rate(one_stage, "adopt", margin=0.05) >= 0.10


def test_a_real_speedup_is_adopted_with_enough_data():
    cis = run_many(4, ratio=0.80, n_sim=200)
    assert rate(cis, "adopt", margin=0.05) >= 0.90


def test_equal_speed_with_many_launches_is_equivalent():
    cis = run_many(5, ratio=1.0, n_sim=200, launches=12)
    assert rate(cis, "equivalent", margin=0.05) >= 0.75
    assert rate(cis, "worse", margin=0.05) <= 0.05


def test_a_slowdown_is_worse():
    cis = run_many(6, ratio=1.15, n_sim=100)
    assert rate(cis, "worse", margin=0.05) >= 0.90


def test_variance_share_recovers_the_components():
    rng = np.random.default_rng(7)
    # log-ratio components: between 2*0.05**2, within 2*0.05**2 → share 0.5
    c, e, cl = simulate(rng, ratio=0.9, launches=40, per_launch=50, launch_sd=0.05, noise_sd=0.05)
    ci = paired_ratio_ci(c, e, clusters=cl, n_resamples=200, rng=rng)
    assert ci.between_launch_share == pytest.approx(0.5, abs=0.15)
    assert ci.more_launches_help is True
    c, e, cl = simulate(rng, ratio=0.9, launches=6, per_launch=30, launch_sd=0.0, noise_sd=0.1)
    quiet = paired_ratio_ci(c, e, clusters=cl, n_resamples=200, rng=rng)
    assert quiet.between_launch_share < 0.05
    assert quiet.more_launches_help is False


def test_two_stage_interval_widens_with_launch_noise():
    rng = np.random.default_rng(8)
    widths = []
    for launch_sd in (0.0, 0.05):
        c, e, cl = simulate(rng, ratio=0.9, launch_sd=launch_sd)
        ci = paired_ratio_ci(c, e, clusters=cl, n_resamples=N_RESAMPLES, rng=rng)
        widths.append(math.log(ci.ci_high / ci.ci_low))
    assert widths[1] > 1.5 * widths[0]


# ------------------------------------------------------------------ planning more data


def test_extra_pairs_estimate_is_roughly_right():
    """Topping up by the planned amount reaches the target often, but not always."""
    rng = np.random.default_rng(9)
    tried = reached = 0
    while tried < 60:
        lr = rng.normal(math.log(0.92), 0.15, 40)
        ci = paired_ratio_ci(np.ones(40), np.exp(lr), method="percentile", n_resamples=500, rng=rng)
        plan = decide(ci, margin=0.05)
        if plan.word != "inconclusive" or plan.target_word != "adopt":
            continue
        assert plan.extra_launches_needed is None  # no launches in this design
        more = rng.normal(math.log(0.92), 0.15, plan.extra_pairs_needed)
        full = np.concatenate([lr, more])
        again = paired_ratio_ci(
            np.ones(full.size), np.exp(full), method="percentile", n_resamples=500, rng=rng
        )
        tried += 1
        reached += decide(again, margin=0.05).word == "adopt"
    print(f"planned top-up reached 'adopt' in {reached}/{tried}")
    assert 0.25 <= reached / tried <= 0.85


def test_extra_data_planning_is_consistent_with_its_assumption():
    ci = RatioCI(
        estimate=0.93, ci_low=0.88, ci_high=0.98, confidence_level=0.95, method="BCa",
        n_pairs=100, n_launches=1, median_delta=-0.001, wilcoxon_p=0.01,
        between_launch_share=None, more_launches_help=None, var_between=None,
        var_within=0.02, n_resamples=4000,
    )  # fmt: skip
    plan = decide(ci, margin=0.05)
    assert plan.word == "inconclusive" and plan.target_word == "adopt"

    def scaled(n):
        s = math.sqrt(ci.n_pairs / n)
        return math.exp(math.log(0.93) + s * math.log(0.98 / 0.93))

    total = ci.n_pairs + plan.extra_pairs_needed
    assert scaled(total) < 0.95 <= scaled(total - 1)


def test_launch_noise_floor_makes_more_prompts_useless():
    ci = RatioCI(
        estimate=0.93, ci_low=0.80, ci_high=1.08, confidence_level=0.95, method="two-stage",
        n_pairs=90, n_launches=3, median_delta=-0.001, wilcoxon_p=0.2,
        between_launch_share=0.5, more_launches_help=True, var_between=0.01,
        var_within=0.01, n_resamples=4000,
    )  # fmt: skip
    plan = decide(ci, margin=0.05)
    assert plan.word == "inconclusive"
    assert plan.extra_pairs_needed is None
    assert plan.extra_launches_needed is not None and plan.extra_launches_needed > 0
    assert "more launches" in plan.reason


def test_extra_launches_use_the_intervals_own_df():
    """A t-interval on fewer df than launches - 1 needs fewer extra launches to shrink: the
    plan follows ``ci.df`` (growing by one per launch), not ``n_launches - 1``."""
    common = dict(
        estimate=0.93, ci_low=0.80, ci_high=1.08, confidence_level=0.95, method="blocks",
        n_pairs=30, n_launches=3, median_delta=-0.001, wilcoxon_p=None,
        between_launch_share=0.9, more_launches_help=True, var_between=0.01,
        var_within=0.001, n_resamples=0,
    )  # fmt: skip
    by_launches = decide(RatioCI(**common), margin=0.05).extra_launches_needed
    same = decide(RatioCI(**common, df=2), margin=0.05).extra_launches_needed
    fewer = decide(RatioCI(**common, df=1), margin=0.05).extra_launches_needed
    assert by_launches == same and fewer is not None and fewer < same
    assert decide(RatioCI(**common, df=0), margin=0.05).extra_launches_needed is None


def test_finite_median_can_skip_non_positive_tpots():
    import pandas as pd

    from speclib.analysis.frames import finite_median

    values = pd.Series([0.0, 0.0, 0.0, 0.02, 0.03, "x", float("inf"), -1.0])
    assert finite_median(values, positive=True) == pytest.approx(0.025)
    assert finite_median(values) == 0.0  # acceptance rates: 0 is a value
    assert finite_median(pd.Series([0.0, -0.1]), positive=True) is None


def test_estimate_on_a_boundary_needs_no_finite_amount():
    ci = RatioCI(
        estimate=0.95, ci_low=0.90, ci_high=1.00, confidence_level=0.95, method="BCa",
        n_pairs=50, n_launches=1, median_delta=0.0, wilcoxon_p=0.1,
        between_launch_share=None, more_launches_help=None, var_between=None,
        var_within=0.01, n_resamples=4000,
    )  # fmt: skip
    plan = decide(ci, margin=0.05)
    assert plan.word == "inconclusive"
    assert plan.extra_pairs_needed is None and plan.extra_launches_needed is None


# ---------------------------------------------------------------------- degenerate data


def _no_nan(obj):
    return json.loads(json.dumps(obj.to_dict(), allow_nan=False))


def test_all_log_ratios_equal_gives_zero_width_interval_and_a_warning():
    control = np.linspace(0.02, 0.08, 30)
    with pytest.warns(DegenerateDataWarning, match="all log-ratios are equal"):
        ci = paired_ratio_ci(control, 0.8 * control, rng=np.random.default_rng(0))
    assert ci.method == "percentile" and "all log-ratios are equal" in ci.note
    assert ci.estimate == pytest.approx(0.8)
    assert ci.ci_low == pytest.approx(0.8) and ci.ci_high == pytest.approx(0.8)
    assert decide(ci, margin=0.05).word == "adopt"
    _no_nan(ci)


def test_all_log_ratios_equal_with_launches_is_not_nan():
    control = np.linspace(0.02, 0.08, 30)
    with pytest.warns(DegenerateDataWarning):
        ci = paired_ratio_ci(
            control, control, clusters=np.arange(30) % 3, rng=np.random.default_rng(0)
        )
    assert ci.ci_low == pytest.approx(1.0) and ci.ci_high == pytest.approx(1.0)
    assert ci.between_launch_share is None and ci.more_launches_help is None
    assert ci.wilcoxon_p == 1.0
    assert decide(ci, margin=0.05).word == "equivalent"
    _no_nan(ci)


def test_equal_deltas_are_not_degenerate():
    control = np.linspace(0.02, 0.08, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateDataWarning)
        ci = paired_ratio_ci(control, control - 0.01, rng=np.random.default_rng(0))
    assert ci.median_delta == pytest.approx(-0.01)
    assert 0 < ci.ci_low < ci.estimate < ci.ci_high < 1


def test_one_pair_is_degenerate_and_inconclusive():
    with pytest.warns(DegenerateDataWarning, match="one pair"):
        ci = paired_ratio_ci([0.05], [0.04], rng=np.random.default_rng(0))
    assert ci.method == "degenerate"
    assert ci.ci_low == 0.0 and ci.ci_high == math.inf
    assert _no_nan(ci)["ci_high"] is None
    plan = decide(ci, margin=0.05)
    assert plan.word == "inconclusive" and plan.extra_pairs_needed is None


def test_few_pairs_fall_back_to_expanded_percentile():
    rng = np.random.default_rng(10)
    c = rng.uniform(0.04, 0.06, 5)
    ci = paired_ratio_ci(c, c * np.exp(rng.normal(-0.1, 0.05, 5)), rng=rng)
    assert ci.method == "percentile" and "fewer than 10 pairs" in ci.note
    plain = paired_ratio_ci(c, c * np.exp(rng.normal(-0.1, 0.05, 5)), rng=rng, method="percentile")
    assert "expanded" in plain.note


def test_heavy_ties_fall_back_to_percentile():
    c = np.full(20, 0.05)
    e = np.where(np.arange(20) < 15, 0.04, 0.045)
    ci = paired_ratio_ci(c, e, rng=np.random.default_rng(0))
    assert ci.method == "percentile" and "heavy ties" in ci.note
    assert ci.ci_low <= ci.estimate <= ci.ci_high


def test_nan_bca_bounds_fall_back_to_percentile():
    rng = np.random.default_rng(11)
    c = rng.uniform(0.04, 0.06, 30)
    ci = paired_ratio_ci(c, c * np.exp(rng.normal(0, 0.1, 30)), n_resamples=1, rng=rng)
    assert ci.method == "percentile" and "not finite" in ci.note
    assert math.isfinite(ci.ci_low) and math.isfinite(ci.ci_high)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"control": [], "experiment": []}, "at least one pair"),
        ({"control": [1.0, 2.0], "experiment": [1.0]}, "same length"),
        ({"control": [1.0, 0.0], "experiment": [1.0, 1.0]}, "`control` must hold positive"),
        ({"control": [1.0, 1.0], "experiment": [1.0, -2.0]}, "`experiment` must hold positive"),
        ({"control": [1.0, np.nan], "experiment": [1.0, 1.0]}, "`control` must hold finite"),
        ({"control": [[1.0]], "experiment": [[1.0]]}, "`control` must be one-dimensional"),
        ({"clusters": [0, 1]}, "`clusters` must hold one label per pair"),
        ({"clusters": [0.0, np.nan, 1.0]}, "`clusters` must not hold missing"),
        ({"confidence_level": 1.5}, "`confidence_level`"),
        ({"n_resamples": 0}, "`n_resamples`"),
        ({"n_resamples": 10.5}, "`n_resamples`"),
        ({"method": "bca"}, "`method`"),
        ({"rng": 12345}, "`rng` must be a numpy.random.Generator"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, message):
    args = {
        "control": [1.0, 1.1, 1.2], "experiment": [0.9, 1.0, 1.0],
        "rng": np.random.default_rng(0),
    }  # fmt: skip
    args.update(kwargs)
    control, experiment = args.pop("control"), args.pop("experiment")
    with pytest.raises(ValueError, match=message):
        paired_ratio_ci(control, experiment, **args)


def test_same_seed_same_interval():
    c, e, cl = simulate(np.random.default_rng(12), ratio=0.9)
    a = paired_ratio_ci(c, e, clusters=cl, n_resamples=500, rng=np.random.default_rng(1))
    b = paired_ratio_ci(c, e, clusters=cl, n_resamples=500, rng=np.random.default_rng(1))
    assert a == b


def test_one_launch_label_means_one_stage():
    c, e, _ = simulate(np.random.default_rng(13), ratio=0.9)
    ci = paired_ratio_ci(c, e, clusters=["L1"] * c.size, rng=np.random.default_rng(0))
    assert ci.method == "BCa" and ci.n_launches == 1 and ci.between_launch_share is None


# ----------------------------------------------------------------------------- Wilcoxon


def test_wilcoxon_all_zero_differences_is_one_not_nan():
    x = [0.05, 0.06, 0.07]
    assert wilcoxon_logratio(x, x) == 1.0


def test_wilcoxon_detects_a_clear_shift_and_not_a_null():
    rng = np.random.default_rng(14)
    c = rng.uniform(0.04, 0.06, 60)
    assert wilcoxon_logratio(c, c * np.exp(rng.normal(-0.1, 0.05, 60))) < 1e-6
    assert wilcoxon_logratio(c, c * np.exp(rng.normal(0, 0.05, 60))) > 0.01


# ---------------------------------------------------------------------------------- Holm


def test_holm_adjust_matches_hand_computation():
    # sorted 0.01, 0.03, 0.04 → 3*0.01, max(0.03, 2*0.03), max(0.06, 1*0.04)
    assert holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm_adjust([0.005, 0.5]) == pytest.approx([0.01, 0.5])
    assert holm_adjust([0.6, 0.6]) == pytest.approx([1.0, 1.0])


def test_holm_adjust_properties_and_validation():
    p = np.random.default_rng(15).uniform(0, 0.2, 7)
    adj = holm_adjust(p)
    assert np.all(adj >= p) and np.all(adj <= 1)
    assert np.all(np.diff(adj[np.argsort(p)]) >= 0)
    for bad in ([], [0.1, 1.2], [[0.1]]):
        with pytest.raises(ValueError, match="`pvalues`"):
            holm_adjust(bad)


def _ci_at(estimate, se, level):
    from scipy import stats

    half = stats.norm.ppf(0.5 + level / 2) * se
    return RatioCI(
        estimate=estimate, ci_low=estimate * math.exp(-half), ci_high=estimate * math.exp(half),
        confidence_level=level, method="BCa", n_pairs=100, n_launches=1, median_delta=0.0,
        wilcoxon_p=None, between_launch_share=None, more_launches_help=None,
        var_between=None, var_within=se**2 * 100, n_resamples=4000,
    )  # fmt: skip


def test_holm_decide_steps_down_the_confidence_level():
    # log-distance below 1 - δ over se: a ≈ 4.6 (decides at 1 - α/3), b ≈ 2.3 (needs
    # 1 - α/2), c ≈ 0.5 (never)
    truth = {"a": (0.80, 0.035), "b": (0.90, 0.023), "c": (0.94, 0.02)}
    asked = []

    def compute(name, level):
        asked.append((name, round(level, 6)))
        return _ci_at(*truth[name], level)

    out = holm_decide(compute, ["a", "b", "c"], family_confidence=0.95, margin=0.05)
    assert [n for n, lv in asked if lv == round(1 - 0.05 / 3, 6)] == ["a", "b", "c"]
    assert {n for n, lv in asked if lv == round(1 - 0.05 / 2, 6)} == {"b", "c"}
    assert {n for n, lv in asked if lv == 0.95} == {"c"}
    assert out["a"][1].word == "adopt" and out["a"][0].confidence_level == pytest.approx(
        1 - 0.05 / 3
    )
    assert out["b"][1].word == "adopt" and out["b"][0].confidence_level == pytest.approx(0.975)
    assert out["c"][1].word == "inconclusive" and out["c"][0].confidence_level == 0.95


def test_holm_decide_stops_when_a_round_settles_nothing():
    truth = {"x": (0.94, 0.02), "y": (0.96, 0.02)}
    out = holm_decide(lambda n, lv: _ci_at(*truth[n], lv), ["x", "y"], margin=0.05)
    assert all(d.word == "inconclusive" for _, d in out.values())
    assert all(ci.confidence_level == pytest.approx(0.975) for ci, _ in out.values())


# --------------------------------------------------------------------------------- gates

ADOPT = Decision("adopt", "TPOT ratio 0.80: faster", margin=0.05, confidence_level=0.95)
CLEAN = {
    "control_error_rate": 0.0,
    "experiment_error_rate": 0.0,
    "control_requests": 1000,
    "experiment_requests": 1000,
}


def _gated(decision, *, max_increase=0.02, min_agreement=None, memory=None, **evidence):
    """The verdict of ``decision`` under a rule with δ = 5 % at 95 %, on ``evidence``."""
    gates = (ErrorGate(max_increase=max_increase, confidence_level=0.95),
             OutputGate(min_agreement), MemoryGate(memory), TtftGate(margin=0.05),
             E2eGate(margin=0.05))  # fmt: skip
    return apply_gates(decision, GateEvidence(**{**CLEAN, **evidence}), gates)


def test_all_gates_pass_keeps_adopt():
    verdict = _gated(ADOPT, ttft=_ci_at(1.02, 0.01, 0.95))
    assert verdict.word == "adopt"
    assert [g.name for g in verdict.gates] == ["errors", "outputs", "ttft"]
    assert all(g.passed for g in verdict.gates)
    _no_nan(verdict)


@pytest.mark.parametrize(
    ("extra", "gate"),
    [
        ({"experiment_error_rate": 0.05}, "errors"),
        ({"wrong_outputs": 1}, "outputs"),
        ({"agreement_rate": 0.90, "min_agreement": 0.99}, "outputs"),
        ({"peak_memory_gib": 9.0, "memory": 8.0}, "memory"),
        ({"ttft": _ci_at(1.20, 0.02, 0.95)}, "ttft"),
        ({"e2e": _ci_at(1.20, 0.02, 0.95)}, "e2e"),
    ],
)
def test_a_failed_gate_turns_adopt_into_reject_naming_the_gate(extra, gate):
    verdict = _gated(ADOPT, **extra)
    assert verdict.word == "reject"
    assert [g.name for g in verdict.gates if not g.passed] == [gate]
    assert any(f"gate {gate!r} failed" in r for r in verdict.reasons)
    assert verdict.tpot_decision is ADOPT


def test_error_gate_boundary_and_slightly_worse_latency_pass():
    # an observed rise of 2 % under an allowance of 2.5 %, without request counts, is no
    # evidence either way: "not assessed" (it used to pass), and it keeps "adopt"
    verdict = _gated(
        ADOPT, control_error_rate=0.01, experiment_error_rate=0.03, max_increase=0.025,
        control_requests=None, experiment_requests=None,
        ttft=_ci_at(1.03, 0.005, 0.95), peak_memory_gib=8.0, memory=8.0,
    )  # fmt: skip
    assert verdict.word == "adopt"
    status = {g.name: g.status for g in verdict.gates}
    assert status == {"errors": "not assessed", "outputs": "pass", "memory": "pass", "ttft": "pass"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"experiment_error_rate": 1.5}, "`experiment_error_rate`"),
        ({"control_error_rate": -0.1}, "`control_error_rate`"),
        ({"wrong_outputs": -1}, "`wrong_outputs`"),
        ({"agreement_rate": 1.2}, "`agreement_rate`"),
        ({"peak_memory_gib": -8.0}, "`peak_memory_gib`"),
        ({"ttft": "fast"}, "`ttft`"),
    ],
)
def test_gate_evidence_is_validated(extra, message):
    with pytest.raises(ValueError, match=message):
        GateEvidence(**{**CLEAN, **extra})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ErrorGate(max_increase=1.5, confidence_level=0.95), "`max_increase`"),
        (lambda: ErrorGate(max_increase=0.02, confidence_level=1.0), "`confidence_level`"),
        (lambda: OutputGate(min_agreement_rate=-0.1), "`min_agreement_rate`"),
        (lambda: MemoryGate(limit_gib=0), "`limit_gib`"),
    ],
)
def test_gate_rules_are_validated(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_decide_validates_margin_and_ci():
    ci = _ci_at(0.9, 0.01, 0.95)
    for bad in (0, 1, -0.1, float("nan"), "0.05"):
        with pytest.raises(ValueError, match="`margin`"):
            decide(ci, margin=bad)
    with pytest.raises(ValueError, match="`ci`"):
        decide({"estimate": 0.9}, margin=0.05)


def test_a_block_interval_gets_blocks_advice_never_pairs():
    """Its t quantile has df = blocks - 1 whatever the pairs per block, and a zero instance
    share is an artefact of few blocks: no "more pairs" advice, only more blocks."""
    ci = RatioCI(
        estimate=0.80, ci_low=0.40, ci_high=1.60, confidence_level=0.975, method="blocks (own-arm "
        "paired t vs control, df=2)", n_pairs=36, n_launches=3, median_delta=-0.001,
        wilcoxon_p=None, between_launch_share=0.0, more_launches_help=False, var_between=0.0,
        var_within=0.02, n_resamples=0, df=2,
    )  # fmt: skip
    plan = decide(ci, margin=0.05)
    assert plan.word == "inconclusive" and plan.extra_pairs_needed is None
    assert plan.extra_launches_needed is not None and "more blocks" in plan.reason
    assert "pairs" not in plan.reason.split(";")[-1]


def test_t_width_scale_is_the_one_projection_of_more_blocks():
    from scipy import stats as st

    from speclib.analysis.stats.base import t_width_scale

    got = t_width_scale(n_blocks=3, df=2, confidence_level=0.95, blocks=[3, 4, 9])
    q = 0.975
    want = [st.t.ppf(q, 2 + b - 3) / st.t.ppf(q, 2) * math.sqrt(3 / b) for b in (3, 4, 9)]
    assert got == pytest.approx(want) and got[0] == pytest.approx(1.0)
    for bad in ({"n_blocks": 0}, {"df": 0}, {"confidence_level": 1.0}, {"blocks": [2]}):
        kw = {"n_blocks": 3, "df": 2, "confidence_level": 0.95, "blocks": [4], **bad}
        with pytest.raises(ValueError):
            t_width_scale(**kw)
