"""The traffic's TPOT ratio, what every verdict about the traffic uses (issue 53).

On an H100 an n-gram arm was ×0.31 on "echo" prompts and ×1.64–1.83 on "fresh" ones, half
the traffic each: the kit's pooled figure, a geometric mean of per-request ratios, read
×0.71–0.84 ("adopt") while the traffic's mean TPOT rose up to 10 %. Known truth here:
synthetic run folders of that kind (every answer the same length), whose traffic's ratio
is the mean of the two effects; the block-model interval of the traffic's ratio must cover
it in repeated simulated runs at the nominal level, and the old figure must miss it.
"""

from __future__ import annotations

import io
import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from speclib.analysis.stats.block_summary import summarize_mean_ratios
from speclib.analysis.stats.t_interval import t_interval, welch_t_interval
from speclib.core.estimand import DEFINITIONS, LABELS, Estimand
from speclib.core.run_summary import read_summary
from tests.benchmarks.estimand_sim import coverage
from tests.unit.test_segments import _write_run

pytestmark = pytest.mark.unit


def _comparison(summary: dict, arm: str = "ngram-k4") -> dict:
    return next(c for c in summary["comparisons"] if c["experiment"] == arm)


# ------------------------------------------------------------------ the issue's run


def test_the_issues_run_gets_the_traffics_ratio_not_the_geometric_one(
    tmp_path, monkeypatch
) -> None:
    """Echo ×0.3, fresh ×1.65, equal shares and lengths: the traffic's ratio is ×0.975 with
    an interval, the typical request's ×0.70 beside it, named; no adopt; routing compares a
    mean TPOT with a mean TPOT."""
    from speclib.analysis.run_analysis import analyze_run
    from speclib.app.verdicts import print_verdicts
    from speclib.report.conclusion import conclusion, conclusion_parts
    from speclib.report.sections import answer_html, verdict_table_html

    run = _write_run(tmp_path, effect={"echo": 0.3, "fresh": 1.65}, blocks=3)
    an = analyze_run(run)
    summary = json.loads((run / "summary.json").read_text())
    comp = _comparison(summary)
    traffic, geometric = (0.3 + 1.65) / 2, math.sqrt(0.3 * 1.65)
    assert comp["tpot_estimand"] == "traffic" and summary["analysis"]["tpot_estimand"] == "traffic"
    low, high = comp["tpot_ratio_ci"]
    assert comp["tpot_ratio"] == pytest.approx(traffic, rel=0.03)
    assert low < traffic < high and not low < geometric < high
    means = comp["mean_tpot_experiment_s"] / comp["mean_tpot_control_s"]
    assert comp["tpot_ratio"] == pytest.approx(means, rel=0.02)  # the ratio of the shown means
    typical = comp["tpot_ratios"]["typical_request"]
    assert typical["estimand"] == "typical_request"
    assert typical["estimate"] == pytest.approx(geometric, rel=0.03)
    assert comp["tpot_ratios"]["traffic"]["estimate"] == comp["tpot_ratio"]
    per_token = comp["tpot_ratios"]["per_token"]  # equal lengths: the traffic's own
    assert per_token["estimate"] == pytest.approx(comp["tpot_ratio"], rel=1e-9)
    assert comp["answer_lengths_differ"] is False
    assert comp["pooled_decision"] != "adopt" and comp["decision"] == "mixed"
    assert set(summary["analysis"]["estimands"]) == {"traffic", "per_token", "typical_request"}
    # routing compares like with like: one deployment for all pays nothing (×1.00, off)
    advice = summary["answer"]["deploy"]["advice"][0]["text"]
    echo = next(
        s
        for s in summary["answer"]["arms"][0]["segments"]
        if (s["cut"], s["segment"]) == ("category", "echo")
    )
    routed = 0.5 * echo["estimate"] + 0.5
    assert f"expected TPOT ×{routed:.2f} for the traffic" in advice
    assert "against ×1.00 for one deployment for all (speculation off)" in advice
    # the first screen says which figure is which
    head = answer_html(an)
    assert "Which ratio is which" in head and "<b>the typical request</b>: the geometric" in head
    table = verdict_table_html(an)
    assert "The traffic's TPOT ratio" in table and LABELS[Estimand.TYPICAL] in table
    text = conclusion(an)
    assert f"the typical request ×{typical['estimate']:.2f} (geometric mean" in text
    assert "Best for this traffic as a whole" not in conclusion_parts(an)[0]
    monkeypatch.setenv("COLUMNS", "160")
    out = io.StringIO()
    print_verdicts(read_summary(run / "summary.json"), stream=out)
    shown = out.getvalue()
    assert "TPOT ratio = the traffic's" in shown and "typical = the typical request" in shown
    assert f"×{typical['estimate']:.3f}" in shown and "per token" not in shown.split("ratios:")[0]


def test_where_the_traffic_gets_slower_the_pooled_word_is_not_adopt(tmp_path) -> None:
    """The issue's c=16: echo ×0.31, fresh ×1.83, the traffic 7 % slower (geometric ×0.75)."""
    from speclib.analysis.run_analysis import analyze_run

    run = _write_run(tmp_path, effect={"echo": 0.31, "fresh": 1.83}, blocks=3)
    analyze_run(run)
    comp = _comparison(json.loads((run / "summary.json").read_text()))
    assert comp["tpot_ratio"] == pytest.approx((0.31 + 1.83) / 2, rel=0.03)
    assert comp["tpot_ratios"]["typical_request"]["estimate"] < 0.8
    assert comp["pooled_decision"] in ("worse", "inconclusive")


def test_with_answers_of_different_lengths_the_token_weighted_ratio_is_shown_beside(
    tmp_path, monkeypatch
) -> None:
    """Long answers on the arm's slow category: the token-weighted ratio (total decode time
    over decode tokens) differs from the traffic's, and the terminal shows it."""
    from speclib.analysis.run_analysis import analyze_run
    from speclib.app.verdicts import print_verdicts

    run = _write_run(tmp_path, effect={"echo": 0.5, "fresh": 1.2}, blocks=3)
    rows = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    for r in rows:  # fresh answers 49 tokens, echo 17: stretch the fresh streams
        if r["category"] == "fresh":
            step = r["chunk_offsets_s"][1] - r["chunk_offsets_s"][0]
            extra = [r["chunk_offsets_s"][-1] + step * (i + 1) for i in range(32)]
            r["chunk_offsets_s"] += extra
            r["chunk_tokens"] += [1] * 32
            r["output_tokens"] += 32
            r["token_ids"] = list(range(r["output_tokens"]))
            r["done_offset_s"] = r["chunk_offsets_s"][-1]
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    analyze_run(run)
    summary = json.loads((run / "summary.json").read_text())
    comp = _comparison(summary)
    assert comp["answer_lengths_differ"] is True
    per_token = comp["tpot_ratios"]["per_token"]["estimate"]
    # decode tokens 16 (echo) and 48 (fresh): fresh weighs three times as much
    assert per_token == pytest.approx((16 * 0.5 + 48 * 1.2) / 64, rel=0.05)
    assert comp["tpot_ratio"] == pytest.approx((0.5 + 1.2) / 2, rel=0.05)
    monkeypatch.setenv("COLUMNS", "160")
    out = io.StringIO()
    print_verdicts(read_summary(run / "summary.json"), stream=out)
    assert f"×{per_token:.3f}" in out.getvalue() and "per token =" in out.getvalue()


# ------------------------------------------------------------------------ the mix


def test_every_output_of_an_analysis_with_a_mix_says_the_mix(tmp_path, monkeypatch) -> None:
    """summary.json, --json, the terminal and the report's first screen say the mix, and a
    category the mix leaves out is named."""
    from speclib.analysis.run_analysis import analyze_run
    from speclib.app.verdicts import outcome_json, print_verdicts
    from speclib.report.conclusion import conclusion_parts
    from speclib.report.sections import answer_html, verdict_table_html

    effect = {"echo": 0.3, "fresh": 1.65, "known": 0.6}
    run = _write_run(tmp_path, effect=effect, n={"echo": 6, "fresh": 6, "known": 6}, blocks=3)
    an = analyze_run(run, mix="echo=0.8,fresh=0.2")
    words = (
        "for your mix: echo 80 %, fresh 20 %, known 0 % (left out) "
        "(the run's prompts: 33 / 33 / 33)"
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["mix"]["text"] == words and summary["mix"]["left_out"] == ["known"]
    assert summary["answer"]["mix"]["shares"] == {"echo": 0.8, "fresh": 0.2, "known": 0.0}
    comp = _comparison(summary)
    assert comp["tpot_ratio"] == pytest.approx(0.8 * 0.3 + 0.2 * 1.65, rel=0.05)
    means = comp["mean_tpot_experiment_s"] / comp["mean_tpot_control_s"]  # the mix's means
    assert comp["tpot_ratio"] == pytest.approx(means, rel=0.03)
    result = SimpleNamespace(run_dir=run, report=run / "report.html",
                             summary=run / "summary.json", failed_launches=())  # fmt: skip
    assert json.loads(outcome_json(result, read_summary(result.summary)))["mix"] == words
    monkeypatch.setenv("COLUMNS", "160")
    out = io.StringIO()
    print_verdicts(read_summary(run / "summary.json"), stream=out)
    assert "For your mix: echo 80 %, fresh 20 %, known 0 % (left out)" in out.getvalue()
    assert conclusion_parts(an)[0].startswith("For your mix: echo 80 %, fresh 20 %")
    assert "For your mix: echo 80 %" in answer_html(an)
    assert "for your mix: echo 80 %" in verdict_table_html(an)
    sentence = summary["answer"]["arms"][0]["sentence"]  # the share is the mix's, said so
    assert "on echo (80 % of your mix)" in sentence, sentence
    plain = analyze_run(run, write=False)
    assert plain.answer.mix is None and not conclusion_parts(plain)[0].startswith("For your")


# ------------------------------------------------------------------- the statistics


def test_the_traffic_interval_covers_the_traffics_truth_and_the_old_figure_misses_it() -> None:
    """Echo ×0.3 and fresh ×1.7 at shares 0.2, 0.5, 0.8, the speculative servers ±5 % launch
    to launch and the controls ±0.3 %: the 95 % interval of the traffic's ratio covers its
    truth in 95 % of runs (within 3 standard errors); the typical request's interval, the
    old pooled figure, covers its own truth but almost never the traffic's."""
    rng = np.random.default_rng(53)
    runs, found = 200, []
    for share in (0.2, 0.5, 0.8):
        found.append(coverage(rng, runs=runs, blocks=3, n=24, echo_share=share))
    total = runs * len(found)
    se = math.sqrt(0.95 * 0.05 / total)
    traffic = sum(c.traffic for c in found) / len(found)
    own = sum(c.geometric_own for c in found) / len(found)
    assert abs(traffic - 0.95) <= 3 * se, [c.traffic for c in found]
    assert abs(own - 0.95) <= 3 * se, [c.geometric_own for c in found]
    assert all(c.geometric_traffic < 0.3 for c in found), [c.geometric_traffic for c in found]
    for c in found:  # unbiased for the traffic, the old figure far off it
        assert c.mean_traffic_estimate == pytest.approx(c.mean_traffic_truth, rel=0.01)
        assert abs(c.mean_geometric_estimate / c.mean_traffic_truth - 1) > 0.1


def test_summarize_mean_ratios_by_hand() -> None:
    e = np.array([1.0, 3.0, 2.0, 2.0, 4.0, 8.0])
    c = np.array([2.0, 2.0, 2.0, 2.0, 4.0, 4.0])
    arm, block = ["a"] * 6, [0, 0, 1, 1, 2, 2]
    found = summarize_mean_ratios(e, c, arm=arm, block=block)
    assert found.estimand == Estimand.TRAFFIC
    np.testing.assert_allclose(found.mean[0], np.log([4 / 4, 4 / 4, 12 / 8]))
    assert found.n_pairs.tolist() == [[2, 2, 2]]
    # the delta method: var(e/ē - c/c̄) / n per block, times n
    u = e[:2] / 2 - c[:2] / 2
    assert found.pair_var[0, 0] == pytest.approx(np.var(u, ddof=1))
    # decode tokens: total time over total tokens per side
    k = np.array([1.0, 3.0, 1.0, 1.0, 1.0, 1.0])
    tok = summarize_mean_ratios(e, c, arm=arm, block=block, arm_tokens=k, control_tokens=k)
    assert tok.estimand == Estimand.PER_TOKEN
    assert tok.mean[0, 0] == pytest.approx(math.log((1 * 1 + 3 * 3) / 4 / ((2 + 6) / 4)))
    # a mix: each group's mean at its share; a block without a group of positive share
    # has no value
    group = ["x", "y", "x", "x", "x", "y"]
    mixed = summarize_mean_ratios(e, c, arm=arm, block=block, group=group,
                                  shares={"x": 0.25, "y": 0.75})  # fmt: skip
    assert mixed.mean[0, 0] == pytest.approx(math.log((0.25 * 1 + 0.75 * 3) / 2))
    assert mixed.n_pairs[0, 1] == 0 and math.isnan(mixed.mean[0, 1])
    with pytest.raises(ValueError, match="`shares` must be non-negative and sum to 1"):
        summarize_mean_ratios(e, c, arm=arm, block=block, group=group, shares={"x": 0.5})
    with pytest.raises(ValueError, match="`arm_tpot` must hold positive finite numbers"):
        summarize_mean_ratios(-e, c, arm=arm, block=block)


def test_the_delta_method_variance_is_the_spread_of_the_block_ratio() -> None:
    """The within-block variance the summary reports is that of ``d`` over repeated blocks
    of prompts drawn from one population (as the old per-pair variance of the log-ratios,
    it counts the prompts' spread: prompt-level noise)."""
    rng = np.random.default_rng(5)
    ds, var = [], []
    for _ in range(400):
        base = np.exp(rng.normal(0, 0.3, 40))
        ratio = np.where(rng.random(40) < 0.5, 0.3, 1.7)
        e = base * ratio * np.exp(rng.normal(0, 0.2, 40))
        c = base * np.exp(rng.normal(0, 0.2, 40))
        s = summarize_mean_ratios(e, c, arm=["a"] * 40, block=[0] * 40)
        ds.append(s.mean[0, 0])
        var.append(s.pair_var[0, 0] / 40)
    assert np.mean(var) == pytest.approx(np.var(ds, ddof=1), rel=0.2)


def test_one_t_interval_helper_matches_scipy() -> None:
    from scipy import stats

    x = np.array([0.1, -0.2, 0.05, 0.3, 0.0])
    t = t_interval(x, confidence_level=0.9)
    low, high = stats.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert (t.low, t.high, t.df, t.n) == (pytest.approx(low), pytest.approx(high), 4, 5)
    one = t_interval([0.2], confidence_level=0.95)
    assert not one.decidable and (one.low, one.high) == (-math.inf, math.inf)
    y = np.array([1.0, 1.5, 0.7])
    w = welch_t_interval(x, y, confidence_level=0.95)
    ref = stats.ttest_ind(x, y, equal_var=False).confidence_interval(0.95)
    assert (w.low, w.high) == (pytest.approx(ref.low), pytest.approx(ref.high))
    with pytest.raises(ValueError, match="`confidence_level` must be in"):
        t_interval(x, confidence_level=1.0)


def test_every_estimand_is_named_and_defined() -> None:
    assert set(LABELS) == set(DEFINITIONS) == set(Estimand)
    assert [str(e) for e in Estimand] == ["traffic", "per_token", "typical_request"]
    frame = pd.DataFrame({"e": [1.0]})  # an Estimand is its name in JSON
    assert (
        json.dumps({Estimand.TRAFFIC: str(Estimand.TYPICAL)}) == ('{"traffic": "typical_request"}')
        and len(frame) == 1
    )
