"""The report's bench-trust panel and the A/A noise floor, in HTML.

:func:`bench_trust_html` renders ``summary.json``'s ``bench_trust`` (the gating checks,
each with its figure, and the workload's warnings: :func:`workload_warnings_html`);
:func:`noise_floor_html` the A/A arm's bench check at each load level. Both read the
analysis only; nothing is recomputed.
"""

from __future__ import annotations

import html
from typing import Any

from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.verdict.resolution import bench_check
from speclib.core.reason_text import render
from speclib.core.reasons import Reason
from speclib.core.verdict_words import FALSE_EFFECT, Word
from speclib.core.wording import STATUS_MARKS, span_text
from speclib.report.conclusion import (
    at_load,
    conf_words,
)

__all__ = [
    "bench_trust_html",
    "design_line",
    "noise_floor_html",
    "workload_warnings_html",
]


def _blocks_run(an: RunAnalysis) -> int:
    return int(an.records["replicate"].nunique()) if len(an.records) else 0


def _grouping(an: RunAnalysis) -> str:
    """How the blocks of one replicate were formed when the arms ran in groups ("" if not)."""
    d = an.design
    if not d.get("group_size"):
        return ""
    first = [b for b in an.manifest.get("blocks") or [] if b.get("replicate") == 0]
    groups = "; ".join(f"{b['block']}: {', '.join(b['arms'])}" for b in first)
    return (
        f" Blocks of a replicate ({len(first)}, arms in the order they fit): {groups}; every "
        "arm is paired with the control of its own block."
    )


def design_line(an: RunAnalysis) -> str:
    """How the arms were measured: design, blocks (and how they were formed when the arms
    ran in groups); for an older kit's run, why it stopped in its own words (a newer run's
    stopping is on the first screen: :func:`speclib.report.sections.stopping_html`)."""
    d = an.design
    blocks = _blocks_run(an)
    text = (
        f"Design: {d.get('design', 'sequential')} ({d.get('reason', '')}); "
        f"{blocks} replicate block(s), a fresh server per arm in each."
    )
    text += _grouping(an)
    older = an.manifest.get("stopping") or {}
    if "code" not in older and older.get("reason"):  # an older kit's record, in its words
        text += f" {older['reason']}"
    return text


def noise_floor_html(an: RunAnalysis) -> str:
    """The A/A arm first: this bench's noise floor, and whether the bench can be trusted."""
    parts = []
    for c in an.noise_floor:
        ci = c.cis.get("tpot_s")
        if ci is None:
            text = "the A/A arm has no valid pairs: the noise floor is unknown"
        else:
            text = (
                f"A/A arm (a second copy of the control{at_load(c, an)}): TPOT ratio "
                f"<b>{ci.estimate:.3f}</b>, {conf_words(ci.confidence_level)} CI "
                f"{span_text(ci.ci_low, ci.ci_high, digits=3, sep='–')} → <b>{c.word.upper()}</b>. "
            )
            margin = c.decision.margin if c.decision else an.params.analysis.margin
            check = bench_check(ci, margin=margin).text()
            text += html.escape(check[0].upper() + check[1:]) + ". "
            if c.word in (*FALSE_EFFECT, Word.REJECT):
                text += (
                    "The bench shows an effect where none exists: no verdict of this run "
                    "can be trusted."
                )
            elif (getattr(an, "trust", None) or {}).get("trusted"):
                text += "No false effect."
            else:
                text += "Alone it does not vouch for the bench: see the checks below."
        parts.append(f"<p><b>This bench's noise floor.</b> {text}</p>")
    calibrated = (getattr(an, "calibration", None) or {}).get("reason")
    if calibrated:
        said = render(Reason.from_dict(calibrated), "html", lead=False)
        parts.append(f"<p><b>Calibration.</b> {said[0].upper() + said[1:]}.</p>")
    more = [f"<p class='speclib-small'>{html.escape(design_line(an))}</p>"]
    if an.bench_problem:
        more.append(f"<p><b>Bench problem:</b> {render(an.bench_problem, 'html')}</p>")
    parts.append(bench_trust_html(an, more=more))
    return f"<div class='speclib-noise' id='speclib-noise'>{''.join(parts)}</div>"


def _partial_trust(checks: list[dict[str, Any]]) -> str:
    """The panel's head when the bench is neither trusted nor untrustworthy."""
    failed = [c["check"] for c in checks if c["status"] == "fail"]
    missing = [c["check"] for c in checks if c["status"] == "not assessed"]
    parts = []
    if failed:
        parts.append(f"failed {', '.join(failed)}, which the verdicts do not rest on")
    if missing:
        parts.append(f"not assessed: {', '.join(missing)}")
    return "; ".join(parts) + " (so no claim of “no false effect”)."


_WARNING = "⚠ warning"  # a failed workload check: a warning, never a veto


def _check_row(c: dict[str, Any], *, workload: bool = False) -> str:
    """One row of the bench-trust table (a failed workload check reads "warning")."""
    per_arm = "; ".join(f"{k} {v}" for k, v in (c.get("per_arm") or {}).items())
    kind = "workload" if workload else "trust"
    status = (
        _WARNING
        if workload and c["status"] == "fail"
        else f"{STATUS_MARKS.get(c['status'], c['status'])} {c['status']}"
    )
    return (
        f"<tr class='speclib-{kind}-{c['status'].replace(' ', '-')}'>"
        f"<td><b>{html.escape(c['check'])}</b></td>"
        f"<td>{status}</td>"
        f"<td>{html.escape(c['figure'])}</td>"
        f"<td class='speclib-small'>{html.escape(c['detail'])}"
        + (f"<br>{html.escape(per_arm)}" if per_arm else "")
        + "</td></tr>"
    )


def workload_warnings_html(trust: dict[str, Any]) -> str:
    """The failed workload checks of the panel as a list on the first screen (empty when
    none failed): what the workload measures is not what its labels say, though no verdict
    is vetoed for it."""
    failed = [c for c in trust.get("workload") or [] if c["status"] == "fail"]
    if not failed:
        return ""
    items = "".join(
        f"<li><b>{html.escape(c['check'])}</b> ({html.escape(c['figure'])}): "
        f"<span class='speclib-small'>{html.escape(c['detail'])}</span></li>"
        for c in failed
    )
    return (
        f"<div class='speclib-workload'><p><b>Workload: {len(failed)} warning"
        f"{'s' * (len(failed) != 1)}</b> (the workload is your choice: these never veto a "
        f"verdict, but say what it measures).</p><ul>{items}</ul></div>"
    )


def _workload_rows(trust: dict[str, Any]) -> str:
    checks = trust.get("workload") or []
    if not checks:
        return ""
    head = (
        "<tr><th colspan='4'>Workload checks (warnings only: they never make a verdict "
        "untrustworthy)</th></tr>"
    )
    return head + "".join(_check_row(c, workload=True) for c in checks)


def bench_trust_html(an: RunAnalysis, *, more: list[str] | None = None) -> str:
    """The bench-trust panel: each check with its status, figure and per-arm figures, and
    the instrument the verdict's TPOT comes from (all from ``summary.json``'s fields); the
    workload checks' warnings below its head, and every workload check in its table."""
    trust = getattr(an, "trust", None) or {}
    checks = trust.get("checks") or []
    if not checks:
        return ""
    rows = [_check_row(c) for c in checks]
    if trust.get("trusted"):
        head = "Bench trust: every check passed."
    elif trust.get("untrustworthy"):
        head = "Bench trust: FAILED — no verdict of this run can be acted on."
    else:
        head = "Bench trust: " + _partial_trust(checks)
    inst = getattr(an, "instrument", None)
    server = inst is not None and inst.tpot == "server"
    source = "the servers' own per-request stamps" if server else "the client's stamps"
    marks = " · ".join(
        f"{html.escape(c['check'])} {STATUS_MARKS.get(c['status'], c['status'])}"
        f"{'' if c['status'] == 'pass' else ' ' + c['status'].upper()} "
        f"{html.escape(c['figure'])}"
        for c in checks
    )
    n_warn = sum(c["status"] == "fail" for c in trust.get("workload") or [])
    if n_warn:
        marks += f" · workload ⚠ {n_warn} warning{'s' * (n_warn != 1)}"
    reason = html.escape(inst.reason) if inst is not None else ""
    return (
        f"<div id='speclib-trust'><p><b>{head}</b> TPOT from {source}.</p>"
        f"{workload_warnings_html(trust)}"
        f"<details><summary class='speclib-small'>{marks} — details</summary>"
        f"{''.join(more or [])}<p class='speclib-small'>{reason}</p>"
        "<table class='speclib-table speclib-trust'>"
        "<tr><th>Check</th><th>Status</th><th>Figure</th><th>What it says</th></tr>"
        f"{''.join(rows)}{_workload_rows(trust)}</table></details></div>"
    )
