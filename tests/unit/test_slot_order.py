"""The order of the prompts within an alternation slot: random per slot and block,
reproducible from the seed, the same for every arm of the slot.

Measured at concurrency 1 with ``protocol.switch_pause_s``: the first request after a
switch pause was never read late and later positions were, so a fixed order within a slot
put that damage on the same prompts in every block.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from speclib.core.prompts import load_prompts
from speclib.core.rundir import RunDir
from speclib.params.loader import load_params
from speclib.run.alternate import prepare_level, slot_offsets
from speclib.run.arms import Arm
from speclib.run.design import plan_slots

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _setup(tmp_path: Path, **protocol):
    data = yaml.safe_load((REPO / "params" / "cpu-demo-full.yaml").read_text())
    data["workload"]["prompts"] = str(REPO / "prompts" / "demo-mixed.jsonl")
    data["protocol"] = {**data.get("protocol", {}), **protocol}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    params = load_params(path)
    rd = RunDir.at(tmp_path / "run")
    arms = []
    for series in params.arms:
        arm = Arm(series, f"{series.name}-r0", rd.launch_files(f"{series.name}-r0"))
        arm.model = "m"
        arms.append(arm)
    prompts = load_prompts(
        params.resolve_path(params.workload.prompts), limit=params.workload.num_prompts
    )
    return params, arms, prompts


def _level(params, arms, prompts, replicate: int, block: str):
    level = params.workload.levels[0]
    return prepare_level(params, arms, prompts, replicate, 0, level, "nonce", block)


def _sent(lv, arm: str) -> list[tuple[str, ...]]:
    """The prompt ids ``arm`` is sent, slot by slot, in sending order."""
    return [tuple(lv.specs[arm][j].prompt_id for j in slot.items) for slot in lv.slots]


def test_blocks_send_a_slots_prompts_in_different_orders_same_for_every_arm(tmp_path) -> None:
    params, arms, prompts = _setup(tmp_path)
    assert params.workload.levels[0].concurrency == 1 and params.protocol.switch_pause_s > 0
    r0, r1 = _level(params, arms, prompts, 0, "r0"), _level(params, arms, prompts, 1, "r1")
    size = 6  # c=1 with a switch pause
    for lv in (r0, r1):
        assert len(lv.slots) == 2 and all(len(s.items) == size for s in lv.slots)
        for index, slot in enumerate(lv.slots):  # each slot keeps its consecutive prompts
            assert sorted(slot.items) == list(range(index * size, (index + 1) * size))
        sent = {a.name: _sent(lv, a.name) for a in arms}
        assert len({tuple(v) for v in sent.values()}) == 1  # every arm: same prompts, order
    assert [s.items for s in r0.slots] != [s.items for s in r1.slots]
    assert any(list(s.items) != sorted(s.items) for s in r0.slots + r1.slots)


def test_the_order_is_reproducible_and_differs_between_groups_of_a_replicate(tmp_path) -> None:
    params, arms, prompts = _setup(tmp_path)
    again = _level(params, arms, prompts, 0, "r0")
    assert [s.items for s in again.slots] == [
        s.items for s in _level(params, arms, prompts, 0, "r0").slots
    ]
    group = _level(params, arms, prompts, 0, "r0.1")
    assert [s.items for s in group.slots] != [s.items for s in again.slots]
    assert [s.order for s in group.slots] == [s.order for s in again.slots]  # arm order as before


def test_the_prompt_order_leaves_the_arm_orders_drawn_from_the_seed_unchanged() -> None:
    plain = plan_slots(30, ["a", "b", "c"], size=6, rng=random.Random(5))
    mixed = plan_slots(30, ["a", "b", "c"], size=6, rng=random.Random(5), item_rng=random.Random(9))
    assert [s.order for s in mixed] == [s.order for s in plain]
    assert [sorted(s.items) for s in mixed] == [list(s.items) for s in plain]
    assert [s.items for s in mixed] != [s.items for s in plain]


def test_arrival_times_follow_the_sending_position_not_the_prompt() -> None:
    offsets = [0.0, 0.4, 0.5, 1.1, 1.3, 2.0]
    got = slot_offsets(offsets, (4, 2, 5, 3))
    assert got == pytest.approx([0.0, 0.6, 0.8, 1.5])  # the slot's times, from its start
    assert slot_offsets(None, (0, 1)) is None
