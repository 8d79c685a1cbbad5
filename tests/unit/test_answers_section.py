"""The report's "What the model answered" section on a stored run folder.

The stand-in run of ``tests/fixtures/run-standin`` (control, one experiment, the A/A arm;
6 prompts of one category) is copied; one experiment answer is changed to differ from the
control's (text and token ids), another prompt is put in a second category, and an answer
gets HTML in it. The section must show each category with its prompts' answers side by side,
the diverged prompt first and marked, the A/A arm left out, and escape every text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclib.analysis.run_analysis import analyze_run
from speclib.report.answers_section import answer_samples, answers_html
from tests.unit.test_summary_fixture import analyze_copy

pytestmark = pytest.mark.unit


def _edit_records(run: Path) -> None:
    path = run / "requests.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if row["prompt_id"] == "p3" and row["series"] == "spec":
            row["text"] = "t0 t1 <b>other</b>"
            row["token_ids"] = [1000, 1001, 7, 7, 7]
        if row["prompt_id"] == "p5":
            row["category"] = "second"
        if row["prompt_id"] == "p0" and row["series"] == "control":
            row["finish_reason"] = "stop"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("answers")
    analyze_copy(tmp)
    _edit_records(tmp / "run")
    return analyze_run(tmp / "run")


def test_samples_per_category_diverged_first(analysis) -> None:
    samples = answer_samples(analysis, per_category=2)
    assert [(s.category, s.prompt_id) for s in samples] == [
        ("c", "p3"),  # differs from the control: shown first
        ("c", "p0"),
        ("second", "p5"),
    ]
    first = samples[0]
    assert [name for name, *_ in first.experiments] == ["spec"]  # the A/A arm is no experiment
    _name, text, finish, same = first.experiments[0]
    assert text == "t0 t1 <b>other</b>" and same is False and finish == "length"
    assert first.control.startswith("t0 t1 t2") and first.prompt == "prompt number 3"
    assert samples[1].control_finish == "stop" and samples[1].experiments[0][3] is True
    assert len(answer_samples(analysis, per_category=1)) == 2
    with pytest.raises(ValueError, match="per_category"):
        answer_samples(analysis, per_category=0)


def test_html_shows_answers_escaped_with_the_disagreements(analysis) -> None:
    html = answers_html(analysis)
    assert "<h2>What the model answered</h2>" in html
    assert "&lt;b&gt;other&lt;/b&gt;" in html and "<b>other</b>" not in html
    assert "<b>differs</b>" in html and "= control" in html
    assert "ended (EOS)" in html and "cut at max_tokens" in html
    assert ">c — TPOT ratio spec ×" in html and ">second" in html
    assert (
        "prompts answered exactly as the control; 1 differ (0 near tie(s), 0 real, 1 not "
        "ranked): p3 (at 2 tokens)" in html
    )
