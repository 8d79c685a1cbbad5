"""The one renderer of reasons (speclib/core/reason_text.py): every code renders in every
style from its values, a few golden sentences, and the words of a reason survive
summary.json (data in, the same words out). The kit's other tests assert codes and numbers;
the rendered text is checked here."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from speclib.core.reason_text import STYLES, TEMPLATES, interval_label, render, short_text
from speclib.core.reasons import Code, Reason

pytestmark = pytest.mark.unit

_TPOT = {"ratio": 0.812, "low": 0.78, "high": 0.85, "level": 0.975, "method": "blocks",
         "reference": "controls", "df": 3, "mixed": False, "n_pairs": 40, "n_blocks": 4,
         "margin": 0.05}  # fmt: skip
_LATENCY = {**_TPOT, "metric": "ttft", "median_delta_s": 0.0042, "limit": 1.1, "min_rise_s": 0.05}
_SEG = {"cut": "category", "ratio": 0.5, "low": 0.47, "high": 0.54, "share": 0.5}
_SEGS = [{**_SEG, "segment": "echo"}, {**_SEG, "segment": "fresh", "ratio": 1.41, "low": 1.29,
                                       "high": 1.54}]  # fmt: skip
_CHECK = {"resolution": 0.0935, "margin": 0.05, "level": 0.95, "n_blocks": 6, "df": 5,
          "block_sd_log": 0.083, "word": "inconclusive", "excludes_one": False,
          "false_effect": False, "blocks_needed": 15, "more_blocks": 9, "max_blocks": 1000,
          "ratio": 0.955, "low": 0.873, "high": 1.044}  # fmt: skip
_COUNTS = {"failed_experiment": 3, "n_experiment": 100, "failed_control": 1, "n_control": 100}
_MEMORY = Reason(Code.MEMORY, {"peak_gib": 9.0, "limit_gib": 8.0})

SAMPLES = {
    Code.RULE_ADOPT: {**_TPOT},
    Code.RULE_EQUIVALENT: {**_TPOT, "side": "above_one"},
    Code.RULE_WORSE: {**_TPOT},
    Code.RULE_INCONCLUSIVE: {
        **_TPOT,
        "extra_pairs": None,
        "extra_blocks": 3,
        "unit": "blocks",
        "target": "adopt",
    },
    Code.NO_VALID_PAIRS: {},
    Code.SEGMENT_UNDECIDED: {
        "cut": "category",
        "segment": "echo",
        "why": Reason(Code.TOO_FEW, {"what": "blocks", "need": 2}),
    },
    Code.NO_DF: {},
    Code.ZERO_WIDTH: {},
    Code.MIX_BLOCKS: {},
    Code.TOO_FEW: {"what": "pairs", "need": 6},
    Code.ONE_PAIR: {},
    Code.PERCENTILE_EXPANDED: {
        "factor": 1.204,
        "obstacle": Reason(Code.BCA_FEW_PAIRS, {"minimum": 10, "n": 5}),
    },
    Code.BCA_FEW_PAIRS: {"minimum": 10, "n": 5},
    Code.BCA_ALL_EQUAL: {},
    Code.BCA_HEAVY_TIES: {"count": 15, "n": 20},
    Code.BCA_NOT_FINITE: {"messages": "no message"},
    Code.ERRORS_UNCOUNTED: {"control_rate": 0.01, "experiment_rate": 0.03, "allowed": 0.02},
    Code.ERRORS_NONE_SENT: {**_COUNTS},
    Code.ERRORS_BOUNDS: {
        **_COUNTS,
        "level": 0.95,
        "low": -0.01,
        "high": 0.06,
        "allowed": 0.02,
        "outcome": "unclear",
    },
    Code.OUTPUTS: {"wrong": 1, "agreement": 0.9, "minimum": 0.99},
    Code.MEMORY: dict(_MEMORY.values),
    Code.LATENCY: {**_LATENCY, "outcome": "too_wide"},
    Code.TTFT_LAG: {"load": "c=32", "spread_ms": 40.5, "tolerance_ms": 10.0},
    Code.MODE_EXCLUDED: {"launch": "spec-r1", "problems": ["speculation off"]},
    Code.BENCH_CHECKS_FAILED: {"failed": [["late reads", "40 % of streams read late"]]},
    Code.AA_FALSE_EFFECT: {"ratio": 0.9, "low": 0.85, "high": 0.94, "word": "adopt"},
    Code.UNSCORED: {},
    Code.GATE_FAILED: {"gate": "memory", "detail": _MEMORY},
    Code.GATE_NOT_ASSESSED: {"gate": "memory", "detail": _MEMORY},
    Code.CORRECTNESS_UNKNOWN: {"why": Reason(Code.UNSCORED)},
    Code.ADOPT_RULED_OUT: {},
    Code.ARM_FAILED: {"arm": "draft-k4", "cause": "OSError: no such model"},
    Code.MIXED: {
        "arm": "ngram-k4",
        "load": "c=1",
        "cut": "category",
        "segments": _SEGS,
        "pooled_ratio": 0.95,
        "pooled_word": "inconclusive",
        "apart": None,
        "fast": "echo",
        "slow": "fresh",
        "undecided": [],
        "for_mix": False,
    },
    Code.UNEVEN: {
        "arm": "ngram-k4",
        "load": "c=1",
        "cut": "category",
        "segments": _SEGS,
        "pooled_word": "adopt",
        "apart": [2.82, 2.4, 3.3],
        "fast": "echo",
        "slow": "fresh",
        "for_mix": False,
    },
    Code.PAIRS_LEFT_OUT: {"dropped": {"spec failed": 2, "unmatched": 1}, "used": 37},
    Code.INSTRUMENT_SENSITIVITY: {"client": 0.94, "server": 0.97},
    Code.BENCH_CHECK: {**_CHECK},
    Code.BENCH_RESOLUTION: {**_CHECK},
    Code.CALIBRATION: {
        "target": 0.1,
        "resolution": 0.081,
        "reached": True,
        "blocks": 4,
        "blocks_needed": 4,
        "level": 0.95,
        "max_blocks": 1000,
    },
    Code.SWEEP_RECOMMENDED: {
        "arm": "k2",
        "value": {"num_speculative_tokens": 2},
        "best": "k4",
        "to_best": [1.021, 0.99, 1.04],
        "level": 0.95,
        "margin": 0.05,
        "smaller": ["k1"],
    },
    Code.SWEEP_NO_K_PAYS: {"family": "draft", "arms": [["k1", "equivalent"], ["k4", "worse"]]},
    Code.SWEEP_UNDECIDED: {"paying": ["k1"], "margin": 0.05, "best": "k4"},
    Code.SWEEP_NO_DATA: {},
}


def test_every_code_has_one_template_and_a_sample():
    assert set(TEMPLATES) == set(Code) == set(SAMPLES)


@pytest.mark.parametrize("code", list(Code))
@pytest.mark.parametrize("style", STYLES)
def test_every_code_renders_from_its_values_in_every_style(code, style):
    text = render(Reason(code, SAMPLES[code]), style)
    assert text and text == text.strip()
    assert not any(bad in text for bad in ("{", "}", "None", "nan", "Reason(", "Code."))
    if style == "html":
        assert "<" not in text.replace("&lt;", "")


@pytest.mark.parametrize("code", list(Code))
def test_the_words_survive_summary_json(code):
    """A reason written to summary.json (``reason_codes``) and read back renders the same
    words: the readers render the data, never parse the words."""
    reason = Reason(code, SAMPLES[code])
    back = Reason.from_dict(json.loads(json.dumps(reason.to_dict())))
    assert back == reason and render(back) == render(reason)


def test_an_unknown_code_is_refused_by_name():
    with pytest.raises(ValueError, match="'great'"):
        Reason.from_dict({"code": "great", "values": {}})
    with pytest.raises(ValueError, match="`style`"):
        render(Reason(Code.NO_DF), "latex")  # type: ignore[arg-type]


# ---------------------------------------------------------------- golden sentences


def test_the_rule_says_where_an_equivalent_interval_lies():
    slower = render(Reason(Code.RULE_EQUIVALENT, {**_TPOT, "side": "above_one"}))
    assert slower.endswith(
        ": equivalent within ±δ = ±0.05, but measurably slower: the whole interval is above 1 "
        "(inside (1 − δ, 1 + δ) = (0.950, 1.050))"
    )
    faster = render(Reason(Code.RULE_EQUIVALENT, {**_TPOT, "side": "below_one"}))
    assert "measurably faster, but by less than δ = 0.05: the whole interval is below 1" in faster
    plain = render(Reason(Code.RULE_EQUIVALENT, {**_TPOT, "side": "covers_one"}))
    assert plain.endswith(": inside (1 − δ, 1 + δ) = (0.950, 1.050)")


def test_the_rule_opens_with_the_interval_and_lead_false_leaves_it_out():
    reason = Reason(Code.RULE_INCONCLUSIVE, SAMPLES[Code.RULE_INCONCLUSIVE])
    assert render(reason) == (
        "TPOT ratio 0.812 (97.5% CI 0.780–0.850, blocks (own-arm paired t vs mean of control "
        "and aa, df=3), 40 pairs, 4 launch(es) per arm): no rule applies at δ = 0.050; about 3 "
        "more blocks would likely reach 'adopt' if the estimate holds"
    )
    assert render(reason, lead=False) == (
        "no rule applies at δ = 0.050; about 3 more blocks would likely reach 'adopt' if the "
        "estimate holds"
    )


def test_an_interval_is_named_by_its_method_reference_and_df():
    assert interval_label("blocks", "control", 2, False) == (
        "blocks (own-arm paired t vs control, df=2)"
    )
    assert interval_label("blocks", "controls", 1, True) == (
        "blocks (mix-weighted own-arm paired t vs mean of control and aa, df=1)"
    )
    assert interval_label("no_blocks", None, 0, False) == "blocks (none)"
    assert interval_label("two-stage", None, None, False) == "two-stage"


def test_a_failed_gate_says_its_name_and_what_was_compared():
    assert render(Reason(Code.GATE_FAILED, SAMPLES[Code.GATE_FAILED])) == (
        "gate 'memory' failed: peak 9.00 GiB (limit 8.00 GiB)"
    )
    latency = render(Reason(Code.LATENCY, {**_LATENCY, "outcome": "no_df"}))
    assert latency.endswith(": no degrees of freedom (one block): the interval cannot tell")
    assert "median change +4.2 ms" in latency and "rises by more than 50 ms" in latency


def test_the_mixed_sentence_names_the_segments_and_what_is_undecided():
    values = SAMPLES[Code.MIXED]
    assert render(Reason(Code.MIXED, values)) == (
        "mixed: ngram-k4 at c=1 is ×0.50 [0.47, 0.54] on echo (50 % of requests) and ×1.41 "
        "[1.29, 1.54] on fresh (50 %) (the traffic's ratio ×0.95, inconclusive; segments by "
        "category)"
    )
    apart = {**values, "apart": [2.82, 2.4, 3.3], "undecided": ["fresh"], "for_mix": True}
    text = render(Reason(Code.MIXED, apart), lead=False)
    assert text.startswith("ngram-k4 at c=1 is ×0.50 [0.47, 0.54] on echo (50 % of your mix)")
    assert "; fresh takes ×2.82 [2.40, 3.30] the time per token of echo, beyond δ, though " \
        "fresh alone is not decided (" in text  # fmt: skip
    both = render(Reason(Code.MIXED, {**apart, "undecided": ["echo", "fresh"]}))
    assert ", though neither alone is decided (" in both
    also = render(Reason(Code.MIXED, {**values, "also": ["c=4", "c=8"]}))
    assert also.endswith("; mixed too at c=4, c=8")
    assert short_text(Reason(Code.MIXED, values)) == "mixed: echo ×0.50, fresh ×1.41"


def test_the_bench_check_and_the_calibration_in_words():
    assert render(Reason(Code.BENCH_CHECK, _CHECK)) == (
        "bench check: resolution ±9.3 % (δ = ±5 %) at 95 % over 6 blocks; 9 more blocks would "
        "likely make it equivalent (15 in all, t at df = blocks − 1, block SD 0.083 held); the "
        "interval 0.873–1.044 covers 1: the A/A arm shows no effect"
    )
    broken = {**_CHECK, "word": "worse", "excludes_one": True, "false_effect": True}
    assert "a false effect, this bench is untrustworthy" in render(Reason(Code.BENCH_CHECK, broken))
    one = {**_CHECK, "resolution": None, "df": 0}
    assert "not reachable yet: one block has no degrees of freedom" in render(
        Reason(Code.BENCH_CHECK, one)
    )
    assert render(Reason(Code.BENCH_RESOLUTION, _CHECK)) == (
        "resolution ±9.3 % (δ = ±5 %): 9 more block(s) would likely make it equivalent"
    )
    done = Reason(Code.CALIBRATION, SAMPLES[Code.CALIBRATION])
    assert render(done) == (
        "calibration: A/A resolution ±8.1 % at 95 % after 4 block(s), target ±10.0 % reached"
    )
    assert render(done, lead=False).startswith("A/A resolution ±8.1 %")
    short = Reason(Code.CALIBRATION, {**done.values, "reached": False, "blocks_needed": 5})
    assert render(short).endswith("not reached: would need 5 blocks (t at df = blocks − 1, the "
                                  "observed block SD held)")  # fmt: skip


def test_a_bootstrap_note_says_why_bca_was_not_used():
    note = Reason(Code.PERCENTILE_EXPANDED, SAMPLES[Code.PERCENTILE_EXPANDED])
    assert render(note) == (
        "BCa not used: fewer than 10 pairs (5); percentile interval expanded by 1.204 "
        "(Hesterberg 2015)"
    )
    plain = Reason(Code.PERCENTILE_EXPANDED, {"factor": 1.204, "obstacle": None})
    assert render(plain) == "percentile interval expanded by 1.204 (Hesterberg 2015)"


def test_html_escapes_and_markdown_keeps_asterisks_literal():
    cause = Reason(Code.ARM_FAILED, {"arm": "a<b>", "cause": "x * y & z"})
    assert render(cause, "html") == "every launch of a&lt;b&gt; failed: x * y &amp; z"
    assert render(cause, "markdown") == "every launch of a<b> failed: x \\* y & z"
    assert render(cause) == "every launch of a<b> failed: x * y & z"


def test_an_infinite_bound_read_back_from_json_renders_as_before():
    """summary.json holds no infinity: a reason's non-finite number is written by name and
    read back as the number, so the words rendered from the data are the words before."""
    reason = Reason(Code.RULE_INCONCLUSIVE, {**SAMPLES[Code.RULE_INCONCLUSIVE], "low": 0.0,
                                             "high": math.inf, "extra_blocks": None})  # fmt: skip
    data = json.loads(json.dumps(reason.to_dict(), allow_nan=False))
    assert data["values"]["high"] == "inf"
    assert render(Reason.from_dict(data)) == render(reason) and "0.000–inf" in render(reason)
    seg = {**_SEG, "segment": "echo", "high": None}  # a segment with no interval at all
    assert "×0.50 on echo" in render(Reason(Code.MIXED, {**SAMPLES[Code.MIXED], "segments": [seg]}))


# what reads a verdict's words back: a string method or a substring test on a reason's text
_PARSE = re.compile(
    r"\b(reasons?|detail|sentence|note|headline|why|method|calibration)\b"
    r"(\[[^]]*\]|\.\w+)*(\s+or\s+\"\")?\)?"
    r"\.(startswith|removeprefix|removesuffix|endswith|split|partition)\("
    r"|[\"']\s+in\s+(\w+\.)*(reasons?|detail|sentence|headline)\b(?!_)"
)


def test_nothing_outside_the_renderer_reads_a_reasons_words_back():
    """The analysis, the report and the terminal's verdicts decide on codes and numbers
    (speclib/core/reasons.py); only speclib/core/reason_text.py holds the words."""
    root = Path(__file__).resolve().parents[2] / "speclib"
    files = [*root.glob("report/*.py"), *root.glob("analysis/**/*.py"),
             root / "app" / "verdicts.py", root / "app" / "cli.py"]  # fmt: skip
    found = [
        f"{f.relative_to(root)}:{i}: {line.strip()}"
        for f in files
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if _PARSE.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []
    assert _PARSE.search('if reason.startswith("TPOT ratio "):')  # the check can fail
    assert _PARSE.search('more = "more blocks" in c.reason')
    assert _PARSE.search("name = detail.split(':', 1)[0]")
    assert _PARSE.search('(a.sentence or "").startswith(kind)')
    assert _PARSE.search('calibration["text"].removeprefix("calibration: ")')


def test_every_final_word_has_one_meaning_and_an_unknown_word_is_refused():
    from speclib.core.reason_text import word_meaning
    from speclib.core.verdict_words import Word

    gate = Reason(Code.ARM_FAILED, {"arm": "draft-k4", "cause": "CUDA out of memory"})
    said = {
        w: word_meaning(w, load="c=8", margin=0.05, failed_gates=["ttft", "e2e"], failure=[gate])
        for w in Word
    }
    assert all(said.values()) and not any("{" in t for t in said.values())
    assert "c=8" in said[Word.ADOPT] and "±5%" in said[Word.EQUIVALENT]
    assert said[Word.REJECT].endswith("ttft; e2e") and "CUDA out of memory" in said[Word.FAILED]
    assert said[Word.MIXED] == "mixed"  # without the segments' reason
    with pytest.raises(ValueError, match="verdict word"):
        word_meaning("maybe")


def test_a_sweep_recommendation_in_words():
    rec = SAMPLES[Code.SWEEP_RECOMMENDED]
    assert render(Reason(Code.SWEEP_RECOMMENDED, rec)) == (
        "k2 (num_speculative_tokens = 2): ADOPT and its TPOT is 1.021× the best arm k4's "
        "(95% CI 0.990–1.040, Holm), within δ = 0.05; smaller k1 pay(s) but not within δ of "
        "the best"
    )
    best = render(Reason(Code.SWEEP_RECOMMENDED, {**rec, "to_best": None, "smaller": []}))
    assert best == "k2 (num_speculative_tokens = 2): ADOPT and it is the best arm"
