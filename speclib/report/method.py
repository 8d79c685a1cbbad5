"""The report's last part: method and provenance, as one HTML block.

:func:`method_html` lists the protocol and decision rule, the run's warnings, the per-series
numbers (:func:`series_html`), the acceptance reconciliation, the ``vllm bench serve``
cross-check (:func:`crosscheck_html`), greedy outputs that differ, then provenance
(versions, hardware, models, the server command lines collapsed to what differs per launch:
:func:`command_lines_html`) and links to the raw files. :func:`why_html` ("Why this
speed-up?") is shown earlier, right after the first screen.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from speclib.analysis.health.crosscheck import ADJUSTED_ROW
from speclib.analysis.run_analysis import RunAnalysis
from speclib.report.html_format import gib, pct, wrap

__all__ = ["command_lines_html", "crosscheck_html", "method_html", "series_html", "why_html"]


class _Raw(str):
    """A string that is already HTML (not escaped again by :func:`_kv_table`)."""

    __slots__ = ()


def _signed_pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.2f} %"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.2f} ms"


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
        "memory": gib(mem) if mem else None,
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


def crosscheck_html(an: RunAnalysis) -> str:
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
            f"<td>{pct(acc.get('kit'), 1)} / {pct(acc.get('vllm_bench'), 1)}</td>"
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
        "matches the server's own TPOT; <i>kit read late</i> when the kit's client was not "
        "scheduled in time for some streams, see the late-read warning); <i>disagree</i> "
        "otherwise.</p>"
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
    ("acceptance_rate", "draft acceptance rate (median per request)", pct),
    (
        "mean_acceptance_length",
        "acceptance length, median per request (tokens per step)",
        lambda x: f"{x:.2f}",
    ),
    ("requests_without_drafts", "requests without drafts", _plain),
    ("peak_rss_bytes", "peak server memory (RSS)", gib),
    ("kv_cache_tokens", "KV-cache capacity (tokens, from the server's log)", _plain),
    ("prefix_cache_hits", "prefix-cache hits while measured (tokens)", lambda x: f"{x:g}"),
    ("prefix_cache_queries", "prefix-cache queries while measured (tokens)", lambda x: f"{x:g}"),
)


def series_html(an: RunAnalysis) -> str:
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


def why_html(an: RunAnalysis) -> str:
    """ "Why this speed-up?": the measured decomposition per comparison (shown right after
    the first screen, before the evidence)."""
    items = [
        f"<li><b>{html.escape(c.experiment)}</b> ({html.escape(c.load)}): "
        f"{html.escape(c.explanation.summary)}</li>"
        for c in an.comparisons
        if c.explanation and c.explanation.summary
    ]
    stack = _stack_html(an)
    if not items and not stack:
        return ""
    return wrap(
        "<h2>Why this speed-up?</h2><p>Measured, not fitted: tokens per verify step come "
        "from the /metrics counters, a step's cost from the gaps between streamed chunks "
        "(one chunk per engine step at c=1). The standard model of speculative decoding "
        "(Leviathan et al. 2023) is shown only where the draft cost c is known "
        "independently of these timings (n-gram: c = 0; a draft model: served alone with "
        "<code>analysis.measure_draft_cost: true</code>).</p><ul>"
        + "".join(items)
        + "</ul>"
        + stack
    )


def _stack_html(an: RunAnalysis) -> str:
    """What vLLM's own log says bears on speed, per series (lines the control logged too
    left out), and the acceptance against a synthetic pair's truth."""
    out = []
    truth = an.stack.get("acceptance_truth_line")
    if truth:
        out.append(
            f"<p><b>Acceptance against a known truth</b>: the measured acceptance "
            f"{html.escape(truth)}.</p>"
        )
    lines = an.stack.get("speed_log") or {}
    rows = [
        f"<tr><td>{html.escape(series)}</td><td>{html.escape(x['kind'])}</td>"
        f"<td>{html.escape(x['meaning'])}</td><td><code>{html.escape(x['line'])}</code></td>"
        f"<td>{x['launches']}</td></tr>"
        for series, items in lines.items()
        for x in items
    ]
    if rows:
        out.append(
            "<h3>What vLLM's log says about speed</h3><p>Lines of each server's own log that "
            "bear on speed (vLLM's words; for an experiment, lines the control logged too are "
            "left out).</p><table class='speclib-table'><tr><th>Series</th><th>Kind</th>"
            "<th>What it means</th><th>vLLM's line</th><th>Launches</th></tr>"
            + "".join(rows)
            + "</table>"
        )
    return "".join(out)


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


def _gate_rules(a: Any) -> str:
    """Each gate's rule in words, with the declared values (three states, never silent)."""
    conf = f"{100 * a.confidence:.3g} %"
    ttft = 1 + a.ttft_margin
    return (
        "each gate is pass, fail or not assessed; not assessed (the data cannot tell) is "
        "never counted as passed and keeps the TPOT word with a reason; only fail makes "
        f"the verdict reject. errors: one-sided {conf} Newcombe–Wilson bounds on the rise "
        f"in failed-request share; pass when the upper bound ≤ {a.max_error_rate_increase:.1%}"
        ", fail when the lower bound exceeds it, else not assessed (too few requests). "
        "outputs: fail on any output flagged wrong, or (greedy) agreement below "
        f"{a.min_greedy_agreement:.0%}. memory: fail above the limit, when set. TTFT: fail "
        f"when the ratio CI's lower bound > {ttft:.2f} and the median rises by more than "
        f"{a.ttft_max_increase_ms:g} ms; pass when its upper bound ≤ {ttft:.2f}, or is a rise "
        f"of at most {a.ttft_max_increase_ms:g} ms at the control's median; else not "
        f"assessed (one block, or too wide). E2E: the same against 1 + δ = {1 + a.margin:.2f}"
        ", without a minimum rise."
    )


def _argv_pairs(argv: list[str]) -> list[str]:
    """The argv as items, ``--flag value`` kept together (the unit a difference is in)."""
    items: list[str] = []
    for a in argv:
        if items and not a.startswith("--") and items[-1].startswith("--") and " " not in items[-1]:
            items[-1] = f"{items[-1]} {a}"
        else:
            items.append(a)
    return items


def command_lines_html(launches: Any) -> str:
    """The server command lines, collapsed: what every launch shares once, then per launch
    only what differs (port, speculative config, …); the full lines one click away."""
    rows = [(s["launch_id"], _argv_pairs(list(s.get("command") or []))) for s in launches]
    started = [items for _, items in rows if items]
    if not started:
        return "<h3>Server command lines</h3><p>No server was started by the kit.</p>"
    shared = [i for i in started[0] if all(i in other for other in started[1:])]
    diffs = "".join(
        f"<li><b>{html.escape(lid)}</b>: <code>"
        + html.escape(" ".join(i for i in items if i not in shared) or "(nothing else)")
        + "</code></li>"
        if items
        else f"<li><b>{html.escape(lid)}</b>: an external endpoint</li>"
        for lid, items in rows
    )
    full = "".join(
        f"<li><b>{html.escape(lid)}</b>: <code>{html.escape(' '.join(items))}</code></li>"
        for lid, items in rows
        if items
    )
    return (
        "<h3>Server command lines</h3>"
        f"<p>Every launch: <code>{html.escape(' '.join(shared))}</code></p>"
        f"<p>Per launch, what differs:</p><ul>{diffs}</ul>"
        f"<details><summary>full command lines</summary><ul>{full}</ul></details>"
    )


def _multi_turn_words(found: dict[str, Any], wl: Any) -> str:
    """How a multi-turn run's turns were sent: one prompt per turn, with the control's
    greedy answers as every arm's history (from the manifest's ``multi_turn`` entry)."""
    series = found.get("series") or "the control"
    tokens = found.get("max_tokens") or wl.history_tokens
    return (
        f"every turn of each question is a prompt of its own (id <question>#t<turn>), turn k "
        f"carrying the earlier turns and their answers; the answers are {series}'s, greedy "
        f"(temperature 0, up to {tokens} tokens), generated once before any measured "
        f"request ({found.get('history_file') or 'turn_history.jsonl'}) and fed to every arm"
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
            "above 1; else inconclusive; gates: errors, outputs, memory, TTFT/E2E "
            "(a failed gate makes it reject; see gates)"
        ),
        "gates": _gate_rules(p.analysis),
        "statistics": (
            "TPOT: per arm, a paired t-interval over replicate blocks of its per-block mean "
            "log ratio (with an A/A arm: against the mean of the two control servers), on "
            "that arm's own block-to-block variance, blocks - 1 df (one launch per arm: "
            "never adopt or worse); Holm step-down over every experiment arm and load level "
            "(the A/A arm apart); TTFT/E2E gates: the same block model on that metric's "
            "per-block mean log ratio (per-arm paired t, blocks - 1 df, at the declared "
            "confidence); the prompt-level bootstrap of TPOT "
            f"({p.analysis.n_resamples} resamples, seed {p.analysis.seed}) is information only"
        ),
    }
    if getattr(wl, "multi_turn", False):
        protocol["multi-turn"] = _multi_turn_words(an.manifest.get("multi_turn") or {}, wl)
    parts = ["<h2>Method and provenance</h2>", _kv_table(protocol)]
    if an.warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in an.warnings)
        parts.append(f"<h3 id='speclib-warnings'>Warnings</h3><ul>{items}</ul>")
    parts += [
        series_html(an),
        _reconciliation_html(an),
        crosscheck_html(an),
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
    parts += ["<h3>Provenance</h3>", _kv_table(prov), command_lines_html(an.launches)]
    parts.append(
        "<h3>Raw files</h3><ul>"
        "<li><a href='requests.jsonl'>requests.jsonl</a> (one line per request)</li>"
        "<li><a href='summary.json'>summary.json</a></li>"
        "<li><a href='manifest.json'>manifest.json</a></li>"
        "<li><a href='launches/'>launches/</a> (server logs, /metrics snapshots, "
        "memory samples, status)</li><li><a href='notebooks/'>notebooks/</a></li></ul>"
    )
    return wrap("".join(parts))
