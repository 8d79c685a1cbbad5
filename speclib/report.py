"""Export an executed analysis notebook to a self-contained ``report.html``.

Code cells are hidden (inputs and prompts removed), figures are embedded as base64 images,
and every script or stylesheet that would be fetched from the network (MathJax, widget and
Mermaid loaders of nbconvert's template) is removed, so the page renders offline, the same
on a laptop, in print, or attached to a ticket.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["export_report", "strip_network_fetches"]

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
_PRINT_CSS = """
<style>
  body { max-width: 1200px; margin: 0 auto; }
  .jp-OutputArea-output img { max-width: 100%; height: auto; }
  table { font-size: 0.92em; }
  @media print {
    .jp-Cell { break-inside: avoid; }
    body { max-width: none; }
  }
</style>
"""


def strip_network_fetches(html: str) -> str:
    """Remove scripts, module imports and stylesheets that would be fetched over the network."""
    html = _MATHJAX_BLOCK.sub("", html)
    html = _REMOTE_SCRIPT.sub("", html)
    html = _REMOTE_LINK.sub("", html)
    html = _MODULE_SCRIPT.sub(
        lambda m: "" if re.search(r"https?://", m.group(0)) else m.group(0), html
    )
    return html


def export_report(notebook: Path, out: Path, *, title: str = "speclib report") -> Path:
    """Convert ``notebook`` to HTML with code hidden; write it to ``out``; return ``out``."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(notebook), as_version=4)
    exporter = HTMLExporter(template_name="lab")
    exporter.exclude_input = True
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.embed_images = True
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    html = strip_network_fetches(html)
    html = html.replace("</head>", _PRINT_CSS + "</head>", 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(out)
    return out
