"""The report's evidence: every figure, in report order, from one run's analysis.

:func:`evidence_figures` picks the figures a run has data for (the tuning sweep's TPOT
ratio against the swept value when the run has a sweep, latency ECDFs, one paired
per-prompt ratio per comparison, speed-up under load, acceptance from the ``/metrics``
counters, acceptance against speed-up, tokens per chunk, the timeline, the sampling check,
memory) and numbers their captions. Drawing is in :mod:`speclib.report.request_figures` and
:mod:`speclib.report.spec_figures`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pandas as pd

from speclib.analysis.acceptance import sum_counters
from speclib.analysis.drift import drift_sentence
from speclib.analysis.run_analysis import RunAnalysis
from speclib.core.rundir import RunDir
from speclib.core.scores import read_scores
from speclib.report.figure_base import FigureWithCaption, series_palette
from speclib.report.request_figures import (
    plot_drift,
    plot_latency_ecdf,
    plot_paired_ratio,
    plot_timeline,
    plot_tokens_per_chunk,
)
from speclib.report.spec_figures import (
    plot_acceptance,
    plot_acceptance_vs_speedup,
    plot_memory,
    plot_output_logprob,
    plot_speedup_vs_load,
)
from speclib.report.sweep_figures import sweep_figure

__all__ = ["evidence_figures"]


def evidence_figures(an: RunAnalysis) -> Iterator[FigureWithCaption]:
    """Every evidence figure in report order (skipping those without data), numbered."""
    for i, fig in enumerate(_evidence_figures(an), start=1):
        yield dataclasses.replace(fig, caption=f"Figure {i}. {fig.caption}")


def _evidence_figures(an: RunAnalysis) -> Iterator[FigureWithCaption]:
    df, control = an.records, an.control
    if df.empty:
        return
    pal = series_palette([s.name for s in an.params.arms], control=control)
    sweep = sweep_figure(an)
    if sweep is not None:
        yield sweep
    yield plot_latency_ecdf(df, control=control, palette=pal)
    for c in an.comparisons:
        ci = c.cis.get("tpot_s")
        if ci is not None:
            yield plot_paired_ratio(
                df[df["level"] == c.level],
                experiment=c.experiment,
                ci=(ci.ci_low, ci.ci_high),
                estimate=ci.estimate,
                confidence_level=ci.confidence_level,
                control=control,
                palette=pal,
            )
    load = an.load_frame()
    closed = load[load["request_rate"].isna()] if len(load) else load
    if len(closed) and closed["concurrency"].nunique() > 1:
        yield plot_speedup_vs_load(closed, control=control, palette=pal)
    counters = _series_counters(an)
    if counters:
        yield plot_acceptance(counters, palette=pal, control=control)
    if df["spec_rate"].notna().any():
        yield plot_acceptance_vs_speedup(df, control=control, palette=pal)
    yield plot_tokens_per_chunk(df, control=control, palette=pal)
    yield plot_timeline(df, control=control, palette=pal)
    if len(an.drift):
        yield plot_drift(
            df, an.drift, sentence=drift_sentence(an.drift), control=control, palette=pal
        )
    scores = _scores_frame(an)
    if scores is not None:
        thresholds = [
            c.plausibility.degenerate_threshold
            for c in an.comparisons
            if c.plausibility is not None
        ]
        yield plot_output_logprob(
            scores, control=control, palette=pal, threshold=thresholds[0] if thresholds else None
        )
    if not an.memory.empty and an.memory["rss_bytes"].notna().any():
        yield plot_memory(an.memory, control=control, palette=pal)


def _scores_frame(an: RunAnalysis) -> pd.DataFrame | None:
    path = RunDir.at(an.run_dir).output_scores
    if not path.exists():
        return None
    rows = [
        {"series": s.series, "mean_logprob": s.mean_logprob}
        for s in read_scores(path)
        if s.mean_logprob is not None
    ]
    return pd.DataFrame(rows) if rows else None


def _series_counters(an: RunAnalysis) -> dict[str, Any]:
    out = {}
    for s in an.params.arms:
        cs = [m.spec for m in an.launch_metrics if m.series == s.name and m.spec is not None]
        total = sum_counters(cs)
        if total is not None and total.num_draft_tokens > 0 and total.accepted_per_pos:
            out[s.name] = total  # nothing to draw without per-position counters
    return out
