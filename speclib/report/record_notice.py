"""The report's notice above the answer when the decision is not the run's own, whole one.

Two facts change how far a verdict can be trusted and must be read before it: the records
were not whole and the run was decided on what was there (``--allow-incomplete``: what is
missing, from :class:`~speclib.analysis.health.integrity.Integrity`), or the rule was
changed after the run (``analyze --params``: which fields, from
:class:`~speclib.params.override.Redecision`). :func:`record_notice_html` renders both;
it is empty for a whole run decided under its own params.
"""

from __future__ import annotations

import html

from speclib.analysis.run_analysis import RunAnalysis
from speclib.report.html_format import wrap

__all__ = ["record_notice_html"]


def _incomplete(an: RunAnalysis) -> str:
    found = an.integrity
    if found.whole and not found.records_only:
        return ""
    if found.whole:
        return (
            "<p><b>Records only:</b> this folder holds no launch folders and no design, so "
            "no launch evidence (mode check, counters, logs) backs these verdicts.</p>"
        )
    items = "".join(f"<li><code>{html.escape(p)}</code></li>" for p in found.problems)
    return (
        "<p><b>DECIDED ON INCOMPLETE RECORDS</b> (<code>--allow-incomplete</code>): the run "
        f"folder is not whole; {len(found.problems)} problem(s):</p><ul>{items}</ul>"
    )


def _redecided(an: RunAnalysis) -> str:
    change = an.redecision
    if change is None:
        return ""
    src = html.escape(change.params_file)
    if not change.changed:
        return f"<p>Re-analysed with <code>{src}</code>: the same analysis rule as the run's.</p>"
    rows = "".join(
        f"<li><code>{html.escape(f)}</code>: {html.escape(repr(old))} in the run's params, "
        f"{html.escape(repr(new))} now</li>"
        for f, old, new in change.changed
    )
    return (
        f"<p><b>RE-DECIDED AFTER THE RUN</b> with <code>{src}</code>; the rule differs from "
        f"the run's own params.yaml in:</p><ul>{rows}</ul>"
    )


def record_notice_html(an: RunAnalysis) -> str:
    """The notice (HTML) when the records are not whole or the rule changed; else ``""``."""
    body = _incomplete(an) + _redecided(an)
    if not body:
        return ""
    return wrap(f"<div class='speclib-workload' id='speclib-record-notice'>{body}</div>")
