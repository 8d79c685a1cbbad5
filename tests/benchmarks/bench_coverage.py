"""Coverage benchmark: do the block-level TPOT intervals hold 95 % when arms differ in noise?

Simulates interleaved runs with known truth and feeds them through the functions the kit
decides with (:func:`speclib.analysis.verdict.tpot_verdict.block_analysis` for the intervals at the
nominal level, :func:`speclib.analysis.verdict.tpot_verdict.decide_family` for the Holm-adjusted
verdicts). Each run has ``B`` replicate blocks; in every block each arm gets a fresh server
and the same 4–7 prompts (drawn per block, as in the demo). The log TPOT of a request is

    prompt base + block drift + log(true ratio) + instance effect (one per server and block)
    + request noise,

with the instance variance of the control and the A/A arm ``sigma_L^2`` and of the
experiments ``1x``, ``2x``, ``3x`` that (true ratio 0.85 each), plus a **null** arm (ratio 1,
``1x``). Printed per number of blocks: each experiment's coverage of its true ratio at
nominal 0.95 (the kit's per-arm interval, and for comparison the old interval with one
variance pooled over every arm), how often it is adopted (power at δ = 0.05), and the null
arm's false verdicts (adopt or worse, after Holm over the family of four experiments).
It is a benchmark, not a test: pytest does not collect it.

    .venv/bin/python -m tests.benchmarks.bench_coverage --runs 400 --blocks 2 3 4 8
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
import pandas as pd
from scipy import special

from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.verdict.tpot_verdict import block_analysis, decide_family

RATIOS = {"x1": 0.85, "x2": 0.85, "x3": 0.85, "null": 1.0, "aa": 1.0}
VAR_FACTOR = {"control": 1.0, "aa": 1.0, "x1": 1.0, "x2": 2.0, "x3": 3.0, "null": 1.0}
EXPERIMENTS = ("x1", "x2", "x3", "null")
CONFIDENCE, MARGIN = 0.95, 0.05


def simulate_run(
    rng: np.random.Generator, *, blocks: int, instance_sd: float, noise_sd: float
) -> dict[str, pd.DataFrame]:
    """One run's pairs with the control, per arm (columns the kit's analysis reads)."""
    rows: dict[str, list[pd.DataFrame]] = {a: [] for a in RATIOS}
    for b in range(blocks):
        n = int(rng.integers(4, 8))
        base = rng.normal(math.log(0.05), 0.5, n) + rng.normal(0, 0.05)
        logs = {}
        for arm, factor in VAR_FACTOR.items():
            theta = math.log(RATIOS.get(arm, 1.0))
            instance = rng.normal(0, instance_sd * math.sqrt(factor))
            logs[arm] = base + theta + instance + rng.normal(0, noise_sd, n)
        for arm in RATIOS:
            rows[arm].append(
                pd.DataFrame(
                    {
                        "tpot_s_c": np.exp(logs["control"]),
                        "tpot_s_e": np.exp(logs[arm]),
                        "replicate": b,
                        "prompt_id": np.arange(n),
                    }
                )
            )
    return {a: pd.concat(f, ignore_index=True) for a, f in rows.items()}


def _pooled_interval(pairs: dict[str, pd.DataFrame], arm: str) -> tuple[float, float]:
    """The old interval: the arm's mean block log-ratio, one variance pooled over all arms."""
    an = block_analysis(pairs, aa_arm=None, confidence_level=CONFIDENCE)
    d = pairs[arm].assign(lr=np.log(pairs[arm]["tpot_s_e"] / pairs[arm]["tpot_s_c"]))
    means = d.groupby("replicate")["lr"].mean().to_numpy()
    if an is None or an.sigma2 is None or an.df < 1:
        return 0.0, math.inf
    half = special.stdtrit(an.df, 0.5 + CONFIDENCE / 2) * math.sqrt(2 * an.sigma2 / means.size)
    return math.exp(means.mean() - half), math.exp(means.mean() + half)


def one_design(blocks: int, runs: int, seed: int, instance_sd: float, noise_sd: float) -> dict:
    """Coverage, power and false verdicts over ``runs`` simulated runs with ``blocks``."""
    rng = np.random.default_rng([seed, blocks])
    cover = {a: 0 for a in EXPERIMENTS}
    cover_pooled = {a: 0 for a in EXPERIMENTS}
    adopt = {a: 0 for a in EXPERIMENTS}
    false_null = 0
    for _ in range(runs):
        pairs = simulate_run(rng, blocks=blocks, instance_sd=instance_sd, noise_sd=noise_sd)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            an = block_analysis(pairs, aa_arm="aa", confidence_level=CONFIDENCE)
            decided = decide_family({0: pairs}, experiments=EXPERIMENTS, aa_arm="aa",
                                    confidence=CONFIDENCE, margin=MARGIN)[0]  # fmt: skip
        for arm in EXPERIMENTS:
            ci, truth = an.arms[arm], RATIOS[arm]
            cover[arm] += ci.ci_low <= truth <= ci.ci_high
            lo, hi = _pooled_interval(pairs, arm)
            cover_pooled[arm] += lo <= truth <= hi
            adopt[arm] += decided.experiments[arm][1].word == "adopt"
        false_null += decided.experiments["null"][1].word in ("adopt", "worse")
    return {
        "blocks": blocks,
        "cover": {a: v / runs for a, v in cover.items()},
        "cover_pooled": {a: v / runs for a, v in cover_pooled.items()},
        "adopt": {a: v / runs for a, v in adopt.items()},
        "false_null": false_null / runs,
        "df": an.arms["x1"].df,
    }


def table(results: list[dict], runs: int) -> str:
    """The markdown table of every design."""
    se = math.sqrt(0.95 * 0.05 / runs)
    lines = [
        f"coverage at nominal 0.95 over {runs} runs per row (Monte Carlo SE ±{se:.3f}); "
        "instance variance of the experiment vs the control's: 1x, 2x, 3x",
        "",
        "| blocks | df | cover 1x | cover 2x | cover 3x | null cover | pooled (old) 1x / 2x / 3x "
        "| adopt 0.85 (1x / 2x / 3x) | null false verdicts |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for r in results:
        c, p, a = r["cover"], r["cover_pooled"], r["adopt"]
        lines.append(
            f"| {r['blocks']} | {r['df']} | {c['x1']:.3f} | {c['x2']:.3f} | {c['x3']:.3f} | "
            f"{c['null']:.3f} | {p['x1']:.3f} / {p['x2']:.3f} / {p['x3']:.3f} | "
            f"{a['x1']:.2f} / {a['x2']:.2f} / {a['x3']:.2f} | {r['false_null']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every design and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400, help="simulated runs per design")
    ap.add_argument("--blocks", type=int, nargs="+", default=[2, 3, 4, 8])
    ap.add_argument("--instance-sd", type=float, default=0.05, help="control's instance SD")
    ap.add_argument("--noise-sd", type=float, default=0.08, help="request noise SD (log)")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    results = [
        one_design(b, args.runs, args.seed, args.instance_sd, args.noise_sd) for b in args.blocks
    ]
    print(table(results, args.runs))
    took = time.monotonic() - t0
    print(
        f"\n({took:.0f} s; instance SD {args.instance_sd}, request noise SD {args.noise_sd}, "
        f"4-7 prompts per block, Holm over {len(EXPERIMENTS)} experiments)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
