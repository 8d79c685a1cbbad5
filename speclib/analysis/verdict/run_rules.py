"""Run-level rules over the comparisons: the looks a run made, their confidence, failed arms.

:func:`looks_plan` is the run-until-decided plan a run folder was run under (the blocks at
least and at most that setup recorded in the manifest before any block ran;
:mod:`speclib.analysis.stats.sequential`); :func:`decision_confidence` and
:func:`decision_looks` give the family confidence of the TPOT decision after a number of
replicate blocks, and the looks of that plan seen so far; :func:`with_failed_arms` turns the
comparison of an arm none of whose launches ended well into "failed", named by its root
cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from speclib.analysis.stats.sequential import SpendingPlan, spending_plan
from speclib.analysis.verdict.comparisons import Comparison
from speclib.analysis.verdict.decision import Decision
from speclib.analysis.verdict.gates import Verdict
from speclib.params.experiment import ExperimentParams

__all__ = [
    "decision_confidence",
    "decision_looks",
    "failed_outright",
    "looks_plan",
    "with_failed_arms",
]


def looks_plan(
    params: ExperimentParams, manifest: Mapping[str, Any] | None = None
) -> SpendingPlan | None:
    """The looks of the run and their levels, or None for one decision at
    ``analysis.confidence``.

    The blocks at least and at most are those setup recorded in the manifest
    (``until_decided``, from :attr:`ExperimentParams.block_bounds`) before any block ran;
    the levels follow from them and ``analysis.confidence`` (so a re-decision at another
    confidence re-spends the same looks). A folder whose manifest records none (an older
    kit's run, a records-only folder) was run until decided only if its params name a cap
    (``protocol.max_replicates`` a number above ``workload.replicates``). None as well for
    a calibration run (``protocol.target_resolution``): it stops on the A/A interval's
    width, never on where it lies, so its looks spend no α."""
    if params.protocol.target_resolution is not None:
        return None
    recorded = (manifest or {}).get("until_decided") or {}
    if recorded:
        least, most = int(recorded["at_least"]), int(recorded["at_most"])
    else:
        least, cap = params.workload.replicates, params.protocol.max_replicates
        most = cap if isinstance(cap, int) else least
    if most <= least or least < 2:
        return None
    return spending_plan(most, min_blocks=least, alpha=1 - params.analysis.confidence)


def decision_confidence(
    params: ExperimentParams, n_blocks: int, manifest: Mapping[str, Any] | None = None
) -> tuple[float, str | None]:
    """The family confidence of the TPOT decision after ``n_blocks`` replicate blocks.

    Without looks (:func:`looks_plan` None) it is ``analysis.confidence``. A run until
    decided adds blocks while a verdict is inconclusive and looks again, so each look gets
    its share of α by O'Brien–Fleming-type spending (:mod:`speclib.analysis.stats.sequential`)
    and the error rate holds across looks; the second value says so in words. A calibration
    run (``protocol.target_resolution``) stops on the A/A interval's width only, never on its
    position, so its looks spend no α: ``analysis.confidence``, with a note.
    """
    a = params.analysis
    least, most = params.block_bounds
    if params.protocol.target_resolution is not None and most > least:
        return a.confidence, (
            f"calibration after {n_blocks} of up to {most} replicate blocks: the runner stops "
            "on the A/A interval's width, never on its position, so the looks spend no alpha "
            f"(confidence {a.confidence:.0%})"
        )
    plan = looks_plan(params, manifest)
    if plan is None:
        return a.confidence, None
    look = min(max(n_blocks, plan.looks[0]), plan.looks[-1])
    level = plan.level_at(look)
    return level, (
        f"look after {n_blocks} of up to {plan.max_blocks} replicate blocks: O'Brien-Fleming-"
        f"type alpha spending over looks {list(plan.looks)}, this look at confidence "
        f"{level:.4f} (overall {a.confidence:.0%})"
    )


def decision_looks(
    params: ExperimentParams, n_blocks: int, manifest: Mapping[str, Any] | None = None
) -> list[tuple[int, float]] | None:
    """The looks of a run-until-decided plan seen so far: ``(replicates, confidence)`` each.

    None without looks (:func:`looks_plan`: one decision at ``analysis.confidence``, and a
    calibration run, whose A/A arm is judged once on all its blocks). The analysis replays
    these looks from the records, so a comparison settled at an early look keeps that
    decision (:func:`speclib.analysis.verdict.tpot_verdict.decide_family`).
    """
    plan = looks_plan(params, manifest)
    if plan is None:
        return None
    seen = [(k, c) for k, c in zip(plan.looks, plan.confidence_levels, strict=True)
            if k <= n_blocks]  # fmt: skip
    return seen or [(plan.looks[0], plan.confidence_levels[0])]


def failed_outright(launches: Sequence[dict[str, Any]]) -> bool:
    """Whether an arm failed outright: it has launches, none ended well, and none ran in the
    wrong mode (such an arm keeps its "reject": the mode gate says why)."""
    wrong_mode = any((s.get("mode_check") or {}).get("ok") is False for s in launches)
    return bool(launches) and not wrong_mode and not any(s.get("ok") for s in launches)


def with_failed_arms(
    comps: list[Comparison], statuses: list[dict[str, Any]], *, margin: float, confidence: float
) -> list[Comparison]:
    """An arm none of whose launches ended well is "failed", named by its root cause (the
    last exception line of its server's log), not "inconclusive — no valid pairs"; an arm
    that never sent a request has no failed-request rate (None, shown as "–", never 0 %).
    An arm whose server ran in the wrong mode keeps its "reject" (the mode gate says why)."""
    by_series: dict[str, list[dict[str, Any]]] = {}
    for s in statuses:
        by_series.setdefault(s["series"], []).append(s)
    out = []
    for c in comps:
        launches = by_series.get(c.experiment) or []
        if not failed_outright(launches):
            out.append(c)
            continue
        first = launches[0]
        cause = first.get("error_cause") or (first.get("error") or "unknown").splitlines()[0]
        why = f"every launch of {c.experiment} failed: {cause}"
        dec = c.decision or Decision("inconclusive", why, margin, confidence)
        failed = replace(c, verdict=Verdict("failed", (why,), dec, ()))
        if not any(s.get("n_ok") or s.get("n_failed") for s in launches):
            failed = replace(failed, error_rate_experiment=None)  # nothing was sent: no rate
        out.append(failed)
    return out
