"""The report's evidence: every figure, in report order, from one run's analysis.

:func:`evidence_figures` picks the figures a run has data for (the tuning sweep's TPOT
ratio against the swept value when the run has a sweep, latency ECDFs, one paired
per-prompt ratio per comparison, speed-up under load, acceptance from the ``/metrics``
counters, acceptance against speed-up, tokens per chunk, the timeline, the sampling check,
memory) and numbers their captions. A figure that would repeat another is left out: tokens
per chunk when the ``/metrics`` counters give the accepted-drafts histogram (a chunk carries
the accepted drafts plus one), the timeline when no two requests of a launch overlapped
(at concurrency 1 it shows only the send order, which the drift figure shows with TPOT).
Drawing is in :mod:`speclib.report.request_figures`, :mod:`speclib.report.stream_figures`
and :mod:`speclib.report.spec_figures`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd

from speclib.analysis.health.drift import drift_sentence
from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.speculation.acceptance import sum_counters
from speclib.core.estimand import Estimand
from speclib.core.rundir import RunDir
from speclib.core.scores import read_scores
from speclib.report.figure_base import FigureWithCaption, series_palette
from speclib.report.request_figures import plot_latency_ecdf, plot_paired_ratio
from speclib.report.spec_figures import (
    plot_acceptance,
    plot_acceptance_vs_speedup,
    plot_memory,
    plot_output_logprob,
    plot_speedup_vs_load,
)
from speclib.report.stream_figures import (
    plot_drift,
    plot_timeline,
    plot_tokens_per_chunk,
    requests_overlap,
)
from speclib.report.sweep_figures import sweep_figure

__all__ = [
    "EVIDENCE",
    "FigureNumbers",
    "acceptance_figures",
    "chunk_figures",
    "evidence_figures",
    "latency_figures",
    "load_figures",
    "memory_figures",
    "paired_ratio_figures",
    "sampling_figures",
    "sweep_figures",
    "timeline_figures",
]


def _palette(an: RunAnalysis) -> dict[str, str]:
    return series_palette([s.name for s in an.params.arms], control=an.control)


def sweep_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """Which k of a tuning sweep? (the sweep's TPOT ratio against the swept value)."""
    fig = sweep_figure(an) if len(an.records) else None
    if fig is None:
        return []
    question = "Which value of the swept setting pays off? "
    return [dataclasses.replace(fig, caption=question + fig.caption)]


def latency_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """How are TTFT, TPOT and end-to-end latency distributed per arm? (ECDFs)"""
    if an.records.empty:
        return []
    return [plot_latency_ecdf(an.records, control=an.control, palette=_palette(an))]


def paired_ratio_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """Per prompt, how much faster is each experiment? (one figure per comparison)"""
    df, pal, out = an.records, _palette(an), []
    for c in an.comparisons if len(df) else ():
        ci = c.cis.get("tpot_s")
        if ci is not None:
            out.append(
                plot_paired_ratio(
                    df[df["level"] == c.level],
                    experiment=c.experiment,
                    ci=(ci.ci_low, ci.ci_high),
                    estimate=ci.estimate,
                    confidence_level=ci.confidence_level,
                    control=an.control,
                    palette=pal,
                    typical=_typical(c),
                )
            )
    return out


def _typical(c: Any) -> float | None:
    """The comparison's typical-request ratio (a geometric mean), when it has one."""
    ci = (getattr(c, "ratios", None) or {}).get(Estimand.TYPICAL)
    return ci.estimate if ci is not None and ci.estimate > 0 else None


def load_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """Does the speed-up hold as the load rises? (closed-loop runs at several concurrencies)"""
    load = an.load_frame() if len(an.records) else pd.DataFrame()
    closed = load[load["request_rate"].isna()] if len(load) else load
    if not len(closed) or closed["concurrency"].nunique() < 2:
        return []
    return [
        plot_speedup_vs_load(
            closed,
            control=an.control,
            palette=_palette(an),
            margin=an.params.analysis.margin,
            break_evens=[b for b in an.load.break_evens if b.axis == "concurrency"],
        )
    ]


def acceptance_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """How often are drafts accepted, by position, and does acceptance track speed-up?"""
    if an.records.empty:
        return []
    pal, out = _palette(an), []
    counters = _series_counters(an)
    if counters:
        out.append(plot_acceptance(counters, palette=pal, control=an.control))
    if an.records["spec_rate"].notna().any():
        out.append(plot_acceptance_vs_speedup(an.records, control=an.control, palette=pal))
    return out


def chunk_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """How many tokens does one streamed chunk carry? (why ITL is not TPOT under speculation)

    Left out when the acceptance figure has the ``/metrics`` histogram of accepted drafts
    per step: a chunk carries the accepted drafts plus one, so it would repeat that panel.
    """
    if an.records.empty or _series_counters(an):
        return []
    return [plot_tokens_per_chunk(an.records, control=an.control, palette=_palette(an))]


def timeline_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """Did requests queue, and did the machine's speed move during the run?

    The timeline only when requests of a launch overlapped (or there is no drift figure):
    at concurrency 1 it shows just the send order, which the drift figure shows with TPOT.
    """
    df = an.records
    if df.empty:
        return []
    pal = _palette(an)
    out = []
    if not len(an.drift) or requests_overlap(df):
        out.append(plot_timeline(df, control=an.control, palette=pal))
    if len(an.drift):
        sentence = drift_sentence(an.drift)
        out.append(plot_drift(df, an.drift, sentence=sentence, control=an.control, palette=pal))
    return out


def sampling_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """Are sampled outputs as likely under the target with speculation as without?"""
    scores = _scores_frame(an) if len(an.records) else None
    if scores is None:
        return []
    thresholds = [
        c.plausibility.degenerate_threshold for c in an.comparisons if c.plausibility is not None
    ]
    threshold = thresholds[0] if thresholds else None
    return [
        plot_output_logprob(scores, control=an.control, palette=_palette(an), threshold=threshold)
    ]


def memory_figures(an: RunAnalysis) -> list[FigureWithCaption]:
    """How much memory does each arm's server take?"""
    if an.records.empty or an.memory.empty or not an.memory["rss_bytes"].notna().any():
        return []
    return [plot_memory(an.memory, control=an.control, palette=_palette(an))]


EVIDENCE = (
    sweep_figures,
    latency_figures,
    paired_ratio_figures,
    load_figures,
    acceptance_figures,
    chunk_figures,
    timeline_figures,
    sampling_figures,
    memory_figures,
)
"""The evidence figure groups in report order; the notebook runs one per cell."""


class FigureNumbers:
    """Numbers captions across calls (``Figure 1.``, ``Figure 2.``, …): the notebook draws
    one group per cell and keeps one counter, so a re-run cell takes the next numbers."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, figures: Iterable[FigureWithCaption]) -> list[FigureWithCaption]:
        out = []
        for fig in figures:
            self.count += 1
            out.append(dataclasses.replace(fig, caption=f"Figure {self.count}. {fig.caption}"))
        return out


def evidence_figures(an: RunAnalysis) -> Iterator[FigureWithCaption]:
    """Every evidence figure in report order (skipping those without data), numbered."""
    numbers = FigureNumbers()
    for group in EVIDENCE:
        yield from numbers(group(an))


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
