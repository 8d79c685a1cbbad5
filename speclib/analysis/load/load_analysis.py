"""Speculation against load: the per-level table, break-even loads, k schedules, goodput.

:func:`analyze_load` joins the pure functions of :mod:`speclib.analysis.load.breakeven`,
:mod:`speclib.analysis.load.goodput` and :mod:`speclib.analysis.load.k_schedule` over one run's
records, comparisons and sweep recommendations into one frozen :class:`LoadAnalysis`
(``summary.json``'s ``load`` entry, the report's load section). The verdict uses TPOT, the
speed each user sees; at high load an operator may care more about throughput, so output
tokens/s and TTFT stand beside the ratio at every level, and goodput under the SLO when
``analysis.slo`` is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.load.breakeven import BreakEven, break_even
from speclib.analysis.load.goodput import (
    block_rates,
    goodput_ratios,
    highest_sustained,
    level_table,
)
from speclib.analysis.load.k_schedule import KSchedule, k_schedule
from speclib.analysis.load.recommend import Recommendation
from speclib.analysis.verdict.comparisons import Comparison
from speclib.core.jsonutil import jsonable
from speclib.params.experiment import AA_ARM, ExperimentParams

__all__ = ["LoadAnalysis", "analyze_load", "load_notes", "server_max_num_seqs"]

USES = (
    "The verdict uses TPOT (time per output token after the first): the speed each user "
    "sees, which speculation is meant to cut. At high load throughput (output tokens/s) "
    "may matter more to an operator; it stands beside the ratio at each level"
)


@dataclass(frozen=True)
class LoadAnalysis:
    """What the run says about load (empty fields where it has one level and no SLO)."""

    levels: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    break_evens: tuple[BreakEven, ...] = ()
    goodput: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    sustained: dict[str, str | None] = field(default_factory=dict)
    schedules: tuple[KSchedule, ...] = ()
    slo: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    uses: str = USES

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (``summary.json``'s ``load``)."""
        return jsonable(
            {
                "uses": self.uses,
                "levels": self.levels.to_dict(orient="records"),
                "break_even": [b.to_dict() for b in self.break_evens],
                "slo": self.slo,
                "goodput": self.goodput.to_dict(orient="records"),
                "highest_load_within_slo": self.sustained,
                "k_schedules": [s.to_dict() for s in self.schedules],
                "notes": list(self.notes),
            }
        )


def server_max_num_seqs(params: ExperimentParams) -> int | None:
    """``--max-num-seqs`` from the server's extra arguments, when set."""
    args = list(params.server.extra_args)
    for i, a in enumerate(args):
        if a.startswith("--max-num-seqs="):
            return int(a.split("=", 1)[1])
        if a == "--max-num-seqs" and i + 1 < len(args):
            return int(args[i + 1])
    return None


def _axis_levels(params: ExperimentParams) -> dict[str, list[tuple[int, float]]]:
    """Level indices by kind of load, each with its load value, from the lowest up."""
    out: dict[str, list[tuple[int, float]]] = {"concurrency": [], "request_rate": []}
    for i, lv in enumerate(params.workload.levels):
        if lv.request_rate is None:
            out["concurrency"].append((i, float(lv.concurrency)))
        else:
            out["request_rate"].append((i, float(lv.request_rate)))
    return {k: sorted(v, key=lambda t: t[1]) for k, v in out.items() if v}


def _break_evens(params: ExperimentParams, comps: Sequence[Comparison]) -> list[BreakEven]:
    out = []
    for axis, levels in _axis_levels(params).items():
        if len(levels) < 2:
            continue
        for name in [e for e in params.experiments if e != AA_ARM]:
            by_level = {c.level: c.cis.get("tpot_s") for c in comps if c.experiment == name}
            rows = [(x, by_level.get(i)) for i, x in levels]
            rows = [(x, ci) for x, ci in rows if ci is not None]
            if not rows:
                continue
            out.append(
                break_even(
                    loads=[x for x, _ in rows],
                    estimate=[ci.estimate for _, ci in rows],
                    ci_low=[ci.ci_low for _, ci in rows],
                    ci_high=[ci.ci_high for _, ci in rows],
                    margin=params.analysis.margin,
                    confidence_level=min(ci.confidence_level for _, ci in rows),
                    series=name,
                    axis=axis,
                )
            )
    return out


def _schedules(
    params: ExperimentParams,
    comps: Sequence[Comparison],
    recs: Sequence[Recommendation],
    table: pd.DataFrame,
) -> list[KSchedule]:
    closed = _axis_levels(params).get("concurrency", [])
    if len(closed) < 2:
        return []
    out = []
    for family, members in params.sweep_families.items():
        series = [params.series_by_name(m) for m in members]
        if any((s.sweep_value or {}).keys() != {"num_speculative_tokens"} for s in series):
            continue  # a schedule is over k only
        spec = dict(series[0].speculative_config or {})
        spec.pop("num_speculative_tokens", None)
        k_of = {s.name: int((s.speculative_config or {})["num_speculative_tokens"]) for s in series}
        fam = table[table["series"].isin(members)] if len(table) else table
        levels = {}
        for i, c in closed:
            rows = fam[fam["level"] == i] if len(fam) else fam
            flight = float(np.nanmedian(rows["in_flight"])) if len(rows) else None
            levels[i] = (int(c), flight)
        verdicts = {
            i: {
                x.experiment: (
                    x.pooled_word,
                    x.cis["tpot_s"].ci_high if x.cis.get("tpot_s") else None,
                )
                for x in comps
                if x.level == i and x.experiment in members
            }
            for i, _ in closed
        }
        found = k_schedule(family, recs, method=spec.get("method"), base_config=spec,
                           k_of=k_of, levels=levels, verdicts=verdicts,
                           max_num_seqs=server_max_num_seqs(params))  # fmt: skip
        out.append(found)
    return out


UNDERLOADED = 0.75  # a closed-loop level whose mean in flight is below this share of c


def load_notes(params: ExperimentParams, table: pd.DataFrame) -> list[str]:
    """Closed-loop levels that ran well below their concurrency (too few requests per
    arm and slot to keep the batch full, or a client that could not keep up)."""
    out = []
    for i, c in _axis_levels(params).get("concurrency", []):
        rows = table[table["level"] == i] if len(table) else table
        if c <= 1 or not len(rows):
            continue
        flight = float(np.nanmedian(rows["in_flight"]))
        per_arm = float(np.nanmedian(rows["requests"] / rows["blocks"]))
        if flight < UNDERLOADED * c:
            out.append(
                f"c={int(c)} ran at a mean of {flight:.1f} requests in flight, not {int(c)} "
                f"({per_arm:.0f} requests per arm and block: the batch drains as they "
                "finish). Its load is lower than its name: the break-even is on the "
                "nominal concurrency, the k schedule maps levels to batch sizes by the "
                "measured count. More requests per level (workload.repeats or more "
                "prompts) keep the batch full."
            )
    return out


def analyze_load(
    params: ExperimentParams,
    records: pd.DataFrame,
    comparisons: Sequence[Comparison],
    recommendations: Sequence[Recommendation],
) -> LoadAnalysis:
    """The load analysis of one run (see the module docstring)."""
    a = params.analysis
    bounds = a.slo.bounds_ms() if a.slo else None
    pct = a.slo.percentile if a.slo else 90.0
    if records.empty:
        return LoadAnalysis()
    rates = block_rates(records, bounds_ms=bounds)
    table = level_table(
        records, bounds_ms=bounds, percentile=pct, confidence_level=a.confidence, rates=rates
    )
    names = {i: lv.label for i, lv in enumerate(params.workload.levels)}
    if len(table):
        table.insert(2, "load", table["level"].map(names))
    goodput = pd.DataFrame()
    sustained: dict[str, str | None] = {}
    if bounds:
        goodput = goodput_ratios(
            rates, control=params.control_name, margin=a.margin, confidence_level=a.confidence
        )
        if len(goodput):
            goodput.insert(2, "load", goodput["level"].map(names))
        order = [i for i, _ in _axis_levels(params).get("concurrency", [])]
        sustained = highest_sustained(table, order=order, names=names)
    return LoadAnalysis(
        levels=table,
        break_evens=tuple(_break_evens(params, comparisons)),
        goodput=goodput,
        sustained=sustained,
        schedules=tuple(_schedules(params, comparisons, recommendations, table)),
        slo={**a.slo.model_dump(), "bounds_ms": bounds} if a.slo else None,
        notes=tuple(load_notes(params, table)),
    )
