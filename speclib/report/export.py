"""Export an executed analysis notebook to a self-contained ``report.html``.

Code cells are hidden (inputs and prompts removed), figures are embedded as base64 images,
and every script or stylesheet that would be fetched from the network (MathJax, widget and
Mermaid loaders of nbconvert's template) is removed, so the page renders offline, the same
on a laptop, in print, or attached to a ticket. A small stylesheet fits the page to a laptop
screen (the verdict and the conclusion on the first screen) and to A4/Letter paper (no
cut-off tables, figures not split across pages, verdict colours kept). The page title is
the report's first heading.
"""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path

__all__ = ["NOTEBOOK_ONLY", "export_report", "page_title", "strip_network_fetches"]

_REMOTE_SCRIPT = re.compile(
    r"<script\b[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//[^>]*>\s*</script>", re.IGNORECASE | re.DOTALL
)
_REMOTE_LINK = re.compile(
    r"<link\b[^>]*\bhref\s*=\s*[\"']?(?:https?:)?//[^>]*>", re.IGNORECASE | re.DOTALL
)
_MODULE_SCRIPT = re.compile(r"<script\b[^>]*type=\"module\"[^>]*>.*?</script>", re.DOTALL)
_MATHJAX_BLOCK = re.compile(
    r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL
)
_PAGE_CSS = """
<style>
  body { max-width: 1200px; margin: 0 auto; }
  .jp-Notebook { padding: 12px 16px; }
  .jp-Cell { padding: 0; }
  .jp-OutputArea-output img { max-width: 100%; height: auto; }
  .jp-OutputArea-output figure { margin: 0.6em 0 1.4em; }
  .jp-OutputArea-output figcaption { max-width: 60em; font-size: 0.95em; color: #222; }
  .jp-RenderedHTMLCommon h2 { margin-top: 1.2em; }
  @page { size: auto; margin: 12mm; }
  @media print {
    body { max-width: none; }
    .jp-Notebook { padding: 0; }
    .jp-OutputArea-output { overflow: visible; }
    .jp-OutputArea-output figure, .jp-OutputArea-output tr { break-inside: avoid; }
    .jp-RenderedHTMLCommon h2, .jp-RenderedHTMLCommon h3 { break-after: avoid; }
    a.anchor-link { display: none; }
  }
</style>
"""
NOTEBOOK_ONLY = "notebook-only"
"""Cell tag: help text for JupyterLab users, left out of the exported report."""
_TITLE = re.compile(r"<title>.*?</title>", re.DOTALL)
_FIRST_H1 = re.compile(r"<h1\b[^>]*>(.*?)</h1>", re.DOTALL | re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")


def strip_network_fetches(html: str) -> str:
    """Remove scripts, module imports and stylesheets that would be fetched over the network."""
    html = _MATHJAX_BLOCK.sub("", html)
    html = _REMOTE_SCRIPT.sub("", html)
    html = _REMOTE_LINK.sub("", html)
    html = _MODULE_SCRIPT.sub(
        lambda m: "" if re.search(r"https?://", m.group(0)) else m.group(0), html
    )
    return html


def page_title(html: str, *, default: str = "speclib report") -> str:
    """Text of the first ``<h1>`` of ``html`` (tags and the ¶ anchor removed), else ``default``."""
    m = _FIRST_H1.search(html)
    text = html_lib.unescape(_TAG.sub("", m.group(1))).replace("¶", "").strip() if m else ""
    return text or default


def export_report(notebook: Path, out: Path, *, title: str | None = None) -> Path:
    """Convert ``notebook`` to HTML with code hidden; write it to ``out``; return ``out``.

    ``title`` (the browser tab and the default file name when printing) defaults to the
    report's first heading.
    """
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook), as_version=4)
    nb.cells = [c for c in nb.cells if NOTEBOOK_ONLY not in c.get("metadata", {}).get("tags", [])]
    exporter = HTMLExporter(template_name="lab")
    exporter.exclude_input = True
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.embed_images = True
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": "speclib"}})
    html = strip_network_fetches(html)
    name = html_lib.escape(title or page_title(html))
    html = _TITLE.sub(lambda _: f"<title>{name}</title>", html, count=1)
    html = html.replace("</head>", _PAGE_CSS + "</head>", 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out
