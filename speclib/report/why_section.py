"""The report's "Why this speed-up?" section, shown right after the first screen.

:func:`why_html` gives, per comparison, the measured decomposition of its speed-up (tokens
per verify step from the ``/metrics`` counters, a step's cost from the gaps between streamed
chunks: :mod:`speclib.analysis.spec.why`), then the lines of vLLM's own log that bear on
speed, per series, and the acceptance against a synthetic pair's known truth (both from
:mod:`speclib.analysis.health.stack`).
"""

from __future__ import annotations

import html

from speclib.analysis.run_analysis import RunAnalysis
from speclib.report.html_format import wrap

__all__ = ["why_html"]


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
