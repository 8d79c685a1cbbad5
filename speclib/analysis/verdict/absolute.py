"""Absolute latencies of a comparison's pairs: what each side measured, in ms and tokens/s.

The verdict rests on ratios; a decider also wants the numbers behind them. From the pairs
the TPOT verdict uses (:attr:`speclib.analysis.verdict.comparisons.Comparison.pairs`, the chosen
instrument's TPOT), :func:`absolute_summary` gives per side (``control``, ``experiment``)
the median and 90th percentile of TPOT and TTFT in ms, and the median per-stream output
rate (``output_tokens / e2e_s``, tokens/s of one request: at concurrency 1 the user's
speed, not the server's throughput). Only finite, positive values count; ``n`` says how
many requests each figure rests on. Pure function of the pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["absolute_summary"]


def _positive(values: Any) -> np.ndarray:
    x = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(float)
    return x[np.isfinite(x) & (x > 0)]


def _quantiles_ms(values: Any) -> dict[str, float | None]:
    x = _positive(values)
    if not len(x):
        return {"p50_ms": None, "p90_ms": None}
    return {"p50_ms": float(np.median(x)) * 1e3, "p90_ms": float(np.quantile(x, 0.9)) * 1e3}


def _side(pairs: pd.DataFrame, suffix: str) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(pairs)}
    for metric in ("tpot", "ttft"):
        col = f"{metric}_s_{suffix}"
        values = pairs.get(col, [])
        out[metric] = {**_quantiles_ms(values), "n": len(_positive(values))}
    tokens, e2e = f"output_tokens_{suffix}", f"e2e_s_{suffix}"
    rate = None
    if tokens in pairs and e2e in pairs:
        t = pd.to_numeric(pairs[tokens], errors="coerce").to_numpy(float)
        d = pd.to_numeric(pairs[e2e], errors="coerce").to_numpy(float)
        keep = np.isfinite(t) & np.isfinite(d) & (d > 0) & (t > 0)
        rate = float(np.median(t[keep] / d[keep])) if keep.any() else None
    out["tokens_per_s"] = rate
    return out


def absolute_summary(pairs: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """``{"control": {...}, "experiment": {...}}``: TPOT and TTFT p50/p90 in ms (with the
    count of positive values), median per-stream tokens/s, and the pair count."""
    if not isinstance(pairs, pd.DataFrame):
        raise ValueError(f"`pairs` must be a DataFrame (got {type(pairs).__name__})")
    return {"control": _side(pairs, "c"), "experiment": _side(pairs, "e")}
