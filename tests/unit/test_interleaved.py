"""The interleaved design through the CLI with the stand-in server (real processes, HTTP).

All arms of a block are up together; at concurrency 1 each prompt goes to every arm back to
back in a random order; every record carries its block, slot and position; pairs share a
block; each server's CPU is sampled with the arm being served; the A/A arm runs the
control's configuration.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.helpers import fake_servers_left
from tests.unit.test_robustness import REPO, _params


def _run(params: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ},
    )


@pytest.fixture(scope="module")
def interleaved_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("interleaved")
    path = _params(tmp, n_prompts=6)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"aa": True, "design": "interleaved", "switch_pause_s": 0,
                        "max_replicates": None}  # fmt: skip
    data["workload"].update(replicates=2, concurrency=[1, 2], min_waves=1)  # the slots' shapes
    path.write_text(yaml.safe_dump(data))
    out = tmp / "run"
    proc = _run(path, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    return out


def _measured(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "measure"]


def test_every_record_carries_block_slot_and_position(interleaved_run: Path) -> None:
    rows = _measured(interleaved_run)
    assert len(rows) == 3 * 2 * 2 * 6  # arms x replicates x levels x prompts
    assert all(r["ok"] for r in rows)
    assert {r["block"] for r in rows} == {"r0", "r1"}
    assert all(r["slot"] is not None and r["slot_pos"] is not None for r in rows)
    assert {r["series"] for r in rows} == {"control", "spec", "aa"}


def test_at_concurrency_one_each_prompt_visits_every_arm_back_to_back(interleaved_run) -> None:
    rows = [r for r in _measured(interleaved_run) if r["concurrency"] == 1]
    slots = defaultdict(list)
    for r in rows:
        slots[(r["block"], r["slot"])].append(r)
    orders = set()
    for members in slots.values():
        assert len({m["prompt_id"] for m in members}) == 1
        by_time = sorted(members, key=lambda m: m["t_start"])
        assert [m["slot_pos"] for m in by_time] == [0, 1, 2]
        orders.add(tuple(m["series"] for m in by_time))
    assert len(orders) > 1  # a fresh random order per prompt


def test_slots_at_higher_concurrency_alternate_groups_of_requests(interleaved_run) -> None:
    rows = [r for r in _measured(interleaved_run) if r["concurrency"] == 2]
    per_slot = defaultdict(set)
    for r in rows:
        per_slot[(r["block"], r["slot"], r["series"])].add(r["prompt_id"])
    sizes = {len(v) for v in per_slot.values()}
    assert sizes == {4, 2}  # max(4, 2 x concurrency) per slot: 6 prompts → 4 + 2


def test_pairs_share_a_block_and_the_servers_were_up_together(interleaved_run) -> None:
    statuses = {
        p.parent.name: json.loads(p.read_text())
        for p in (interleaved_run / "launches").glob("*/status.json")
    }
    assert len(statuses) == 6 and all(s["ok"] for s in statuses.values())
    for rep in (0, 1):
        block = [statuses[f"{a}-r{rep}"] for a in ("control", "spec", "aa")]
        assert {s["block"] for s in block} == {f"r{rep}"}
        assert all(s["design"] == "interleaved" for s in block)
        assert max(s["started_at"] for s in block) < min(s["ended_at"] for s in block)
    aa = statuses["aa-r0"]
    assert aa["mode_check"]["expected"] == "off" and aa["mode_check"]["ok"]
    command = json.loads((interleaved_run / "launches" / "aa-r0" / "command.json").read_text())
    assert "--speculative-config" not in command["argv"]


def test_each_server_cpu_is_sampled_with_the_arm_being_served(interleaved_run) -> None:
    lines = (interleaved_run / "launches" / "spec-r1" / "cpu.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert {r["serving"] for r in rows} >= {"control", "spec", "aa", None}
    cpu = [r["cpu_s"] for r in rows]
    assert cpu == sorted(cpu)  # cumulative


def test_manifest_records_the_design_and_blocks(interleaved_run: Path) -> None:
    manifest = json.loads((interleaved_run / "manifest.json").read_text())
    assert manifest["design"]["design"] == "interleaved"
    assert [b["block"] for b in manifest["blocks"]] == ["r0", "r1"]
    assert [s["name"] for s in manifest["series"]] == ["control", "spec", "aa"]


def test_an_external_draft_series_on_a_plain_server_is_rejected_by_the_mode_gate(tmp_path):
    """A "draft_model" series pointed at a server without speculation: no drafts in
    /metrics, no per-request spec metrics, one token per chunk. Its launch fails the mode
    check, its records are left out, and its verdict is REJECT naming the gate."""
    from tests.fakeserver import FakeServer, Script

    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    # 20 ms between tokens: at 2 ms a busy CI machine read streams late, and the late-read
    # check rightly made every verdict "untrustworthy" before the mode gate could reject
    with FakeServer(default=Script(n_tokens=8, ttft_s=0.01, step_s=0.02), mode="process") as s:
        data["server"] = {"model": str(tmp_path), "base_url": s.base_url}
        data["series"][1] = {
            "name": "draft",
            "speculative_config": {
                "method": "draft_model",
                "model": str(tmp_path),
                "num_speculative_tokens": 3,
            },
        }
        data["workload"].update(replicates=2)
        path.write_text(yaml.safe_dump(data))
        proc = _run(path, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    draft = next(c for c in summary["comparisons"] if c["experiment"] == "draft")
    assert draft["decision"] == "reject", draft["reasons"]
    gate = next(g for g in draft["gates"] if g["name"] == "mode")
    assert not gate["passed"] and "mode unverified" in gate["detail"]
    status = json.loads((tmp_path / "run" / "launches" / "draft-r0" / "status.json").read_text())
    assert not status["mode_check"]["ok"]
    assert proc.returncode == 1  # the failed launch is reported


def test_a_switch_of_arm_waits_for_the_previous_workers_busy_poll(tmp_path) -> None:
    """With protocol.switch_pause_s, slots hold several prompts and every switch of arm
    starts at least the pause after the previous arm's last request ended."""
    path = _params(tmp_path, n_prompts=6)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"design": "interleaved", "switch_pause_s": 0.4, "slot_requests": 3}
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    proc = _run(path, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    rows = sorted(_measured(out), key=lambda r: r["t_start"])
    assert len({(r["slot"], r["series"]) for r in rows}) == 2 * 2  # 2 slots x 2 arms
    switches = 0
    for prev, cur in itertools.pairwise(rows):
        end = prev["t_start"] + prev["e2e_s"]
        if cur["series"] != prev["series"]:
            switches += 1
            assert cur["t_start"] - end >= 0.4 - 0.01, (prev, cur)
    assert switches >= 2  # 2 slots in random order: A,B then B,A (2) or A,B again (3)
