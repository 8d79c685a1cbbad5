"""Output scoring against a real local stand-in server, and the plausibility comparison."""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from speclib.analysis.speculation.agreement import classify_output
from speclib.analysis.speculation.nucleus import expected_logprob, outside_nucleus
from speclib.analysis.speculation.sampling import compare_plausibility, compare_run
from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.core.records import RequestRecord, append_record
from speclib.core.scores import OutputScore, ScoreItem, append_score, read_scores
from speclib.params.experiment import ExperimentParams
from speclib.run.scoring import items_from_records, score_outputs, score_run, scoring_enabled
from tests.fake_scorer import DIST, ScorerServer, logprob_of, tokenize_text

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

FAKE_SCORER = Path(__file__).resolve().parents[1] / "fake_scorer.py"
MSGS = ({"role": "user", "content": "count to three"},)


def chat_prompt_len(messages) -> int:
    return 1 + sum(len(tokenize_text(f"<{m['role']}>{m['content']}")) + 1 for m in messages)


def expected_mean(ids) -> float:
    return sum(logprob_of(t) for t in ids) / len(ids)


def item(
    series="control",
    prompt_id="p0",
    *,
    ids=(11, 12, 13),
    text=None,
    messages=MSGS,
    replicate=0,
    repeat=0,
) -> ScoreItem:
    return ScoreItem(
        series,
        replicate,
        prompt_id,
        repeat,
        messages,
        tuple(ids) if ids is not None else None,
        text,
    )


@pytest.fixture
def scorer():
    with ScorerServer(model="m") as srv:
        yield srv


# ------------------------------------------------------------------------------ scoring


def test_scores_are_the_mean_logprob_of_the_output_positions_only(scorer):
    ids = (11, 17, 504, 13)
    [s] = score_outputs(scorer.url, [item(ids=ids)], model="m")
    assert s.ok and s.error is None
    assert s.n_tokens == 4
    assert s.prompt_tokens == chat_prompt_len(MSGS)
    assert s.mean_logprob == pytest.approx(expected_mean(ids))
    assert s.sum_logprob == pytest.approx(sum(logprob_of(t) for t in ids))
    assert s.min_logprob == pytest.approx(logprob_of(504))
    assert s.source == "token_ids"
    # the prompt tokens (BOS, template bytes) were scored by the server but not counted
    assert s.mean_logprob != pytest.approx(expected_mean([*tokenize_text("<user>"), *ids]))


def test_order_is_kept_sink_sees_every_score_and_each_prompt_is_tokenized_once(scorer):
    other = ({"role": "user", "content": "spell cat"},)
    items = [
        item(
            prompt_id=f"p{i % 3}", repeat=i, ids=(20 + i, 30 + i), messages=MSGS if i % 3 else other
        )
        for i in range(9)
    ]
    seen: list[OutputScore] = []
    got = score_outputs(scorer.url, items, model="m", concurrency=3, sink=seen.append)
    assert [s.key for s in got] == [it.key for it in items]
    assert sorted(s.key for s in seen) == sorted(it.key for it in items)
    for it, s in zip(items, got, strict=True):
        assert s.mean_logprob == pytest.approx(expected_mean(it.token_ids))
    assert scorer.calls["/tokenize"] == 2
    assert scorer.calls["/v1/completions"] == 9


def test_text_is_retokenized_when_no_token_ids_were_recorded(scorer):
    [s] = score_outputs(scorer.url, [item(ids=None, text="abc")], model="m")
    assert s.source == "text"
    assert s.n_tokens == 3
    assert s.mean_logprob == pytest.approx(expected_mean(tokenize_text("abc")))


def test_failures_are_scores_with_errors_and_the_others_still_run(scorer):
    bad_prompt = ({"role": "user", "content": "untokenizable"},)
    items = [
        item(prompt_id="ok", ids=(11, 12)),
        item(prompt_id="long", ids=(11, 999)),
        item(prompt_id="odd", ids=(998,)),
        item(prompt_id="tpl", messages=bad_prompt),
        item(prompt_id="empty", ids=None, text=None),
    ]
    got = {s.prompt_id: s for s in score_outputs(scorer.url, items, model="m")}
    assert got["ok"].ok
    assert not got["long"].ok and "HTTP 400" in got["long"].error
    assert "maximum context length" in got["long"].error
    assert not got["odd"].ok and "no log-prob for token 998" in got["odd"].error
    assert not got["tpl"].ok and "HTTP 500" in got["tpl"].error
    assert "prompt not tokenized" in got["tpl"].error
    assert not got["empty"].ok and "empty output" in got["empty"].error
    assert all(s.mean_logprob is None for k, s in got.items() if k != "ok")


def test_an_unreachable_server_gives_error_scores_not_an_exception():
    with ScorerServer() as srv:
        url = srv.url
    got = score_outputs(url, [item(), item(prompt_id="p1")], model="m", timeout_s=5)
    assert [s.ok for s in got] == [False, False]
    assert all("/tokenize" in s.error for s in got)


def test_api_key_is_sent():
    with ScorerServer(model="m", api_key="sekret") as srv:
        [no_key] = score_outputs(srv.url, [item()], model="m")
        [with_key] = score_outputs(srv.url, [item()], model="m", api_key="sekret")
    assert not no_key.ok and "HTTP 401" in no_key.error
    assert with_key.ok


def test_concurrency_bounds_requests_in_flight():
    with ScorerServer(model="m", delay_s=0.05) as srv:
        items = [item(prompt_id=f"p{i}") for i in range(8)]
        score_outputs(srv.url, items, model="m", concurrency=2)
        assert srv.max_inflight == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"items": "abc"}, "`items` must be a sequence"),
        ({"items": [{"series": "x"}]}, "`items` must hold only ScoreItem"),
        ({"items": [item(), item()]}, "holds the output"),
        ({"concurrency": 0}, "`concurrency` must be a positive integer"),
        ({"timeout_s": 0}, "`timeout_s` must be a positive number"),
        ({"model": ""}, "`model` must be a non-empty string"),
    ],
)
def test_score_outputs_validates_its_inputs(kwargs, message):
    args = {"items": [item()], "model": "m", **kwargs}
    with pytest.raises(ValueError, match=message):
        score_outputs("http://127.0.0.1:9", args.pop("items"), **args)


# ------------------------------------------------------------------------- the file


def test_scores_round_trip_last_line_wins_and_a_torn_line_is_skipped(tmp_path):
    path = tmp_path / "output_scores.jsonl"
    first = OutputScore("a", 0, "p", 0, mean_logprob=None, error="HTTP 500")
    second = OutputScore("a", 0, "p", 0, mean_logprob=-1.25, n_tokens=4, source="token_ids")
    other = OutputScore("b", 0, "p", 0, mean_logprob=-2.0, n_tokens=2)
    with path.open("a", encoding="utf-8") as fh:
        for s in (first, other, second):
            append_score(fh, s)
        fh.write('{"series": "c", "repl')
    got = {s.key: s for s in read_scores(path)}
    assert got == {second.key: second, other.key: other}
    assert read_scores(tmp_path / "missing.jsonl") == []


def test_items_from_records_keeps_successful_measured_outputs_of_known_prompts():
    base = {"replicate": 0, "repeat": 0}
    recs = [
        RequestRecord(series="c", prompt_id="p0", ok=True, token_ids=(5, 6), text="ab", **base),
        RequestRecord(series="c", prompt_id="p1", ok=True, token_ids=None, text="xy", **base),
        RequestRecord(series="c", prompt_id="p2", ok=False, error="HTTP 500", **base),
        RequestRecord(series="c", prompt_id="p3", ok=True, token_ids=(), text="", **base),
        RequestRecord(
            series="c",
            prompt_id="warmup-0",
            ok=True,
            token_ids=(1,),
            text="a",
            phase="warmup",
            **base,
        ),
        RequestRecord(series="c", prompt_id="gone", ok=True, token_ids=(1,), **base),
    ]
    msgs = {p: [{"role": "user", "content": p}] for p in ("p0", "p1", "p2", "p3", "warmup-0")}
    got = items_from_records(recs, msgs)
    assert [(i.prompt_id, i.token_ids, i.text) for i in got] == [
        ("p0", (5, 6), "ab"),
        ("p1", None, "xy"),
    ]
    assert got[0].messages == ({"role": "user", "content": "p0"},)


# --------------------------------------------------------------------------- comparison


def synth(series, values, *, repeats=1):
    """Scores of one series: ``values[i]`` is prompt i's mean log-prob (each repeat)."""
    return [
        OutputScore(series, 0, f"p{i:02d}", r, mean_logprob=float(v), n_tokens=32)
        for i, v in enumerate(values)
        for r in range(repeats)
    ]


def rng(seed=0):
    return np.random.default_rng(seed)


BASE = np.random.default_rng(7).normal(-1.2, 0.4, size=24)


def test_much_less_likely_outputs_are_flagged_implausible_with_degenerate_outputs():
    broken = BASE - 4.0 + np.random.default_rng(1).normal(0, 0.3, BASE.size)
    scores = synth("control", BASE) + synth("spec", broken)
    res = compare_plausibility(
        scores, control="control", experiment="spec", margin_nats=0.5, rng=rng()
    )
    assert res.implausible and res.word == "implausible" and res.shifted
    assert res.ci_high < -0.5 and res.ci_low < res.estimate < res.ci_high
    assert res.estimate == pytest.approx(float(np.mean(broken - BASE)))
    assert res.n_prompts == 24 and res.method == "BCa"
    assert res.degenerate_threshold == pytest.approx(np.quantile(BASE, 0.01) - 0.5)
    expected = int(np.sum(broken < res.degenerate_threshold))
    assert expected > 12
    assert res.n_degenerate_experiment == expected and res.n_degenerate_control == 0
    bad = [s for s in scores if s.series == "spec" and res.is_degenerate(s.key)]
    assert len(bad) == expected
    rec = {"ok": True, "text": "zz", "output_tokens": 32, "finish_reason": "length"}
    assert classify_output(rec, implausible=res.is_degenerate(bad[0].key)) == "implausible"
    good = next(s for s in scores if s.series == "control")
    assert classify_output(rec, implausible=res.is_degenerate(good.key)) == "ok"
    json.dumps(res.to_dict(), allow_nan=False)


def test_same_distribution_is_equivalent_and_not_flagged():
    same = BASE + np.random.default_rng(2).normal(0, 0.15, BASE.size)
    res = compare_plausibility(
        synth("control", BASE) + synth("spec", same),
        control="control",
        experiment="spec",
        margin_nats=0.5,
        rng=rng(),
    )
    assert res.word == "equivalent" and not res.implausible and not res.shifted
    assert -0.5 < res.ci_low < res.ci_high < 0.5
    assert res.n_degenerate_experiment == 0


def test_more_likely_outputs_say_so_but_are_not_implausible():
    greedyish = BASE + 1.5 + np.random.default_rng(4).normal(0, 0.2, BASE.size)
    res = compare_plausibility(
        synth("control", BASE) + synth("spec", greedyish),
        control="control",
        experiment="spec",
        rng=rng(),
    )
    assert res.word == "more_likely" and not res.implausible and res.shifted
    assert "sampling" in res.reason


def test_noisy_small_difference_is_inconclusive():
    noisy = BASE - 0.5 + np.random.default_rng(3).normal(0, 1.0, BASE.size)
    res = compare_plausibility(
        synth("control", BASE) + synth("spec", noisy),
        control="control",
        experiment="spec",
        margin_nats=0.5,
        rng=rng(),
    )
    assert res.word == "inconclusive" and not res.implausible
    assert res.ci_low < -0.5 < res.ci_high


def test_outputs_are_averaged_per_prompt_before_pairing():
    # control: two repeats per prompt at v-0.2 and v+0.2 → per-prompt mean v
    c = [
        OutputScore("control", 0, f"p{i:02d}", r, mean_logprob=float(v + (0.4 * r - 0.2)))
        for i, v in enumerate(BASE)
        for r in range(2)
    ]
    e = synth("spec", BASE - 1.0)
    res = compare_plausibility(c + e, control="control", experiment="spec", rng=rng())
    assert res.n_prompts == BASE.size
    assert res.estimate == pytest.approx(-1.0)
    assert res.n_scored_control == 2 * BASE.size


def test_failed_scores_are_counted_not_used():
    c = synth("control", BASE)
    e = synth("spec", BASE - 2.0)
    e[:4] = [
        OutputScore("spec", 0, s.prompt_id, 0, mean_logprob=None, error="HTTP 400") for s in e[:4]
    ]
    res = compare_plausibility(c + e, control="control", experiment="spec", rng=rng())
    assert res.n_prompts == BASE.size - 4
    assert res.n_unscored_experiment == 4 and res.n_scored_experiment == BASE.size - 4
    assert res.estimate == pytest.approx(-2.0)


def test_same_seed_same_interval_and_other_series_are_ignored():
    scores = synth("control", BASE) + synth("spec", BASE - 0.3) + synth("x", BASE - 9)
    a = compare_plausibility(scores, control="control", experiment="spec", rng=rng(5))
    b = compare_plausibility(
        scores[: 2 * BASE.size], control="control", experiment="spec", rng=rng(5)
    )
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)


def test_one_pair_warns_and_gives_an_unbounded_interval():
    with pytest.warns(DegenerateDataWarning, match="one paired prompt"):
        res = compare_plausibility(
            synth("control", [-1.0]) + synth("spec", [-6.0]),
            control="control",
            experiment="spec",
            rng=rng(),
        )
    assert res.method == "degenerate" and res.word == "inconclusive"
    assert (res.ci_low, res.ci_high) == (-math.inf, math.inf)
    assert res.to_dict()["ci_low"] is None


def test_identical_outputs_warn_zero_width_and_are_equivalent():
    with pytest.warns(DegenerateDataWarning, match="zero width"):
        res = compare_plausibility(
            synth("control", BASE) + synth("spec", BASE),
            control="control",
            experiment="spec",
            rng=rng(),
        )
    assert (res.ci_low, res.ci_high) == (0.0, 0.0) and res.word == "equivalent"


def test_no_pairs_warns_and_is_inconclusive():
    c = synth("control", BASE[:3])
    e = [OutputScore("spec", 0, "p00", 0, mean_logprob=None, error="HTTP 400")]
    with pytest.warns(DegenerateDataWarning, match="no prompt"):
        res = compare_plausibility(c + e, control="control", experiment="spec", rng=rng())
    assert res.word == "inconclusive" and res.estimate is None and res.ci_low is None
    assert res.n_prompts == 0 and "no prompt" in res.reason


def test_few_prompts_use_the_expanded_percentile_interval():
    res = compare_plausibility(
        synth("control", BASE[:6]) + synth("spec", BASE[:6] - 3),
        control="control",
        experiment="spec",
        rng=rng(),
    )
    assert res.method == "percentile" and "fewer than" in res.note


def test_the_flag_keeps_its_error_rate_at_the_boundary():
    # true shift exactly −δ: a one-sided 97.5 % bound should flag about 2.5 % of experiments
    gen = np.random.default_rng(11)
    flags = 0
    trials = 200
    for t in range(trials):
        c = gen.normal(-1.2, 0.4, 30)
        e = c - 0.5 + gen.normal(0, 0.3, 30)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = compare_plausibility(
                synth("control", c) + synth("spec", e),
                control="control",
                experiment="spec",
                margin_nats=0.5,
                n_resamples=999,
                rng=np.random.default_rng(t),
            )
        flags += res.implausible
    assert flags / trials <= 0.06


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"margin_nats": 0}, "`margin_nats` must be a positive number"),
        ({"margin_nats": float("nan")}, "`margin_nats` must be a positive number"),
        ({"confidence_level": 1.0}, r"`confidence_level` must be in \(0, 1\)"),
        ({"n_resamples": 0}, "`n_resamples` must be a positive integer"),
        ({"degenerate_quantile": 1.0}, r"`degenerate_quantile` must be in \[0, 1\)"),
        ({"rng": 3}, "`rng` must be a numpy.random.Generator"),
        ({"experiment": "control"}, "must differ"),
        ({"experiment": "nope"}, "`experiment` 'nope' has no score"),
        ({"control": None}, "`control` must be a series name"),
        ({"scores": [{"series": "control"}]}, "`scores` must hold only OutputScore"),
    ],
)
def test_compare_validates_its_inputs(kwargs, message):
    args = {
        "scores": synth("control", BASE) + synth("spec", BASE - 1),
        "control": "control",
        "experiment": "spec",
        "rng": rng(),
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        compare_plausibility(args.pop("scores"), **args)


def test_compare_needs_keyword_options():
    with pytest.raises(TypeError):
        compare_plausibility(synth("control", BASE), "control", "spec")  # type: ignore[misc]


# ------------------------------------------------------------------------- the run step


def make_params(
    tmp_path: Path, prompts: Path, *, temperature=0.8, score="auto", base_url: str | None = None
) -> ExperimentParams:
    server = {
        "model": str(tmp_path),
        "served_model_name": "fake",
        "start_timeout_s": 30,
        "launcher": [sys.executable, str(FAKE_SCORER)],
    }
    if base_url:
        server = {"model": str(tmp_path), "base_url": base_url}
    return ExperimentParams.model_validate(
        {
            "name": "t",
            "server": server,
            "series": [
                {"name": "control"},
                {
                    "name": "spec",
                    "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
                },
            ],
            "workload": {"prompts": str(prompts), "temperature": temperature},
            "analysis": {"score_outputs": score},
        }
    )


def write_run(tmp_path: Path) -> tuple[Path, Path]:
    """A run folder whose control outputs are plausible tokens and the spec's garbage."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"task {i}"}]})
            + "\n"
            for i in range(12)
        ),
        encoding="utf-8",
    )
    run = tmp_path / "run"
    run.mkdir()
    gen = np.random.default_rng(0)
    with (run / "requests.jsonl").open("w", encoding="utf-8") as fh:
        for series, lo, hi in (("control", 10, 400), ("spec", 500, 900)):
            for i in range(12):
                ids = tuple(int(t) for t in gen.integers(lo, hi, size=16))
                append_record(
                    fh,
                    RequestRecord(
                        series=series,
                        replicate=0,
                        prompt_id=f"p{i}",
                        ok=True,
                        token_ids=ids,
                        text="x",
                    ),
                )
            append_record(
                fh,
                RequestRecord(
                    series=series,
                    replicate=0,
                    prompt_id="p0",
                    ok=True,
                    phase="warmup",
                    token_ids=(1,),
                ),
            )
    return run, prompts


def test_score_run_launches_the_target_without_speculation_and_scores_every_output(tmp_path):
    run, prompts = write_run(tmp_path)
    params = make_params(tmp_path, prompts)
    out = score_run(params, run)
    assert out == run / "output_scores.jsonl"
    scores = read_scores(out)
    assert len(scores) == 24 and all(s.ok for s in scores)
    argv = json.loads((run / "launches" / "scoring" / "command.json").read_text())["argv"]
    assert "--speculative-config" not in argv and str(FAKE_SCORER) in argv
    info = json.loads((run / "launches" / "scoring" / "scoring.json").read_text())
    assert info["scored"] == 24 and info["failed"] == 0
    assert "fake scorer argv" in (run / "launches" / "scoring" / "server.log").read_text()
    assert not (run / "server.pid").exists()
    res = compare_plausibility(scores, control="control", experiment="spec", rng=rng())
    assert res.implausible and res.n_degenerate_experiment == 12
    # a second call finds nothing new: no server start, the file is unchanged
    before = out.read_text()
    (run / "launches" / "scoring" / "server.log").unlink()
    score_run(params, run)
    assert out.read_text() == before
    assert not (run / "launches" / "scoring" / "server.log").exists()


def test_score_run_uses_the_controls_external_endpoint(tmp_path, scorer):
    run, prompts = write_run(tmp_path)
    params = make_params(tmp_path, prompts, base_url=scorer.url)
    scores = read_scores(score_run(params, run))
    assert len(scores) == 24 and all(s.ok for s in scores)
    assert scorer.calls["/tokenize"] == 12
    assert not (run / "launches" / "scoring" / "server.log").exists()
    results = compare_run(run, params)
    assert set(results) == {"spec"}
    assert results["spec"].implausible and results["spec"].margin_nats == 0.5


def test_compare_run_of_an_unscored_run_is_empty(tmp_path):
    run, prompts = write_run(tmp_path)
    assert compare_run(run, make_params(tmp_path, prompts)) == {}


@pytest.mark.parametrize(
    ("temperature", "mode", "expected"),
    [(0.0, "auto", False), (0.8, "auto", True), (0.0, "on", True), (0.8, "off", False)],
)
def test_scoring_enabled(tmp_path, temperature, mode, expected):
    params = make_params(tmp_path, tmp_path / "p.jsonl", temperature=temperature, score=mode)
    assert scoring_enabled(params) is expected


def test_outputs_of_several_load_levels_are_distinct_outputs(scorer):
    recs = [
        RequestRecord(
            series="c",
            replicate=0,
            prompt_id="p0",
            repeat=0,
            level=lvl,
            ok=True,
            token_ids=(11 + lvl, 12),
        )
        for lvl in (0, 1)
    ]
    items = items_from_records(recs, {"p0": list(MSGS)})
    assert [i.key for i in items] == [("c", 0, 0, "p0", 0), ("c", 0, 1, "p0", 0)]
    got = score_outputs(scorer.url, items, model="m")
    assert [(s.level, s.mean_logprob) for s in got] == [
        (0, pytest.approx(expected_mean((11, 12)))),
        (1, pytest.approx(expected_mean((12, 12)))),
    ]
    path_scores = {s.key for s in got}
    assert path_scores == {i.key for i in items}


# ---------------------------------------------------------------- calibration residual


def test_expected_logprob_tempers_then_cuts_to_top_p():
    lp = np.log([0.5, 0.3, 0.2])
    assert expected_logprob(lp, temperature=1.0, top_p=1.0) == pytest.approx(
        float(np.dot([0.5, 0.3, 0.2], lp))
    )
    # top_p 0.6: 0.5 is below it, 0.3 crosses it and is kept, 0.2 is cut
    assert expected_logprob(lp, temperature=1.0, top_p=0.6) == pytest.approx(
        float(np.dot([0.625, 0.375], lp[:2]))
    )
    # a low temperature concentrates q on the most likely token
    assert expected_logprob(lp, temperature=0.05, top_p=1.0) == pytest.approx(lp[0], abs=1e-3)
    w = np.array([0.5, 0.3, 0.2]) ** (1 / 0.8)
    q = w / w.sum()
    assert expected_logprob(lp, temperature=0.8, top_p=1.0) == pytest.approx(float(q @ lp))


def test_residual_is_near_zero_for_a_correct_sampler_and_positive_for_greedy(scorer):
    temperature, top_p = 0.8, 1.0
    toks = np.array(sorted(DIST))
    w = np.array([DIST[t] for t in toks]) ** (1 / temperature)
    q = w / w.sum()
    gen = np.random.default_rng(3)
    sampled = [
        item(prompt_id=f"s{i}", ids=tuple(int(t) for t in gen.choice(toks, 64, p=q)))
        for i in range(20)
    ]
    greedy = [item(series="spec", prompt_id=f"s{i}", ids=(100,) * 64) for i in range(20)]
    got = score_outputs(
        scorer.url, sampled + greedy, model="m", temperature=temperature, top_p=top_p
    )
    ok = [s.mean_residual for s in got[:20]]
    bad = [s.mean_residual for s in got[20:]]
    e_q = expected_logprob([logprob_of(int(t)) for t in toks], temperature=temperature, top_p=top_p)
    assert bad == pytest.approx([math.log(0.5) - e_q] * 20)
    assert bad[0] > 0.5
    assert abs(float(np.mean(ok))) < 0.1
    res = compare_plausibility(
        got,
        control="control",
        experiment="spec",
        metric="mean_residual",
        margin_nats=0.2,
        rng=rng(),
    )
    assert res.metric == "mean_residual" and res.word == "more_likely" and res.shifted
    # without a temperature there is no residual, and the log-prob metric stays as before
    [plain] = score_outputs(scorer.url, [greedy[0]], model="m")
    assert plain.mean_residual is None and plain.mean_logprob == pytest.approx(math.log(0.5))


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="`metric` must be one of"):
        compare_plausibility(
            synth("control", BASE) + synth("spec", BASE),
            control="control",
            experiment="spec",
            metric="median",
            rng=rng(),
        )


# ------------------------------------------------------------------------ top-p nucleus


def test_outside_nucleus_follows_vllms_top_p_rule_on_a_complete_distribution():
    lp = np.log([0.5, 0.2, 0.15, 0.1, 0.05])
    # top_p 0.6 at T=1: 0.5 (nothing above) and 0.2 (0.5 above < 0.6) are kept, 0.15 is not
    got = [outside_nucleus(lp, x, temperature=1.0, top_p=0.6) for x in lp]
    assert got == [False, False, True, True, True]
    # at top_p 1 every token is possible
    assert not any(outside_nucleus(lp, x, temperature=1.0, top_p=1.0) for x in lp)
    # a lower temperature sharpens q: 0.2 is now outside a 0.6 nucleus
    assert outside_nucleus(lp, lp[1], temperature=0.3, top_p=0.6)
    # the tolerance: 0.7 above 0.15 is within 0.6 + 0.2, so it is not called outside
    assert not outside_nucleus(lp, lp[2], temperature=1.0, top_p=0.6, tolerance=0.2)


def test_outside_nucleus_never_claims_a_token_the_full_distribution_keeps():
    gen = np.random.default_rng(11)
    claimed = 0
    for _ in range(300):
        p = np.sort(gen.dirichlet(np.full(50, gen.uniform(0.05, 1.0))))[::-1]
        p = np.clip(p, 1e-300, None)
        temperature, top_p, k = gen.uniform(0.2, 1.0), gen.uniform(0.5, 0.99), gen.integers(1, 20)
        w = p ** (1 / temperature)
        q = w / w.sum()
        above = np.cumsum(q) - q  # exact tempered mass above each token
        for j in range(p.size):
            if outside_nucleus(np.log(p[:k]), np.log(p[j]), temperature=temperature, top_p=top_p):
                claimed += 1
                assert above[j] >= top_p, (temperature, top_p, k, j)
    assert claimed > 1000  # the bound is not so loose that it never decides


def test_outside_nucleus_refuses_temperatures_it_cannot_bound():
    with pytest.raises(ValueError, match="temperature"):
        outside_nucleus([-0.1], -3.0, temperature=1.5, top_p=0.9)


def test_scores_count_tokens_outside_the_nucleus_only_when_top_p_cuts(scorer):
    # DIST: 0.5, 0.2, 0.15, 0.1, 0.05; at T=1, top_p=0.6 the nucleus is {100, 101}
    inside = item(prompt_id="in", ids=(100, 101, 100, 101))
    outside = item(series="spec", prompt_id="in", ids=(100, 103, 104, 102))
    got = score_outputs(scorer.url, [inside, outside], model="m", temperature=1.0, top_p=0.6)
    assert [s.n_outside_nucleus for s in got] == [0, 3]
    loose = score_outputs(scorer.url, [outside], model="m", temperature=1.0, top_p=1.0)
    assert loose[0].n_outside_nucleus is None and loose[0].mean_residual is not None
    hot = score_outputs(scorer.url, [outside], model="m", temperature=1.2, top_p=0.6)
    assert hot[0].ok and hot[0].n_outside_nucleus is None  # no bound above T = 1
    [greedy] = score_outputs(scorer.url, [outside], model="m")
    assert greedy.n_outside_nucleus is None


def synth_nucleus(series, outside_prompts, n=24):
    return [
        OutputScore(series, 0, f"p{i:02d}", 0, mean_logprob=float(BASE[i]), n_tokens=32,
                    n_outside_nucleus=2 if i in outside_prompts else 0)
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.filterwarnings("ignore::speclib.analysis.stats.base.DegenerateDataWarning")
def test_tokens_outside_the_nucleus_make_a_series_implausible_whatever_its_log_prob():
    scores = synth_nucleus("control", set()) + synth_nucleus("spec", set(range(8)))
    res = compare_plausibility(scores, control="control", experiment="spec", rng=rng())
    assert res.estimate == pytest.approx(0.0)  # the mean log-prob sees nothing
    assert res.implausible and res.shifted
    assert (res.n_outside_control, res.n_outside_experiment) == (0, 8)
    assert res.nucleus_p_value == pytest.approx(0.5**8)
    assert "8 prompt(s) with tokens outside it in the experiment only" in res.reason
    json.dumps(res.to_dict(), allow_nan=False)


@pytest.mark.filterwarnings("ignore::speclib.analysis.stats.base.DegenerateDataWarning")
def test_few_or_shared_nucleus_misses_are_not_flagged():
    few = synth_nucleus("control", set()) + synth_nucleus("spec", {3, 4})
    res = compare_plausibility(few, control="control", experiment="spec", rng=rng())
    assert not res.implausible and res.nucleus_p_value == pytest.approx(0.25)
    shared = synth_nucleus("control", set(range(8))) + synth_nucleus("spec", set(range(9)))
    res = compare_plausibility(shared, control="control", experiment="spec", rng=rng())
    assert not res.implausible and res.nucleus_p_value == pytest.approx(0.5)
    plain = synth("control", BASE) + synth("spec", BASE + 0.01)
    res = compare_plausibility(plain, control="control", experiment="spec", rng=rng())
    assert res.n_outside_experiment is None and res.nucleus_p_value is None
    assert "nucleus" not in res.reason
