"""Multi-turn conversations (issue #23 part 2), the pure parts: params, the expansion of a
question into one prompt per turn, the history file, records with and without ``turn``,
per-turn TPOT ratios, and how they reach summary.json, the report and the terminal. No
server is started here (the end-to-end run is ``test_multiturn_run.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from speclib.analysis.frames import pair_frame, records_frame
from speclib.analysis.verdict.categories import TURN_NOTE, turn_ratios
from speclib.app.verdicts import MAX_LINE, turn_lines
from speclib.core.datasets import read_dataset
from speclib.core.prompts import Prompt
from speclib.core.records import RequestRecord, read_records, record_to_json
from speclib.core.run_summary import RunSummary
from speclib.core.rundir import RunDir
from speclib.core.turns import (
    TurnAnswer,
    TurnHistoryError,
    expand_turns,
    history_answers,
    history_prompts,
    measured_prompts,
    read_turn_history,
    sent_prompt_count,
    turn_messages,
    turn_prompt_id,
    write_turn_history,
)
from speclib.core.wording import ratio_words
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError, load_params
from speclib.params.validation import validate_params

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
MT_BENCH = REPO / "tests" / "fixtures" / "datasets" / "mt-bench" / "question.jsonl"
DEMO = REPO / "params" / "cpu-demo-multiturn.yaml"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}


def _q(qid: str, *turns: str, category: str = "c") -> Prompt:
    return Prompt(qid, ({"role": "user", "content": turns[0]},), category, tuple(turns))


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


# ------------------------------------------------------------------------------- expansion

QUESTIONS = [_q("81", "u1", "u2", category="writing"), _q("7", "v1", "v2", "v3", category="math")]
ANSWERS = {"81": ["a1"], "7": ["b1", "b2"]}


def test_each_question_becomes_one_prompt_per_turn_in_question_then_turn_order() -> None:
    got = expand_turns(QUESTIONS, ANSWERS)
    assert [p.id for p in got] == ["81#t1", "81#t2", "7#t1", "7#t2", "7#t3"]
    assert [p.turn for p in got] == [1, 2, 1, 2, 3]
    assert [p.category for p in got] == ["writing"] * 2 + ["math"] * 3
    assert got[0].messages == (_user("u1"),)
    assert got[1].messages == (_user("u1"), _assistant("a1"), _user("u2"))
    assert got[4].messages == (
        _user("v1"), _assistant("b1"), _user("v2"), _assistant("b2"), _user("v3"),
    )  # fmt: skip
    assert sent_prompt_count(QUESTIONS, _workload(multi_turn=True)) == 5
    assert sent_prompt_count(QUESTIONS, _workload()) == 2


def test_turn_messages_need_the_earlier_answers_and_a_turn_in_range() -> None:
    assert turn_messages(QUESTIONS[1], 2, ["b1", "extra"]) == (
        _user("v1"), _assistant("b1"), _user("v2"),
    )  # fmt: skip
    with pytest.raises(ValueError, match="turn 3 of '7' needs 2 earlier answer"):
        turn_messages(QUESTIONS[1], 3, ["b1"])
    with pytest.raises(ValueError, match=r"`turn` must be in 1\.\.2"):
        turn_messages(QUESTIONS[0], 3, ["a1", "a2"])
    with pytest.raises(ValueError, match="`turn` must be a positive integer"):
        turn_prompt_id("81", 0)
    single = Prompt("s", (_user("only"),))  # no turns: one turn, its last message
    assert [p.id for p in expand_turns([single], {})] == ["s#t1"]


def test_history_prompts_ask_only_for_turns_that_have_a_later_turn() -> None:
    first = history_prompts(QUESTIONS, 1, {})
    assert [(p.id, p.messages) for p in first] == [
        ("81#t1", (_user("u1"),)), ("7#t1", (_user("v1"),)),
    ]  # fmt: skip
    second = history_prompts(QUESTIONS, 2, {"7": ["b1"]})
    assert [p.id for p in second] == ["7#t2"]  # 81 has no turn 3: its turn 2 is never history
    assert second[0].messages == (_user("v1"), _assistant("b1"), _user("v2"))
    assert history_prompts(QUESTIONS, 3, ANSWERS) == []


# ----------------------------------------------------------------------------- the history


def _answers() -> list[TurnAnswer]:
    return [
        TurnAnswer("81", 1, (_user("u1"),), "a1", "stop", 2, "control", "control-r0", "r0"),
        TurnAnswer("7", 1, (_user("v1"),), "b1", "length", 8, "control", "control-r0", "r0"),
        TurnAnswer("7", 2, (_user("v1"), _assistant("b1"), _user("v2")), "b2", "stop", 3),
    ]


def test_the_history_file_round_trips_and_gives_each_question_its_answers(tmp_path) -> None:
    path = RunDir.at(tmp_path).turn_history
    assert path.name == "turn_history.jsonl"
    write_turn_history(path, _answers())
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0] == {
        "question_id": "81", "turn": 1, "messages": [_user("u1")], "answer": "a1",
        "finish_reason": "stop", "output_tokens": 2, "series": "control",
        "launch_id": "control-r0", "block": "r0",
    }  # fmt: skip
    assert read_turn_history(path) == _answers()
    assert not path.with_name(path.name + ".tmp").exists()
    assert history_answers(read_turn_history(path), QUESTIONS) == ANSWERS


def test_a_history_that_misses_a_turn_or_is_malformed_is_named(tmp_path) -> None:
    short = _answers()[:2]
    with pytest.raises(TurnHistoryError, match=r"h\.jsonl: no answer to turn 2 of question '7'"):
        history_answers(short, QUESTIONS, source="h.jsonl")
    bad = tmp_path / "turn_history.jsonl"
    bad.write_text('{"question_id": "81", "turn": 1, "answer": "a1"}\n{"question_id": "7"}\n')
    with pytest.raises(TurnHistoryError, match=r"turn_history\.jsonl:2: 'turn' must be"):
        read_turn_history(bad)
    with pytest.raises(TurnHistoryError, match="cannot read the turn history"):
        read_turn_history(tmp_path / "missing.jsonl")


def test_measured_prompts_expand_with_the_run_folders_history(tmp_path) -> None:
    params = _params(tmp_path, multi_turn=True)
    questions = read_dataset(MT_BENCH, "mt-bench").prompts
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(TurnHistoryError, match="cannot read the turn history"):
        measured_prompts(params, run)
    history = [TurnAnswer(q.id, 1, q.messages, f"answer {q.id}", "stop", 3) for q in questions]
    write_turn_history(RunDir.at(run).turn_history, history)
    got = measured_prompts(params, run)
    assert [p.id for p in got] == [f"{q.id}#t{k}" for q in questions for k in (1, 2)]
    assert got[1].messages[1] == _assistant(f"answer {questions[0].id}")
    single = _params(tmp_path, multi_turn=False)
    assert [p.id for p in measured_prompts(single, run)] == [q.id for q in questions]


def test_ensure_history_reads_the_file_and_needs_a_live_control_to_generate_one(tmp_path):
    from speclib.run.arms import Arm
    from speclib.run.history import ensure_history

    params = _params(tmp_path, multi_turn=True)
    rd = RunDir.at(tmp_path / "run")
    rd.root.mkdir()
    arms = [Arm(params.series_by_name("spec"), "spec-r0", rd.launch_files("spec-r0"))]
    questions = read_dataset(MT_BENCH, "mt-bench").prompts
    with pytest.raises(TurnHistoryError, match="the control 'control' is not up in this block"):
        ensure_history(params, rd, questions, arms, block="spec-r0")
    assert not rd.turn_history.exists()
    down = Arm(params.series_by_name("control"), "control-r0", rd.launch_files("control-r0"))
    down.start_error = "RuntimeError: did not start"
    with pytest.raises(TurnHistoryError, match="not up in this block"):
        ensure_history(params, rd, questions, [down, *arms], block="r0")
    history = [TurnAnswer(q.id, 1, q.messages, f"a{q.id}", "stop", 2) for q in questions]
    write_turn_history(rd.turn_history, history)  # a block before wrote it: read, not asked
    got = ensure_history(params, rd, questions, arms, block="r1")
    assert got == {q.id: [f"a{q.id}"] for q in questions}


def test_history_requests_are_greedy_with_the_history_budget(tmp_path) -> None:
    from speclib.run.requests import history_request_specs

    params = _params(
        tmp_path, multi_turn=True, history_max_tokens=7, temperature=0.8, top_k=5, seed=3,
        ignore_eos=True, min_tokens=4,
    )  # fmt: skip
    prompts = history_prompts(QUESTIONS, 1, {})
    specs = history_request_specs(prompts, params, model="m", cache_salt="history-x")
    body = json.loads(specs[0].body)
    assert body["messages"] == [_user("u1")] and body["max_tokens"] == 7
    assert body["temperature"] == 0.0 and body["top_p"] == 1.0 and body["cache_salt"] == "history-x"
    assert not {"top_k", "seed", "min_tokens", "ignore_eos"} & {k for k, v in body.items() if v}
    assert [(s.prompt_id, s.turn) for s in specs] == [("81#t1", 1), ("7#t1", 1)]
    assert _params(tmp_path, multi_turn=True).workload.history_tokens == 16  # max_tokens


def test_measured_requests_carry_the_turn_into_their_spec(tmp_path) -> None:
    from speclib.run.requests import make_request_specs

    params = _params(tmp_path, multi_turn=True)
    specs = make_request_specs(expand_turns(QUESTIONS, ANSWERS), params, model="m", repeats=1)
    assert [(s.prompt_id, s.turn) for s in specs][:2] == [("81#t1", 1), ("81#t2", 2)]
    assert json.loads(specs[1].body)["messages"][1] == _assistant("a1")


def test_sequential_multi_turn_runs_open_with_the_control(tmp_path) -> None:
    from speclib.run.design import plan_blocks

    params = _params(tmp_path, multi_turn=True, protocol={"order": "random", "seed": 3})
    firsts = {plan_blocks(params, "sequential")[0].arms[0]}
    for seed in range(8):
        p = _params(tmp_path, multi_turn=True, protocol={"order": "random", "seed": seed})
        firsts.add(plan_blocks(p, "sequential")[0].arms[0])
    assert firsts == {"control"}
    fixed = _params(tmp_path, series=["spec", "control"], protocol={"order": "fixed"})
    assert plan_blocks(fixed, "sequential")[0].arms == ("spec",)  # single-turn: as before
    turns = _params(tmp_path, multi_turn=True, series=["spec", "control"])
    assert [b.arms[0] for b in plan_blocks(turns, "sequential")] == [
        "control", "spec", "control", "spec",
    ]  # fmt: skip


# ----------------------------------------------------------------------------------- params


def _workload(**over):
    from speclib.params.workload import WorkloadParams

    return WorkloadParams(prompts=str(MT_BENCH), format="mt-bench", **over)


def _params(
    tmp: Path, *, series: list[str] | None = None, protocol: dict | None = None, **workload
) -> ExperimentParams:
    arms = {"control": {"name": "control"}, "spec": {"name": "spec", "speculative_config": NGRAM}}
    return ExperimentParams.model_validate(
        {
            "name": "multiturn",
            "server": {"model": str(tmp)},
            "series": [arms[n] for n in series or ["control", "spec"]],
            "workload": {"prompts": str(MT_BENCH), "format": "mt-bench", "max_tokens": 16,
                         "replicates": 2, **workload},
            "protocol": protocol or {},
        }
    )  # fmt: skip


def _write(tmp: Path, workload: dict, protocol: dict | None = None) -> Path:
    data = {
        "name": "multiturn",
        "server": {"model": "demo:target"},
        "series": [{"name": "control"}, {"name": "spec", "speculative_config": NGRAM}],
        "workload": {"prompts": str(MT_BENCH), "format": "mt-bench", **workload},
        "protocol": protocol or {},
    }
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("workload", "protocol", "needle"),
    [
        ({"format": "speclib", "multi_turn": True}, None,
         r"workload: workload\.multi_turn needs a prompt format with turns \(mt-bench or "
         r"spec-bench\); workload\.format is 'speclib'"),
        ({"history_max_tokens": 8}, None,
         r"workload\.history_max_tokens applies to workload\.multi_turn: true only"),
        ({"multi_turn": True, "history_max_tokens": 0}, None,
         r"workload\.history_max_tokens: Input should be greater than or equal to 1"),
        ({"multi_turn": True}, {"crosscheck_vllm_bench": True},
         r"workload\.multi_turn cannot be cross-checked with vllm bench"),
        ({"multi_turn": "sometimes"}, None, r"workload\.multi_turn: Input should be a valid"),
    ],
)  # fmt: skip
def test_multi_turn_params_are_refused_with_the_field_named(tmp_path, workload, protocol, needle):
    with pytest.raises(ParamsError, match=needle):
        load_params(_write(tmp_path, workload, protocol), check_files=False, check_vllm=False)


def test_multi_turn_with_ray_is_refused(tmp_path, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "ray" else
                        real(n, *a))  # fmt: skip
    path = _write(tmp_path, {"multi_turn": True}, {"executor": "ray"})
    with pytest.raises(ParamsError, match=r"not supported with protocol\.executor 'ray'"):
        load_params(path, check_files=False, check_vllm=False)


def test_a_multi_turn_workload_validates_and_its_default_dump_loads_again(tmp_path) -> None:
    path = _write(tmp_path, {"multi_turn": True})
    params = load_params(path, check_files=False, check_vllm=False)
    assert params.workload.multi_turn and params.workload.history_tokens == 64
    again = ExperimentParams.model_validate({**params.model_dump(), "source": None})
    assert again.workload == params.workload
    plain = load_params(_write(tmp_path, {}), check_files=False, check_vllm=False)
    assert ExperimentParams.model_validate(plain.model_dump()).workload.multi_turn is False


def test_the_demo_multi_turn_params_validate() -> None:
    found = validate_params(DEMO)
    params = found.params
    assert params.workload.multi_turn and params.workload.format == "mt-bench"
    assert params.workload.replicates == 4 and params.workload.max_tokens == 48
    assert params.workload.truncation_expected
    assert len(found.prompts) == 8 and all(len(p.turns) == 2 for p in found.prompts)
    assert len({p.category for p in found.prompts}) == 3
    assert any("8 question(s) sent as 16 prompt(s)" in n for n in found.notes)


# ---------------------------------------------------------------------------------- records


def test_a_record_without_turn_loads_and_one_with_turn_round_trips(tmp_path) -> None:
    old = {"series": "control", "replicate": 0, "prompt_id": "p0", "ok": True, "version": 1}
    assert RequestRecord.from_json(old).turn is None
    rec = RequestRecord(series="control", replicate=0, prompt_id="81#t2", ok=True, turn=2)
    data = json.loads(record_to_json(rec))
    assert data["turn"] == 2 and data["version"] == 1
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(old) + "\n" + record_to_json(rec) + "\n")
    assert [r.turn for r in read_records(path)] == [None, 2]


def test_the_frame_and_the_pairs_carry_the_turn() -> None:
    recs = [
        RequestRecord(series=s, replicate=0, prompt_id=f"q#t{t}", ok=True, turn=t,
                      chunk_offsets_s=(0.1, 0.2, 0.3), chunk_tokens=(1, 1, 1), output_tokens=3)
        for s in ("control", "spec") for t in (1, 2)
    ]  # fmt: skip
    df = records_frame(recs)
    assert str(df["turn"].dtype) == "Int64" and list(df["turn"]) == [1, 2, 1, 2]
    pairs = pair_frame(df, control="control", experiment="spec").pairs
    assert sorted(pairs["turn"]) == [1, 2]
    old = records_frame([RequestRecord(series="control", replicate=0, prompt_id="p", ok=True)])
    assert old["turn"].isna().all()


# ---------------------------------------------------------------------- per-turn TPOT ratios


def _pairs(spec: dict[int | None, tuple[float, int, int]], *, seed: int = 0) -> pd.DataFrame:
    """``{turn: (ratio, blocks, pairs per block)}`` of one arm with the control."""
    rng = np.random.default_rng(seed)
    shift = rng.normal(0, 0.02, size=8)
    rows = []
    for turn, (ratio, blocks, per_block) in spec.items():
        for b in range(blocks):
            for i in range(per_block):
                c = float(rng.lognormal(np.log(0.02), 0.2))
                e = c * ratio * float(np.exp(shift[b] + rng.normal(0, 0.03)))
                rows.append({"tpot_s_c": c, "tpot_s_e": e, "turn": turn, "block": b,
                             "replicate": b, "category": "c",
                             "prompt_id": f"q{i}#t{turn}"})  # fmt: skip
    return pd.DataFrame(rows)


def test_each_turn_gets_its_ratio_and_block_interval() -> None:
    pairs = _pairs({1: (0.8, 3, 6), 2: (0.5, 3, 6)})
    got = turn_ratios(pairs, arm="spec", confidence_level=0.95)
    assert list(got) == [1, 2]
    t1, t2 = got[1], got[2]
    assert t1.category == "turn 1" and t2.category == "turn 2"
    assert t1.estimate == pytest.approx(0.8, rel=0.1) and t2.estimate == pytest.approx(0.5, rel=0.1)
    assert t2.has_interval and t2.ci_high < 1 and t2.df == 2 and t2.n_pairs == 18
    assert t2.ci_high < t1.ci_low  # turn 2 pays more here, and the intervals say so
    sel = pairs[pairs["turn"] == 2]
    means = sel.groupby("block")[["tpot_s_e", "tpot_s_c"]].mean()
    by_block = np.log(means["tpot_s_e"] / means["tpot_s_c"])  # the turn's traffic ratio
    assert t2.estimate == pytest.approx(float(np.exp(by_block.mean())))  # the verdict's model


def test_pairs_without_a_turn_are_left_out_and_a_run_without_turns_has_none() -> None:
    pairs = _pairs({1: (0.7, 2, 2), None: (0.5, 2, 6)})
    pairs["turn"] = pairs["turn"].astype("Int64")
    got = turn_ratios(pairs, arm="spec", confidence_level=0.95)
    assert list(got) == [1] and got[1].n_pairs == 4
    assert got[1].note == "too few pairs for an interval, need 6" and not got[1].has_interval
    assert turn_ratios(pairs.drop(columns="turn"), arm="spec", confidence_level=0.95) == {}
    with pytest.raises(ValueError, match="`confidence_level`"):
        turn_ratios(pairs, arm="spec", confidence_level=2)


def test_with_an_aa_arm_each_turn_is_against_both_controls() -> None:
    pairs, aa = _pairs({1: (0.8, 3, 4), 2: (0.5, 3, 4)}), _pairs({1: (1.0, 3, 4)}, seed=4)
    got = turn_ratios(pairs, arm="spec", confidence_level=0.95, aa_arm="aa", aa_pairs=aa)
    assert got[1].reference == "controls" and got[2].reference == "control"


def _write_run(tmp: Path, blocks: int = 3) -> Path:
    """A multi-turn run folder written by hand: control, aa and spec; spec halves TPOT on
    turn 2 and leaves turn 1 alone; 8 questions of 2 turns."""
    from speclib.core.records import append_record

    questions = [
        {"question_id": f"q{i}", "category": "c" if i % 2 else "d", "turns": [f"u{i}", f"w{i}"]}
        for i in range(8)
    ]
    qfile = tmp / "question.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in questions))
    params = ExperimentParams.model_validate({
        "name": "turns", "server": {"model": str(tmp)},
        "series": [{"name": "control"}, {"name": "spec", "speculative_config": NGRAM}],
        "workload": {"prompts": str(qfile), "format": "mt-bench", "multi_turn": True,
                     "replicates": blocks, "max_tokens": 17},
        "protocol": {"aa": True}, "analysis": {"n_resamples": 200},
    })  # fmt: skip
    run = tmp / "run"
    run.mkdir()
    (run / "params.resolved.json").write_text(json.dumps(params.model_dump()))
    rng = np.random.default_rng(7)
    t = 1.0e9
    with (run / "requests.jsonl").open("w") as fh:
        for b in range(blocks):
            for q in questions:
                for turn in (1, 2):
                    for arm in ("control", "aa", "spec"):
                        tpot = 0.02 * (0.5 if arm == "spec" and turn == 2 else 1.0)
                        tpot *= float(np.exp(rng.normal(0, 0.03)))
                        offsets = tuple(0.02 + tpot * i for i in range(17))
                        append_record(fh, RequestRecord(
                            series=arm, replicate=b, prompt_id=f"{q['question_id']}#t{turn}",
                            ok=True, launch_id=f"{arm}-r{b}", block=f"r{b}", t_start=t,
                            category=q["category"], turn=turn, chunk_offsets_s=offsets,
                            chunk_tokens=(1,) * 17, done_offset_s=offsets[-1], output_tokens=17,
                            text=f"answer {q['question_id']} {turn}", token_ids=tuple(range(17)),
                            finish_reason="length",
                        ))  # fmt: skip
                        t += 1.0
    return run


def test_summary_report_and_terminal_carry_the_per_turn_ratios(tmp_path) -> None:
    from speclib.analysis.run_analysis import analyze_run
    from speclib.report.sections import conclusion

    run = _write_run(tmp_path)
    an = analyze_run(run)
    summary = json.loads((run / "summary.json").read_text())
    spec = next(c for c in summary["comparisons"] if c["experiment"] == "spec")
    turns = spec["tpot_ratio_by_turn"]
    assert set(turns) == {"1", "2"} and spec["tpot_ratio_by_turn_note"] == TURN_NOTE
    assert turns["2"]["ratio"] == pytest.approx(0.5, rel=0.05) and turns["2"]["ci_high"] < 1
    assert turns["1"]["ci_low"] < 1 < turns["1"]["ci_high"]
    assert turns["2"]["n_pairs"] == 24 and turns["2"]["reference"] == "controls"
    text = conclusion(an)
    assert f"TPOT ratio per turn: turn 1 {ratio_words(turns['1']['ratio'])} (95 % CI" in text
    assert f"; turn 2 {ratio_words(turns['2']['ratio'])} (95 % CI" in text
    assert TURN_NOTE in text
    from speclib.report.method import method_html

    assert "greedy (temperature 0, up to 17 tokens), generated once" in method_html(an)
    lines = turn_lines(RunSummary.model_validate(summary))
    assert len(lines) == 1 and lines[0].startswith("per turn spec at c=1: t1 ×")
    assert re.search(r" · t2 ×0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]$", lines[0])
    assert len(lines[0]) <= MAX_LINE


def test_a_single_turn_summary_has_no_turns(tmp_path) -> None:
    from speclib.analysis.verdict.comparisons import Comparison

    assert Comparison.__dataclass_fields__["by_turn"].default_factory() == {}
    one = {"comparisons": [{"experiment": "x", "tpot_ratio_by_turn": {}}]}
    assert turn_lines(RunSummary.model_validate(one)) == []


def _turn_lines(*comparisons: dict) -> list[str]:
    return turn_lines(RunSummary.model_validate({"comparisons": list(comparisons)}))


def test_the_terminal_line_drops_intervals_then_itself_past_160_characters() -> None:
    r = {"ratio": 0.81234, "ci_low": 0.7, "ci_high": 0.9}
    short = {"experiment": "ngram-k4", "load": "c=1", "tpot_ratio_by_turn": {"1": r, "2": r}}
    assert _turn_lines(short) == [
        "per turn ngram-k4 at c=1: t1 ×0.812 [0.700, 0.900] · t2 ×0.812 [0.700, 0.900]"
    ]
    eight = {**short, "tpot_ratio_by_turn": {str(t): r for t in range(1, 9)}}
    (line,) = _turn_lines(eight)
    assert "[" not in line and line.count("×0.812") == 8 and len(line) <= MAX_LINE
    many = {**short, "tpot_ratio_by_turn": {str(t): r for t in range(1, 30)}}
    aa = {**short, "role": "aa"}
    assert _turn_lines(many, aa) == []


def _demo_dir(name: str) -> Path:
    """The demo model's folder, built first if missing (a file lock keeps a second worker
    from building it twice): the check needs the real tokenizer and chat template."""
    from speclib.demo.models import demo_model_dir

    return demo_model_dir(name, log=lambda _m: None)


def test_later_turns_are_checked_against_max_model_len_with_the_history_budget(tmp_path):
    data = yaml.safe_load(DEMO.read_text())
    data["workload"]["prompts"] = str(REPO / "prompts" / "demo-multiturn.jsonl")
    data["server"]["max_model_len"] = 150  # turn 1 (56 + 48) fits; turn 2 (94 + 48 + 48) not
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError, match=r"the longest, 'unseen-001#t2', is 142 tokens with the "
                       r"chat template and 48 per earlier answer") as err:  # fmt: skip
        validate_params(path, resolve_demo=_demo_dir)
    assert "#t1" not in str(err.value)
    data["workload"].pop("multi_turn")
    data["workload"].pop("history_max_tokens")
    path.write_text(yaml.safe_dump(data))
    assert validate_params(path, resolve_demo=_demo_dir).params.workload.multi_turn is False
