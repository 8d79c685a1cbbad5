"""Presentation of a :class:`~speclib.analysis.RunAnalysis` in the analysis notebook.

The page an operator forwards: the verdict table and a plain-words conclusion first, the
evidence (figures, each with a caption saying what to look for) next, the method and the
provenance last. Functions here return HTML strings or figure objects; the notebook only
displays them, so the exported ``report.html`` is exactly what a JupyterLab user sees.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from speclib import plots
from speclib.analysis import Comparison, RunAnalysis

__all__ = [
    "conclusion",
    "evidence_figures",
    "method_html",
    "render_report",
    "verdict_html",
]

_CSS = """
<style>
.speclib-verdict { border-collapse: collapse; margin: 0.5em 0 1em; }
.speclib-verdict th, .speclib-verdict td { border: 1px solid #bbb; padding: 4px 8px;
  text-align: left; vertical-align: top; }
.speclib-verdict th { background: #f0f0f0; }
.speclib-word { font-weight: bold; padding: 1px 6px; border-radius: 3px; }
.speclib-adopt { background: #d4edda; } .speclib-equivalent { background: #e2e3e5; }
.speclib-worse, .speclib-reject { background: #f8d7da; }
.speclib-inconclusive { background: #fff3cd; }
.speclib-small { font-size: 0.85em; color: #444; }
</style>
"""


def _pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x * 100:.{digits}f} %"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.2f} ms"


def _gib(b: int | float | None) -> str:
    return "–" if not b else f"{b / 1024**3:.2f} GiB"


def _ratio_cell(c: Comparison) -> str:
    ci = c.cis.get("tpot_s")
    if ci is None:
        return "no valid pairs"
    change = (ci.estimate - 1) * 100
    return (f"<b>{ci.estimate:.3f}</b> ({change:+.1f} %)<br><span class='speclib-small'>"
            f"{ci.confidence_level:.1%} CI {ci.ci_low:.3f}–{ci.ci_high:.3f}, {ci.method}, "
            f"{ci.n_pairs} pairs, {ci.n_launches} launch(es)</span>")


def _reason(c: Comparison) -> str:
    if c.verdict is None:
        return "no successful pairs to compare"
    failed = [g for g in c.verdict.gates if not g.passed]
    if failed:
        return "; ".join(f"gate <b>{g.name}</b>: {html.escape(g.detail)}" for g in failed)
    d = c.verdict.tpot_decision
    text = html.escape(d.reason)
    if d.word == "inconclusive" and (d.extra_pairs_needed or d.extra_launches_needed):
        text += (f"<br><b>run ~{d.extra_pairs_needed or '?'} more prompt pairs</b>"
                 + (f" or ~{d.extra_launches_needed} more launches"
                    if d.extra_launches_needed else ""))
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
        text += (f"<br><span class='speclib-small'>{a['requests_without_drafts']} request(s) "
                 "with no drafts (missing data, not 0 %)</span>")
    return text


def _agreement_cell(c: Comparison, greedy: bool) -> str:
    if not greedy:
        return "sampling: see output check"
    if c.agreement is None:
        return "–"
    ag = c.agreement
    return f"{ag.n_exact}/{ag.n_compared} identical ({_pct(ag.exact_match_rate)})"


def verdict_html(an: RunAnalysis) -> str:
    """The first-screen table: one row per experiment against the control."""
    greedy = an.params.workload.temperature == 0.0
    levels = sorted({int(x) for x in an.records.get("concurrency", pd.Series([1])).dropna()})
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
            f"<td>{', '.join(map(str, levels))}</td>"
            "</tr>"
        )
    head = ("<tr><th>Experiment</th><th>TPOT ratio vs control</th><th>Verdict</th>"
            "<th>Why</th><th>Acceptance</th><th>Greedy output agreement</th>"
            "<th>Failed requests (control / exp.)</th><th>Peak server memory</th>"
            "<th>Concurrency</th></tr>")
    title = (f"<h1>Speculative decoding: {html.escape(an.params.name)}</h1>"
             f"<p class='speclib-small'>{html.escape(an.params.description)}</p>")
    table = (f"<table class='speclib-verdict' id='speclib-verdict'>{head}{''.join(rows)}"
             "</table>")
    return _CSS + title + table


def _sentence(c: Comparison, an: RunAnalysis) -> str:
    ci = c.cis.get("tpot_s")
    if ci is None:
        return f"{c.experiment}: no successful request pairs, so no comparison."
    conf = f"{ci.confidence_level:.0%}"
    lo, hi = (1 - ci.ci_high) * 100, (1 - ci.ci_low) * 100
    if ci.estimate < 1:
        effect = (f"cut time per output token by {(1 - ci.estimate) * 100:.0f} % "
                  f"({conf} CI {lo:.0f} to {hi:.0f} %)")
    else:
        effect = (f"made time per output token {(ci.estimate - 1) * 100:.0f} % slower "
                  f"({conf} CI {-hi:.0f} to {-lo:.0f} % slower)")
    word = c.word
    tail = {
        "adopt": "worth turning on for this workload",
        "equivalent": f"no difference that matters (within ±{an.params.analysis.margin:.0%})",
        "worse": "slower: keep it off",
        "reject": "rejected by a gate: " + "; ".join(
            g.name for g in (c.verdict.gates if c.verdict else ()) if not g.passed),
        "inconclusive": "not enough data to decide",
    }[word]
    extra = ""
    if word == "inconclusive" and c.decision and c.decision.extra_pairs_needed:
        extra = f" — about {c.decision.extra_pairs_needed} more prompt pairs would decide it"
    return (f"**{c.experiment}** ({c.method}, k={c.k}) {effect} over {ci.n_pairs} paired "
            f"prompts: **{word}** — {tail}{extra}.")


def conclusion(an: RunAnalysis) -> str:
    """A plain-words paragraph generated from the numbers (Markdown)."""
    if not an.comparisons:
        return "No comparison could be made: no experiment series has successful requests."
    parts = [_sentence(c, an) for c in an.comparisons]
    wins = [c for c in an.comparisons if c.word == "adopt"]
    if wins:
        best = min(wins, key=lambda c: c.cis["tpot_s"].estimate)  # type: ignore[union-attr]
        parts.append(f"Best configuration here: **{best.experiment}**.")
    else:
        parts.append("No configuration is a clear win here: keep speculative decoding off, "
                     "or test other settings.")
    wl = an.params.workload
    parts.append(
        f"Measured client-side over streaming chat completions ({wl.max_tokens} max tokens, "
        f"temperature {wl.temperature:g}, load {', '.join(lv.label for lv in wl.levels)}); "
        "TPOT excludes the "
        "first token; intervals are paired bootstrap CIs (Holm-adjusted across "
        "experiments); the method is at the end of this page.")
    if an.warnings:
        parts.append(f"⚠ {len(an.warnings)} warning(s) below.")
    return " ".join(parts)


def evidence_figures(an: RunAnalysis) -> Iterator[plots.FigureWithCaption]:
    """Every evidence figure in report order (skipping those without data)."""
    df, control = an.records, an.control
    if df.empty:
        return
    pal = plots.series_palette([s.name for s in an.params.series], control=control)
    yield plots.plot_latency_ecdf(df, control=control, palette=pal)
    for c in an.comparisons:
        ci = c.cis.get("tpot_s")
        if ci is not None:
            yield plots.plot_paired_ratio(df[df["level"] == c.level], experiment=c.experiment,
                                          ci=(ci.ci_low, ci.ci_high), estimate=ci.estimate,
                                          control=control, palette=pal)
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
    if not an.memory.empty and an.memory["rss_bytes"].notna().any():
        yield plots.plot_memory(an.memory, control=control, palette=pal)


def _series_counters(an: RunAnalysis) -> dict[str, Any]:
    from speclib.analysis import _sum_counters

    out = {}
    for s in an.params.series:
        cs = [m.spec for m in an.launch_metrics if m.series == s.name and m.spec is not None]
        total = _sum_counters(cs)
        if total is not None and total.num_draft_tokens > 0:
            out[s.name] = total
    return out


def _kv_table(data: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
        for k, v in data.items())
    return f"<table class='speclib-verdict'>{rows}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return str(v)


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
            "</tr>")
    if not rows:
        return ""
    head = ("<tr><th>Launch</th><th>Drafts (requests / /metrics)</th><th>Draft tokens</th>"
            "<th>Accepted tokens</th><th>Reconciled</th></tr>")
    return ("<h3>Acceptance: per-request sums against /metrics deltas</h3>"
            f"<table class='speclib-verdict'>{head}{''.join(rows)}</table>")


def _series_html(an: RunAnalysis) -> str:
    df = an.series.copy()
    for col in ("median_ttft_s", "median_tpot_s", "p90_tpot_s"):
        df[col] = df[col].map(lambda x: _ms(x) if pd.notna(x) else "–")
    df["median_e2e_s"] = df["median_e2e_s"].map(lambda x: f"{x:.3f} s" if pd.notna(x) else "–")
    df["peak_rss_bytes"] = df["peak_rss_bytes"].map(lambda x: _gib(x) if pd.notna(x) else "–")
    return "<h3>Per series</h3>" + df.to_html(index=False, classes="speclib-verdict",
                                               na_rep="–", float_format=lambda x: f"{x:.3g}")


def _explanations_html(an: RunAnalysis) -> str:
    items = [f"<li><b>{html.escape(c.experiment)}</b>: {html.escape(c.explanation.summary)}</li>"
             for c in an.comparisons if c.explanation]
    if not items:
        return ""
    return ("<h3>Why this speed-up? (standard model of speculative decoding, Leviathan et "
            "al. 2023)</h3><ul>" + "".join(items) + "</ul>")


def _divergence_html(an: RunAnalysis, limit: int = 5) -> str:
    out = []
    for c in an.comparisons:
        diverged = [(pid, a) for pid, a in c.agreements.items() if not a.exact_match][:limit]
        for pid, a in diverged:
            out.append(
                f"<tr><td>{html.escape(c.experiment)}</td><td>{html.escape(pid)}</td>"
                f"<td>{a.first_divergence} ({a.unit})</td>"
                f"<td>…{html.escape(a.context_before)}<b>[{html.escape(a.control_after)}]</b></td>"
                f"<td><b>[{html.escape(a.experiment_after)}]</b></td></tr>")
    if not out:
        return ""
    head = ("<tr><th>Experiment</th><th>Prompt</th><th>First divergence</th>"
            "<th>Control output</th><th>Experiment output</th></tr>")
    return ("<h3>Greedy outputs that differ from the control</h3>"
            f"<table class='speclib-verdict'>{head}{''.join(out)}</table>")


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
            "above 1; else inconclusive; gates: errors, outputs, memory, TTFT/E2E"),
        "statistics": (f"paired bootstrap ({p.analysis.n_resamples} resamples, seed "
                       f"{p.analysis.seed}); two-stage over launches when there are several; "
                       "Holm step-down across experiments; Wilcoxon signed-rank shown beside"),
    }
    parts = ["<h2>Method and provenance</h2>", _kv_table(protocol)]
    if an.warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in an.warnings)
        parts.append(f"<h3>Warnings</h3><ul>{items}</ul>")
    parts += [_series_html(an), _reconciliation_html(an), _explanations_html(an),
              _divergence_html(an)]
    m = an.manifest
    prov = {
        "versions": m.get("versions"),
        "hardware": m.get("hardware"),
        "models": {k: {kk: vv for kk, vv in v.items() if kk != "path"}
                   for k, v in (m.get("models") or {}).items()},
        "created": m.get("created_at"),
    }
    parts += ["<h3>Provenance</h3>", _kv_table(prov), "<h3>Server command lines</h3><ul>"]
    for s in an.launches:
        cmd = " ".join(s.get("command") or []) or f"external endpoint {s.get('base_url')}"
        parts.append(f"<li><b>{html.escape(s['launch_id'])}</b>: <code>{html.escape(cmd)}</code>"
                     "</li>")
    parts.append("</ul><h3>Raw files</h3><ul>"
                 "<li><a href='requests.jsonl'>requests.jsonl</a> (one line per request)</li>"
                 "<li><a href='summary.json'>summary.json</a></li>"
                 "<li><a href='manifest.json'>manifest.json</a></li>"
                 "<li><a href='launches/'>launches/</a> (server logs, /metrics snapshots, "
                 "memory samples, status)</li><li><a href='notebooks/'>notebooks/</a></li></ul>")
    return "".join(parts)


def render_report(an: RunAnalysis, *, display: Callable[..., Any], HTML: Callable[..., Any],
                  Markdown: Callable[..., Any]) -> None:
    """Display the whole report (verdict, conclusion, evidence, method) in a notebook."""
    display(HTML(verdict_html(an)))
    display(Markdown(conclusion(an)))
    display(Markdown("## Evidence"))
    for fig in evidence_figures(an):
        display(fig)
    display(HTML(method_html(an)))
