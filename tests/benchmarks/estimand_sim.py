"""Runs with heterogeneous per-request effects and known truth (pure functions, issue 53).

Speculation helps some requests a lot and hurts others: an n-gram arm was ×0.31 on prompts
whose answer is in the prompt ("echo") and ×1.64 on the others ("fresh") on an H100. This
module simulates interleaved runs of that kind and feeds them through the function the kit
decides with (:func:`speclib.analysis.verdict.tpot_verdict.block_analysis`), so that
:mod:`tests.benchmarks.bench_estimand` (by hand, many runs) and
``tests/unit/test_estimands.py`` (fast, a fixed rng) measure the same thing.

A run has ``n`` prompts, a share ``echo_share`` of them echo; every block sends the same
prompts to fresh servers of each arm (control, an A/A copy of it, the speculative arm). The
TPOT of prompt ``i`` on arm ``a`` in block ``b`` is::

    base_i · ratio_a(kind_i) · drift_b · instance[a, b] · exp(noise[a, b, i])

with ``base_i`` the prompt's own TPOT (lognormal, drawn once per run), ``ratio`` 0.3 on
echo and 1.7 on fresh for the speculative arm (1 for the controls), ``drift_b`` shared by
the arms of a block, ``instance[a, b] = exp(N(0, sd_a))`` one draw per server (±5 % for the
speculative arm, ±0.3 % for the control and the A/A arm, as launch to launch on the GPU)
and request noise ``N(0, noise_sd)``, the same for every arm.

**The truth.** The traffic's ratio for the run's prompts is ``Σ base_i ratio(kind_i) /
Σ base_i``: the arm's expected mean TPOT over the control's, each prompt once, with the
instance effects at their median (their mean log is 0: the block model averages them on
the log scale). The old pooled figure estimated the geometric mean
``exp(mean_i log ratio(kind_i))`` instead, which for half echo and half fresh is ×0.71
where the traffic's is ×1.0.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.verdict.tpot_verdict import block_analysis
from speclib.core.estimand import Estimand

__all__ = ["EFFECT", "Coverage", "coverage", "simulate_run", "truths"]

EFFECT = {"echo": 0.3, "fresh": 1.7}
INSTANCE_SD = {"control": 0.003, "aa": 0.003, "spec": 0.05}


def truths(base: np.ndarray, kinds: np.ndarray) -> tuple[float, float]:
    """``(traffic's ratio, geometric mean of the per-request ratios)`` of a run's prompts."""
    ratio = np.array([EFFECT[k] for k in kinds])
    return float((base * ratio).sum() / base.sum()), float(np.exp(np.log(ratio).mean()))


def simulate_run(
    rng: np.random.Generator, *, blocks: int, n: int, echo_share: float, noise_sd: float = 0.05
) -> tuple[dict[str, pd.DataFrame], float, float]:
    """One run: the speculative and A/A arms' pairs with the control (the columns the kit's
    analysis reads), the traffic's truth and the geometric truth."""
    n_echo = round(echo_share * n)
    kinds = np.array(["echo"] * n_echo + ["fresh"] * (n - n_echo))
    base = np.exp(rng.normal(math.log(0.004), 0.3, n))
    ratio = {"control": np.ones(n), "aa": np.ones(n),
             "spec": np.array([EFFECT[k] for k in kinds])}  # fmt: skip
    frames: dict[str, list[pd.DataFrame]] = {"spec": [], "aa": []}
    for b in range(blocks):
        drift = math.exp(rng.normal(0, 0.05))
        tpot = {
            a: base * r * drift * math.exp(rng.normal(0, INSTANCE_SD[a]))
            * np.exp(rng.normal(0, noise_sd, n))
            for a, r in ratio.items()
        }  # fmt: skip
        for arm in frames:
            frames[arm].append(pd.DataFrame({
                "tpot_s_c": tpot["control"], "tpot_s_e": tpot[arm], "replicate": b,
                "block": b, "prompt_id": np.arange(n), "category": kinds,
                "output_tokens_c": 65, "output_tokens_e": 65,
            }))  # fmt: skip
    traffic, geometric = truths(base, kinds)
    return {a: pd.concat(f, ignore_index=True) for a, f in frames.items()}, traffic, geometric


@dataclass(frozen=True)
class Coverage:
    """Over ``runs`` simulated runs: how often the interval of the traffic's ratio covered
    the traffic's truth (``traffic``), how often the interval of the old figure (the typical
    request's, a geometric mean) covered its own truth (``geometric_own``) and the
    traffic's (``geometric_traffic``), and the mean estimates against the mean truths."""

    runs: int
    traffic: float
    geometric_own: float
    geometric_traffic: float
    mean_traffic_estimate: float
    mean_traffic_truth: float
    mean_geometric_estimate: float


def _interval(pairs: dict[str, pd.DataFrame], estimand: Estimand, level: float):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        found = block_analysis(pairs, aa_arm="aa", confidence_level=level, estimand=estimand)
    assert found is not None
    return found.arms["spec"]


def coverage(
    rng: np.random.Generator, *, runs: int, blocks: int, n: int, echo_share: float,
    confidence_level: float = 0.95,
) -> Coverage:  # fmt: skip
    """The coverage of :class:`Coverage` over ``runs`` runs of :func:`simulate_run`."""
    hit = {"traffic": 0, "own": 0, "geo_traffic": 0}
    est_t, truth_t, est_g = [], [], []
    for _ in range(runs):
        pairs, traffic, geometric = simulate_run(rng, blocks=blocks, n=n, echo_share=echo_share)
        t = _interval(pairs, Estimand.TRAFFIC, confidence_level)
        g = _interval(pairs, Estimand.TYPICAL, confidence_level)
        hit["traffic"] += t.ci_low <= traffic <= t.ci_high
        hit["own"] += g.ci_low <= geometric <= g.ci_high
        hit["geo_traffic"] += g.ci_low <= traffic <= g.ci_high
        est_t.append(t.estimate)
        truth_t.append(traffic)
        est_g.append(g.estimate)
    return Coverage(
        runs, hit["traffic"] / runs, hit["own"] / runs, hit["geo_traffic"] / runs,
        float(np.mean(est_t)), float(np.mean(truth_t)), float(np.mean(est_g)),
    )  # fmt: skip
