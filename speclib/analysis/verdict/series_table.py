"""The per-series table: one row per arm, what its launches and requests came to.

:func:`series_table` counts each arm's launches and requests (ok, failed, not attempted,
bad outputs) and gives its latency medians and p90, tokens per chunk, acceptance and peak
memory; the comparisons read the memory gate's input from it, the report shows it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from speclib.analysis.frames import finite_median
from speclib.analysis.speculation.agreement import count_bad_outputs
from speclib.analysis.speculation.chunks import tokens_per_chunk_distribution
from speclib.params.experiment import ExperimentParams
from speclib.params.server import SeriesParams

__all__ = [
    "series_row",
    "series_table",
]


def _quantile(values: pd.Series, q: float) -> float | None:
    vals = pd.to_numeric(values, errors="coerce").dropna()
    return float(vals.quantile(q)) if len(vals) else None


def series_row(
    s: SeriesParams, params: ExperimentParams, df: pd.DataFrame, statuses: list[dict[str, Any]]
) -> dict[str, Any]:
    name = s.name
    d = df[df["series"] == name] if not df.empty else df
    ok = d[d["ok"].astype(bool)] if len(d) else d
    attempted = d[d["attempted"].astype(bool)] if len(d) else d
    st = [x for x in statuses if x.get("series") == name]
    peaks = [((x.get("memory") or {}).get("rss_peak_bytes")) for x in st]
    peaks = [p for p in peaks if p]
    has = bool(len(ok))
    return {
        "series": name,
        "role": "control" if name == params.control_name else "experiment",
        "method": (s.speculative_config or {}).get("method"),
        "k": (s.speculative_config or {}).get("num_speculative_tokens"),
        "launches": len(st),
        "launches_failed": sum(1 for x in st if not x.get("ok")),
        "requests": len(d),
        "ok": len(ok),
        "failed": len(attempted) - len(ok),
        "not_attempted": len(d) - len(attempted),
        "bad_outputs": count_bad_outputs(ok.to_dict(orient="records")) if has else 0,
        "median_ttft_s": finite_median(ok["ttft_s"]) if has else None,
        "median_tpot_s": finite_median(ok["tpot_s"], positive=True) if has else None,
        "p90_tpot_s": _quantile(ok["tpot_s"], 0.9) if has else None,
        "median_e2e_s": finite_median(ok["e2e_s"]) if has else None,
        "mean_output_tokens": float(ok["output_tokens"].mean()) if has else None,
        "mean_tokens_per_chunk": tokens_per_chunk_distribution(ok["chunk_tokens"]).mean
        if has
        else None,
        "acceptance_rate": finite_median(ok["spec_rate"]) if has else None,
        "mean_acceptance_length": finite_median(ok["spec_mean_len"]) if has else None,
        "requests_without_drafts": int(ok["spec_no_drafts"].fillna(False).astype(bool).sum())
        if has
        else 0,
        "peak_rss_bytes": max(peaks) if peaks else None,
    }


def series_table(
    df: pd.DataFrame, params: ExperimentParams, statuses: list[dict[str, Any]]
) -> pd.DataFrame:
    """One row per series: counts, latency medians and p90s, acceptance, memory."""
    return pd.DataFrame([series_row(s, params, df, statuses) for s in params.arms])
