"""Run until decided by simulation: is the α spending valid, which spending decides soonest,
and may an arm's launch-to-launch variance be pooled over its load levels?

Each simulated run is an arm's per-block contrasts against the control, the kit's model
(:mod:`speclib.analysis.stats.block_intervals`): ``c[b] = log(true ratio) + u_arm[b] -
u_control[b] + e[b]``, a fresh launch effect per server and block (SD ``sd_arm``,
``sd_control``) and the request noise of the block's mean (SD ``se_within``). The interval
at a look after ``k`` blocks is the kit's paired t-interval on the arm's own contrasts
(``k - 1`` df) at the look's level, Holm over the family at each look, a decided
comparison frozen with its look's interval; the run stops when every comparison is decided,
at the cap, or when the time budget (a number of blocks, drawn independently of the data)
ends it. Noise settings:

* **GPU**: speculative arms ±5 % launch to launch, the control ±0.3 % (one H100, vLLM 0.26,
  docs/measurements.md), request noise 1 %; **GPU noisy**: the arms ±15 % (the H100 demo's
  c = 8 and c = 32 blocks, 2026-12-06);
* **CPU**: the arm 13 %, the control 3.5 %, request noise 7 % (the 2-core CPU demo).

Part A, validity: one comparison (no Holm slack to hide behind), true ratios on and near
the rule's boundaries; the final interval's coverage and the share of false decisions for
the kit's spending (O'Brien–Fleming-type, the cap as maximum information), a spending that
needs no cap (half of what is left at each look), 95 % at every look (invalid: the reason
for spending) and the fixed design (the planned blocks only). Part B, what each spending
costs in blocks: the share of runs whose every verdict is decided within the budget, per
comparison decided, and blocks used, in the settings of the demos. Part C: pooling an
arm's variance over its load levels (one server serves every level of a block): the
coverage per load level of its own-level interval (the kit's), of a pooled variance with
``L (k - 1)`` df, and of a block × level model with Satterthwaite df, when the launch
effect is shared by the levels, independent, or of a different size per level.

It is a benchmark, not a test: pytest does not collect it (the fast check with a fixed rng
is ``tests/unit/test_sequential.py``).

    .venv/bin/python -m tests.benchmarks.bench_until_decided            # ~2 min on 2 cores
    .venv/bin/python -m tests.benchmarks.bench_until_decided --runs 4000 --parts A
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
from scipy import special

from speclib.analysis.stats.sequential import spending_plan

ALPHA, MARGIN = 0.05, 0.05
NOISE = {  # sd_arm, sd_control, se_within
    "GPU": (0.05, 0.003, 0.01),
    "GPU noisy": (0.15, 0.003, 0.01),
    "CPU": (0.13, 0.035, 0.07),
}


def spent(rule: str, first: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """The looks (blocks) and each look's family α under ``rule``."""
    looks = np.arange(first, cap + 1)
    if rule == "fixed":
        return looks[:1], np.array([ALPHA])
    if rule == "95 % each look":
        return looks, np.full(looks.size, ALPHA)
    if rule == "kit (OBF, cap)":
        plan = spending_plan(cap, min_blocks=first, alpha=ALPHA)
        return np.asarray(plan.looks), np.asarray(plan.alpha_spent)
    if rule == "halving (no cap)":
        cum = ALPHA * (1 - 0.5 ** (np.arange(looks.size) + 1))
        cum[-1] = ALPHA
        return looks, np.diff(np.r_[0.0, cum])
    raise ValueError(rule)


def words(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The rule's word of log intervals (adopt / equivalent / worse / inconclusive)."""
    lower, upper = math.log1p(-MARGIN), math.log1p(MARGIN)
    out = np.full(lo.shape, "inconclusive", dtype=object)
    out[lo > 0] = "worse"
    out[(lo > lower) & (hi < upper)] = "equivalent"
    out[hi < lower] = "adopt"
    return out


def false_word(theta: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Whether a decision's claim is untrue of the true log ratio ``theta``."""
    lower, upper = math.log1p(-MARGIN), math.log1p(MARGIN)
    return (
        ((w == "adopt") & (theta >= lower))
        | ((w == "worse") & (theta <= 0))
        | ((w == "equivalent") & ((theta <= lower) | (theta >= upper)))
    )


def contrasts(rng: np.random.Generator, runs: int, theta: np.ndarray, cap: int,
              noise: tuple[float, float, float]) -> np.ndarray:  # fmt: skip
    """``(runs, comparisons, cap)`` block contrasts."""
    sd_a, sd_c, se_w = noise
    shape = (runs, theta.size, cap)
    return (theta[None, :, None] + rng.normal(0, sd_a, shape) - rng.normal(0, sd_c, shape)
            + rng.normal(0, se_w, shape))  # fmt: skip


def run_family(c: np.ndarray, rule: str, first: int, cap: int, budget: np.ndarray):
    """Every run's final words, intervals and blocks: looks at the rule's levels, Holm over
    the comparisons still open at each look, decisions frozen; ``budget[r]`` is the last
    block run ``r`` may reach."""
    runs, k_cmp, _ = c.shape
    looks, alphas = spent(rule, first, cap)
    done = np.zeros((runs, k_cmp), bool)
    word = np.full((runs, k_cmp), "inconclusive", dtype=object)
    low, high = np.full((runs, k_cmp), np.nan), np.full((runs, k_cmp), np.nan)
    blocks = np.full(runs, first)
    last = np.minimum(budget, looks[-1])
    for k, a in zip(looks, alphas, strict=True):
        live = (k <= last) & ~done.all(1)
        if not live.any():
            break
        blocks[live] = k
        x = c[:, :, :k]
        mean, se = x.mean(2), x.std(2, ddof=1) / math.sqrt(k)
        remaining = ~done & live[:, None]
        final = (k == last)[:, None]
        while remaining.any():
            n = remaining.sum(1, keepdims=True)
            t = special.stdtrit(k - 1, 1 - a / np.maximum(n, 1) / 2)
            lo, hi = mean - t * se, mean + t * se
            w = words(lo, hi)
            hit = remaining & (w != "inconclusive")
            stuck = remaining & ~hit.any(1, keepdims=True)
            keep = hit | (stuck & final)
            word[keep], low[keep], high[keep] = w[keep], lo[keep], hi[keep]
            done |= keep
            remaining &= ~hit & ~stuck
    return word, low, high, blocks


RULES = ("fixed", "95 % each look", "kit (OBF, cap)", "halving (no cap)")


def part_a(rng: np.random.Generator, runs: int) -> None:
    first, cap = 3, 5
    print(f"\nA. validity: one comparison, looks after {first}..{cap} blocks, the budget ending "
          f"the run after a uniform {first}..{cap} blocks; coverage of the final interval / "
          f"false decisions (nominal {1 - ALPHA:.0%} / {ALPHA:.0%}), {runs} runs each")  # fmt: skip
    for name, noise in NOISE.items():
        print(f"  {name} (arm ±{noise[0]:.1%}, control ±{noise[1]:.1%}):")
        for ratio in (0.6, 0.85, 0.95, 1.0, 1.05, 1.3, 2.0):
            theta = np.array([math.log(ratio)])
            c = contrasts(rng, runs, theta, cap, noise)
            budget = rng.integers(first, cap + 1, runs)
            cells = []
            for rule in RULES:
                w, lo, hi, _ = run_family(c, rule, first, cap, budget)
                cover = np.mean((lo <= theta) & (theta <= hi))
                cells.append(f"{rule} {cover:.3f}/{np.mean(false_word(theta, w)):.3f}")
            print(f"    ×{ratio:<4g} " + " | ".join(cells))


CASES = {  # name: (ratios, noise, planned, budget in blocks)
    "GPU demo: 3 arms × 3 loads, plan 3, budget 4": ([1.9, 2.4, 1.3] * 3, "GPU", 3, 4),
    "GPU demo, budget 5": ([1.9, 2.4, 1.3] * 3, "GPU", 3, 5),
    "the issue's run: plan 2, budget 4": ([1.9, 2.4, 1.3] * 3, "GPU", 2, 4),
    "GPU noisy, plan 3, budget 5": ([1.9, 2.4, 1.3] * 3, "GPU noisy", 3, 5),
    "GPU moderate ×0.85 / ×1.15, plan 3, budget 5": ([0.85, 1.15] * 3, "GPU", 3, 5),
    "CPU demo ×0.6, plan 4, budget 5": ([0.6], "CPU", 4, 5),
    "CPU ×0.8, plan 4, budget 6": ([0.8], "CPU", 4, 6),
}


def part_b(rng: np.random.Generator, runs: int) -> None:
    print("\nB. blocks: every verdict decided within the budget / per comparison decided / mean "
          "blocks; the kit's cap is planned + 2 (auto), halving's too")  # fmt: skip
    for name, (ratios, noise, first, budget) in CASES.items():
        theta = np.log(np.asarray(ratios, float))
        cap = first + 2
        c = contrasts(rng, runs, theta, max(cap, budget), NOISE[noise])
        cells = []
        for rule in ("fixed", "kit (OBF, cap)", "halving (no cap)"):
            w, _, _, blocks = run_family(c, rule, first, cap, np.full(runs, budget))
            decided = w != "inconclusive"
            cells.append(f"{rule} {decided.all(1).mean():.2f}/{decided.mean():.2f}/"
                         f"{blocks.mean():.1f}")  # fmt: skip
        print(f"  {name:46s} " + " | ".join(cells))
    print(
        "  the kit's cap against the budget (GPU demo plan 3, budget 4; CPU demo plan 4, "
        "budget 5): all decided, OBF by cap"
    )
    for name, ratios, noise, first, budget in (("GPU", [1.9, 2.4, 1.3] * 3, "GPU", 3, 4),
                                               ("CPU", [0.6], "CPU", 4, 5)):  # fmt: skip
        theta = np.log(np.asarray(ratios, float))
        c = contrasts(rng, runs, theta, first + 6, NOISE[noise])
        cells = []
        for extra in (1, 2, 3, 6):
            w, *_ = run_family(c, "kit (OBF, cap)", first, first + extra, np.full(runs, budget))
            cells.append(f"cap planned+{extra} {(w != 'inconclusive').all(1).mean():.2f}")
        print(f"    {name}: " + ", ".join(cells))


def _cover_levels(c: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    """Coverage of 0 per level and the median half-width: ``c`` is (runs, levels, blocks)."""
    _, n_lvl, m = c.shape
    mean = c.mean(2)
    if how == "own level (kit)":
        s2, df = c.var(2, ddof=1), np.full(mean.shape, m - 1.0)
    elif how == "pooled, L(k-1) df":
        s2 = np.repeat(c.var(2, ddof=1).mean(1, keepdims=True), n_lvl, 1)
        df = np.full(mean.shape, n_lvl * (m - 1.0))
    else:  # block x level, compound symmetry, Satterthwaite df
        dev = c - mean[:, :, None]
        block = dev.mean(1, keepdims=True)
        msb = n_lvl * (block**2).sum(2)[:, 0] / (m - 1)
        msr = ((dev - block) ** 2).sum((1, 2)) / ((m - 1) * (n_lvl - 1))
        tot = (msb + (n_lvl - 1) * msr) / n_lvl
        sat = tot**2 / ((msb / n_lvl) ** 2 / (m - 1)
                        + ((n_lvl - 1) * msr / n_lvl) ** 2 / ((m - 1) * (n_lvl - 1)))  # fmt: skip
        s2, df = np.repeat(tot[:, None], n_lvl, 1), np.repeat(sat[:, None], n_lvl, 1)
    half = special.stdtrit(df, 1 - ALPHA / 2) * np.sqrt(s2 / m)
    return (np.abs(mean) <= half).mean(0), np.median(half, 0)


POOLING = {  # launch effect shared by the levels (SD per level), own per level (SD per level)
    "shared by the loads, ±5 % each": ((0.05, 0.05, 0.05), (0.0, 0.0, 0.0)),
    "own per load, ±5 % each": ((0.0, 0.0, 0.0), (0.05, 0.05, 0.05)),
    "half shared": ((0.035, 0.035, 0.035), (0.035, 0.035, 0.035)),
    "shared, larger at high load (3, 5, 10 %)": ((0.03, 0.05, 0.10), (0.0, 0.0, 0.0)),
    "own, larger at high load (3, 5, 15 %)": ((0.0, 0.0, 0.0), (0.03, 0.05, 0.15)),
    "the H100 demo's (7, 22, 21 %)": ((0.0, 0.0, 0.0), (0.07, 0.22, 0.21)),
}


def part_c(rng: np.random.Generator, runs: int) -> None:
    print("\nC. pooling an arm's variance over its 3 load levels: coverage of 95 % intervals "
          "at c=1 / c=8 / c=32 (median half-width, log)")  # fmt: skip
    for m in (2, 3, 4):
        print(f"  {m} blocks:")
        for name, (shared, own) in POOLING.items():
            u = rng.normal(0, 1, (runs, 1, m)) * np.asarray(shared)[None, :, None]
            v = rng.normal(0, 1, (runs, 3, m)) * np.asarray(own)[None, :, None]
            c = u + v + rng.normal(0, 0.01, (runs, 3, m))
            cells = []
            for how in ("own level (kit)", "pooled, L(k-1) df", "block x level, Satterthwaite"):
                cover, half = _cover_levels(c, how)
                cells.append(f"{how} " + "/".join(f"{x:.3f}" for x in cover)
                             + f" ({np.median(half):.2f})")  # fmt: skip
            print(f"    {name:42s} " + " | ".join(cells))


PARTS: dict[str, Callable[[np.random.Generator, int], None]] = {
    "A": part_a, "B": part_b, "C": part_c,
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Print the tables of the parts asked for."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20_000, help="simulated runs per cell")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    ap.add_argument("--seed", type=int, default=56)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    for part in args.parts:
        PARTS[part](rng, args.runs)
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
