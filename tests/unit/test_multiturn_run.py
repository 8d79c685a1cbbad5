"""Multi-turn runs end to end, against stand-in servers (issue #23 part 2).

The history is asked of a scripted server through the kit's own client
(:func:`speclib.run.history.generate_history`), and a whole run goes through the real CLI,
papermill and notebooks with ``tests/fake_vllm.py`` as every arm's server (started through
``server.launcher``). ``FAKE_VLLM_REQUEST_LOG`` makes each stand-in write the body of every
request it answered, so the test sees exactly what each arm was sent: the history once, from
the control, and the same history in every arm's turn-2 request, in every block and after a
resume. Pure parts are in ``test_multiturn.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from speclib.core.records import read_records

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fake_vllm.py"
HISTORY_TOKENS = 12  # the history's max_tokens, told apart from the measured requests' 16
FAKE_ANSWER = "".join(f"t{i} " for i in range(16))  # what every stand-in stream says
QUESTIONS = [
    {"question_id": f"q{i}", "category": "odd" if i % 2 else "even",
     "turns": [f"first question {i}", f"second question {i}"]}
    for i in range(4)
]  # fmt: skip


def _params(tmp: Path, **protocol) -> Path:
    qfile = tmp / "question.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    data = {
        "name": "multiturn",
        "server": {"model": str(tmp), "launcher": [sys.executable, str(FAKE)],
                   "start_timeout_s": 30},
        "series": [
            {"name": "control"},
            {"name": "spec", "speculative_config": {
                "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
                "prompt_lookup_max": 3}},
        ],
        "workload": {
            "prompts": str(qfile), "format": "mt-bench", "multi_turn": True,
            "history_max_tokens": HISTORY_TOKENS, "max_tokens": 16, "replicates": 2,
            "warmup_requests": 1, "request_timeout_s": 20,
        },
        "analysis": {"n_resamples": 500},
        # the stand-in does not busy-poll: no pause; one block at a time
        "protocol": {"switch_pause_s": 0, "max_replicates": None, **protocol},
    }  # fmt: skip
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(args: list[str], log: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "speclib", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env={**os.environ, "FAKE_VLLM_REQUEST_LOG": str(log)},
    )


def _servers(log: Path) -> dict[str, list[dict]]:
    """Each stand-in server's logged requests (``speculative``, ``body``), by its pid."""
    return {
        p.stem: [json.loads(x) for x in p.read_text().splitlines() if x]
        for p in sorted(log.glob("*.jsonl"))
    }


def _is_history(body: dict) -> bool:
    return body["max_tokens"] == HISTORY_TOKENS


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _expected_turn2(q: dict, answer: str) -> list[dict[str, str]]:
    return [_user(q["turns"][0]), {"role": "assistant", "content": answer}, _user(q["turns"][1])]


def _check_turn2_everywhere(servers: dict[str, list[dict]], answers: dict[str, str]) -> None:
    """Every server got every question's turn 2 with exactly the history's answer."""
    for pid, lines in servers.items():
        turn2 = [x["body"]["messages"] for x in lines if len(x["body"]["messages"]) == 3]
        expected = [_expected_turn2(q, answers[q["question_id"]]) for q in QUESTIONS]
        assert sorted(map(json.dumps, turn2)) == sorted(map(json.dumps, expected)), pid


def test_the_history_is_the_controls_greedy_answers_turn_by_turn(tmp_path) -> None:
    """Three turns: turn 2's history request carries the answer to turn 1."""
    from speclib.core.prompts import Prompt
    from speclib.core.rundir import RunDir
    from speclib.params.experiment import ExperimentParams
    from speclib.run.arms import Arm
    from speclib.run.history import generate_history
    from tests.fakeserver import FakeServer, Script

    params = ExperimentParams.model_validate(
        yaml.safe_load(_params(tmp_path, cache_policy="salt").read_text())
    )
    questions = [
        Prompt("a", (_user("a1"),), "c", ("a1", "a2", "a3")),
        Prompt("b", (_user("b1"),), "c", ("b1", "b2")),
    ]
    rd = RunDir.at(tmp_path / "run")
    control = Arm(params.series_by_name("control"), "control-r0", rd.launch_files("control-r0"))
    with FakeServer(default=Script(n_tokens=5, ttft_s=0.01, step_s=0.002)) as srv:
        control.base_url, control.model = srv.base_url, "fake-model"
        got = generate_history(params, control, questions, block="r0")
        bodies = [e.body for e in srv.exchanges()]
    answer = "".join(f"t{i} " for i in range(5))
    assert [(a.question_id, a.turn) for a in got] == [("a", 1), ("b", 1), ("a", 2)]
    assert all(a.answer == answer and a.output_tokens == 5 for a in got)
    assert all(a.launch_id == "control-r0" and a.block == "r0" for a in got)
    assert got[2].messages == (_user("a1"), {"role": "assistant", "content": answer}, _user("a2"))
    assert all(b["temperature"] == 0.0 and b["max_tokens"] == HISTORY_TOKENS for b in bodies)
    assert all(b["cache_salt"].startswith("history-") for b in bodies)  # caching on: salted
    assert [b["messages"] for b in bodies][-1] == [dict(m) for m in got[2].messages]


def test_a_failed_history_request_stops_the_block_with_its_cause(tmp_path) -> None:
    """No measured turn 2 without the whole history: a 500 from the control is named."""
    from speclib.core.prompts import Prompt
    from speclib.core.rundir import RunDir
    from speclib.core.turns import TurnHistoryError
    from speclib.params.experiment import ExperimentParams
    from speclib.run.arms import Arm
    from speclib.run.history import generate_history
    from tests.fakeserver import FakeServer, Script

    params = ExperimentParams.model_validate(yaml.safe_load(_params(tmp_path).read_text()))
    questions = [Prompt(q, (_user(q + "1"),), "c", (q + "1", q + "2")) for q in ("a", "b")]
    rd = RunDir.at(tmp_path / "run")
    control = Arm(params.series_by_name("control"), "control-r0", rd.launch_files("control-r0"))
    failing = Script(status=500, error_message="KV cache exhausted")
    with FakeServer(default=failing) as srv:
        control.base_url, control.model = srv.base_url, "fake-model"
        with pytest.raises(TurnHistoryError, match=r"2 of 2 requests to the control") as err:
            generate_history(params, control, questions, block="r0")
    assert "control-r0" in str(err.value) and "KV cache exhausted" in str(err.value)


def test_a_multi_turn_run_feeds_every_arm_the_controls_history(tmp_path) -> None:
    params = _params(tmp_path)
    run, log = tmp_path / "run", tmp_path / "bodies"
    log.mkdir()
    proc = _run(["run", str(params), "--out", str(run)], log)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # the history: written once, by the control of the first block, one line per question
    history = [json.loads(x) for x in (run / "turn_history.jsonl").read_text().splitlines()]
    assert [h["question_id"] for h in history] == [q["question_id"] for q in QUESTIONS]
    for h, q in zip(history, QUESTIONS, strict=True):
        assert h["turn"] == 1 and h["messages"] == [_user(q["turns"][0])]
        assert h["answer"] == FAKE_ANSWER and h["output_tokens"] == 16
        assert h["finish_reason"] and h["launch_id"] == "control-r0" and h["block"] == "r0"
    servers = _servers(log)
    assert len(servers) == 4  # control and spec, in each of the two blocks
    asked = {pid: [x for x in lines if _is_history(x["body"])] for pid, lines in servers.items()}
    askers = [pid for pid, found in asked.items() if found]
    assert len(askers) == 1 and not any(x["speculative"] for x in asked[askers[0]])
    assert len(asked[askers[0]]) == len(QUESTIONS)  # once: block r1 read the file
    assert all(x["body"]["temperature"] == 0.0 for x in asked[askers[0]])

    # every arm's turn 2, in every block, carries exactly that history
    answers = {h["question_id"]: h["answer"] for h in history}
    _check_turn2_everywhere(servers, answers)

    # records: every measured one has its turn, paired across arms by prompt id
    recs = [r for r in read_records(run / "requests.jsonl") if r.phase == "measure"]
    assert {r.turn for r in recs} == {1, 2}
    assert all(r.prompt_id.endswith(f"#t{r.turn}") for r in recs)
    for lid in ("control-r0", "spec-r0", "control-r1", "spec-r1"):
        ids = sorted(r.prompt_id for r in recs if r.launch_id == lid)
        assert ids == sorted(f"{q['question_id']}#t{t}" for q in QUESTIONS for t in (1, 2)), lid
    assert not any(r.phase == "history" for r in read_records(run / "requests.jsonl"))

    # summary, manifest, report
    summary = json.loads((run / "summary.json").read_text())
    spec = next(c for c in summary["comparisons"] if c["experiment"] == "spec")
    assert set(spec["tpot_ratio_by_turn"]) == {"1", "2"}
    assert spec["tpot_ratio_by_turn"]["2"]["n_pairs"] == 2 * len(QUESTIONS)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["multi_turn"]["generated_by"] == "control"
    assert manifest["multi_turn"]["temperature"] == 0.0
    assert manifest["multi_turn"]["max_tokens"] == HISTORY_TOKENS
    assert manifest["multi_turn"]["prompts"] == 2 * len(QUESTIONS)
    assert "TPOT ratio per turn: turn 1" in (run / "report.html").read_text()
    assert "per turn spec at c=1: t1 ×" in proc.stdout


def test_a_resumed_block_reads_the_history_instead_of_asking_again(tmp_path) -> None:
    params = _params(tmp_path)
    run, log = tmp_path / "run", tmp_path / "bodies"
    log.mkdir()
    assert _run(["run", str(params), "--out", str(run)], log).returncode == 0
    before = (run / "turn_history.jsonl").read_bytes()
    (run / "launches" / "spec-r0" / "status.json").unlink()  # block r0 unfinished: run again
    for path in log.glob("*.jsonl"):
        path.unlink()
    proc = _run(["run", "--resume", str(run)], log)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "block r1: done before, kept (resume)" in proc.stderr
    assert (run / "turn_history.jsonl").read_bytes() == before
    servers = _servers(log)
    assert len(servers) == 2  # block r0's control and spec, started again
    assert not any(_is_history(x["body"]) for lines in servers.values() for x in lines)
    answers = {h["question_id"]: h["answer"] for h in map(json.loads, before.splitlines())}
    _check_turn2_everywhere(servers, answers)


def test_a_sequential_multi_turn_run_starts_with_the_control(tmp_path) -> None:
    params = _params(tmp_path, design="sequential", order="random", seed=1)
    run, log = tmp_path / "run", tmp_path / "bodies"
    log.mkdir()
    proc = _run(["run", str(params), "--out", str(run)], log)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["blocks"][0]["arms"] == ["control"]
    history = [json.loads(x) for x in (run / "turn_history.jsonl").read_text().splitlines()]
    assert {h["launch_id"] for h in history} == {"control-r0"}
    _check_turn2_everywhere(_servers(log), {h["question_id"]: h["answer"] for h in history})
