"""The analysis of a run folder: records on disk → per-series tables → decisions → summary.

Pure computation over what the run wrote (``requests.jsonl``, each launch's
``status.json`` and ``/metrics`` snapshots, ``manifest.json``); no server is contacted, so
``speclib analyze RUN_DIR`` can re-decide a GPU run on a laptop with another margin or
confidence level. For every experiment series against the control it pairs requests by
replicate, prompt and repeat; computes TPOT (primary), TTFT and E2E ratio CIs (two-stage
when there are several launches); decides TPOT with Holm's step-down across experiments;
weighs the gates (errors, outputs, memory, TTFT/E2E); measures acceptance per request and
from ``/metrics`` deltas and reconciles the two; compares greedy outputs; and explains the
speed-up with the standard model of speculative decoding. The result is a frozen
:class:`RunAnalysis` whose :meth:`~RunAnalysis.summary` is written to ``summary.json``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis import specdecode as sd
from speclib.analysis.decision import Decision, Verdict, apply_gates, holm_decide
from speclib.analysis.frames import PairedFrame, load_records, pair_frame, ratio_by_category
from speclib.analysis.stats import DegenerateDataWarning, RatioCI, paired_ratio_ci
from speclib.core.params import AnalysisParams, ExperimentParams, load_params
from speclib.core.prometheus import (
    CounterResetError,
    PrefixCacheDelta,
    SpecCounters,
    parse_prometheus,
    prefix_cache_delta,
    spec_counters_delta,
)
from speclib.core.records import read_records
from speclib.core.rundir import RunDir, write_json_atomic

__all__ = [
    "Comparison",
    "LaunchMetrics",
    "RunAnalysis",
    "analyze_run",
    "launch_metrics",
    "series_table",
]

_METRICS = ("tpot_s", "ttft_s", "e2e_s")


@dataclass(frozen=True)
class LaunchMetrics:
    """``/metrics`` deltas of one launch over its measured requests, and the reconciliation."""

    launch_id: str
    series: str
    spec: SpecCounters | None
    prefix_cache: PrefixCacheDelta | None
    reconciliation: sd.Reconciliation | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        rec = self.reconciliation
        return {
            "launch_id": self.launch_id,
            "series": self.series,
            "spec": self.spec.to_dict() if self.spec else None,
            "prefix_cache": None
            if self.prefix_cache is None
            else {"queries": self.prefix_cache.queries, "hits": self.prefix_cache.hits},
            "reconciliation": None
            if rec is None
            else {
                "matches": rec.matches,
                "n_requests": rec.n_requests,
                "n_with_metrics": rec.n_with_metrics,
                "requests": rec.requests.to_dict(),
                "server": rec.server.to_dict(),
                "diff_drafts": rec.diff_drafts,
                "diff_draft_tokens": rec.diff_draft_tokens,
                "diff_accepted_tokens": rec.diff_accepted_tokens,
                "explanation": rec.explanation,
            },
            "note": self.note,
        }


@dataclass(frozen=True)
class Comparison:
    """One experiment series against the control."""

    experiment: str
    control: str
    level: int
    load: str
    method: str | None
    k: int | None
    pairing: dict[str, int]
    n_launches: int
    cis: dict[str, RatioCI | None]
    decision: Decision | None
    verdict: Verdict | None
    error_rate_control: float
    error_rate_experiment: float
    bad_outputs_control: int
    bad_outputs_experiment: int
    median_tpot_control_s: float | None
    median_tpot_experiment_s: float | None
    agreement: sd.AgreementSummary | None
    agreements: dict[str, sd.Agreement]
    acceptance: dict[str, Any]
    explanation: sd.SpeedupExplanation | None
    peak_rss_bytes: int | None
    pairs: pd.DataFrame = field(repr=False)
    plausibility: Any = None  # speclib.analysis.plausibility.PlausibilityResult (sampled runs)

    @property
    def word(self) -> str:
        return self.verdict.word if self.verdict else "inconclusive"

    @property
    def tpot_ratio_by_category(self) -> dict[str, tuple[float, int]]:
        """Geometric-mean TPOT ratio and pair count per prompt category (point estimates)."""
        return ratio_by_category(self.pairs)

    def to_dict(self) -> dict[str, Any]:
        tpot = self.cis.get("tpot_s")
        dec = self.decision
        return _clean(
            {
                "experiment": self.experiment,
                "control": self.control,
                "level": self.level,
                "load": self.load,
                "method": self.method,
                "num_speculative_tokens": self.k,
                "n_pairs": self.pairing.get("n_pairs", 0),
                "n_launches": self.n_launches,
                "median_tpot_control_s": self.median_tpot_control_s,
                "median_tpot_experiment_s": self.median_tpot_experiment_s,
                "tpot_ratio": tpot.estimate if tpot else None,
                "tpot_ratio_ci": [tpot.ci_low, tpot.ci_high] if tpot else None,
                "tpot_ratio_by_category": {
                    cat: {"ratio": r, "n_pairs": n}
                    for cat, (r, n) in self.tpot_ratio_by_category.items()
                },
                "confidence_level": tpot.confidence_level if tpot else None,
                "ci_method": tpot.method if tpot else None,
                "tpot_decision": dec.word if dec else "inconclusive",
                "decision": self.word,
                "reasons": list(self.verdict.reasons) if self.verdict else ["no valid pairs"],
                "extra_pairs_needed": dec.extra_pairs_needed if dec else None,
                "extra_launches_needed": dec.extra_launches_needed if dec else None,
                "metrics": {
                    m.removesuffix("_s"): (ci.to_dict() if ci else None)
                    for m, ci in self.cis.items()
                },
                "gates": [vars(g) for g in self.verdict.gates] if self.verdict else [],
                "pairing": self.pairing,
                "error_rate_control": self.error_rate_control,
                "error_rate_experiment": self.error_rate_experiment,
                "bad_outputs_control": self.bad_outputs_control,
                "bad_outputs_experiment": self.bad_outputs_experiment,
                "agreement": vars(self.agreement) if self.agreement else None,
                "acceptance": self.acceptance,
                "explanation": _explanation_dict(self.explanation),
                "peak_rss_bytes": self.peak_rss_bytes,
                "plausibility": _plaus_dict(self.plausibility),
            }
        )


@dataclass(frozen=True)
class RunAnalysis:
    """Everything the report shows, computed from the run folder."""

    run_dir: Path
    params: ExperimentParams
    records: pd.DataFrame = field(repr=False)
    series: pd.DataFrame = field(repr=False)
    comparisons: tuple[Comparison, ...]
    launches: tuple[dict[str, Any], ...]
    launch_metrics: tuple[LaunchMetrics, ...]
    manifest: dict[str, Any] = field(repr=False)
    memory: pd.DataFrame = field(repr=False)
    warnings: tuple[str, ...] = ()
    crosschecks: tuple[dict[str, Any], ...] = ()

    @property
    def control(self) -> str:
        return self.params.control_name

    def load_frame(self) -> pd.DataFrame:
        """TPOT ratio with CI per experiment and load level (for the speed-up-vs-load plot)."""
        levels = self.params.workload.levels
        rows = []
        for c in self.comparisons:
            ci = c.cis.get("tpot_s")
            if ci is None or c.level >= len(levels):
                continue
            lv = levels[c.level]
            rows.append(
                {
                    "series": c.experiment,
                    "level": c.level,
                    "load": c.load,
                    "concurrency": lv.concurrency,
                    "request_rate": lv.request_rate,
                    "estimate": ci.estimate,
                    "ci_low": ci.ci_low,
                    "ci_high": ci.ci_high,
                    "decision": c.word,
                }
            )
        return pd.DataFrame(rows)

    def summary(self) -> dict[str, Any]:
        """The content of ``summary.json``."""
        a = self.params.analysis
        return _clean(
            {
                "kit": "speclib",
                "experiment": self.params.name,
                "run_dir": str(self.run_dir),
                "control": self.control,
                "analysis": {
                    "confidence_level": a.confidence,
                    "margin": a.margin,
                    "n_resamples": a.n_resamples,
                    "seed": a.seed,
                    "multiple_comparisons": (
                        f"Holm step-down over {len(self.comparisons)} experiment(s) at family "
                        f"confidence {a.confidence:.0%}"
                    ),
                    "primary_metric": "TPOT = (E2E - TTFT) / (output_tokens - 1), client-side",
                },
                "series": self.series.to_dict(orient="records"),
                "comparisons": [c.to_dict() for c in self.comparisons],
                "launches": [
                    {k: v for k, v in s.items() if k not in ("extra",)} for s in self.launches
                ],
                "launch_metrics": [m.to_dict() for m in self.launch_metrics],
                "crosschecks": [_crosscheck_summary(c) for c in self.crosschecks],
                "warnings": list(self.warnings),
            }
        )


def _crosscheck_summary(check: dict[str, Any]) -> dict[str, Any]:
    """A launch's vllm bench cross-check without the bench's per-request detail."""
    out = {k: v for k, v in check.items() if k != "bench"}
    bench = check.get("bench") or {}
    out["bench_argv"] = bench.get("argv")
    return out


def _plaus_dict(p: Any) -> dict[str, Any] | None:
    if p is None:
        return None
    keep = (
        "word",
        "implausible",
        "estimate",
        "ci_low",
        "ci_high",
        "confidence_level",
        "margin_nats",
        "n_prompts",
        "mean_logprob_control",
        "mean_logprob_experiment",
        "n_degenerate_control",
        "n_degenerate_experiment",
        "n_outside_control",
        "n_outside_experiment",
        "nucleus_p_value",
        "reason",
    )
    return {k: getattr(p, k, None) for k in keep}


def _explanation_dict(e: sd.SpeedupExplanation | None) -> dict[str, Any] | None:
    if e is None:
        return None
    out = dict(vars(e))
    out["k_curve"] = [list(kv) for kv in e.k_curve]
    return out


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python, tuples → lists."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is pd.NA or obj is pd.NaT:
        return None
    return obj


def _median(values: pd.Series) -> float | None:
    vals = pd.to_numeric(values, errors="coerce").dropna()
    return float(vals.median()) if len(vals) else None


def _quantile(values: pd.Series, q: float) -> float | None:
    vals = pd.to_numeric(values, errors="coerce").dropna()
    return float(vals.quantile(q)) if len(vals) else None


def _bad_output_count(df: pd.DataFrame) -> int:
    return int(
        sum(
            sd.classify_output(row) in ("empty_output", "truncated_by_error")
            for row in df.to_dict(orient="records")
        )
    )


def series_table(
    df: pd.DataFrame, params: ExperimentParams, statuses: list[dict[str, Any]]
) -> pd.DataFrame:
    """One row per series: counts, latency medians and p90s, acceptance, memory."""
    rows = []
    for s in params.series:
        d = df[df["series"] == s.name] if not df.empty else df
        ok = d[d["ok"].astype(bool)] if len(d) else d
        attempted = d[d["attempted"].astype(bool)] if len(d) else d
        st = [x for x in statuses if x.get("series") == s.name]
        peaks = [((x.get("memory") or {}).get("rss_peak_bytes")) for x in st]
        peaks = [p for p in peaks if p]
        rows.append(
            {
                "series": s.name,
                "role": "control" if s.name == params.control_name else "experiment",
                "method": (s.speculative_config or {}).get("method"),
                "k": (s.speculative_config or {}).get("num_speculative_tokens"),
                "launches": len(st),
                "launches_failed": sum(1 for x in st if not x.get("ok")),
                "requests": len(d),
                "ok": len(ok),
                "failed": len(attempted) - len(ok),
                "not_attempted": len(d) - len(attempted),
                "bad_outputs": _bad_output_count(ok) if len(ok) else 0,
                "median_ttft_s": _median(ok["ttft_s"]) if len(ok) else None,
                "median_tpot_s": _median(ok["tpot_s"]) if len(ok) else None,
                "p90_tpot_s": _quantile(ok["tpot_s"], 0.9) if len(ok) else None,
                "median_e2e_s": _median(ok["e2e_s"]) if len(ok) else None,
                "mean_output_tokens": float(ok["output_tokens"].mean()) if len(ok) else None,
                "mean_tokens_per_chunk": _tokens_per_chunk(ok),
                "acceptance_rate": _median(ok["spec_rate"]) if len(ok) else None,
                "mean_acceptance_length": _median(ok["spec_mean_len"]) if len(ok) else None,
                "requests_without_drafts": int(
                    ok["spec_no_drafts"].fillna(False).astype(bool).sum()
                )
                if len(ok)
                else 0,
                "peak_rss_bytes": max(peaks) if peaks else None,
            }
        )
    return pd.DataFrame(rows)


def _tokens_per_chunk(ok: pd.DataFrame) -> float | None:
    chunks = [c for c in ok["chunk_tokens"] if c]
    if not chunks:
        return None
    return float(sum(map(sum, chunks)) / sum(map(len, chunks)))


def _read_prom(path: Path) -> dict[Any, float] | None:
    try:
        return parse_prometheus(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def launch_metrics(rd: RunDir, status: dict[str, Any], records: pd.DataFrame) -> LaunchMetrics:
    """``/metrics`` deltas over the measured window of one launch, reconciled with records."""
    lid, series = status["launch_id"], status["series"]
    before = _read_prom(rd.launch(lid) / "metrics_before.prom")
    after = _read_prom(rd.launch(lid) / "metrics_after.prom")
    if before is None or after is None:
        return LaunchMetrics(lid, series, None, None, None, "no /metrics snapshots")
    try:
        spec = spec_counters_delta(before, after)
    except CounterResetError as exc:
        return LaunchMetrics(lid, series, None, None, None, f"counters reset: {exc}")
    cache = prefix_cache_delta(before, after)
    mine = records[records["launch_id"] == lid] if len(records) else records
    specs = [s if isinstance(s, dict) else None for s in mine.get("spec", [])]
    rec = sd.reconcile(specs, spec) if spec.present or any(specs) else None
    return LaunchMetrics(lid, series, spec, cache, rec)


def _ci(
    pairs: pd.DataFrame, metric: str, level: float, a: AnalysisParams, salt: int
) -> RatioCI | None:
    c = pairs[f"{metric}_c"].to_numpy(float)
    e = pairs[f"{metric}_e"].to_numpy(float)
    keep = np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)
    if keep.sum() == 0:
        return None
    clusters = pairs["replicate"].to_numpy()[keep]
    rng = np.random.default_rng([a.seed, salt])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        return paired_ratio_ci(
            c[keep],
            e[keep],
            clusters=clusters if len(set(clusters)) > 1 else None,
            confidence_level=level,
            n_resamples=a.n_resamples,
            rng=rng,
        )


def _acceptance(exp_df: pd.DataFrame, lms: list[LaunchMetrics]) -> dict[str, Any]:
    ok = exp_df[exp_df["ok"].astype(bool)]
    per_req = [sd.request_acceptance(s) for s in ok["spec"] if isinstance(s, dict)]
    with_drafts = [r for r in per_req if r.rate is not None]
    counters = [m.spec for m in lms if m.spec is not None]
    total = _sum_counters(counters)
    recs = [m.reconciliation for m in lms if m.reconciliation is not None]
    return {
        "requests_with_metrics": len(per_req),
        "requests_without_drafts": sum(r.no_drafts for r in per_req),
        "per_request_median_rate": statistics.median([r.rate for r in with_drafts])
        if with_drafts
        else None,
        "per_request_median_mean_length": statistics.median(
            [r.mean_length for r in with_drafts if r.mean_length is not None]
        )
        if with_drafts
        else None,
        "metrics_acceptance_rate": total.acceptance_rate if total else None,
        "metrics_mean_acceptance_length": total.mean_acceptance_length if total else None,
        "metrics_per_position_rate": list(total.per_position_rate or []) if total else None,
        "metrics_counters": total.to_dict() if total else None,
        "reconciled": all(r.matches for r in recs) if recs else None,
        "reconciliation_notes": sorted({r.explanation for r in recs if r.explanation}),
    }


def _sum_counters(counters: list[SpecCounters]) -> SpecCounters | None:
    if not counters:
        return None
    width = max(len(c.accepted_per_pos) for c in counters)
    per_pos = [
        sum(c.accepted_per_pos[i] if i < len(c.accepted_per_pos) else 0 for c in counters)
        for i in range(width)
    ]
    return SpecCounters(
        num_drafts=sum(c.num_drafts for c in counters),
        num_draft_tokens=sum(c.num_draft_tokens for c in counters),
        num_accepted_tokens=sum(c.num_accepted_tokens for c in counters),
        accepted_per_pos=tuple(per_pos),
        present=any(c.present for c in counters),
    )


def _explain(
    k: int | None,
    acc: dict[str, Any],
    tpot: RatioCI | None,
    med_c: float | None,
    med_e: float | None,
) -> sd.SpeedupExplanation | None:
    mean_len = acc.get("metrics_mean_acceptance_length") or acc.get(
        "per_request_median_mean_length"
    )
    if not k or not mean_len or not med_c or not med_e or tpot is None:
        return None
    try:
        alpha = sd.alpha_from_mean_length(mean_len, k)
        c = sd.estimate_draft_cost(
            control_tpot=med_c, k=k, spec_tpot=med_e, mean_acceptance_length=mean_len
        )
        return sd.explain_speedup(alpha=alpha, k=k, c=c, measured_speedup=1 / tpot.estimate)
    except ValueError:
        return None


def _greedy(params: ExperimentParams) -> bool:
    return params.workload.temperature == 0.0


def _compare(
    name: str,
    df: pd.DataFrame,
    params: ExperimentParams,
    ci_tpot: RatioCI | None,
    decision: Decision | None,
    lms: list[LaunchMetrics],
    series_rows: pd.DataFrame,
    salt: int,
    level: int = 0,
    plaus: Any = None,
) -> Comparison:
    a = params.analysis
    control = params.control_name
    paired: PairedFrame = pair_frame(df, control=control, experiment=name)
    pairs = paired.pairs
    cis: dict[str, RatioCI | None] = {"tpot_s": ci_tpot}
    for j, m in enumerate(("ttft_s", "e2e_s")):
        cis[m] = _ci(pairs, m, a.confidence, a, salt * 10 + j + 1) if len(pairs) else None
    d_c, d_e = df[df["series"] == control], df[df["series"] == name]
    err_c = _error_rate(d_c)
    err_e = _error_rate(d_e)
    bad_c = _bad_output_count(d_c[d_c["ok"].astype(bool)])
    bad_e = _bad_output_count(d_e[d_e["ok"].astype(bool)])
    agreements = (
        sd.compare_outputs(d_c.to_dict(orient="records"), d_e.to_dict(orient="records"))
        if _greedy(params)
        else {}
    )
    agreement = sd.summarize_agreement(list(agreements.values())) if agreements else None
    row = series_rows.set_index("series").loc[name]
    peak = row.get("peak_rss_bytes")
    peak = None if peak is None or (isinstance(peak, float) and math.isnan(peak)) else int(peak)
    verdict = None
    if decision is not None:
        verdict = apply_gates(
            decision,
            control_error_rate=err_c,
            experiment_error_rate=err_e,
            max_error_rate_increase=a.max_error_rate_increase,
            wrong_outputs=max(0, bad_e - bad_c) + _implausible_count(plaus),
            agreement_rate=agreement.exact_match_rate if agreement else None,
            min_agreement_rate=a.min_greedy_agreement if agreement else None,
            peak_memory_gib=peak / 1024**3 if peak else None,
            memory_limit_gib=a.memory_limit_gib if peak else None,
            ttft=cis.get("ttft_s"),
            e2e=cis.get("e2e_s"),
            ttft_margin=a.ttft_margin,
            ttft_min_delta_s=a.ttft_max_increase_ms / 1e3,
        )
    spec_cfg = params.series_by_name(name).speculative_config or {}
    k = spec_cfg.get("num_speculative_tokens")
    acc = _acceptance(d_e, [m for m in lms if m.series == name])
    med_c = _median(pairs["tpot_s_c"]) if len(pairs) else None
    med_e = _median(pairs["tpot_s_e"]) if len(pairs) else None
    levels = params.workload.levels
    load = levels[level].label if level < len(levels) else f"level {level}"
    return Comparison(
        experiment=name,
        control=control,
        level=level,
        load=load,
        method=spec_cfg.get("method"),
        k=k,
        pairing=paired.to_dict(),
        n_launches=int(pairs["replicate"].nunique()) if len(pairs) else 0,
        cis=cis,
        decision=decision,
        verdict=verdict,
        error_rate_control=err_c,
        error_rate_experiment=err_e,
        bad_outputs_control=bad_c,
        bad_outputs_experiment=bad_e,
        median_tpot_control_s=med_c,
        median_tpot_experiment_s=med_e,
        agreement=agreement,
        agreements=agreements,
        acceptance=acc,
        explanation=_explain(k, acc, ci_tpot, med_c, med_e),
        peak_rss_bytes=peak,
        pairs=pairs,
        plausibility=plaus,
    )


def _implausible_count(p: Any) -> int:
    """Outputs the sampling check flags: degenerate ones, at least one if the series is."""
    if p is None:
        return 0
    n = int(getattr(p, "n_degenerate_experiment", 0) or 0)
    return max(n, 1) if getattr(p, "implausible", False) else n


def _plausibility(rd: RunDir, params: ExperimentParams) -> dict[str, Any]:
    if not (rd.root / "output_scores.jsonl").exists():
        return {}
    from speclib.analysis.plausibility import compare_run

    try:
        return dict(compare_run(rd.root, params))
    except (ValueError, OSError):
        return {}


def _error_rate(d: pd.DataFrame) -> float:
    return float(1 - d["ok"].astype(bool).mean()) if len(d) else 0.0


def _load_params(rd: RunDir, params_file: str | None) -> ExperimentParams:
    data = json.loads(rd.params_resolved.read_text("utf-8"))
    data["source"] = None
    params = ExperimentParams.model_validate(data)
    if params_file:
        override = load_params(params_file, check_files=False)
        params = params.model_copy(update={"analysis": override.analysis})
    return params


def _memory_frame(rd: RunDir, statuses: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for s in statuses:
        path = rd.launch(s["launch_id"]) / "memory.jsonl"
        if not path.exists():
            continue
        for line in path.read_text("utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            rows.append(
                {
                    "series": s["series"],
                    "launch_id": s["launch_id"],
                    "t": row.get("t"),
                    "rss_bytes": row.get("rss_bytes"),
                }
            )
    return pd.DataFrame(rows, columns=["series", "launch_id", "t", "rss_bytes"])


def _with_cache_hits(rows: pd.DataFrame, lms: list[LaunchMetrics]) -> pd.DataFrame:
    """Add the prefix-cache hits and queries (tokens) of the measured windows per series.

    Empty when no launch of a series has the counters (e.g. an external server without
    ``/metrics``); 0 hits is what every arm should show.
    """
    if rows.empty or "series" not in rows.columns:
        return rows
    hits, queries = [], []
    for name in rows["series"]:
        deltas = [m.prefix_cache for m in lms if m.series == name and m.prefix_cache is not None]
        hits.append(sum(d.hits for d in deltas) if deltas else None)
        queries.append(sum(d.queries for d in deltas) if deltas else None)
    return rows.assign(prefix_cache_hits=hits, prefix_cache_queries=queries)


def _crosschecks(rd: RunDir, statuses: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Each launch's ``crosscheck.json`` (vllm bench on the same server), labelled."""
    out = []
    for s in statuses:
        path = rd.launch(s["launch_id"]) / "crosscheck.json"
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        labels = {"series": s["series"], "replicate": s["replicate"], "launch_id": s["launch_id"]}
        out.append({**labels, **data})
    return tuple(out)


def _crosscheck_warnings(checks: tuple[dict[str, Any], ...]) -> list[str]:
    out = []
    for c in checks:
        if c.get("error"):
            out.append(
                f"launch {c['launch_id']}: vllm bench cross-check failed: {c['error'][:300]}"
            )
        elif c.get("verdict") in ("disagree", "too noisy", "kit off"):
            out.append(
                f"launch {c['launch_id']}: the kit's median TPOT and vllm bench serve's on the "
                f"same server differ by more than {100 * c.get('tolerance', 0):g} % "
                f"({c['verdict']})"
            )
    return out


def analyze_run(
    run_dir: str | os.PathLike[str], *, params_file: str | None = None, write: bool = True
) -> RunAnalysis:
    """Analyse a run folder; write ``summary.json`` when ``write`` (the default)."""
    rd = RunDir.at(run_dir)
    params = _load_params(rd, params_file)
    df = load_records(rd.root)
    statuses = rd.statuses()
    lms = [launch_metrics(rd, s, df) for s in statuses]
    rows = _with_cache_hits(series_table(df, params, statuses), lms)
    levels = sorted(int(x) for x in df["level"].unique()) if len(df) else []
    plaus = _plausibility(rd, params)
    comps = tuple(c for lvl in levels for c in _compare_level(df, params, lms, rows, lvl, plaus))
    checks = _crosschecks(rd, statuses)
    notes = _warnings(rd, statuses, lms, df) + _crosscheck_warnings(checks)
    analysis = RunAnalysis(
        run_dir=rd.root,
        params=params,
        records=df,
        series=rows,
        comparisons=comps,
        launches=tuple(statuses),
        launch_metrics=tuple(lms),
        manifest=rd.read_manifest(),
        memory=_memory_frame(rd, statuses),
        warnings=tuple(notes),
        crosschecks=checks,
    )
    if write:
        write_json_atomic(rd.summary, analysis.summary())
    return analysis


def _usable(pairs: pd.DataFrame) -> bool:
    c, e = pairs.get("tpot_s_c"), pairs.get("tpot_s_e")
    if c is None or e is None or not len(pairs):
        return False
    c, e = c.to_numpy(float), e.to_numpy(float)
    return bool((np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)).any())


def _compare_level(
    df: pd.DataFrame,
    params: ExperimentParams,
    lms: list[LaunchMetrics],
    rows: pd.DataFrame,
    level: int,
    plaus: dict[str, Any],
) -> list[Comparison]:
    """Every experiment against the control at one load level (Holm across experiments)."""
    a = params.analysis
    d = df[df["level"] == level]
    experiments = [s.name for s in params.series if s.name != params.control_name]
    pairs = {n: pair_frame(d, control=params.control_name, experiment=n).pairs for n in experiments}
    salts = {n: (level + 1) * 1000 + i + 1 for i, n in enumerate(experiments)}
    usable = [n for n in experiments if _usable(pairs[n])]
    decided = (
        holm_decide(
            lambda n, conf: _ci(pairs[n], "tpot_s", conf, a, salts[n] * 100),  # type: ignore[arg-type]
            usable,
            family_confidence=a.confidence,
            margin=a.margin,
        )
        if usable
        else {}
    )
    return [
        _compare(
            n, d, params, *decided.get(n, (None, None)), lms, rows, salts[n], level, plaus.get(n)
        )
        for n in experiments
    ]


def _warnings(
    rd: RunDir, statuses: list[dict[str, Any]], lms: list[LaunchMetrics], df: pd.DataFrame
) -> list[str]:
    out = [
        f"installed vLLM is affected by security advisory {a['id']} ({a['summary']}; fixed "
        f"in {a['fixed_in']})"
        for a in rd.read_manifest().get("security_advisories", [])
    ]
    for s in statuses:
        if not s.get("ok"):
            out.append(f"launch {s['launch_id']} failed: {(s.get('error') or '')[:300]}")
        if (s.get("client") or {}).get("saturated"):
            out.append(
                f"launch {s['launch_id']}: the client used most of a core; its "
                "latencies are upper bounds"
            )
    for m in lms:
        if m.reconciliation is not None and not m.reconciliation.matches:
            out.append(
                f"launch {m.launch_id}: per-request spec metrics do not add up to "
                f"the /metrics deltas ({m.reconciliation.explanation})"
            )
        if m.prefix_cache is not None and m.prefix_cache.hits:
            out.append(
                f"launch {m.launch_id}: {m.prefix_cache.hits:g} prefix-cache hits "
                "during the measured requests (a warm cache favours this series)"
            )
    if not rd.requests.exists() or df.empty:
        out.append("no measured request records")
    n_lines = sum(1 for _ in read_records(rd.requests)) if rd.requests.exists() else 0
    if n_lines == 0:
        out.append("requests.jsonl is empty")
    return out
