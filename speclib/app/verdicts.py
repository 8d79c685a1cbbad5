"""The terminal's verdicts at the end of ``speclib run`` / ``speclib analyze``: the table,
its cells and the lines under it, in the manner of ``vllm bench serve``'s result block.

:func:`print_verdicts` prints ``summary.json`` between rules of ``=``: a table with one line
per experiment and load level (:func:`table_rows`: mean TPOT of control and arm in ms, the
traffic's TPOT ratio with its interval and the interval's level, the token-weighted ratio
where answer lengths differ, the typical request's, the verdict, one short reason, the gates
as marks), a line saying which ratio is which (:func:`estimand_line`), then the lines under
it (:func:`end_lines`); above the table, the user's traffic mix when the verdicts are for one
(:func:`mix_line`). The full reasons stay in ``summary.json`` and the report.
:func:`outcome_json` gives the verdicts as one JSON object, with the mix.

The cells: :func:`ratio_cell` writes a TPOT ratio with its interval and level, :func:`ms_cell`
the mean TPOT of control and arm in ms, :func:`gate_marks` the gates as marks where "not
assessed" is never a tick (:func:`gate_legend` says what the marks mean), :func:`short_reason`
one phrase of at most :data:`REASON_WIDTH` characters. :data:`MAX_LINE` and :func:`fit` bound
every line the terminal shows.

The lines under the table (:func:`end_lines`, each cut to :data:`MAX_LINE`): what the marks
mean, the A/A arm as a "bench check: resolution ±x %" line (:func:`bench_check_line`), a
multi-turn run's TPOT ratio per turn (:func:`turn_lines`), the bench-trust lines with the
workload's warnings (:func:`trust_lines`, :func:`workload_lines`), a calibration's result, the
break-even and k schedules (:func:`load_lines`) and the stack's own words
(:func:`stack_lines`); :func:`record_lines` what the records missed and a re-decision;
:func:`failed_line` names the failed launches after a block.

One concept, one module: the verdict's words come from ``summary.json``'s answer
(:mod:`speclib.analysis.verdict.answer`); everything here only renders them. Pure functions
of the typed summary (:class:`~speclib.core.run_summary.RunSummary`, read by
:func:`~speclib.core.run_summary.read_summary`, its one reader) and the run result, except
the printing.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
from typing import Any, TextIO

from speclib.core.estimand import Estimand
from speclib.core.run_summary import ComparisonEntry, GateEntry, RunSummary, TrustCheckEntry
from speclib.core.stopping import Stopping, stopping_lines
from speclib.core.wording import STATUS_MARKS

__all__ = [
    "GATE_MARKS",
    "MAX_LINE",
    "REASON_WIDTH",
    "bench_check_line",
    "end_lines",
    "estimand_line",
    "failed_line",
    "fit",
    "gate_legend",
    "gate_marks",
    "is_finite_number",
    "load_lines",
    "mix_line",
    "ms_cell",
    "outcome_json",
    "print_verdicts",
    "ratio_cell",
    "recommendation_rows",
    "record_lines",
    "short_reason",
    "stack_lines",
    "stopped_lines",
    "table_rows",
    "trust_lines",
    "turn_lines",
    "verdict_rows",
    "workload_lines",
]


def verdict_rows(summary: RunSummary) -> list[dict[str, Any]]:
    """The verdict of every comparison in ``summary.json``: experiment, load, TPOT ratio and
    its CI with the estimand they are (the traffic's), decision and reasons (the shape of
    ``--json``'s ``verdicts``)."""
    return [
        {
            "experiment": c.experiment,
            "load": c.load,
            "tpot_ratio": c.tpot_ratio,
            "tpot_ratio_ci": c.tpot_ratio_ci,
            "tpot_estimand": c.tpot_estimand,
            "decision": c.decision,
            "reasons": list(c.reasons),
        }
        for c in summary.comparisons
    ]


def estimand_line(lengths_differ: bool) -> str:
    """What each ratio column is (:mod:`speclib.core.estimand`)."""
    per_token = "; per token = total decode time / decode tokens" if lengths_differ else ""
    return (
        "ratios: the verdict's is the traffic's (same prompts, each request once); typical = "
        f"the typical request: geometric mean of per-request ratios, not the traffic's{per_token}"
    )


def mix_line(summary: RunSummary) -> str | None:
    """The user's traffic mix the verdicts are for, as ``summary.json`` says it ("for your
    mix: echo 80 %, fresh 20 % (the run's prompts: 50 / 50)"); None for the prompts as sent."""
    return (summary.mix or {}).get("text") or None


def recommendation_rows(summary: RunSummary) -> list[dict[str, Any]]:
    """The "recommended" row of every sweep family and load level in ``summary.json``, in
    the shape of :func:`verdict_rows` (the decision is the value, or "no k pays")."""
    words = {"no_k_pays": "no k pays", "undecided": "undecided", "no_data": "no data"}
    rows = []
    for r in summary.recommendations:
        word = ", ".join(f"{k}={v}" for k, v in r.value.items()) if r.value else None
        ci = [r.ci_low, r.ci_high]
        rows.append(
            {
                "experiment": f"recommended: {r.family}",
                "load": r.load,
                "tpot_ratio": r.ratio,
                "tpot_ratio_ci": ci if None not in ci else None,
                "decision": word or words.get(r.outcome, "–"),
                "reasons": [r.reason or ""],
            }
        )
    return rows


_RECOMMEND_REASONS = {
    "no_k_pays": "no arm of the family is adopt",
    "undecided": "arms that pay are not shown within δ of the best",
    "no_data": "no arm of the family has valid pairs",
}


def _more_blocks(summary: RunSummary) -> dict[tuple[Any, Any], int | None]:
    """Per (arm, load level) whose own word is still inconclusive: the blocks more that
    would likely decide it at the run's later looks (``summary.json``'s ``stopping``)."""
    found = Stopping.from_dict(summary.stopping)
    if found is None:
        return {}
    return {(o.arm, o.level): None if o.blocks_needed is None else o.blocks_needed - found.blocks
            for o in found.open if o.segment is None}  # fmt: skip


def _row(c: ComparisonEntry, reason: str | None = None) -> dict[str, str]:
    """The cells of one table row from comparison ``c`` (``reason`` overrides its own)."""
    return {
        "arm": str(c.experiment),
        "load": str(c.load),
        "ms": ms_cell(*_mean_tpot(c)),
        "ratio": ratio_cell(c.tpot_ratio, c.tpot_ratio_ci, c.confidence_level),
        **_view_cells(c),
        "verdict": str(c.decision),
        "reason": reason or c.short_reason or short_reason(c),
        "gates": gate_marks(c.gates),
    }


def _mean_tpot(c: ComparisonEntry) -> tuple[Any, Any]:
    """The two sides of the traffic's ratio (mean TPOT, control and arm); a summary written
    before them gives its medians."""
    if c.mean_tpot_control_s is not None or c.mean_tpot_experiment_s is not None:
        return c.mean_tpot_control_s, c.mean_tpot_experiment_s
    return c.median_tpot_control_s, c.median_tpot_experiment_s


def _view_cells(c: ComparisonEntry | None) -> dict[str, str]:
    """The descriptive ratios beside the verdict's (the token-weighted and the typical
    request's) as cells: ``×0.840`` ("–" without one)."""
    ratios = c.tpot_ratios if c is not None else {}
    cells = {}
    for key, estimand in (("per_token", Estimand.PER_TOKEN), ("typical", Estimand.TYPICAL)):
        value = (ratios.get(str(estimand)) or {}).get("estimate")
        cells[key] = f"×{value:.3f}" if is_finite_number(value) and value > 0 else "–"
    return cells


def _recommendation_row(
    c: ComparisonEntry | None,
    *,
    arm: str,
    load: Any,
    ratio: Any,
    ci: Any,
    verdict: str,
    reason: str,
) -> dict[str, str]:
    """The cells of a sweep family's "recommended" row; ``c`` is the recommended arm's
    comparison (its mean TPOT, descriptive ratios, interval level and gates), None when
    there is none."""
    return {
        "arm": str(arm),
        "load": str(load),
        "ms": ms_cell(*_mean_tpot(c)) if c else "–",
        "ratio": ratio_cell(ratio, ci, c.confidence_level if c else None),
        **_view_cells(c),
        "verdict": str(verdict),
        "reason": reason,
        "gates": gate_marks(c.gates) if c else "–",
    }


def table_rows(summary: RunSummary) -> list[dict[str, str]]:
    """The rows of the verdict table, as cells: every experiment at every load level, then
    every sweep family's recommendation (the A/A arm is not among them:
    :func:`bench_check_line` says what it shows)."""
    comps = summary.comparisons
    more = _more_blocks(summary)
    rows = []
    for c in summary.experiments:
        key = (c.experiment, c.level)
        if key in more:  # still open: what the run's later looks would take
            rows.append(_row(c, short_reason(c, more_blocks=more[key], projected=True)))
        else:
            rows.append(_row(c))
    recs = summary.recommendations
    for r, rec in zip(recs, recommendation_rows(summary), strict=True):
        picked = [c for c in comps if (c.experiment, c.load) == (r.arm, r.load)]
        why = _RECOMMEND_REASONS.get(r.outcome) or f"{r.arm}: adopt, within δ of the best"
        rows.append(
            _recommendation_row(
                picked[0] if picked else None,
                arm=rec["experiment"],
                load=rec["load"],
                ratio=rec["tpot_ratio"],
                ci=rec["tpot_ratio_ci"],
                verdict=rec["decision"],
                reason=fit(why, REASON_WIDTH),
            )
        )
    return rows


_REASON_MIN = 16
"""The narrowest the reason column gets when the table is cut to the width."""

_COLUMNS = (
    ("arm", "arm"),
    ("load", "load"),
    ("ms", "TPOT ms ctrl → arm"),
    ("ratio", "TPOT ratio [CI] level"),
    ("per_token", "per token"),
    ("typical", "typical"),
    ("verdict", "verdict"),
    ("reason", "reason"),
    ("gates", "gates"),
)
_COLOUR = {
    "mixed": "magenta",
    "adopt": "green",
    "reject": "red",
    "failed": "red",
    "untrustworthy": "red",
}
_MARK_COLOUR = {"✔": "green", "✘": "red", "–": "yellow", "?": "yellow"}
_OPTIONAL = ("per_token",)
"""Columns shown only where they differ from the traffic's ratio (answer lengths differ)."""


def _table(
    rows: list[dict[str, str]], title: str, width: int, *, lengths_differ: bool = False
) -> Any:
    """The rich table of :func:`table_rows`, one line per row (the per-token column only
    where ``lengths_differ``); when it is wider than ``width``, the reason column gives way
    first (cut with "…", down to :data:`_REASON_MIN` characters)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    columns = [(k, n) for k, n in _COLUMNS if lengths_differ or k not in _OPTIONAL]
    keys = [k for k, _ in columns]

    def build(reason_width: int | None) -> Table:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      collapse_padding=True)  # fmt: skip
        for key, name in columns:
            table.add_column(name, no_wrap=True, overflow="ellipsis",
                             max_width=reason_width if key == "reason" else None)  # fmt: skip
        for r in rows:
            cells = [Text(r[key], no_wrap=True, overflow="ellipsis") for key in keys]
            cells[keys.index("verdict")].stylize(_COLOUR.get(r["verdict"], "yellow"))
            gates = cells[keys.index("gates")]
            for at, mark in enumerate(r["gates"]):
                if mark in _MARK_COLOUR and (at == 0 or r["gates"][at - 1] == " "):
                    gates.stylize(_MARK_COLOUR[mark], at, at + 1)
            table.add_row(*cells)
        return table

    table, reason = build(None), max(len(r["reason"]) for r in rows)
    while reason > _REASON_MIN and Console(width=10_000).measure(table).maximum > width:
        reason -= 1
        table = build(reason)
    return table


def _plain_lines(renderable: Any, width: int) -> list[str]:
    """``renderable`` as plain text lines at most ``width`` wide, trailing blanks removed."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False).print(renderable)
    return [line.rstrip() for line in buf.getvalue().splitlines()]


def print_verdicts(summary: RunSummary, *, stream: TextIO | None = None) -> None:
    """The end of ``speclib run``/``analyze`` on ``stream``, in the manner of ``vllm bench
    serve``'s result block: the user's mix (if any), a table with one line per experiment
    and load level (mean TPOT in ms of control and arm, the traffic's TPOT ratio with its
    interval and level, the typical request's, the verdict, one short reason and the gates'
    marks), which ratio is which, then :func:`end_lines` (the A/A arm's bench check, bench
    trust), between rules of ``=``. No line is wider than :data:`MAX_LINE`:
    plain text in logs and pipes, rich colours on a terminal; the full reasons are in
    ``summary.json`` and the report."""
    from rich.console import Console

    console = Console(file=stream or sys.stdout, highlight=False)
    plain = not console.is_terminal
    width = min(MAX_LINE if plain and "COLUMNS" not in os.environ else console.width, MAX_LINE)
    if not summary.comparisons:
        print("no comparison in the summary", file=console.file, flush=True)
        return
    rows = table_rows(summary)
    margin = summary.analysis.margin
    title = (
        "verdicts: TPOT ms = mean TPOT; TPOT ratio = the traffic's: their ratio, arm / control"
        + ("" if margin is None else f"; the rule's margin δ = ±{100 * margin:.3g} %")
    )
    differ = any(c.answer_lengths_differ for c in summary.comparisons)
    table = _table(rows, title, width, lengths_differ=differ) if rows else None
    head = _plain_lines(table, width) if table else ["no experiment arm (an A/A calibration run)"]
    mix = mix_line(summary)
    lead = [fit(mix[:1].upper() + mix[1:])] if mix else []
    tail = [*([estimand_line(differ)] if table else []), *end_lines(summary)]
    rule = "=" * min(max(len(x) for x in lead + head + tail), width)
    if table is not None and not plain:
        console.width = width
        console.print("\n".join([rule, *lead]), markup=False)
        console.print(table)
    else:
        print("\n".join([rule, *lead, *head]), file=console.file)
    print("\n".join([*tail, rule]), file=console.file, flush=True)


def outcome_json(result: Any, summary: RunSummary) -> str:
    """One JSON object: the paths of a run's outputs (``result``), the verdict rows of its
    ``summary`` and on what they were decided (``decided_on``: records whole or not, a
    re-decision, a traffic mix; :mod:`speclib.report.decision_basis`)."""
    from speclib.report.decision_basis import decision_basis

    return json.dumps(
        {
            "run_dir": str(result.run_dir),
            "report": str(result.report),
            "summary": str(result.summary),
            "failed_launches": list(result.failed_launches),
            "mix": mix_line(summary),
            "verdicts": verdict_rows(summary),
            "decided_on": decision_basis(summary).to_dict(),
        }
    )


def record_lines(summary: RunSummary) -> list[str]:
    """What the terminal says under the verdicts when the records were not whole (decided
    with ``--allow-incomplete``, or records only) or the rule was changed after the run."""
    lines = []
    found = summary.integrity
    if found.missing:
        lines.append(
            f"DECIDED ON INCOMPLETE RECORDS (--allow-incomplete): {len(found.missing)} problem(s):"
        )
        lines += [f"  - {p}" for p in found.missing]
    elif found.records_only:
        lines.append("records only: no launches/ and no design, so no launch evidence")
    change = summary.redecision
    if change is not None and change.changed:
        fields = "; ".join(f"{c.field} {c.run!r} → {c.now!r}" for c in change.changed)
        lines.append(f"RE-DECIDED AFTER THE RUN with {change.params_file}: {fields}")
    return lines


MAX_LINE = 160
"""No line of the display or of the end output is longer than this (logs stay readable)."""


def fit(line: str, width: int = MAX_LINE) -> str:
    """``line``, cut to ``width`` characters with "…" when it is longer."""
    return line if len(line) <= width else line[: width - 1] + "…"


GATE_MARKS = STATUS_MARKS
"""The mark of a gate status in the verdict table; "not assessed" never reads as a pass."""

_GATE_WORDS = {"pass": "pass", "fail": "FAIL", "not assessed": "NOT ASSESSED"}
REASON_WIDTH = 60
"""The verdict table's reason is one short phrase; the full reasons are in summary.json."""


def gate_marks(gates: list[GateEntry] | None) -> str:
    """The gates of a verdict as marks, e.g. "✘bench –ttft ✔e2e" ("–" without gates);
    :func:`gate_legend` says what each mark means."""
    if not gates:
        return "–"
    return " ".join(f"{GATE_MARKS.get(g.state, '?')}{g.name}" for g in gates)


def gate_legend(gate_lists: list[list[GateEntry]]) -> str:
    """What the marks used in ``gate_lists`` mean, e.g. "gates: ✔ pass · – NOT ASSESSED (no
    evidence either way, never a pass)" ("" when no row has gates)."""
    used = {g.state for gates in gate_lists for g in gates}
    marks = [f"{GATE_MARKS[s]} {_GATE_WORDS[s]}" for s in GATE_MARKS if s in used]
    marks += [f"? {s.upper()}" for s in sorted(used - set(GATE_MARKS))]
    if not marks:
        return ""
    note = " (no evidence either way, never a pass)" if "not assessed" in used else ""
    return "gates: " + " · ".join(marks) + note


def is_finite_number(x: Any) -> bool:
    """Whether ``x`` is a finite int or float (a bool is not a number here)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def ratio_cell(ratio: Any, ci: Any, level: Any) -> str:
    """A TPOT ratio, its interval and the interval's level: ``×0.550 [0.450, 0.670] 97.5 %``
    (an unbounded end reads ``∞``; "–" without a ratio)."""
    if not (is_finite_number(ratio) and ratio > 0):
        return "–"
    text = f"×{ratio:.3f}"
    lo, hi = [*ci, None, None][:2] if ci else (None, None)
    if is_finite_number(lo):
        text += f" [{lo:.3f}, {f'{hi:.3f}' if is_finite_number(hi) else '∞'}]"
        if is_finite_number(level):
            text += f" {100 * level:.4g} %"
    return text


def ms_cell(control_s: Any, experiment_s: Any) -> str:
    """Mean TPOT of the control and the arm in ms (the traffic's ratio's two sides):
    ``30.99 → 15.48``."""
    ms = [f"{1e3 * x:.2f}" if is_finite_number(x) else "–" for x in (control_s, experiment_s)]
    return "–" if ms == ["–", "–"] else " → ".join(ms)


def _tpot_df(c: ComparisonEntry) -> Any:
    return (c.metrics.get("tpot") or {}).get("df")


def short_reason(
    c: ComparisonEntry, *, more_blocks: int | None = None, projected: bool = False
) -> str:
    """One phrase (≤ :data:`REASON_WIDTH` characters) for the verdict of comparison ``c`` of
    ``summary.json``: the bench, a failed gate, or where the TPOT interval lies. With
    ``projected``, ``more_blocks`` is the blocks more that would likely decide an
    inconclusive interval at the run's later looks (None: no practical number); else the
    comparison's own estimate at its level is used."""
    word, gates = c.decision, c.gates
    failed = [g.name for g in gates if g.state == "fail"]
    reasons = c.reasons
    if word == "failed":
        return fit(reasons[0] if reasons else "every launch failed", REASON_WIDTH)
    if word == "untrustworthy":
        bench = next((g for g in gates if g.name == "bench"), None)
        detail = bench.detail if bench else ""
        what = detail and f": {detail.split(':', 1)[0]} failed"
        if detail.startswith("the A/A arm"):
            what = ": the A/A arm shows a false effect"
        return fit(f"bench untrustworthy{what}", REASON_WIDTH)
    if failed:
        return fit(f"gate{'s' * (len(failed) > 1)} {', '.join(failed)} failed", REASON_WIDTH)
    tpot = c.tpot_decision or word
    ci = c.tpot_ratio_ci or [None, None]
    if word == "inconclusive" and tpot == "adopt":
        return "faster by > δ, but correctness unknown"
    if tpot == "adopt":
        return "time per token cut by > δ"
    if tpot == "worse":
        return "slower than the control (lower bound > 1)"
    if tpot == "equivalent":
        if is_finite_number(ci[0]) and ci[0] > 1:
            return "within ±δ, but measurably slower"
        if is_finite_number(ci[1]) and ci[1] < 1:
            return "faster, but by less than δ"
        return "within ±δ of the control"
    if not is_finite_number(c.tpot_ratio):
        return "no valid pairs"
    df = _tpot_df(c)
    if df == 0 or not is_finite_number(ci[1]):
        return "one block: no interval (run ≥ 2 blocks)"
    text = "interval too wide" + ("" if df is None else f" (df {df})")
    more = more_blocks if projected else c.extra_launches_needed
    pairs = None if projected else c.extra_pairs_needed
    if more:
        text += f"; ~{more} more block{'s' * (more != 1)} may decide"
    elif pairs:
        text += f"; ~{pairs} more pairs may decide"
    return fit(text, REASON_WIDTH)


def end_lines(summary: RunSummary) -> list[str]:
    """The lines under the verdict table: what the gates' marks mean, the A/A arm's bench
    check per load level, the TPOT ratio per turn (multi-turn runs), the bench-trust lines
    and a calibration's result."""
    margin = summary.analysis.margin
    lines = [gate_legend([c.gates for c in summary.experiments])]
    answer = summary.answer
    if answer is not None:
        lines += answer.headline
        lines += [f"deploy: {a['text']}" for a in answer.deploy.get("advice") or []]
    lines += stopped_lines(summary)
    lines += [bench_check_line(c, margin=margin) for c in summary.comparisons if c.role == "aa"]
    lines += turn_lines(summary)
    lines += trust_lines(summary)
    lines += [(summary.calibration or {}).get("text") or ""]
    lines += load_lines(summary)
    lines += stack_lines(summary)
    return [fit(x) for x in lines if x]


def stopped_lines(summary: RunSummary) -> list[str]:
    """The blocks run, why the run stopped adding blocks and what each verdict still open
    would take (:func:`speclib.core.stopping.stopping_lines` of ``summary.json``'s
    ``stopping``); none for a summary without it."""
    found = Stopping.from_dict(summary.stopping)
    return stopping_lines(found) if found is not None else []


def bench_check_line(c: ComparisonEntry, *, margin: float | None = None) -> str:
    """The A/A comparison ``c`` as one line: "bench check: resolution ±9.3 % (δ = ±5 %) at
    95 % over 6 blocks at c=1; A/A ×0.955 [0.873, 1.044] covers 1: no false effect; …"."""
    bc = c.bench_check
    if bc is None:
        reasons = c.reasons or ["bench check: no A/A interval"]
        return fit(reasons[0])
    res, m = bc.resolution, bc.margin if "margin" in bc.model_fields_set else margin
    n = bc.n_blocks or 0
    if bc.word == "equivalent":
        outlook = "equivalent"
    elif res is None:
        outlook = "run ≥ 2 blocks for a resolution"
    elif bc.more_blocks:
        outlook = f"~{bc.more_blocks} more blocks to reach ±δ"
    elif bc.blocks_needed is None:
        outlook = "±δ not reachable"
    else:
        outlook = "within ±δ, but off-centre"
    span = ratio_cell(bc.estimate, [bc.ci_low, bc.ci_high], None)
    if bc.false_effect:
        effect = f"excludes 1 ('{bc.word}'): a FALSE EFFECT, the bench is untrustworthy"
    elif bc.excludes_one:
        effect = "excludes 1: an instance effect the rule does not act on"
    else:
        effect = "covers 1: no false effect"
    return fit(
        f"bench check: resolution {'unknown' if res is None else f'±{100 * res:.1f} %'}"
        + ("" if m is None else f" (δ = ±{100 * m:.3g} %)")
        + f" at {100 * (bc.confidence_level or 0):.4g} % over {n} block{'s' * (n != 1)}"
        + f" at {c.load}: {outlook}; A/A {span} {effect}"
    )


def _turn_line(c: ComparisonEntry, *, intervals: bool) -> str:
    cells = []
    for turn, r in c.tpot_ratio_by_turn.items():
        ci = [r.get("ci_low"), r.get("ci_high")] if intervals else None
        cells.append(f"t{turn} {ratio_cell(r.get('ratio'), ci, None)}")
    return f"per turn {c.experiment} at {c.load}: " + " · ".join(cells)


def turn_lines(summary: RunSummary) -> list[str]:
    """A multi-turn run's TPOT ratio per turn, one line per experiment and load level
    ("per turn ngram-k4 at c=1: t1 ×0.812 [0.701, 0.940] · t2 ×0.650 [0.552, 0.766]"),
    without the intervals when the line would pass :data:`MAX_LINE`, and left out when
    even that does not fit (the report has them all). Empty without per-turn ratios."""
    out = []
    for c in summary.experiments:
        if len(c.tpot_ratio_by_turn) < 2:
            continue
        line = _turn_line(c, intervals=True)
        if len(line) > MAX_LINE:
            line = _turn_line(c, intervals=False)
        if len(line) <= MAX_LINE:
            out.append(line)
    return out


def trust_lines(summary: RunSummary) -> list[str]:
    """The bench-trust panel of ``summary.json`` as short terminal lines: the verdict's
    instrument, then one line per check (status, figure)."""
    trust = summary.bench_trust
    if not trust.checks:
        return []
    if trust.trusted:
        head = "bench trust: every check passed"
    elif trust.untrustworthy:
        head = "bench trust: FAILED, the bench cannot be trusted and no verdict decides"
    else:
        head = "bench trust: not every check passed or was assessed (none bears on a verdict)"
    out = [f"{head} (TPOT from the {summary.instrument.tpot or 'client'}'s stamps)"]
    for c in trust.checks:
        out.append(fit(f"  {c.status:>12}  {c.check}: {c.figure}"))
    return out + workload_lines(trust.workload)


def workload_lines(checks: list[TrustCheckEntry]) -> list[str]:
    """The failed workload checks as warning lines (none when every one passed or was not
    assessed): they never veto a verdict, so only what needs a look is printed."""
    failed = [c for c in checks if c.status == "fail"]
    if not failed:
        return []
    head = f"workload: {len(failed)} warning{'s' * (len(failed) != 1)} of {len(checks)} checks"
    out = [head + " (never a veto; what to do: see the report)"]
    for c in failed:
        out.append(fit(f"  {'warning':>12}  {c.check}: {c.figure}"))
    return out


def stack_lines(summary: RunSummary) -> list[str]:
    """The stack's own words: flags left out, where the arms ran, vLLM's log lines that
    bear on speed (kinds per series) and the acceptance against a synthetic pair's truth."""
    from speclib.analysis.speculation.speed_log import by_kind

    lines = [f"note: {n}" for n in (summary.server_commands or {}).get("notes") or []]
    if summary.placement_line:
        lines.append(f"placement: {summary.placement_line}")
    for series, items in summary.speed_log.items():
        kinds = by_kind(items)
        if kinds:
            lines.append(f"vLLM log, {series}: {', '.join(kinds)} (the report quotes the lines)")
    if summary.acceptance_truth_line:
        lines.append(f"measured acceptance {summary.acceptance_truth_line}")
    if summary.acceptance_replay_line:
        lines.append(f"measured acceptance {summary.acceptance_replay_line}")
    return lines


def _load_word(value: Any, axis: str) -> str:
    from speclib.analysis.load.breakeven import load_text

    return load_text(float(value), axis) if is_finite_number(value) else "?"


def _break_even_line(b: dict[str, Any]) -> str:
    axis, loads = b.get("axis", "concurrency"), b.get("loads") or [0]
    low = f"≤{_load_word(loads[0], axis)}" if b.get("low_open") else _load_word(b.get("low"), axis)
    high = (
        f">{_load_word(loads[-1], axis)}" if b.get("high_open") else _load_word(b.get("high"), axis)
    )
    where = {
        "crosses": f"at {_load_word(b.get('estimate'), axis)} ({low} to {high})",
        "pays throughout": f"above {_load_word(loads[-1], axis)} (none in the measured range)",
        "never pays": f"below {_load_word(loads[0], axis)} (not faster at any level)",
    }.get(b.get("status", ""), "none (too few levels)")
    pays = b.get("pays_up_to")
    return (
        f"break-even {b.get('series')}: {where}; "
        f"pays up to {_load_word(pays, axis) if pays is not None else 'no level'}"
    )


def load_lines(summary: RunSummary) -> list[str]:
    """Break-even per experiment, the highest load within the SLO, and each k schedule
    with the command of its confirmation run (empty for a run at one load level)."""
    load = summary.load
    out = [_break_even_line(b) for b in load.break_even]
    sustained = load.highest_load_within_slo
    if sustained:
        out.append("within the SLO up to: " + ", ".join(
            f"{arm} {where or 'none'}" for arm, where in sustained.items()))  # fmt: skip
    for k in load.k_schedules:
        if k.get("entries"):
            spans = ", ".join(f"{a}-{b}: k={n}" for a, b, n in k["entries"])
            out.append(f"k schedule {k.get('family')} (batch size: k): {spans}")
            out.append(
                f"  confirm: python -m speclib schedule {summary.run_dir} --out "
                "confirm.yaml && python -m speclib run confirm.yaml"
            )
        else:
            out.append(f"k schedule: {k.get('text')}")
    return out


def failed_line(launch_ids: list[str] | tuple[str, ...]) -> str:
    """ "failed launches (8): control-r1, draft-k4-r1, … and 5 more (see the report)", never
    over :data:`MAX_LINE` characters: the launches that do not fit are counted."""
    ids = [str(x) for x in launch_ids]
    head, tail = f"failed launches ({len(ids)}): ", " (see the report)"
    for shown in range(len(ids), 0, -1):
        more = f" and {len(ids) - shown} more" if shown < len(ids) else ""
        line = head + ", ".join(ids[:shown]) + more + tail
        if len(line) <= MAX_LINE:
            return line
    return fit(head + f"{len(ids)} launches" + tail)
