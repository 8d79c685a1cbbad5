"""The report's "Why this speed-up?" section, shown right after the first screen.

:func:`why_html` gives, per comparison, the measured decomposition of its speed-up over every
decode step (tokens per step and a step's cost from the streamed chunks, the share of steps
that had no draft, acceptance on the drafted ones: :mod:`speclib.analysis.speculation.why`,
:mod:`speclib.analysis.speculation.drafting`), flags an arm whose streams disagree with what its
server counted, then the lines of vLLM's own log that bear on speed, per series, and the
acceptance against a synthetic pair's known truth (both from
:mod:`speclib.analysis.health.stack`).
"""

from __future__ import annotations

import html
from typing import Any

from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.speculation.acceptance_truth import TOLERANCE
from speclib.report.html_format import wrap

__all__ = ["why_html"]


_METHOD = (
    "<p>Measured, not fitted, over every decode step: a request's decode steps are its "
    "streamed chunks after the first (one chunk per engine step at c=1), the tokens they "
    "carried give tokens per step, the gaps between them a step's cost. vLLM's acceptance "
    "counters (and its mean acceptance length) cover only the steps that had a draft; a "
    "step whose proposer found nothing (an n-gram lookup without a match) yields one token "
    "and is invisible to them. So the share of decode steps that had a draft is counted "
    "apart: from each request's own spec metrics where the server gives them, else "
    "<code>vllm:spec_decode_num_drafts</code> over the streams' decode steps of each "
    "launch; the streams' accepted drafts are checked against both. The standard model of "
    "speculative decoding (Leviathan et al. 2023), weighted by that share, is shown only "
    "where the draft cost c is known independently of these timings (n-gram: c = 0; a draft "
    "model: served alone with <code>analysis.measure_draft_cost: true</code>).</p>"
    "<p>EAGLE-3 is read the same way, with two differences. Its head drafts from the "
    "target's own hidden states (taps on a low, a middle and a high layer, fused into one "
    "input), so it proposes on every decode step and its drafted share should read about "
    "1. Its c is the head's cost per step: one decoder layer and its own "
    "LM head against the target's full stack, far below a separate draft model's, but it "
    "cannot be served alone to measure it, so an EAGLE-3 arm gets the measured "
    "decomposition and no model prediction.</p>"
    "<p>MTP has no draft model at all: its layers ship inside the target's checkpoint, and "
    "each guess runs one of them on the target's own last hidden state (already computed "
    "by the verify pass) and the embedding of the token before, then the target's LM head; "
    "vLLM reuses one layer for every guess when k exceeds the layers the checkpoint has. It "
    "cannot be served alone either, so its c is <i>modelled</i>, not timed: the weights one "
    "guess reads (one MTP layer and the LM head) over those a target step reads, as a "
    "decode step at small batches streams every weight it uses once. The prediction says "
    "so, and its gap to the measured step cost is what that model leaves out.</p>"
)


def why_html(an: RunAnalysis) -> str:
    """ "Why this speed-up?": the measured decomposition per comparison (shown right after
    the first screen, before the evidence), with any disagreement between an arm's streams
    and its server's counters."""
    items = [
        f"<li><b>{html.escape(c.experiment)}</b> ({html.escape(c.load)}): "
        f"{html.escape(c.explanation.summary)}{_stream_flag(c.acceptance)}</li>"
        for c in an.comparisons
        if c.explanation and c.explanation.summary
    ]
    stack = _stack_html(an)
    if not items and not stack:
        return ""
    return wrap("<h2>Why this speed-up?</h2>" + _METHOD + "<ul>" + "".join(items) + "</ul>" + stack)


def _stream_flag(acceptance: dict[str, Any]) -> str:
    """A warning after an arm whose streams disagree with its server's counts ("" if none)."""
    stream = acceptance.get("stream") or {}
    if stream.get("matches") is not False:
        return ""
    notes = "; ".join(stream.get("notes") or [])
    return (
        " <b>Stream against counters: MISMATCH</b> "
        f"({html.escape(notes)}): the drafted share and acceptance read from the stream are "
        "not one engine step per chunk here."
    )


def _stack_html(an: RunAnalysis) -> str:
    """What vLLM's own log says bears on speed, per series (lines the control logged too
    left out), and the acceptance against a synthetic pair's truth."""
    out = []
    truth = an.stack.get("acceptance_truth_line")
    if truth:
        out.append(
            f"<p><b>Acceptance against a known truth</b>: the measured acceptance "
            f"{html.escape(truth)}.</p>" + _truth_table(an.stack.get("acceptance_truth") or [])
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


def _rates(values: Any) -> str:
    return " / ".join("–" if v is None else f"{v:.3f}" for v in values or [])


def _truth_table(rows: list[dict[str, Any]]) -> str:
    """Per launch: acceptance per draft position as vLLM counted it, the exact expectation
    on the launch's outputs and the declared ``agreement ** i``."""
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{html.escape(str(r.get('series')))}</td>"
        f"<td>{html.escape(str(r.get('launch_id')))}</td><td>{r.get('k')}</td>"
        f"<td>{_rates(r.get('measured_per_position'))}</td>"
        f"<td>{_rates(r.get('expected_per_position'))}</td>"
        f"<td>{_rates(r.get('declared_per_position'))}</td>"
        f"<td>{r.get('measured_drafts')} / {r.get('expected_drafts')}</td>"
        f"<td>{'yes' if r.get('within_per_position') else 'NO'}</td></tr>"
        for r in rows
    )
    return (
        "<table class='speclib-table'><tr><th>Series</th><th>Launch</th><th>k</th>"
        "<th>Accepted per position (vLLM)</th><th>Exact on its outputs</th>"
        "<th>Declared (a<sup>i</sup>)</th><th>Drafts (vLLM / exact)</th>"
        f"<th>Every position within ±{TOLERANCE:.0%}</th></tr>" + body + "</table>"
    )
