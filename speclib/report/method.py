"""The report's last part: method and provenance, as one HTML block.

:func:`method_html` lists the protocol and decision rule (the gates' rules in words, the
statistics, how a multi-turn run's turns were sent), the run's warnings, the tables of what
was measured (:mod:`speclib.report.measurement_tables`: per series, the acceptance
reconciliation, the ``vllm bench serve`` cross-check, greedy outputs that differ), then
provenance (versions, hardware, models, the server command lines collapsed to what differs
per launch: :func:`command_lines_html`) and links to the raw files. "Why this speed-up?",
shown earlier, is :mod:`speclib.report.why_section`.
"""

from __future__ import annotations

import html
import json
from typing import Any

from speclib.analysis.run_analysis import RunAnalysis
from speclib.report.html_format import gib, wrap
from speclib.report.measurement_tables import (
    crosscheck_html,
    divergence_html,
    reconciliation_html,
    series_html,
)

__all__ = ["command_lines_html", "method_html"]


class _Raw(str):
    """A string that is already HTML (not escaped again by :func:`_kv_table`)."""

    __slots__ = ()


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
            "TPOT: the traffic's ratio (the arm's mean TPOT over the control's on the same "
            "prompts, each request once; for the user's mix when given): per arm, a paired "
            "t-interval over replicate blocks of the log of each block's ratio (with an A/A "
            "arm: against the mean of the two control servers), on that arm's own "
            "block-to-block variance, blocks - 1 df (one launch per arm: never adopt or "
            "worse); Holm step-down over every experiment arm and load level (the A/A arm "
            "apart); beside it, descriptive: the token-weighted ratio and the typical "
            "request's (the geometric mean of per-request ratios); TTFT/E2E gates: the same "
            "block model on that metric's per-block mean log ratio, the typical request's "
            "(per-arm paired t, blocks - 1 df, at the declared confidence); the prompt-level "
            f"bootstrap of TPOT ({p.analysis.n_resamples} resamples, seed {p.analysis.seed}; "
            "the typical request's) is information only"
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
        reconciliation_html(an),
        crosscheck_html(an),
        divergence_html(an),
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
