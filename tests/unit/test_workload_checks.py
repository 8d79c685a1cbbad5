"""Workload checks (speclib.analysis.health.workload_checks, issue 23 part 3): each fires on a small
fixture built to trip it and stays quiet on a normal one; none gates a verdict or counts
toward "trusted"; the near-duplicate search finds exactly the pairs a brute-force comparison
finds; the demo prompt sets hold no near duplicates; summary.json, the report's trust panel
and the terminal lines carry the warnings."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest

from speclib.analysis.frames import records_frame
from speclib.analysis.health.near_duplicates import jaccard, near_duplicate_pairs, shingles
from speclib.analysis.health.prompt_checks import (
    near_duplicate_check,
    prompt_count_check,
    sent_prompt_texts,
)
from speclib.analysis.health.trust import TrustCheck, bench_trust
from speclib.analysis.health.workload_checks import (
    arrival_rate_check,
    category_size_check,
    cut_outputs_check,
    workload_checks,
)
from speclib.core.datasets import read_dataset
from speclib.core.prompts import PromptSetError
from speclib.core.records import RequestRecord, append_record
from speclib.params.experiment import ExperimentParams

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DEMO_SETS = sorted((REPO / "prompts").glob("demo-*.jsonl"))
DEMO_FORMATS = {"demo-multiturn.jsonl": "mt-bench"}  # the others are the kit's own format


def _rec(series: str, prompt: int, **kw) -> RequestRecord:
    base = {"replicate": 0, "ok": True, "block": "r0", "category": "default"}
    return RequestRecord(series=series, prompt_id=f"p{prompt}", **{**base, **kw})


def _frame(records: list[RequestRecord]):
    return records_frame(records)


def _prompt_file(path: Path, texts: list[str], categories: list[str] | None = None) -> Path:
    lines = []
    for i, text in enumerate(texts):
        cat = categories[i] if categories else "default"
        msg = [{"role": "user", "content": text}]
        lines.append(json.dumps({"id": f"p{i}", "category": cat, "messages": msg}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _params(prompts: Path, **workload) -> ExperimentParams:
    return ExperimentParams.model_validate(
        {
            "name": "workload-checks",
            "server": {"model": str(prompts.parent)},
            "series": [{"name": "control"}, {"name": "spec", "speculative_config": {
                "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}}],
            "workload": {"prompts": str(prompts), **workload},
        }
    )  # fmt: skip


# --- outputs cut by max_tokens --------------------------------------------------------------


def _answers(cut_spec: int, *, n: int = 10, reason: bool = True) -> list[RequestRecord]:
    """``n`` answers per arm; the control's 2 first and the spec's ``cut_spec`` first hit
    max_tokens (64) (finish reason "length", or without a finish reason 64 tokens)."""
    out = []
    for arm, cut in (("control", 2), ("spec", cut_spec)):
        for i in range(n):
            hit = i < cut
            out.append(
                _rec(
                    arm, i, output_tokens=64 if hit else 20,
                    finish_reason=("length" if hit else "stop") if reason else None,
                )
            )  # fmt: skip
    return out


def test_cut_outputs_warn_when_most_answers_stop_at_max_tokens() -> None:
    check = cut_outputs_check(_frame(_answers(8)), max_tokens=64)
    assert check.status == "fail" and check.gating is False
    assert check.per_arm == {"control": "2/10 cut", "spec": "8/10 cut"}
    assert check.figure == "80 % cut in spec"
    assert "raise workload.max_tokens" in check.detail and "first 64 tokens" in check.detail
    assert "ignore_eos" not in check.detail


def test_cut_outputs_name_the_ignore_eos_trap_when_it_is_set() -> None:
    check = cut_outputs_check(_frame(_answers(8)), max_tokens=64, ignore_eos=True)
    assert check.status == "fail"
    assert "workload.ignore_eos" in check.detail and "would not write" in check.detail


def test_a_cap_declared_expected_is_reported_not_warned_but_ignore_eos_still_warns() -> None:
    check = cut_outputs_check(_frame(_answers(8)), max_tokens=64, expected=True)
    assert check.status == "pass" and check.figure == "80 % cut in spec (expected)"
    assert "workload.truncation_expected" in check.detail
    trap = cut_outputs_check(_frame(_answers(8)), max_tokens=64, ignore_eos=True, expected=True)
    assert trap.status == "fail" and "workload.ignore_eos" in trap.detail


def test_cut_outputs_count_tokens_when_the_finish_reason_is_missing() -> None:
    check = cut_outputs_check(_frame(_answers(6, reason=False)), max_tokens=64)
    assert check.status == "fail" and check.per_arm["spec"] == "6/10 cut"
    assert cut_outputs_check(_frame(_answers(6, reason=False)), max_tokens=65).status == "pass"


def test_cut_outputs_stay_quiet_when_most_answers_end_and_ignore_failures() -> None:
    records = _answers(5)  # 50 %: not "most"
    records += [_rec("spec", 10 + i, ok=False, finish_reason="length") for i in range(20)]
    check = cut_outputs_check(_frame(records), max_tokens=64)
    assert check.status == "pass" and check.per_arm["spec"] == "5/10 cut"
    assert cut_outputs_check(_frame([]), max_tokens=64).status == "not assessed"
    with pytest.raises(ValueError, match="`max_tokens`"):
        cut_outputs_check(_frame(records), max_tokens=0)


# --- near-duplicate prompts -----------------------------------------------------------------


def test_shingles_are_lower_cased_word_five_grams() -> None:
    assert shingles("A b, c d e F!") == {("a", "b", "c", "d", "e"), ("b", "c", "d", "e", "f")}
    assert shingles("Count to ten.") == {("count", "to", "ten")}  # short: one shingle
    assert shingles("?!") == frozenset()
    assert jaccard(shingles("a b c d e f"), shingles("a b c d e g")) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="`n`"):
        shingles("a b", n=0)


def _brute_force(texts: list[str], threshold: float) -> list[tuple[int, int]]:
    sets = [shingles(t) for t in texts]
    return [
        (i, j)
        for i, j in itertools.combinations(range(len(texts)), 2)
        if sets[i] and sets[j] and jaccard(sets[i], sets[j]) >= threshold
    ]


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9, 1.0])
def test_near_duplicate_pairs_are_exactly_the_brute_force_pairs(threshold) -> None:
    rng = random.Random(7)
    words = [f"w{i}" for i in range(40)]  # a small vocabulary: many shared shingles
    texts = [" ".join(rng.choices(words, k=rng.randint(3, 40))) for _ in range(120)]
    for i in range(0, 60, 3):  # edits of earlier texts: some near, some not
        w = texts[i].split()
        k = rng.randint(0, 6)
        texts.append(" ".join(w[: len(w) - k] + rng.choices(words, k=k)))
    texts += [texts[5], "", "Count to ten.", "count TO ten"]
    found = near_duplicate_pairs(texts, threshold=threshold)
    expected = _brute_force(texts, threshold)
    assert [(i, j) for i, j, _ in found] == expected
    assert len(expected) >= 3  # the fixture has pairs to find at every threshold
    assert all(s >= threshold for *_, s in found)


def test_near_duplicate_prompts_are_named_from_the_prompt_file(tmp_path: Path) -> None:
    base = "Explain how a lighthouse keeper would trim the wick and polish the lens before dusk"
    texts = [
        base,
        "Write a haiku about autumn leaves falling on a quiet pond",
        base + " tonight",  # 11 of its 12 shingles are the base's 11: 0.92
        "Summarize the causes of the French revolution for a twelve year old student",
        "explain how a LIGHTHOUSE keeper would trim the wick, and polish the lens before dusk",
    ]
    params = _params(_prompt_file(tmp_path / "p.jsonl", texts))
    texts_by_id = sent_prompt_texts(params)
    check = near_duplicate_check(texts_by_id)
    assert check.status == "fail" and check.gating is False
    assert check.figure == "3 pair(s)"
    assert "p0 ~ p2 (0.92)" in check.detail and "p0 ~ p4 (1.00)" in check.detail
    assert "p2 ~ p4" in check.detail and "p1" not in check.detail
    quiet = near_duplicate_check({k: v for k, v in texts_by_id.items() if k in ("p0", "p1")})
    assert quiet.status == "pass" and "the 2 prompts sent" in quiet.detail


def test_only_the_prompts_sent_are_checked(tmp_path: Path) -> None:
    texts = ["the same long prompt about a red fox and a lazy dog"] * 2 + ["another prompt"]
    params = _params(_prompt_file(tmp_path / "p.jsonl", texts))
    assert near_duplicate_check(sent_prompt_texts(params)).status == "fail"
    sent = sent_prompt_texts(params, ids={"p0", "p2"})
    assert sorted(sent) == ["p0", "p2"] and near_duplicate_check(sent).status == "pass"
    assert list(sent_prompt_texts(_params(tmp_path / "p.jsonl", num_prompts=1))) == ["p0"]


def test_a_large_set_is_checked_on_a_seeded_sample() -> None:
    texts = {f"p{i}": f"prompt number {i} about topic {i * 7}" for i in range(30)}
    check = near_duplicate_check(texts, limit=10, seed=3)
    assert check.status == "pass"
    assert "a random sample of 10 of the 30 prompts (seed 3)" in check.detail
    with pytest.raises(ValueError, match="`limit`"):
        near_duplicate_check(texts, limit=1)


def test_a_missing_or_changed_prompt_file_is_not_assessed(tmp_path: Path) -> None:
    path = _prompt_file(tmp_path / "p.jsonl", ["one prompt", "two prompts"])
    params = _params(path)
    with pytest.raises(PromptSetError, match="changed since the run"):
        sent_prompt_texts(params, provenance={"sha256": "0" * 64})
    records = _frame(_answers(0))
    by = {c.check: c for c in workload_checks(params, records, {"prompts": {"sha256": "0" * 64}})}
    assert by["near-duplicate prompts"].status == "not assessed"
    assert "changed since the run" in by["near-duplicate prompts"].detail
    path.unlink()
    by = {c.check: c for c in workload_checks(params, records, {})}
    assert by["near-duplicate prompts"].status == "not assessed"
    assert "could not be read" in by["near-duplicate prompts"].detail


@pytest.mark.parametrize("path", DEMO_SETS, ids=lambda p: p.name)
def test_the_demo_prompt_sets_hold_no_near_duplicates(path: Path) -> None:
    prompts = read_dataset(path, DEMO_FORMATS.get(path.name, "speclib")).prompts
    texts = {p.id: "\n".join([m["content"] for m in p.messages] + list(p.turns[1:]))
             for p in prompts}  # fmt: skip
    check = near_duplicate_check(texts)
    assert check.status == "pass", check.detail


def test_the_demo_sets_exist() -> None:
    assert {p.name for p in DEMO_SETS} >= {"demo-mixed.jsonl", "demo-known.jsonl"}


# --- offered vs achieved request rate -------------------------------------------------------


def _poisson(
    lag_per_request: float,
    *,
    rate: float = 4.0,
    gap: float = 0.25,
    slots: int = 1,
    per_slot: int = 12,
) -> list[RequestRecord]:
    """Two arms at one Poisson level: each slot's requests due ``gap`` apart (from the
    slot's start), each sent ``lag_per_request`` later than the one before would have been;
    interleaved slots of the two arms alternate, 30 s apart."""
    out = []
    t0 = 1.0e9
    for s in range(slots):
        for arm in ("control", "spec"):
            start = t0 + 30.0 * (2 * s + (arm == "spec"))
            for k in range(per_slot):
                wait = lag_per_request * k
                out.append(
                    _rec(
                        arm, s * per_slot + k, level=1, request_rate=rate, concurrency=4,
                        slot=s if slots > 1 else None, t_start=start + gap * k + wait,
                        queue_wait_s=wait,
                    )
                )  # fmt: skip
    return out


def test_a_level_sent_slower_than_its_schedule_warns() -> None:
    check = arrival_rate_check(_frame(_poisson(0.1)))  # 0.35 s apart instead of 0.25
    assert check.status == "fail" and check.gating is False
    assert check.figure == "71 % of offered at 4 req/s"
    assert check.per_arm["spec"] == "2.86 of 4.00 req/s at 4 req/s"
    assert "request slots" in check.detail and "lower the rate" in check.detail


def test_a_level_sent_on_time_passes() -> None:
    check = arrival_rate_check(_frame(_poisson(0.001)))
    assert check.status == "pass", check.detail
    assert check.figure == "100 % of offered at 4 req/s"


def test_a_schedule_slower_than_its_nominal_rate_by_chance_is_not_the_clients_fault() -> None:
    # the seeded draws came out 0.33 s apart at 4 req/s (a few-request Poisson schedule
    # varies); the client kept to them
    check = arrival_rate_check(_frame(_poisson(0.0, gap=0.33)))
    assert check.status == "pass"
    assert "3.03 req/s" in check.per_arm["control"]


def test_interleaved_slots_do_not_count_the_other_arms_time() -> None:
    frame = _frame(_poisson(0.001, slots=3, per_slot=5))
    assert frame["slot"].nunique() == 3
    assert arrival_rate_check(frame).status == "pass"
    late = arrival_rate_check(_frame(_poisson(0.1, slots=3, per_slot=5)))
    assert late.status == "fail" and late.figure == "71 % of offered at 4 req/s"


def test_a_run_without_poisson_levels_is_not_assessed() -> None:
    check = arrival_rate_check(_frame(_answers(0)))
    assert check.status == "not assessed" and check.figure == "no Poisson level"
    one_each = _frame([_rec("control", 0, request_rate=4.0, level=1, t_start=1.0)])
    assert arrival_rate_check(one_each).status == "not assessed"


# --- prompt set smaller than asked ----------------------------------------------------------


def test_a_short_prompt_set_warns_with_both_numbers() -> None:
    prov = {"requested": 20, "returned": 16, "short_by": 4, "records_read": 17, "skipped": 1}
    check = prompt_count_check(prov)
    assert check.status == "fail" and check.gating is False
    assert check.figure == "16 of 20 asked"
    assert "num_prompts asks for 20, the set has 16" in check.detail
    full = prompt_count_check({"requested": 16, "returned": 16, "short_by": 0})
    assert full.status == "pass" and full.figure == "16 of 16 asked"
    every = prompt_count_check({"requested": None, "returned": 24, "short_by": 0})
    assert every.status == "pass" and every.figure == "24 prompts"
    assert prompt_count_check(None).status == "not assessed"
    assert prompt_count_check({"path": "p.jsonl", "sha256": "x"}).status == "not assessed"


# --- categories too small for their own interval --------------------------------------------


def _categorised(sizes: dict[str, int], *, blocks: int = 2, failed: int = 0) -> list:
    """Control and spec answers to every prompt of each category in each block; the spec's
    first ``failed`` requests of the last category in block 0 fail."""
    out = []
    last = list(sizes)[-1]
    pid = 0
    for cat, n in sizes.items():
        for _ in range(n):
            for b in range(blocks):
                for arm in ("control", "spec"):
                    bad = arm == "spec" and cat == last and b == 0 and pid - sum(
                        list(sizes.values())[:-1]) < failed  # fmt: skip
                    out.append(_rec(arm, pid, replicate=b, block=f"r{b}", category=cat,
                                    ok=not bad))  # fmt: skip
            pid += 1
    return out


def test_a_category_with_too_few_pairs_or_one_prompt_warns_by_name() -> None:
    check = category_size_check(_frame(_categorised({"code": 8, "chat": 2})), control="control")
    assert check.status == "fail" and check.gating is False
    assert check.figure == "1 of 2 small"
    assert "chat (2 prompts, 4 pairs)" in check.detail and "code" not in check.detail
    # 3 prompts in 2 blocks: 6 pairs, the categories module gives it an interval
    enough = category_size_check(_frame(_categorised({"code": 8, "chat": 3})), control="control")
    assert enough.status == "pass"
    # one prompt over 6 blocks: 6 pairs, but they speak for one prompt, not its category
    single = category_size_check(
        _frame(_categorised({"code": 8, "chat": 1}, blocks=6)), control="control"
    )
    assert single.status == "fail" and "chat (1 prompts, 6 pairs)" in single.detail


def test_a_category_that_lost_its_pairs_warns() -> None:
    records = _categorised({"code": 8, "chat": 6}, blocks=1, failed=2)
    check = category_size_check(_frame(records), control="control")
    assert check.status == "fail" and "chat (6 prompts, 4 pairs)" in check.detail


def test_categories_large_enough_pass_and_one_category_is_not_assessed() -> None:
    check = category_size_check(_frame(_categorised({"code": 6, "chat": 7})), control="control")
    assert check.status == "pass" and check.figure == "0 of 2 small"
    one_block = category_size_check(_frame(_categorised({"a": 6, "b": 6}, blocks=1)),
                                    control="control")  # fmt: skip
    assert one_block.status == "pass" and "with 1 block no category" in one_block.detail
    single = category_size_check(_frame(_categorised({"default": 3})), control="control")
    assert single.status == "not assessed"


# --- the panel: warnings, never a veto ------------------------------------------------------


def test_workload_warnings_neither_gate_nor_count_toward_trusted() -> None:
    pre = [TrustCheck("instruments agree", "pass", "4 of 4 within", "ok")]
    warn = [TrustCheck("outputs cut by max_tokens", "fail", "80 % cut", "raise", gating=False)]
    aa = [_AA()]
    clean = bench_trust(pre, aa, 0.05)
    warned = bench_trust(pre, aa, 0.05, workload=warn)
    assert clean["trusted"] and warned["trusted"] and not warned["untrustworthy"]
    assert warned["checks"] == clean["checks"]  # the bench's checks do not move
    assert warned["workload"][0]["check"] == "outputs cut by max_tokens"
    assert warned["workload_warnings"] == ["outputs cut by max_tokens"]
    assert clean["workload"] == [] and clean["workload_warnings"] == []


class _AA:
    """An A/A comparison whose interval is well inside ±δ (the A/A check passes)."""

    word = "equivalent"
    load = "c=1"

    def __init__(self) -> None:
        from speclib.analysis.stats.paired import RatioCI

        ci = RatioCI(
            estimate=1.0, ci_low=0.98, ci_high=1.02, confidence_level=0.95, method="blocks",
            n_pairs=32, n_launches=4, median_delta=0.0, wilcoxon_p=None,
            between_launch_share=None, more_launches_help=None, var_between=None,
            var_within=None, n_resamples=0, df=3,
        )  # fmt: skip
        self.cis = {"tpot_s": ci}


# --- wired in: summary.json, the report, the terminal ---------------------------------------


N_TOKENS = 17


def _run(tmp: Path) -> Path:
    """A synthetic two-block run whose answers all stop at max_tokens, in two categories
    (one of 2 prompts: 4 pairs), with a manifest saying the set was 5 prompts short."""
    texts = [f"question {i} about subject {i} in detail please" for i in range(10)]
    cats = ["code"] * 8 + ["chat"] * 2
    params = _params(_prompt_file(tmp / "prompts.jsonl", texts, cats), max_tokens=N_TOKENS,
                     replicates=2, num_prompts=15)  # fmt: skip
    run = tmp / "run"
    run.mkdir()
    (run / "params.resolved.json").write_text(json.dumps(params.model_dump()))
    prov = {"requested": 15, "returned": 10, "short_by": 5, "records_read": 10, "skipped": 0}
    (run / "manifest.json").write_text(json.dumps({"prompts": prov}))
    rng = np.random.default_rng(0)
    t = 1.0e9
    with (run / "requests.jsonl").open("w") as fh:
        for b in range(2):
            for p in range(10):
                for arm, effect in (("control", 1.0), ("spec", 0.6)):
                    tpot = 0.02 * effect * float(np.exp(rng.normal(0, 0.03)))
                    offsets = tuple(0.02 + tpot * i for i in range(N_TOKENS))
                    append_record(fh, RequestRecord(
                        series=arm, replicate=b, prompt_id=f"p{p}", ok=True,
                        launch_id=f"{arm}-r{b}", block=f"r{b}", category=cats[p], t_start=t,
                        chunk_offsets_s=offsets, chunk_tokens=(1,) * N_TOKENS,
                        done_offset_s=offsets[-1], output_tokens=N_TOKENS, text=f"a {p}",
                        token_ids=tuple(range(N_TOKENS)), finish_reason="length",
                    ))  # fmt: skip
                    t += 1.0
    return run


def test_the_run_analysis_carries_the_workload_checks_to_summary_report_and_terminal(
    tmp_path: Path,
) -> None:
    from speclib.analysis.run_analysis import analyze_run
    from speclib.app.verdicts import trust_lines
    from speclib.core.run_summary import RunSummary
    from speclib.report.sections import bench_trust_html

    run = _run(tmp_path)
    an = analyze_run(run)
    summary = json.loads((run / "summary.json").read_text())
    trust = summary["bench_trust"]
    names = [c["check"] for c in trust["workload"]]
    assert names == [
        "outputs cut by max_tokens",
        "near-duplicate prompts",
        "offered vs achieved rate",
        "prompt set size",
        "category sizes",
    ]
    status = {c["check"]: c["status"] for c in trust["workload"]}
    assert status == {
        "outputs cut by max_tokens": "fail",
        "near-duplicate prompts": "pass",
        "offered vs achieved rate": "not assessed",
        "prompt set size": "fail",
        "category sizes": "fail",
    }
    assert all(c["gating"] is False for c in trust["workload"])
    assert trust["workload_warnings"] == [
        "outputs cut by max_tokens",
        "prompt set size",
        "category sizes",
    ]
    assert not trust["untrustworthy"]  # warnings never veto
    assert [c["check"] for c in trust["checks"]][-1] == "A/A"  # the bench's checks unmoved
    assert all(c["decision"] != "untrustworthy" for c in summary["comparisons"])

    panel = bench_trust_html(an)
    first = panel.split("<details>")[0]  # what shows without opening the details
    assert "Workload: 3 warnings" in first
    assert "outputs cut by max_tokens" in first and "num_prompts asks for 15" in first
    assert "near-duplicate prompts" not in first  # passed: only inside the table
    assert "⚠ warning" in panel and "near-duplicate prompts" in panel

    lines = trust_lines(RunSummary.model_validate(summary))
    assert "workload: 3 warnings of 5 checks (never a veto; what to do: see the report)" in lines
    assert any("warning  category sizes: 1 of 2 small" in x for x in lines)
    assert not any("near-duplicate" in x for x in lines)
    assert max(map(len, lines)) <= 160


def test_trust_lines_without_workload_checks_print_none() -> None:
    from speclib.app.verdicts import trust_lines, workload_lines
    from speclib.core.run_summary import RunSummary, TrustCheckEntry

    summary = RunSummary.model_validate({"bench_trust": {"trusted": True, "checks": [
        {"check": "A/A", "status": "pass", "figure": "±2 %"}]}})  # fmt: skip
    assert not any(x.startswith("workload") for x in trust_lines(summary))
    passed = [TrustCheckEntry(check="prompt set size", status="pass", figure="24 prompts")]
    assert workload_lines(passed) == []
