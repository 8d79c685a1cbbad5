"""The experimental design: interleaved vs sequential, blocks, alternation slots."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from speclib.params.loader import load_params
from speclib.run.design import choose_design, plan_blocks, plan_slots, slot_size

REPO = Path(__file__).resolve().parents[2]


def _params(tmp_path: Path, **protocol):
    data = yaml.safe_load((REPO / "params" / "cpu-demo-full.yaml").read_text())
    data["workload"]["prompts"] = str(REPO / "prompts" / "demo-mixed.jsonl")
    data["protocol"] = {**data.get("protocol", {}), **protocol}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_params(path)


def test_all_arms_fit_interleaved_else_sequential(tmp_path: Path) -> None:
    params = _params(tmp_path, aa=True, design="auto")
    fits = choose_design(params, available_gib=23.0)
    assert fits.design == "interleaved"
    assert "4 servers" in fits.reason and fits.needed_gib == pytest.approx(4 * 3.2)
    groups = choose_design(params, available_gib=8.0)  # 2 of 4 fit: interleaved in groups
    assert groups.design == "interleaved" and groups.group_size == 2
    tight = choose_design(params, available_gib=5.0)  # not even the control and one arm
    assert tight.design == "sequential" and tight.reason.startswith("fallback")


def test_explicit_interleaved_that_does_not_fit_is_an_error(tmp_path: Path) -> None:
    params = _params(tmp_path, design="interleaved", memory_per_server_gib=10.0)
    with pytest.raises(ValueError, match="do not fit"):
        choose_design(params, available_gib=23.0)


def test_gpu_shares_are_checked_instead_of_rss(tmp_path: Path) -> None:
    params = _params(tmp_path, design="auto")
    derived = choose_design(params, available_gib=0.1, gpus=1)  # RSS does not count
    assert derived.design == "interleaved" and "gpu_memory_utilization 0.22 each" in derived.reason
    data = params.model_dump()
    data["server"]["gpu_memory_utilization"] = 0.85  # 4 x 0.85 of one GPU
    set_share = params.model_validate(data)
    choice = choose_design(set_share, available_gib=500.0, gpus=1)
    assert choice.design == "sequential" and "do not fit" in choice.reason


def test_interleaved_blocks_hold_every_arm_sequential_blocks_one(tmp_path: Path) -> None:
    params = _params(tmp_path, aa=True)
    blocks = plan_blocks(params, "interleaved", range(2))
    assert [b.block for b in blocks] == ["r0", "r1"]
    assert blocks[0].arms == ("control", "draft-k4", "ngram-k4", "aa")
    assert blocks[1].launch_ids[-1] == "aa-r1"
    seq = plan_blocks(params, "sequential", range(2))
    assert [b.arms for b in seq[:4]] == [("control",), ("draft-k4",), ("ngram-k4",), ("aa",)]
    assert [b.arms[0] for b in seq[4:]] == ["aa", "ngram-k4", "draft-k4", "control"]  # abba
    assert seq[0].block == "control-r0"


def test_slots_at_concurrency_one_send_each_prompt_to_every_arm_in_random_order() -> None:
    slots = plan_slots(24, ["a", "b", "c"], size=1, rng=random.Random(0))
    assert len(slots) == 24 and all(len(s.items) == 1 for s in slots)
    assert all(sorted(s.order) == ["a", "b", "c"] for s in slots)
    firsts = {s.order[0] for s in slots}
    assert firsts == {"a", "b", "c"}  # the order is redrawn per prompt


def test_slots_cover_every_request_once_and_single_arm_is_one_slot() -> None:
    slots = plan_slots(10, ["a", "b"], size=4, rng=random.Random(1))
    assert [s.items for s in slots] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]
    one = plan_slots(10, ["a"], size=None, rng=random.Random(1))
    assert len(one) == 1 and one[0].items == tuple(range(10))
    with pytest.raises(ValueError, match="size"):
        plan_slots(3, ["a"], size=0, rng=random.Random(0))


def test_slot_size_by_load(tmp_path: Path) -> None:
    params = _params(tmp_path)
    assert slot_size(params, 1, 3) == 6  # c=1 with the default switch pause: 6 per slot
    assert slot_size(_params(tmp_path, switch_pause_s=0), 1, 3) == 1  # no pause: per prompt
    assert slot_size(params, 8, 3) == 16
    assert slot_size(params, 8, 1) is None
    assert slot_size(_params(tmp_path, slot_requests=5), 8, 2) == 5
    assert slot_size(_params(tmp_path, slot_requests=3), 1, 2) == 3  # also at c=1
