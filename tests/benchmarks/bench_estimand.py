"""Coverage benchmark of the traffic's TPOT ratio under heterogeneous per-request effects.

Simulates interleaved runs of :mod:`tests.benchmarks.estimand_sim` (echo prompts ×0.3,
fresh ×1.7 on the speculative arm; its servers ±5 % launch to launch, the control's and
the A/A arm's ±0.3 %) and prints, per share of echo prompts and number of blocks, how
often the kit's 95 % interval of the traffic's ratio covers the traffic's truth, how often
the interval of the typical request (the geometric mean, the old pooled figure) covers its
own truth and the traffic's, and the mean estimates against the truth. It is a benchmark,
not a test: pytest does not collect it (``tests/unit/test_estimands.py`` runs a small,
seeded version of it).

    .venv/bin/python -m tests.benchmarks.bench_estimand --runs 1000 --blocks 2 3 6 \\
        --shares 0.2 0.5 0.8 --prompts 32
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from tests.benchmarks.estimand_sim import EFFECT, coverage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000, help="simulated runs per cell")
    ap.add_argument("--blocks", type=int, nargs="+", default=[2, 3, 6])
    ap.add_argument("--shares", type=float, nargs="+", default=[0.2, 0.5, 0.8],
                    help="shares of echo prompts")  # fmt: skip
    ap.add_argument("--prompts", type=int, default=32, help="prompts per block")
    ap.add_argument("--seed", type=int, default=53)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    mc = 1.96 * math.sqrt(0.95 * 0.05 / args.runs)
    print(f"effects {EFFECT}; {args.runs} runs per cell, {args.prompts} prompts per block; "
          f"nominal 0.95 ± {mc:.3f} (Monte Carlo, 95 %)")  # fmt: skip
    head = ("echo share", "blocks", "traffic covered", "geometric covers own",
            "geometric covers traffic", "traffic estimate / truth",
            "geometric / traffic truth")  # fmt: skip
    print(" | ".join(head))
    start = time.perf_counter()
    for share in args.shares:
        for blocks in args.blocks:
            c = coverage(rng, runs=args.runs, blocks=blocks, n=args.prompts, echo_share=share)
            print(
                f"{share:10.2f} | {blocks:6d} | {c.traffic:15.3f} | {c.geometric_own:20.3f} | "
                f"{c.geometric_traffic:24.3f} | {c.mean_traffic_estimate:.3f} / "
                f"{c.mean_traffic_truth:.3f}{'':9} | {c.mean_geometric_estimate:.3f} / "
                f"{c.mean_traffic_truth:.3f}"
            )
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
