"""The report's HTML look: the stylesheet every block carries and the shared number formats.

Each block the notebook displays (verdict, conclusion, method) stands alone in JupyterLab
and in the exported page, so :func:`wrap` puts the stylesheet in front of every one.
"""

from __future__ import annotations

import html

__all__ = ["CSS", "gib", "pct", "word_badge", "wrap"]

# Selectors start with ``.speclib`` and name the table element so they outrank JupyterLab's
# ``.jp-RenderedHTMLCommon td {text-align: right}``; verdict colours are light tints of the
# Okabe-Ito palette (bluish green, vermilion, yellow, grey) and the word is always written.
CSS = """
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
.speclib .speclib-mixed { background: #f5c9a8; }
.speclib .speclib-equivalent { background: #e4e4e4; }
.speclib .speclib-worse, .speclib .speclib-reject, .speclib .speclib-failed { background: #f6cfb5; }
.speclib .speclib-untrustworthy { background: #d9c2e9; }
.speclib .speclib-noise { border-left: 4px solid #888; padding: 0.2em 0.8em; margin: 0.6em 0; }
.speclib .speclib-inconclusive { background: #f7efa0; }
.speclib .speclib-small { font-size: 0.85em; color: #444; }
.speclib #speclib-trust p { margin: 0.3em 0; }
.speclib #speclib-trust details { margin: 0 0 0.3em; }
.speclib .speclib-workload { border-left: 4px solid #de8f05; padding: 0 0.8em; }
.speclib .speclib-workload ul { margin: 0.2em 0; }
.speclib .speclib-conclusion { border-left: 4px solid #0173b2; background: #f3f7fa;
  padding: 0.35em 1em; margin: 0.2em 0 0.8em; }
.speclib .speclib-conclusion p, .speclib .speclib-conclusion ul { margin: 0.3em 0; }
.speclib .speclib-headline { font-size: 1.1em; }
.speclib code { white-space: pre-wrap; overflow-wrap: anywhere; }
.speclib p, .speclib li, .speclib .speclib-conclusion { overflow-wrap: break-word; }
.speclib .speclib-nowrap { white-space: nowrap; }
@media print {
  .speclib table.speclib-table { font-size: 9px; }
  .speclib table.speclib-table th, .speclib table.speclib-table td { padding: 2px 3px; }
  .speclib .speclib-nowrap { white-space: normal; }
  .speclib .speclib-word, .speclib table.speclib-table th, .speclib .speclib-conclusion {
    -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  .speclib table.speclib-table tr, .speclib .speclib-conclusion { break-inside: avoid; }
}
</style>
"""
"""The report's stylesheet (a ``<style>`` element), scoped to ``.speclib``."""


def wrap(body: str) -> str:
    """The CSS and ``body`` in a ``div.speclib`` (each displayed block stands alone)."""
    return f"{CSS}<div class='speclib'>{body}</div>"


def word_badge(word: str, label: str | None = None) -> str:
    """A verdict word as the report's tinted badge (class ``speclib-<word>``), showing
    ``label`` (escaped) or the word in capitals."""
    text = html.escape(label if label is not None else word.upper())
    return f"<span class='speclib-word speclib-{html.escape(word)}'>{text}</span>"


def pct(x: float | None, digits: int = 0) -> str:
    """A fraction as a percentage (``0.5`` → ``50 %``); ``–`` for ``None``."""
    return "–" if x is None else f"{x * 100:.{digits}f} %"


def gib(b: int | float | None) -> str:
    """Bytes as GiB, or as MiB below 1 GiB (a tiny model is not "0.04 GiB")."""
    if not b:
        return "–"
    return f"{b / 1024**3:.2f} GiB" if b >= 1024**3 else f"{b / 1024**2:.0f} MiB"
