"""A verdict per segment of the traffic, the word "mixed", the user's mix (issue 44).

Known truth: run folders whose arm is ×0.5 on one prompt category ("echo", where it also
accepts drafts: three tokens per chunk) and ×1.4 on the other ("fresh", one token per
chunk); the segment verdicts must recover it, the answer must say "mixed" and name both
with their shares, and ``--mix`` must move the pooled verdict as the mix says. Coverage of
the segment intervals is measured over repeated synthetic data with instance effects.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from speclib.analysis.verdict.mix import check_mix, parse_mix
from speclib.analysis.verdict.segments import decide_segments, heterogeneity, label_pairs
from speclib.core.reason_text import render
from speclib.core.reasons import Code, Reason
from speclib.core.verdict_words import Word

pytestmark = pytest.mark.unit

EFFECT = {"echo": 0.5, "fresh": 1.4}


def _write_run(
    tmp: Path, *, effect: dict[str, float] = EFFECT, blocks: int = 4, n: dict | None = None,
    aa: bool = True, seed: int = 3, instance: float = 0.02,
) -> Path:  # fmt: skip
    """An interleaved run of control (and aa) and an n-gram arm whose TPOT ratio is
    ``effect[category]``; the arm's chunks carry 3 tokens where it is faster, else 1."""
    from speclib.core.records import RequestRecord, append_record
    from speclib.params.experiment import ExperimentParams

    n = n or {"echo": 8, "fresh": 8}
    cats = [c for c, k in n.items() for _ in range(k)]
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(
        json.dumps({"id": f"p{i}", "category": c, "messages": [{"role": "user", "content": "q"}]})
        + "\n" for i, c in enumerate(cats)
    ))  # fmt: skip
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    params = ExperimentParams.model_validate({
        "name": "segments", "server": {"model": str(tmp)},
        "series": [{"name": "control"}, {"name": "ngram-k4", "speculative_config": spec}],
        "workload": {"prompts": str(prompts), "replicates": blocks, "max_tokens": 17},
        "protocol": {"aa": aa}, "analysis": {"n_resamples": 200},
    })  # fmt: skip
    run = tmp / "run"
    run.mkdir()
    (run / "params.resolved.json").write_text(json.dumps(params.model_dump()))
    rng = np.random.default_rng(seed)
    arms = ("control", "aa", "ngram-k4") if aa else ("control", "ngram-k4")
    t = 1.0e9
    with (run / "requests.jsonl").open("w") as fh:
        for b in range(blocks):
            shift = {a: float(np.exp(rng.normal(0, instance))) for a in arms}
            for p, cat in enumerate(cats):
                for arm in arms:
                    spec_arm = arm == "ngram-k4"
                    tpot = 0.02 * (effect[cat] if spec_arm else 1.0) * shift[arm]
                    tpot *= float(np.exp(rng.normal(0, 0.03)))
                    per = 3 if spec_arm and effect[cat] < 1 else 1
                    chunks = (1,) + (per,) * (16 // per) + ((1,) * (16 % per))
                    offsets = tuple(
                        0.02 + tpot * sum(chunks[1 : i + 1]) for i in range(len(chunks))
                    )
                    append_record(fh, RequestRecord(
                        series=arm, replicate=b, prompt_id=f"p{p}", ok=True,
                        launch_id=f"{arm}-r{b}", block=f"r{b}", t_start=t, category=cat,
                        chunk_offsets_s=offsets, chunk_tokens=chunks,
                        done_offset_s=offsets[-1], output_tokens=sum(chunks),
                        text=f"answer {p}", token_ids=tuple(range(sum(chunks))),
                        finish_reason="length",
                    ))  # fmt: skip
                    t += 1.0
    return run


def _arm(summary: dict) -> dict:
    return next(a for a in summary["answer"]["arms"] if a["arm"] == "ngram-k4")


def test_the_segment_verdicts_recover_a_known_split_and_the_answer_says_mixed(
    tmp_path, monkeypatch
) -> None:
    from speclib.analysis.run_analysis import analyze_run
    from speclib.report.conclusion import conclusion

    run = _write_run(tmp_path)
    an = analyze_run(run)
    summary = json.loads((run / "summary.json").read_text())
    arm = _arm(summary)
    segs = {(s["cut"], s["segment"]): s for s in arm["segments"]}
    echo, fresh = segs[("category", "echo")], segs[("category", "fresh")]
    assert echo["decision"] == "adopt" and echo["ci_high"] < 1
    assert fresh["decision"] == "worse" and fresh["ci_low"] > 1
    assert echo["ci_low"] < 0.5 < echo["ci_high"] and fresh["ci_low"] < 1.4 < fresh["ci_high"]
    assert echo["share"] == pytest.approx(0.5) and fresh["share"] == pytest.approx(0.5)
    # the arm's own stream says where drafts were accepted: the same split
    accepted = segs[("accepted", "drafts accepted")]
    nothing = segs[("accepted", "nothing accepted")]
    assert accepted["n_pairs"] == nothing["n_pairs"] == 32
    assert accepted["decision"] == "adopt" and nothing["decision"] == "worse"
    # one family over every segment of the arm, stated
    assert summary["answer"]["segment_family"].startswith("Holm step-down over 4 segment")
    assert echo["confidence_level"] >= 0.95 and fresh["confidence_level"] >= 0.95
    # the word, everywhere
    assert arm["word"] == Word.MIXED and arm["pooled_word"] != Word.MIXED
    comp = next(c for c in summary["comparisons"] if c["experiment"] == "ngram-k4")
    assert comp["decision"] == Word.MIXED and comp["pooled_decision"] == arm["pooled_word"]
    sentence = arm["sentence"]
    assert sentence.startswith("mixed: ngram-k4 at c=1 is ×0.")
    assert "on echo (50 % of requests) and ×1." in sentence and "on fresh (50 %)" in sentence
    assert summary["answer"]["headline"] == [sentence]
    assert conclusion(an).startswith("Mixed: ngram-k4 at c=1 is ×0.")
    hets = {h["cut"]: h for h in arm["heterogeneity"]}
    assert hets["category"]["differs"] is True
    from speclib.app.verdicts import print_verdicts
    from speclib.core.run_summary import read_summary

    monkeypatch.setenv("COLUMNS", "160")  # the table's width as in a log
    out = io.StringIO()
    print_verdicts(read_summary(run / "summary.json"), stream=out)
    text = out.getvalue()
    assert " mixed " in text and "mixed: echo ×0.5" in text and sentence[:60] in text
    deploy = summary["answer"]["deploy"]
    got = {c["category"]: (c["choice"], c["arm"]) for c in deploy["choices"]}
    assert got == {"echo": ("on", "ngram-k4"), "fresh": ("off", None)}
    advice = deploy["advice"][0]["text"]
    routed = 0.5 * echo["estimate"] + 0.5
    assert advice.startswith("at c=1: route echo on ngram-k4 to a deployment with speculation")
    assert f"expected TPOT ×{routed:.2f} for the traffic" in advice
    assert f"deploy: {advice}"[:150] in text and f"What to deploy {advice}" in conclusion(an)
    from speclib.report.multirun import compare_runs

    table = compare_runs([run])
    row = table[table["experiment"] == "ngram-k4"].iloc[0]
    assert row["decision"] == Word.MIXED and row["segments"] == sentence


def test_segments_that_differ_beyond_delta_make_mixed_though_neither_alone_decides(
    tmp_path,
) -> None:
    """As on the H200 evidence: servers whose instance effects swamp each segment's own
    interval over 3 blocks, while the per-block difference between segments is sharp."""
    from speclib.analysis.run_analysis import analyze_run

    run = _write_run(tmp_path, blocks=3, aa=False, instance=0.6, seed=11)
    analyze_run(run)
    arm = _arm(json.loads((run / "summary.json").read_text()))
    cats = {s["segment"]: s for s in arm["segments"] if s["cut"] == "category"}
    assert {s["decision"] for s in cats.values()} == {"inconclusive"}
    het = next(h for h in arm["heterogeneity"] if h["cut"] == "category")
    assert het["differs"] is True
    assert arm["word"] == Word.MIXED and arm["pooled_word"] == "inconclusive"
    mixed = next(r["values"] for r in arm["reason_codes"] if r["code"] == Code.MIXED)
    assert (mixed["cut"], mixed["fast"], mixed["slow"]) == ("category", "echo", "fresh")
    ratio, low, high = mixed["apart"]
    assert 2 <= ratio < 3 and low > 1.05 and low <= ratio <= high  # beyond δ = 5 %
    assert sorted(mixed["undecided"]) == ["echo", "fresh"]  # neither alone is decided
    assert arm["sentence"] == render(Reason(Code.MIXED, mixed))  # one renderer


def test_an_adopted_arm_whose_segments_differ_beyond_delta_is_uneven(tmp_path) -> None:
    """As in the CPU demo: both categories gain, one far less; the word stays "adopt" and the
    headline says how far apart they are."""
    from speclib.analysis.run_analysis import analyze_run

    run = _write_run(tmp_path, effect={"echo": 0.4, "fresh": 0.8})
    analyze_run(run)
    summary = json.loads((run / "summary.json").read_text())
    arm = _arm(summary)
    assert arm["word"] == arm["pooled_word"] == "adopt"
    uneven = next(r["values"] for r in arm["reason_codes"] if r["code"] == Code.UNEVEN)
    assert (uneven["cut"], uneven["fast"], uneven["slow"]) == ("category", "echo", "fresh")
    assert uneven["pooled_word"] == Word.ADOPT
    ratio, low, high = uneven["apart"]
    assert 2 <= ratio < 3 and low > 1.05 and low <= ratio <= high
    assert [v["segment"] for v in uneven["segments"]] == ["echo", "fresh"]
    assert uneven["segments"][0]["ratio"] == pytest.approx(0.4, rel=0.1)
    assert arm["sentence"] == render(Reason(Code.UNEVEN, uneven))
    assert arm["sentence"].startswith("uneven: ngram-k4 at c=1 is ×0.4")  # a rendered text
    assert summary["answer"]["headline"] == [arm["sentence"]]
    comp = next(c for c in summary["comparisons"] if c["experiment"] == "ngram-k4")
    assert comp["decision"] == "adopt" and comp["segment_sentence"] == arm["sentence"]


def test_the_same_effect_everywhere_is_not_mixed(tmp_path) -> None:
    from speclib.analysis.run_analysis import analyze_run

    run = _write_run(tmp_path, effect={"echo": 0.6, "fresh": 0.6})
    analyze_run(run)
    arm = _arm(json.loads((run / "summary.json").read_text()))
    assert arm["word"] == arm["pooled_word"] == "adopt" and arm["sentence"] is None
    cats = [s for s in arm["segments"] if s["cut"] == "category"]
    assert {s["decision"] for s in cats} == {"adopt"}
    assert next(h for h in arm["heterogeneity"] if h["cut"] == "category")["differs"] is False


def test_the_mix_moves_the_pooled_verdict_as_it_says(tmp_path) -> None:
    from speclib.analysis.run_analysis import analyze_run

    run = _write_run(tmp_path)
    as_sent = analyze_run(run, write=False).experiments[0].cis["tpot_s"]
    fresh = analyze_run(run, write=False, mix="fresh=0.8,echo=0.2")
    ci = fresh.experiments[0].cis["tpot_s"]
    # the traffic's ratio for the mix: each category's mean TPOT at its share (the control's
    # TPOT is the same on both), not the geometric exp(0.8 log 1.4 + 0.2 log 0.5) = 1.14
    truth = 0.8 * 1.4 + 0.2 * 0.5
    assert ci.ci_low < truth < ci.ci_high and ci.estimate > as_sent.estimate
    assert not ci.ci_low < math.exp(0.8 * math.log(1.4) + 0.2 * math.log(0.5)) < ci.ci_high
    assert ci.estimand == "traffic" and ci.mixed
    assert fresh.answer.mix.shares == {"fresh": 0.8, "echo": 0.2}
    assert (
        fresh.answer.mix.words()
        == "for your mix: fresh 80 %, echo 20 % (the run's prompts: 50 / 50)"
    )
    assert fresh.experiments[0].verdict.tpot_decision.word == "worse"
    echo = analyze_run(run, write=False, mix={"echo": 1.0, "fresh": 0.0})
    assert echo.experiments[0].cis["tpot_s"].ci_high < 1
    assert echo.experiments[0].verdict.tpot_decision.word == "adopt"
    seg = next(s for s in fresh.answer.arms[0].segments if s.segment == "fresh")
    assert seg.share == 0.8 and fresh.answer.arms[0].word == Word.MIXED
    # a category the user does not send cannot make the answer mixed
    assert echo.answer.arms[0].word == "adopt" and echo.answer.arms[0].sentence is None


def test_a_bad_mix_on_the_command_line_exits_2_naming_the_category(tmp_path) -> None:
    run = _write_run(tmp_path)
    bad = (
        ("fresh=0.8,chat=0.2", "category 'chat' is not in the run's prompts"),
        ("fresh=0.5,echo=0.2", "the shares must sum to 1"),
        ("fresh=lots", "the share of category 'fresh' is not a number"),
    )
    for mix, words in bad:
        argv = [sys.executable, "-m", "speclib", "analyze", str(run), "--mix", mix]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and "--mix" in proc.stderr


def test_workload_mix_is_validated_by_the_params_model() -> None:
    from pydantic import ValidationError

    from speclib.params.workload import WorkloadParams

    ok = WorkloadParams.model_validate({"prompts": "p.jsonl", "mix": {"a": 0.25, "b": 0.75}})
    assert ok.mix == {"a": 0.25, "b": 0.75}
    with pytest.raises(ValidationError, match=r"workload\.mix: the shares must sum to 1"):
        WorkloadParams.model_validate({"prompts": "p.jsonl", "mix": {"a": 0.5, "b": 0.2}})
    with pytest.raises(ValidationError, match="share of category 'a' must be in"):
        WorkloadParams.model_validate({"prompts": "p.jsonl", "mix": {"a": 1.5, "b": -0.5}})
    assert parse_mix("a=0.8, b=0.2") == {"a": 0.8, "b": 0.2}
    with pytest.raises(ValueError, match="category 'a' is given twice"):
        parse_mix("a=0.5,a=0.5")
    with pytest.raises(ValueError, match="category 'c' is not in the run's prompts"):
        check_mix({"c": 1.0}, {"a", "b"})


def test_length_tertiles_and_declared_edges() -> None:
    pairs = pd.DataFrame({"prompt_tokens_c": [10, 20, 30, 40, 50, 60], "prompt_id": list("abcdef"),
                          "output_tokens_c": [16] * 6})  # fmt: skip
    got = label_pairs(pairs, accepted=False)
    assert got["seg_prompt_length"].nunique() == 3 and "seg_output_length" not in got
    edges = label_pairs(pairs, accepted=False, edges={"prompt_length": [35]})
    assert sorted(set(edges["seg_prompt_length"])) == ["> 35 prompt tokens", "≤ 35 prompt tokens"]


# ----------------------------------------------------------------------- coverage


def _synthetic(rng: np.random.Generator, truth: dict[str, float], blocks: int, per: int):
    rows = []
    for b in range(blocks):
        instance = rng.normal(0, 0.04)  # the arm's server of this block
        for cat, ratio in truth.items():
            for i in range(per):
                c = float(rng.lognormal(math.log(0.02), 0.2))
                e = c * ratio * math.exp(instance + rng.normal(0, 0.05))
                rows.append({"tpot_s_c": c, "tpot_s_e": e, "category": cat, "block": b,
                             "replicate": b, "prompt_id": f"{cat}{i}", "repeat": 0})  # fmt: skip
    return label_pairs(pd.DataFrame(rows), accepted=False)


def test_the_segment_intervals_hold_their_level_over_repeated_synthetic_runs() -> None:
    """Every segment's interval, Holm-adjusted in one family, covers its true ratio in at
    least 95 % of runs (all at once), with instance effects shared by the segments."""
    rng = np.random.default_rng(44)
    truth = {"echo": 0.5, "fresh": 1.4, "mixed": 1.0}
    runs, covered, each = 300, 0, {c: 0 for c in truth}
    for _ in range(runs):
        labelled = {(0, "arm"): _synthetic(rng, truth, blocks=4, per=6)}
        segs, _ = decide_segments(labelled, confidence=0.95, margin=0.05)
        hit = {s.segment: s.ci.ci_low <= truth[s.segment] <= s.ci.ci_high for s in segs}
        covered += all(hit.values())
        for c in truth:
            each[c] += hit[c]
    se = math.sqrt(0.95 * 0.05 / runs)
    assert covered / runs >= 0.95 - 3 * se, covered / runs
    assert all(v / runs >= 0.95 - 3 * se for v in each.values()), each
    # and an interaction as large as echo against fresh is found beyond δ
    het = heterogeneity(labelled[(0, "arm")], level=0, arm="arm", cut="category", margin=0.05,
                        confidence=0.95)  # fmt: skip
    assert het is not None and het.differs


def test_segments_that_differ_by_nothing_are_not_called_different_too_often() -> None:
    rng = np.random.default_rng(7)
    runs = 200
    found = 0
    for _ in range(runs):
        lab = _synthetic(rng, {"a": 0.7, "b": 0.7}, blocks=4, per=6)
        het = heterogeneity(lab, level=0, arm="arm", cut="category", margin=0.05,
                            confidence=0.95)  # fmt: skip
        found += het.differs
    assert found / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)


def test_a_mix_naming_a_category_the_prompts_lack_is_refused_before_any_server(tmp_path) -> None:
    from speclib.core.datasets import workload_prompts
    from speclib.params.experiment import ExperimentParams
    from speclib.params.validation import mix_problem

    run = _write_run(tmp_path)
    data = json.loads((run / "params.resolved.json").read_text())
    data["workload"]["mix"] = {"echo": 0.5, "chat": 0.5}
    params = ExperimentParams.model_validate(data)
    prompts = workload_prompts(params).prompts
    assert mix_problem(params, prompts) == (
        "workload.mix: category 'chat' is not in the prompt set (its categories: echo, fresh)"
    )
    data["workload"]["mix"] = {"echo": 0.5, "fresh": 0.5}
    assert mix_problem(ExperimentParams.model_validate(data), prompts) is None


# ----------------------------------------------------------------- stand-in servers

STEP_S = 0.010  # the plain server: 10 ms per token
# the n-gram arm on "echo" prompts: the stand-in's default, steps of 1.3 x STEP_S carrying
# 3 tokens (×0.43); on "fresh" prompts: nothing accepted, steps of 2 x STEP_S (×2)
TRUTH = {"echo": 1.3 / 3, "fresh": 2.0}


def test_stand_in_servers_whose_effect_differs_by_category_are_recovered(tmp_path) -> None:
    import yaml

    from speclib.analysis.run_analysis import analyze_run
    from tests.helpers import fake_servers_left
    from tests.unit.test_robustness import REPO, _params

    path = _params(tmp_path, n_prompts=12)
    data = yaml.safe_load(path.read_text())
    prompts = Path(data["workload"]["prompts"])
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    by_prompt = {}
    for i, row in enumerate(rows):
        row["category"] = "echo" if i % 2 else "fresh"
        if row["category"] == "fresh":
            by_prompt[row["messages"][-1]["content"]] = {"accepted": 0, "step_factor": 2.0}
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data["server"]["env"] = {"FAKE_VLLM_STEP_S": str(STEP_S),
                             "FAKE_VLLM_SPEC_BY_PROMPT": json.dumps(by_prompt)}  # fmt: skip
    data["workload"].update(replicates=3)
    data["protocol"] = {"design": "interleaved", "switch_pause_s": 0, "max_replicates": None}
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(path), "--out", str(out), "--quiet"],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left(timeout_s=60)  # a busy shared machine exits them slowly
    summary = json.loads((out / "summary.json").read_text())
    arm = next(a for a in summary["answer"]["arms"] if a["arm"] == "spec")
    cats = {s["segment"]: s for s in arm["segments"] if s["cut"] == "category"}
    for cat, truth in TRUTH.items():
        assert cats[cat]["estimate"] == pytest.approx(truth, rel=0.1), cat
    assert cats["echo"]["decision"] == "adopt" and cats["fresh"]["decision"] == "worse"
    drafted = {s["segment"]: s for s in arm["segments"] if s["cut"] == "accepted"}
    assert (
        drafted["nothing accepted"]["n_pairs"] == 18 and drafted["drafts accepted"]["n_pairs"] == 18
    )
    assert arm["word"] == Word.MIXED and "on echo (50 % of requests)" in arm["sentence"]
    report = (out / "report.html").read_text()
    assert html_text(arm["sentence"])[:40] in report
    # the user's mix re-decides from the records, without servers
    fresh = analyze_run(out, write=False, mix="fresh=1,echo=0")
    assert fresh.experiments[0].cis["tpot_s"].estimate == pytest.approx(2.0, rel=0.1)
    assert fresh.experiments[0].word == "worse"


def html_text(text: str) -> str:
    import html

    return html.escape(text[0].upper() + text[1:])


def test_routing_is_advised_only_where_it_beats_one_deployment_by_more_than_the_margin():
    """The H100 evidence at c=32: echo best on n-gram (×0.626), fresh on EAGLE-3 (×0.635),
    EAGLE-3 for all ×0.64: two deployments would gain ~1 %, under δ, so no routing advice;
    an echo ×0.3 / fresh off split against a pooled ×0.8 is worth routing."""
    from speclib.analysis.verdict import deploy

    close = [
        deploy.Choice(2, "c=32", "echo", "on", "ngram-k4", 0.626, 0.5),
        deploy.Choice(2, "c=32", "fresh", "on", "eagle3-k3", 0.635, 0.5),
    ]
    assert deploy._advice(close, {"eagle3-k3": 0.636, "ngram-k4": 0.996}, 0.05) is None
    split = [
        deploy.Choice(0, "c=1", "echo", "on", "ngram-k4", 0.3, 0.5),
        deploy.Choice(0, "c=1", "fresh", "off", None, None, 0.5),
    ]
    text = deploy._advice(split, {"ngram-k4": 0.8}, 0.05)
    assert text.startswith("at c=1: route echo on ngram-k4 to a deployment with speculation and "
                           "fresh to one without: expected TPOT ×0.65")  # fmt: skip
    assert "×0.80 for one deployment for all (ngram-k4 on" in text
    two_arms = [deploy.Choice(2, "c=32", "echo", "on", "ngram-k4", 0.3, 0.5), close[1]]
    assert "with speculation each" in deploy._advice(two_arms, {"eagle3-k3": 0.636}, 0.05)


def test_a_best_arm_that_changes_with_load_is_not_sold_as_a_k_schedule():
    """vLLM's num_speculative_tokens_per_batch_size switches k, not the method: EAGLE-3 at
    c=1 and n-gram at c=32 for one category is named as such; on at c=1 and off at c=32
    points to the k schedule."""
    from speclib.analysis.verdict import deploy

    methods = {"echo": [deploy.Choice(0, "c=1", "echo", "on", "eagle3-k3", 0.53, 0.5),
                        deploy.Choice(2, "c=32", "echo", "on", "ngram-k4", 0.63, 0.5)]}  # fmt: skip
    text = deploy._load_advice(methods)
    assert "best arm changes with load (echo: eagle3-k3 at c=1, ngram-k4 at c=32)" in text
    assert "not the method" in text
    onoff = {"fresh": [deploy.Choice(0, "c=1", "fresh", "on", "ngram-k4", 0.8, 0.5),
                       deploy.Choice(2, "c=32", "fresh", "off", None, None, 0.5)]}  # fmt: skip
    assert deploy._load_advice(onoff).startswith("the choice changes with load: vLLM can switch k")


def test_the_mixed_sentence_says_which_segment_alone_is_not_decided() -> None:
    """Rule (b) names two segments shown to differ: the sentence names the one its own
    interval does not decide, or both (the SmolLM2 demo: copy adopt ×0.45, code open)."""
    from speclib.analysis.verdict.answer import _undecided
    from speclib.analysis.verdict.segments import SegmentResult
    from tests.intervals import decision_of

    def seg(name: str, word: str) -> SegmentResult:
        return SegmentResult(0, "ngram-k2", "category", name, 0.5, 6, 3, 0.5, None,
                             decision_of(word))  # fmt: skip

    assert _undecided([seg("copy", "adopt"), seg("code", "inconclusive")]) == ["code"]
    both_open = [seg("copy", "inconclusive"), seg("code", "inconclusive")]
    assert _undecided(both_open) == ["copy", "code"]
    assert _undecided([seg("copy", "adopt"), seg("code", "worse")]) == []


def test_a_mixed_arm_that_pays_over_all_its_requests_is_best_for_the_whole(tmp_path) -> None:
    """Echo ×0.5, fresh no gain: the arm is mixed (a segment gains nothing) but pays over all
    its requests; the first screen names it for the traffic as a whole, not "keep it off"."""
    from speclib.analysis.run_analysis import analyze_run
    from speclib.report.conclusion import conclusion_parts

    run = _write_run(tmp_path, effect={"echo": 0.5, "fresh": 1.0}, aa=False)
    an = analyze_run(run)
    arm = _arm(an.summary())
    assert (arm["word"], arm["pooled_word"]) == (Word.MIXED, "adopt")
    headline = conclusion_parts(an)[0]
    assert "Best for this traffic as a whole: **ngram-k4**" in headline, headline
    assert "keep speculative decoding off" not in headline


def test_where_no_arm_pays_over_all_the_headline_names_the_kinds_where_one_does(
    tmp_path,
) -> None:
    """Echo ×0.5, fresh ×1.8: over all requests the arm does not pay, on echo it does; the
    first screen says where, with the arm and its ratio, and that fresh has none."""
    from speclib.analysis.run_analysis import analyze_run
    from speclib.report.conclusion import conclusion_parts

    run = _write_run(tmp_path, effect={"echo": 0.5, "fresh": 1.8}, aa=False)
    an = analyze_run(run)
    arm = _arm(an.summary())
    assert arm["word"] == Word.MIXED and arm["pooled_word"] != "adopt", arm["pooled_word"]
    headline = conclusion_parts(an)[0]
    assert "Speculation pays on some kinds of prompt: **echo** (ngram-k4 ×0.5" in headline
    assert "on fresh no arm is shown to pay" in headline, headline
