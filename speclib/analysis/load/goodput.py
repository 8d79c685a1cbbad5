"""Throughput, load actually served, and goodput under an SLO, per arm and load level.

All from the per-request records (``t_start``, ``t_end``, ``e2e_s``, ``ttft_s``, ``tpot_s``,
``output_tokens``, ``ok``), in three steps:

* :func:`block_rates` — per arm, load level and replicate block: the arm's **active time**
  (the sum, over the alternation slots in which it was served, of first send to last
  finish; the other arms' turns are not counted), its output **tokens/s** over that time,
  its **mean requests in flight** (by Little's law, the sum of the requests' end-to-end
  times over the active time: what vLLM's scheduler saw as its batch, which is below the
  nominal concurrency while a slot drains), and, given an SLO, how many requests met it;
* :func:`level_table` — per arm and level, the mean over blocks of each with a block-level
  t-interval (blocks − 1 degrees of freedom), the TTFT/TPOT percentiles pooled over the
  blocks, and whether the arm **sustains** the SLO there (the chosen percentile of each
  bounded metric within its bound, a failed request counting as a miss);
* :func:`goodput_ratios` — per experiment and level, its goodput over the control's, paired
  by block (t-interval on the per-block log-ratios), with a verdict word against
  ``margin``: ``higher``, ``lower``, ``equivalent`` or ``inconclusive``.

A request meets the SLO when it succeeded and each bounded metric is within its bound; a
request with one output token has no TPOT and is not held to the TPOT bound. Goodput is the
number of requests meeting the SLO per second of the arm's active time. In a closed loop
(fixed concurrency) goodput depends on latency too: a faster arm completes more requests
per second. :func:`highest_sustained` gives, per arm, the highest load level it sustains,
counting up from the lowest without a gap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.stats.t_interval import t_interval

__all__ = [
    "GOODPUT_WORDS",
    "block_rates",
    "goodput_ratios",
    "highest_sustained",
    "level_table",
    "meets_slo",
]

GOODPUT_WORDS = ("higher", "lower", "equivalent", "inconclusive", "not assessed")
_METRIC_COLUMN = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


def meets_slo(df: pd.DataFrame, bounds_ms: Mapping[str, float]) -> pd.Series:
    """Per request: succeeded and within every bound (``{"ttft"|"tpot"|"e2e": ms}``)."""
    unknown = set(bounds_ms) - set(_METRIC_COLUMN)
    if unknown:
        raise ValueError(f"unknown SLO metric(s) {sorted(unknown)}; use ttft, tpot, e2e")
    ok = df["ok"].astype(bool).to_numpy().copy()
    for metric, bound in bounds_ms.items():
        if not bound > 0:
            raise ValueError(f"SLO bound for {metric} must be positive, got {bound!r}")
        v = pd.to_numeric(df[_METRIC_COLUMN[metric]], errors="coerce").to_numpy(float) * 1e3
        within = v <= bound
        if metric == "tpot":  # one output token: no TPOT, not held to the bound
            within |= np.isnan(v) & (pd.to_numeric(df["output_tokens"]).to_numpy() <= 1)
        ok &= within
    return pd.Series(ok, index=df.index)


def _active_s(d: pd.DataFrame) -> float:
    """First send to last finish, summed over the alternation slots of one arm."""
    keys = ["slot"] if "slot" in d and d["slot"].notna().any() else []
    spans = (
        d.groupby(keys, dropna=False).agg(lo=("t_start", "min"), hi=("t_end", "max"))
        if keys
        else pd.DataFrame({"lo": [d["t_start"].min()], "hi": [d["t_end"].max()]})
    )
    return float((spans["hi"] - spans["lo"]).clip(lower=0).sum())


def block_rates(df: pd.DataFrame, *, bounds_ms: Mapping[str, float] | None = None) -> pd.DataFrame:
    """One row per (series, level, block) of the attempted measured requests."""
    cols = ["series", "level", "block", "requests", "ok", "active_s", "tokens_per_s",
            "in_flight", "meet", "goodput_per_s", "share_meeting"]  # fmt: skip
    if df.empty:
        return pd.DataFrame(columns=cols)
    d = df[df["attempted"].astype(bool)] if "attempted" in df else df
    d = d[pd.to_numeric(d["t_end"], errors="coerce").notna()].copy()
    fallback = ("r" + d["replicate"].astype(str)) if "replicate" in d else "-"
    d["block"] = d["block"].where(d["block"].notna(), fallback) if "block" in d else fallback
    d["block"] = d["block"].astype(str)
    d["meet"] = meets_slo(d, bounds_ms) if bounds_ms else False
    rows = []
    for (series, level, block), g in d.groupby(["series", "level", "block"], sort=True):
        active = _active_s(g)
        ok = g[g["ok"].astype(bool)]
        n_meet = int(g["meet"].sum())
        rows.append({
            "series": series, "level": int(level), "block": block, "requests": len(g),
            "ok": len(ok), "active_s": active,
            "tokens_per_s": float(ok["output_tokens"].sum()) / active if active > 0 else np.nan,
            "in_flight": float(pd.to_numeric(g["e2e_s"]).sum()) / active if active > 0
            else np.nan,
            "meet": n_meet if bounds_ms else np.nan,
            "goodput_per_s": n_meet / active if bounds_ms and active > 0 else np.nan,
            "share_meeting": n_meet / len(g) if bounds_ms and len(g) else np.nan,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def _t_interval(values: np.ndarray, confidence_level: float) -> tuple[float, float, float]:
    """Mean and t-interval over blocks (a zero-width interval from one block is NaN)."""
    v = values[np.isfinite(values)]
    if not len(v):
        return math.nan, math.nan, math.nan
    t = t_interval(v, confidence_level=confidence_level)
    if not t.decidable:
        return t.mean, math.nan, math.nan
    return t.mean, t.low, t.high


def _percentile(values: pd.Series, ok: pd.Series, q: float) -> float:
    """The q-th percentile (ms) with failed requests counted as infinitely slow."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(float) * 1e3
    v = np.where(ok.to_numpy(bool), v, np.inf)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, q, method="higher")) if len(v) else math.nan


def level_table(
    df: pd.DataFrame,
    *,
    bounds_ms: Mapping[str, float] | None = None,
    percentile: float = 90.0,
    confidence_level: float = 0.95,
    rates: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per (series, level): tokens/s, in flight, TTFT/TPOT percentiles and, with an SLO,
    share meeting it, goodput (each with its block interval) and whether it is sustained.
    ``rates`` is :func:`block_rates` of ``df`` with the same bounds, when the caller has it."""
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    if not 0 < percentile < 100:
        raise ValueError(f"percentile must be in (0, 100), got {percentile!r}")
    if rates is None:
        rates = block_rates(df, bounds_ms=bounds_ms)
    rows = []
    for (series, level), g in rates.groupby(["series", "level"], sort=True):
        recs = df[(df["series"] == series) & (df["level"] == level)]
        if "attempted" in recs:
            recs = recs[recs["attempted"].astype(bool)]
        ok = recs["ok"].astype(bool)
        row: dict[str, Any] = {"series": series, "level": int(level), "blocks": len(g),
                               "requests": int(g["requests"].sum())}  # fmt: skip
        for name in ("tokens_per_s", "in_flight", "goodput_per_s", "share_meeting"):
            mean, lo, hi = _t_interval(g[name].to_numpy(float), confidence_level)
            lo = max(lo, 0.0)  # rates and shares are never negative
            if name == "share_meeting":  # a share: its interval stays within [0, 1]
                hi = min(hi, 1.0)
            row.update({name: mean, f"{name}_low": lo, f"{name}_high": hi})
        for metric in ("ttft", "tpot", "e2e"):
            row[f"{metric}_p50_ms"] = _percentile(recs[_METRIC_COLUMN[metric]], ok, 50)
            row[f"{metric}_p{percentile:g}_ms"] = _percentile(
                recs[_METRIC_COLUMN[metric]], ok, percentile
            )
        row["sustains_slo"] = (
            all(row[f"{m}_p{percentile:g}_ms"] <= b for m, b in bounds_ms.items())
            if bounds_ms
            else None
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _goodput_word(lo: float, hi: float, margin: float) -> str:
    if lo == hi == math.inf:
        return "higher"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "not assessed"
    if lo > 1 + margin:
        return "higher"
    if hi < 1 - margin:
        return "lower"
    if lo >= 1 - margin and hi <= 1 + margin:
        return "equivalent"
    return "inconclusive"


def goodput_ratios(
    rates: pd.DataFrame,
    *,
    control: str,
    margin: float,
    confidence_level: float = 0.95,
) -> pd.DataFrame:
    """Per experiment and level: goodput over the control's, paired by block, with a
    t-interval on the per-block log-ratios and a verdict word (``GOODPUT_WORDS``)."""
    if not 0 < margin < 1:
        raise ValueError(f"margin must be in (0, 1), got {margin!r}")
    cols = ["series", "level", "ratio", "ci_low", "ci_high", "blocks", "word", "reason"]
    rows = []
    ctrl = rates[rates["series"] == control]
    for (series, level), g in rates[rates["series"] != control].groupby(["series", "level"]):
        c = ctrl[ctrl["level"] == level].set_index("block")["goodput_per_s"]
        e = g.set_index("block")["goodput_per_s"]
        shared = sorted(set(c.index) & set(e.index))
        ge, gc = e.loc[shared].to_numpy(float), c.loc[shared].to_numpy(float)
        reason = ""
        if not shared or np.isnan(ge).all():
            ratio = lo = hi = math.nan
            reason = "no block with both arms"
        elif (ge <= 0).all() and (gc > 0).all():  # none of the arm's requests ever met it
            ratio = lo = hi = 0.0
            reason = "no request of the arm met the SLO in any block"
        elif (gc <= 0).all() and (ge > 0).all():
            ratio = lo = hi = math.inf
            reason = "no request of the control met the SLO in any block"
        elif (ge <= 0).any() or (gc <= 0).any():
            ratio = float(ge.sum() / gc.sum()) if gc.sum() > 0 else math.nan
            lo = hi = math.nan
            reason = "a block where no request of one arm met the SLO: no log-ratio"
            if len(shared) >= 2 and (ge < gc * (1 - margin)).all():  # as "none ever met it"
                lo = hi = 0.0
                reason += "; lower than the control's by more than δ in every block"
            elif len(shared) >= 2 and (ge > gc * (1 + margin)).all():
                lo = hi = math.inf
                reason += "; higher than the control's by more than δ in every block"
        else:
            mean, lo_l, hi_l = _t_interval(np.log(ge / gc), confidence_level)
            ratio, lo, hi = math.exp(mean), math.exp(lo_l), math.exp(hi_l)
            if len(shared) < 2:
                reason = "one block: no interval"
        rows.append({"series": series, "level": int(level), "ratio": ratio, "ci_low": lo,
                     "ci_high": hi, "blocks": len(shared),
                     "word": _goodput_word(lo, hi, margin), "reason": reason})  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def highest_sustained(
    table: pd.DataFrame, *, order: Sequence[int], names: Mapping[int, str]
) -> dict[str, str | None]:
    """Per arm, the highest load it sustains within the SLO, counting up ``order`` (level
    indices from the lowest load to the highest, one kind of load) without a gap; in words
    from ``names`` (None: not even the lowest)."""
    out: dict[str, str | None] = {}
    for series, g in table.groupby("series", sort=False):
        by_level = {int(r["level"]): bool(r["sustains_slo"]) for _, r in g.iterrows()}
        best = None
        for level in order:
            if not by_level.get(level):
                break
            best = names.get(level, str(level))
        out[str(series)] = best
    return out
