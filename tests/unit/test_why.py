"""The "why this speed-up" analysis: a measured decomposition, and a prediction only from an
independently known draft cost (n-gram: 0; a draft model: served alone)."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from speclib.analysis.speculation.drafting import DraftedShare
from speclib.analysis.speculation.speedup import (
    alpha_from_mean_length,
    expected_tokens_per_step,
    leviathan_speedup,
)
from speclib.analysis.speculation.why import DraftCost, explain, paired_stream_factors, stream_steps
from speclib.params.loader import ParamsError, load_params
from tests.helpers import fake_servers_left, stand_in_checkpoint
from tests.unit.test_interleaved import _run
from tests.unit.test_robustness import _params

pytestmark = pytest.mark.unit


def test_stream_steps_is_the_requests_tpot_split_in_two() -> None:
    offsets = [0.10, 0.13, 0.16, 0.19]  # prefill chunk, then three 30 ms steps
    tokens = [1, 3, 3, 2]
    step, per_step = stream_steps(offsets, tokens)
    assert step == pytest.approx(0.03)
    assert per_step == pytest.approx(8 / 3)
    assert step / per_step == pytest.approx((0.19 - 0.10) / 8)  # TPOT after the first token
    assert stream_steps([0.1], [1]) is None
    assert stream_steps([0.1, 0.1], [1, 1]) is None  # no time passed: no step
    assert stream_steps([0.1, 0.2], [1]) is None  # lengths disagree


def test_paired_factors_multiply_back_to_the_geometric_mean_tpot_ratio() -> None:
    control = [(0.010, 1.0), (0.012, 1.0), (0.011, 1.0)]
    experiment = [(0.018, 3.0), (0.020, 2.5), None]
    tokens, cost, n = paired_stream_factors(control, experiment)
    assert n == 2
    ratios = [(0.018 / 3.0) / 0.010, (0.020 / 2.5) / 0.012]
    gm_ratio = math.exp(sum(math.log(r) for r in ratios) / 2)
    assert cost / tokens == pytest.approx(gm_ratio)
    assert paired_stream_factors([None], [(0.1, 2.0)]) is None


def _every_step_drafted() -> DraftedShare:
    return DraftedShare(
        decode_steps=100,
        drafted_steps=100.0,
        drafted_share=1.0,
        tokens_per_drafted_step=None,
        n_requests=10,
        requests_drafted=10,
        source="per-request metrics",
    )


def test_the_decomposition_per_kind_of_prompt() -> None:
    """Each kind's own pairs: a kind whose steps carry 3 tokens at 1.5x a plain step's cost
    gets x2.0, one whose steps carry 1 token at the same cost x0.67."""
    import pandas as pd

    from speclib.analysis.verdict.explain import why_by_category

    plain = [0.0, 0.01, 0.02, 0.03]  # prefill chunk, then three 10 ms steps
    slow = [0.0, 0.015, 0.03, 0.045]  # three 15 ms steps
    rows = []
    for cat, tokens in (("fix", [1, 3, 3, 3]), ("chat", [1, 1, 1, 1])):
        for _ in range(2):
            rows.append({"category": cat, "chunk_offsets_s_c": plain, "chunk_tokens_c": [1] * 4,
                         "chunk_offsets_s_e": slow, "chunk_tokens_e": tokens})  # fmt: skip
    out = why_by_category(pd.DataFrame(rows))
    assert set(out) == {"fix", "chat"} and out["fix"]["n_pairs"] == 2
    assert out["fix"]["tokens_per_step"] == pytest.approx(3.0)
    assert out["fix"]["step_cost"] == pytest.approx(1.5)
    assert out["fix"]["speedup"] == pytest.approx(2.0)
    assert out["chat"]["speedup"] == pytest.approx(2 / 3)
    assert why_by_category(pd.DataFrame()) == {}


def test_without_the_drafted_share_there_is_no_prediction() -> None:
    """An n-gram arm whose counters say 5 tokens per drafted step: the old model assumed
    every step was drafted and predicted 5x; without the share it must not predict."""
    why = explain(
        method="ngram", k=4, stream_factors=(1.6, 1.0, 40), measured_speedup=1.57, verify_tokens=5.0
    )
    assert why.prediction is None
    assert "share of decode steps that had a draft is unknown" in why.no_prediction


def test_ngram_gets_a_prediction_with_c_zero_and_the_gap_is_named() -> None:
    why = explain(
        method="ngram",
        k=4,
        stream_factors=(1.6, 1.3, 40),
        measured_speedup=1.25,
        verify_tokens=2.9,
        drafting=DraftedShare(
            decode_steps=400,
            drafted_steps=100.0,
            drafted_share=0.25,
            tokens_per_drafted_step=None,
            n_requests=40,
            requests_drafted=10,
            source="per-request metrics",
        ),
    )
    d, p = why.decomposition, why.prediction
    assert d.decomposed_speedup == pytest.approx(1.6 / 1.3)
    assert p is not None and p.cost.c == 0.0 and "by definition" in p.cost.source
    # the model on the drafted quarter of the steps, plain steps elsewhere
    alpha = alpha_from_mean_length(2.9, 4)
    expected = 0.25 * expected_tokens_per_step(alpha, 4) + 0.75
    assert p.predicted_speedup == pytest.approx(expected)
    assert p.model_step_cost == pytest.approx(1.0)
    assert p.verify_overhead == pytest.approx(1.3)
    assert "verifying k + 1 = 5 positions" in why.summary
    assert "75% of decode steps had no draft (300 of 400" in why.summary
    assert "10 of 40 requests got drafts" in why.summary


def test_a_draft_model_without_a_measured_cost_gets_no_prediction() -> None:
    why = explain(
        method="draft_model",
        k=4,
        stream_factors=(3.1, 1.8, 48),
        measured_speedup=1.74,
        verify_tokens=2.9,
        no_cost_reason="serve the draft alone",
    )
    assert why.prediction is None and why.no_prediction == "serve the draft alone"
    assert "No independent prediction" in why.summary and "1.72× the speed" in why.summary
    # the measured TPOT ratio is 1 / 1.74 = ×0.57: 43 % less time per token, not "43 % faster"
    assert "as these factors are: ×0.57: 43 % less time per token, 1.74× the speed" in why.summary


def test_a_measured_draft_cost_gives_the_standard_model_and_its_range() -> None:
    cost = DraftCost(0.2, "draft served alone", (0.15, 0.25))
    why = explain(
        method="draft_model",
        k=4,
        stream_factors=(3.1, 2.0, 48),
        measured_speedup=1.55,
        verify_tokens=3.0,
        drafting=_every_step_drafted(),
        draft_cost=cost,
        k_range=range(1, 9),
    )
    p = why.prediction
    assert p.predicted_speedup == pytest.approx(leviathan_speedup(alpha=p.alpha, k=4, c=0.2))
    low, high = p.predicted_range
    assert low < p.predicted_speedup < high  # a dearer draft predicts less
    assert p.model_step_cost == pytest.approx(1.8)
    assert p.verify_overhead == pytest.approx(2.0 / 1.8)
    assert 1 <= p.best_k <= 8
    with pytest.raises(ValueError, match="measured_speedup"):
        explain(method="ngram", k=4, stream_factors=None, measured_speedup=0.0)


# ------------------------------------------------------------ params: the draft-alone arm


def _draft_params(tmp, **analysis):
    stand_in_checkpoint(tmp / "draft")  # the files the kit checks before any server
    path = _params(tmp, n_prompts=6)
    data = yaml.safe_load(path.read_text())
    data["series"][1]["speculative_config"] = {
        "method": "draft_model",
        "model": str(tmp / "draft"),
        "num_speculative_tokens": 3,
    }
    data["analysis"].update(analysis)
    data["protocol"] = {"design": "interleaved", "switch_pause_s": 0, "max_replicates": None}
    data["workload"]["replicates"] = 2
    path.write_text(yaml.safe_dump(data))
    return path


def test_measure_draft_cost_adds_one_reference_arm_never_compared(tmp_path) -> None:
    params = load_params(_draft_params(tmp_path, measure_draft_cost=True))
    assert params.draft_cost_arms == {"spec": "spec.draft-alone"}
    arm = params.series_by_name("spec.draft-alone")
    assert arm.draft_alone_of == "spec" and arm.speculative_config is None
    assert params.experiments == ["spec"]
    other = tmp_path / "off"
    other.mkdir()
    off = load_params(_draft_params(other))
    assert off.draft_cost_arms == {} and len(off.arms) == 2


def test_draft_alone_of_is_not_a_params_file_key(tmp_path) -> None:
    path = _draft_params(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["series"][0]["draft_alone_of"] = "spec"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError, match="draft_alone_of is set by the kit"):
        load_params(path)


def test_the_draft_cost_is_measured_on_a_served_draft_and_predicts(tmp_path) -> None:
    """Stand-in servers (real processes, HTTP): the draft served alone steps at a quarter of
    the target's time, so c ≈ 0.25 and the report carries the model's prediction."""
    out = tmp_path / "run"
    proc = _run(_draft_params(tmp_path, measure_draft_cost=True), out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    alone = [r for r in rows if r["series"] == "spec.draft-alone" and r["phase"] == "measure"]
    assert len(alone) == 2 * 6 and all(r["ok"] for r in alone)
    # block r0's draft-alone launch ("...-r0.1" where the design put the arms in groups, as it
    # does when the machine's free memory is short)
    (launch,) = (out / "launches").glob("spec.draft-alone-r0*")
    argv = json.loads((launch / "command.json").read_text())
    model = argv["argv"][argv["argv"].index("--model") + 1]
    assert model.endswith("/draft") and "--speculative-config" not in argv["argv"]
    summary = json.loads((out / "summary.json").read_text())
    assert [c["experiment"] for c in summary["comparisons"]] == ["spec"]
    why = summary["comparisons"][0]["explanation"]
    cost = why["prediction"]["cost"]
    assert "draft served alone" in cost["source"]
    assert 0.1 < cost["c"] < 0.5, cost
    assert "Model (Leviathan et al. 2023)" in why["summary"]
    assert "Why this speed-up?" in (out / "report.html").read_text()


def test_a_sweep_over_k_shares_one_draft_alone_arm(tmp_path) -> None:
    """c does not depend on k: every swept draft_model series with the same draft is
    predicted from one draft-alone arm, named after the sweep family."""
    path = _draft_params(tmp_path, measure_draft_cost=True)
    data = yaml.safe_load(path.read_text())
    del data["series"][1]["speculative_config"]["num_speculative_tokens"]
    data["series"][1]["sweep"] = {"num_speculative_tokens": [1, 3]}
    path.write_text(yaml.safe_dump(data))
    params = load_params(path)
    assert params.draft_cost_arms == {"spec-k1": "spec.draft-alone", "spec-k3": "spec.draft-alone"}
    alone = [a for a in params.arms if a.draft_alone_of is not None]
    assert [(a.name, a.draft_alone_of) for a in alone] == [("spec.draft-alone", "spec-k1")]
    assert params.experiments == ["spec-k1", "spec-k3"]
