"""The report of a real run, rendered in headless Chromium the way an operator opens it.

One page load (1400×1000) of ``report.html`` from the shared
``demo_run`` folder is measured once per module; each test asserts one property: nothing
fetched from the network and nothing failed, no console errors, every image decoded, the
answer, the bench-trust panel and the forest plot on the first screen, every figure
captioned, no code or error output, nothing cut off on screen or on A4 paper. Screenshots
(first screen, full page, first printed page) and the printed PDF are written to
``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser import BrowserError, open_page
from tests.conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.alone]

WIDTH, HEIGHT = 1400, 1000  # the first screen the decider sees
# A4 at 96 CSS px per inch, less the report's 12 mm print margins: the printed text width.
PRINT_WIDTH, PRINT_HEIGHT = 703, 1032
LOCAL_SCHEMES = {"file", "data"}  # data: = images embedded in the page itself

# One snapshot of everything the tests look at, taken in the page.
MEASURE_JS = r"""
(() => {
  const rect = el => {
    if (!el) return null;
    const r = el.getBoundingClientRect();
    return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY,
            left: r.left, right: r.right};
  };
  const visible = el => el.offsetParent !== null || el.getClientRects().length > 0;
  const overflowing = [...document.querySelectorAll('.jp-OutputArea-output, .jp-Cell, body')]
    .filter(el => el.scrollWidth > el.clientWidth + 1)
    .map(el => (el.className || el.tagName) + ': ' + el.scrollWidth + ' > ' + el.clientWidth
         + ' ' + el.innerText.slice(0, 60).replace(/\s+/g, ' '));
  return {
    title: document.title,
    innerHeight: window.innerHeight,
    images: [...document.images].map(i => ({
      src: i.src.slice(0, 40), complete: i.complete,
      naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight,
      inFigure: !!i.closest('figure'), alt: i.alt})),
    figures: [...document.querySelectorAll('figure')].map(f => ({
      images: f.querySelectorAll('img').length,
      caption: (f.querySelector('figcaption') || {innerText: ''}).innerText.trim()})),
    answer: rect(document.getElementById('speclib-answer')),
    answerText: (document.getElementById('speclib-answer') || {innerText: ''}).innerText,
    trust: rect(document.getElementById('speclib-noise')),
    forest: rect(document.getElementById('speclib-forest')),
    verdict: rect(document.getElementById('speclib-verdict')),
    verdictRows: document.querySelectorAll('#speclib-verdict tr').length,
    conclusion: rect(document.getElementById('speclib-conclusion')),
    conclusionText: (document.getElementById('speclib-conclusion') || {innerText: ''})
      .innerText,
    evidence: rect([...document.querySelectorAll('h2')]
      .find(h => h.innerText.startsWith('Evidence'))),
    codeInputs: [...document.querySelectorAll('.jp-InputArea, .jp-InputPrompt')]
      .filter(visible).length,
    errorOutputs: [...document.querySelectorAll(
        '[data-mime-type="application/vnd.jupyter.stderr"], .jp-OutputArea-output pre')]
      .filter(el => /Traceback|Error\b|Warning\b/.test(el.innerText))
      .map(el => el.innerText.slice(0, 200)),
    bodyText: document.body.innerText,
    overflowing: overflowing,
  };
})()
"""


@dataclass(frozen=True)
class Rendered:
    """What the browser saw: the page on screen, the page in print, and the load events."""

    screen: dict[str, Any]
    printed: dict[str, Any]
    requests: list[str]
    failed_requests: list[dict[str, Any]]
    console_errors: list[str]
    screenshots: dict[str, Path]
    pdf: Path
    n_comparisons: int


@pytest.fixture(scope="module")
def rendered(demo_run: Path) -> Rendered:
    report = demo_run / "report.html"
    assert report.is_file(), f"no report.html in {demo_run}"
    ARTIFACTS.mkdir(exist_ok=True)
    shots = {
        "first_screen": ARTIFACTS / "report-first-screen.png",
        "full_page": ARTIFACTS / "report-full-page.png",
        "print_first_page": ARTIFACTS / "report-print-first-page.png",
    }
    pdf = ARTIFACTS / "report.pdf"
    try:
        with open_page(report.as_uri(), width=WIDTH, height=HEIGHT) as page:
            screen = page.evaluate(MEASURE_JS)
            page.screenshot(shots["first_screen"])
            page.screenshot(shots["full_page"], full_page=True)
            page.emulate_media("print")
            page.set_viewport(PRINT_WIDTH, PRINT_HEIGHT)
            printed = page.evaluate(MEASURE_JS)
            page.screenshot(shots["print_first_page"])
            page.print_pdf(pdf)
            events = page.events
    except BrowserError as exc:
        pytest.fail(f"headless Chromium: {exc}")
    summary = json.loads((demo_run / "summary.json").read_text("utf-8"))
    return Rendered(
        screen,
        printed,
        events.requests,
        events.failed_requests,
        events.console_errors,
        shots,
        pdf,
        sum(c["role"] == "experiment" for c in summary["comparisons"]),  # the A/A arm is
    )  # shown above the table, as the noise floor


def test_nothing_is_fetched_from_the_network_and_nothing_fails(rendered: Rendered) -> None:
    assert rendered.requests, "the browser recorded no request at all"
    remote = [u for u in rendered.requests if urlsplit(u).scheme not in LOCAL_SCHEMES]
    assert remote == []
    assert rendered.failed_requests == []


def test_no_console_errors(rendered: Rendered) -> None:
    assert rendered.console_errors == []


def test_every_image_is_decoded_and_captioned(rendered: Rendered) -> None:
    images = rendered.screen["images"]
    assert len(images) >= 4, "expected the evidence figures"
    bad = [i for i in images if not (i["complete"] and i["naturalWidth"] and i["naturalHeight"])]
    assert bad == []
    assert all(i["inFigure"] and i["alt"] for i in images), "an image outside a <figure>"
    figures = rendered.screen["figures"]
    assert len(figures) == len(images)
    for n, fig in enumerate(figures, start=1):
        assert fig["images"] == 1
        assert fig["caption"].startswith(f"Figure {n}. ") and len(fig["caption"]) > 40, fig


def test_first_screen_holds_answer_trust_panel_and_forest_plot(rendered: Rendered) -> None:
    s = rendered.screen
    assert s["title"].startswith("Speculative decoding: ")
    for part in ("answer", "trust", "forest"):
        box = s[part]
        assert box is not None, f"no #{part} element"
        assert box["top"] >= 0 and box["bottom"] <= s["innerHeight"], (part, box)
        assert box["right"] <= WIDTH, (part, box)
    assert s["answer"]["bottom"] <= s["trust"]["top"] <= s["trust"]["bottom"] <= s["forest"]["top"]
    text = s["answerText"]
    assert (
        "Best configuration here" in text
        or "Best for this traffic as a whole" in text  # a mixed arm that pays over all
        or "Speculation pays on some kinds of prompt" in text
        or "No configuration is a clear win" in text
        or ("No verdict" in text)
    ), text
    assert "concurrency 1" in text, "the answer names the load it holds for"


def test_verdict_table_and_conclusion_follow_the_forest_plot(rendered: Rendered) -> None:
    s = rendered.screen
    assert s["verdict"] is not None, "no #speclib-verdict table"
    assert s["verdictRows"] == 1 + rendered.n_comparisons, "one row per experiment + header"
    assert s["verdict"]["top"] >= s["forest"]["bottom"]
    assert s["verdict"]["right"] <= WIDTH
    assert s["conclusion"] is not None, "no #speclib-conclusion block"
    assert s["conclusion"]["top"] >= s["verdict"]["bottom"]
    assert s["evidence"]["top"] > s["conclusion"]["bottom"]
    assert "time per output token" in s["conclusionText"]


def test_code_and_errors_are_hidden(rendered: Rendered) -> None:
    s = rendered.screen
    assert s["codeInputs"] == 0
    assert "analyze_run(" not in s["bodyText"] and "import speclib" not in s["bodyText"]
    assert s["errorOutputs"] == []


def test_nothing_is_cut_off_on_screen_or_paper(rendered: Rendered) -> None:
    assert rendered.screen["overflowing"] == []
    assert rendered.printed["overflowing"] == []
    assert rendered.pdf.read_bytes().startswith(b"%PDF")


def test_screenshots_are_saved(rendered: Rendered) -> None:
    for path in rendered.screenshots.values():
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    first = rendered.screenshots["first_screen"].read_bytes()
    assert (int.from_bytes(first[16:20], "big"), int.from_bytes(first[20:24], "big")) == (
        WIDTH,
        HEIGHT,
    )
    full = rendered.screenshots["full_page"].read_bytes()
    assert int.from_bytes(full[20:24], "big") > HEIGHT
