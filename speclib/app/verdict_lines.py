"""The lines printed under the verdict table (:mod:`speclib.app.verdicts`) and after it.

:func:`end_lines` gathers them, each cut to :data:`~speclib.app.verdict_cells.MAX_LINE`:
what the gates' marks mean, the A/A arm as a "bench check: resolution ±x %" line
(:func:`bench_check_line`), a multi-turn run's TPOT ratio per turn (:func:`turn_lines`,
only where a line fits), the bench-trust lines with the workload's warnings
(:func:`trust_lines`, :func:`workload_lines`), a calibration's result, the break-even and
k schedules of a run over several load levels (:func:`load_lines`) and the stack's own
words (:func:`stack_lines`). :func:`failed_line` names the failed launches after the
block. Pure functions of ``summary.json``.
"""

from __future__ import annotations

from typing import Any

from speclib.app.verdict_cells import MAX_LINE, fit, gate_legend, is_finite_number, ratio_cell

__all__ = [
    "bench_check_line",
    "end_lines",
    "failed_line",
    "load_lines",
    "stack_lines",
    "trust_lines",
    "turn_lines",
    "workload_lines",
]


def end_lines(summary: dict[str, Any]) -> list[str]:
    """The lines under the verdict table: what the gates' marks mean, the A/A arm's bench
    check per load level, the TPOT ratio per turn (multi-turn runs), the bench-trust lines
    and a calibration's result."""
    comps = summary.get("comparisons") or []
    margin = (summary.get("analysis") or {}).get("margin")
    lines = [gate_legend([c.get("gates") for c in comps if c.get("role") != "aa"])]
    answer = summary.get("answer") or {}
    lines += list(answer.get("headline") or [])
    lines += [f"deploy: {a['text']}" for a in (answer.get("deploy") or {}).get("advice") or []]
    lines += [bench_check_line(c, margin=margin) for c in comps if c.get("role") == "aa"]
    lines += turn_lines(summary)
    lines += trust_lines(summary)
    lines += [(summary.get("calibration") or {}).get("text") or ""]
    lines += load_lines(summary)
    lines += stack_lines(summary)
    return [fit(x) for x in lines if x]


def bench_check_line(c: dict[str, Any], *, margin: float | None = None) -> str:
    """The A/A comparison ``c`` as one line: "bench check: resolution ±9.3 % (δ = ±5 %) at
    95 % over 6 blocks at c=1; A/A ×0.955 [0.873, 1.044] covers 1: no false effect; …"."""
    bc = c.get("bench_check") or {}
    if not bc:
        reasons = c.get("reasons") or ["bench check: no A/A interval"]
        return fit(reasons[0])
    res, m = bc.get("resolution"), bc.get("margin", margin)
    n = bc.get("n_blocks") or 0
    if bc.get("word") == "equivalent":
        outlook = "equivalent"
    elif res is None:
        outlook = "run ≥ 2 blocks for a resolution"
    elif bc.get("more_blocks"):
        outlook = f"~{bc['more_blocks']} more blocks to reach ±δ"
    elif bc.get("blocks_needed") is None:
        outlook = "±δ not reachable"
    else:
        outlook = "within ±δ, but off-centre"
    span = ratio_cell(bc.get("estimate"), [bc.get("ci_low"), bc.get("ci_high")], None)
    if bc.get("false_effect"):
        effect = f"excludes 1 ('{bc.get('word')}'): a FALSE EFFECT, the bench is untrustworthy"
    elif bc.get("excludes_one"):
        effect = "excludes 1: an instance effect the rule does not act on"
    else:
        effect = "covers 1: no false effect"
    return fit(
        f"bench check: resolution {'unknown' if res is None else f'±{100 * res:.1f} %'}"
        + ("" if m is None else f" (δ = ±{100 * m:.3g} %)")
        + f" at {100 * (bc.get('confidence_level') or 0):.4g} % over {n} block{'s' * (n != 1)}"
        + f" at {c.get('load')}: {outlook}; A/A {span} {effect}"
    )


def _turn_line(c: dict[str, Any], *, intervals: bool) -> str:
    turns = c.get("tpot_ratio_by_turn") or {}
    cells = []
    for turn, r in turns.items():
        ci = [r.get("ci_low"), r.get("ci_high")] if intervals else None
        cells.append(f"t{turn} {ratio_cell(r.get('ratio'), ci, None)}")
    return f"per turn {c.get('experiment')} at {c.get('load')}: " + " · ".join(cells)


def turn_lines(summary: dict[str, Any]) -> list[str]:
    """A multi-turn run's TPOT ratio per turn, one line per experiment and load level
    ("per turn ngram-k4 at c=1: t1 ×0.812 [0.701, 0.940] · t2 ×0.650 [0.552, 0.766]"),
    without the intervals when the line would pass :data:`MAX_LINE`, and left out when
    even that does not fit (the report has them all). Empty without per-turn ratios."""
    out = []
    for c in summary.get("comparisons") or []:
        if c.get("role") == "aa" or len(c.get("tpot_ratio_by_turn") or {}) < 2:
            continue
        line = _turn_line(c, intervals=True)
        if len(line) > MAX_LINE:
            line = _turn_line(c, intervals=False)
        if len(line) <= MAX_LINE:
            out.append(line)
    return out


def trust_lines(summary: dict[str, Any]) -> list[str]:
    """The bench-trust panel of ``summary.json`` as short terminal lines: the verdict's
    instrument, then one line per check (status, figure)."""
    trust = summary.get("bench_trust") or {}
    checks = trust.get("checks") or []
    if not checks:
        return []
    if trust.get("trusted"):
        head = "bench trust: every check passed"
    elif trust.get("untrustworthy"):
        head = "bench trust: FAILED, the bench cannot be trusted and no verdict decides"
    else:
        head = "bench trust: not every check passed or was assessed (none bears on a verdict)"
    inst = (summary.get("instrument") or {}).get("tpot")
    out = [f"{head} (TPOT from the {inst or 'client'}'s stamps)"]
    for c in checks:
        out.append(fit(f"  {c['status']:>12}  {c['check']}: {c['figure']}"))
    return out + workload_lines(trust.get("workload") or [])


def workload_lines(checks: list[dict[str, Any]]) -> list[str]:
    """The failed workload checks as warning lines (none when every one passed or was not
    assessed): they never veto a verdict, so only what needs a look is printed."""
    failed = [c for c in checks if c.get("status") == "fail"]
    if not failed:
        return []
    head = f"workload: {len(failed)} warning{'s' * (len(failed) != 1)} of {len(checks)} checks"
    out = [head + " (never a veto; what to do: see the report)"]
    for c in failed:
        out.append(fit(f"  {'warning':>12}  {c['check']}: {c['figure']}"))
    return out


def stack_lines(summary: dict[str, Any]) -> list[str]:
    """The stack's own words: flags left out, where the arms ran, vLLM's log lines that
    bear on speed (kinds per series) and the acceptance against a synthetic pair's truth."""
    from speclib.analysis.speculation.speed_log import by_kind

    lines = [f"note: {n}" for n in (summary.get("server_commands") or {}).get("notes") or []]
    if summary.get("placement_line"):
        lines.append(f"placement: {summary['placement_line']}")
    for series, items in (summary.get("speed_log") or {}).items():
        kinds = by_kind(items)
        if kinds:
            lines.append(f"vLLM log, {series}: {', '.join(kinds)} (the report quotes the lines)")
    if summary.get("acceptance_truth_line"):
        lines.append(f"measured acceptance {summary['acceptance_truth_line']}")
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


def load_lines(summary: dict[str, Any]) -> list[str]:
    """Break-even per experiment, the highest load within the SLO, and each k schedule
    with the command of its confirmation run (empty for a run at one load level)."""
    load = summary.get("load") or {}
    out = [_break_even_line(b) for b in load.get("break_even") or []]
    sustained = load.get("highest_load_within_slo") or {}
    if sustained:
        out.append("within the SLO up to: " + ", ".join(
            f"{arm} {where or 'none'}" for arm, where in sustained.items()))  # fmt: skip
    for k in load.get("k_schedules") or []:
        if k.get("entries"):
            spans = ", ".join(f"{a}-{b}: k={n}" for a, b, n in k["entries"])
            out.append(f"k schedule {k.get('family')} (batch size: k): {spans}")
            out.append(
                f"  confirm: python -m speclib schedule {summary.get('run_dir')} --out "
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
