"""The method part's tables of what was measured, and of its checks against other sources.

:func:`series_html` is one column per series, one row per quantity (labels with units);
:func:`reconciliation_html` sets the per-request acceptance sums beside the ``/metrics``
deltas of each launch; :func:`crosscheck_html` sets the kit's numbers beside ``vllm bench
serve``'s on the same server and prompts; :func:`divergence_html` lists greedy outputs that
differ from the control. Each returns an HTML fragment, empty when the run has nothing to
show; :func:`speclib.report.method.method_html` places them between the protocol and the
provenance.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from speclib.analysis.health.bench_agreement import ADJUSTED_ROW
from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.speculation.agreement import AgreementSummary
from speclib.report.html_format import gib, pct

__all__ = [
    "crosscheck_html",
    "divergence_html",
    "divergence_kinds",
    "reconciliation_html",
    "series_html",
]


def _signed_pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.2f} %"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.2f} ms"


def reconciliation_html(an: RunAnalysis) -> str:
    """Per launch, the per-request acceptance sums beside the ``/metrics`` deltas."""
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
    ("peak_gpu_bytes", "peak GPU memory of the server's processes (nvidia-smi)", gib),
    ("weights_gib", "weights on the GPU (GiB, from the server's log)", lambda x: f"{x:.2f}"),
    ("kv_cache_gib", "KV cache (GiB, from the server's log)", lambda x: f"{x:.2f}"),
    ("peak_rss_bytes", "peak server memory (RSS)", gib),
    ("kv_cache_tokens", "KV-cache capacity (tokens, from the server's log)", _plain),
    ("prefix_cache_hits", "prefix-cache hits while measured (tokens)", lambda x: f"{x:g}"),
    ("prefix_cache_queries", "prefix-cache queries while measured (tokens)", lambda x: f"{x:g}"),
)


_GPU_ROWS = ("peak_gpu_bytes", "weights_gib", "kv_cache_gib")  # shown where known (a GPU)


def series_html(an: RunAnalysis) -> str:
    """One column per series, one row per quantity (labels with units); fits in print."""
    df = an.series
    if df.empty or "series" not in df.columns:
        return ""
    known = {col for col, _, _ in _SERIES_ROWS}
    spec = [r for r in _SERIES_ROWS if r[0] in df.columns]
    spec = [r for r in spec if r[0] not in _GPU_ROWS or not all(_missing(v) for v in df[r[0]])]
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


def _target_view(c: Any, pid: str) -> str:
    """The target's ranking of a divergence in words: near tie, real, or not ranked."""
    cls = c.divergences.get(pid)
    if cls is None or cls.kind == "unranked":
        return "not ranked"
    if cls.kind == "control_varies":
        return "not ranked; the control's own answers to this prompt vary"
    ranks = f"ranks {cls.control_rank} / {cls.experiment_rank}" if cls.control_rank else ""
    word = "near tie" if cls.kind == "near_tie" else "<b>real disagreement</b>"
    return f"{word} (gap {cls.gap:+.3f} nats{'; ' + ranks if ranks else ''})"


def divergence_kinds(ag: AgreementSummary, *, long: bool) -> str:
    """The classes of an arm's greedy divergences in words (an agreement summary's counts):
    near ties, real, where the control's own answers vary (only when some do), not ranked;
    ``long`` names them in full, for the divergence table."""
    real = " disagreement(s)" if long else ""
    parts = [f"{ag.n_near_tie} near tie(s)", f"{ag.n_real} real{real}"]
    if ag.n_control_varies:
        vary = " between its requests" if long else ""
        parts.append(f"{ag.n_control_varies} where the control's own answers vary{vary}")
    parts.append(f"{ag.n_unranked} not ranked")
    return ", ".join(parts)


def divergence_html(an: RunAnalysis, limit: int = 5) -> str:
    """Greedy outputs that differ from the control: up to ``limit`` prompts per
    comparison, each with its first divergence and the target's view of it (a near tie,
    or a real disagreement), and per comparison the count of each kind."""
    out, counts = [], []
    for c in an.comparisons:
        diverged = [(pid, a) for pid, a in c.agreements.items() if not a.exact_match]
        ag = c.agreement
        if diverged and ag is not None:
            counts.append(
                f"<li>{html.escape(c.experiment)} at {html.escape(str(c.load))}: "
                f"{ag.n_diverged} of {ag.n_compared} differ: "
                f"{divergence_kinds(ag, long=True)}</li>"
            )
        for pid, a in diverged[:limit]:
            out.append(
                f"<tr><td>{html.escape(c.experiment)}</td><td>{html.escape(pid)}</td>"
                f"<td>{a.first_divergence} ({a.unit})</td>"
                f"<td>…{html.escape(a.context_before)}<b>[{html.escape(a.control_after)}]</b></td>"
                f"<td><b>[{html.escape(a.experiment_after)}]</b></td>"
                f"<td>{_target_view(c, pid)}</td></tr>"
            )
    if not out:
        return ""
    head = (
        "<tr><th>Experiment</th><th>Prompt</th><th>First divergence</th>"
        "<th>Control output</th><th>Experiment output</th><th>The target's view</th></tr>"
    )
    return (
        "<h3>Greedy outputs that differ from the control</h3>"
        "<p>Where an answer first differs, the target served without speculation ranks both "
        "tokens: within <code>analysis.near_tie_nats</code> of each other the answers parted "
        "on a floating-point near tie (not held against the arm); beyond it the arm disagrees "
        "with its target.</p>"
        f"<ul>{''.join(counts)}</ul>"
        f"<table class='speclib-table'>{head}{''.join(out)}</table>"
    )
