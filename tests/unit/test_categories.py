"""Per-category TPOT ratios with descriptive block-level intervals (issue 20, item 6), and
the one wording of a TPOT ratio: ×0.51 is 49 % less time per token, 1.96× the speed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from speclib.analysis.verdict.categories import (
    CATEGORY_NOTE,
    MIN_CATEGORY_PAIRS,
    SEGMENT_CATEGORY_NOTE,
    category_ratios,
)
from speclib.core.reasons import Code, Reason
from speclib.core.wording import (
    bound_text,
    ratio_words,
    span_text,
    speed_words,
    time_change_words,
)
from speclib.report.conclusion import conf_words

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------------------- wording


@pytest.mark.parametrize(
    ("ratio", "words"),
    [
        (1.0, "×1.00: the same time per token, 1.00× the speed"),
        (0.5, "×0.50: 50 % less time per token, 2.00× the speed"),
        (2.0, "×2.00: 100 % more time per token, 0.50× the speed"),
        (0.51, "×0.51: 49 % less time per token, 1.96× the speed"),
        (1.14, "×1.14: 14 % more time per token, 0.88× the speed"),
        (0.999, "×1.00: the same time per token, 1.00× the speed"),
    ],
)
def test_a_ratio_reads_as_less_time_and_as_speed(ratio: float, words: str) -> None:
    assert ratio_words(ratio) == words
    assert "faster" not in words and "slower" not in words


def test_the_parts_of_the_wording() -> None:
    assert time_change_words(0.51) == "49 % less time per token"
    assert speed_words(0.51) == "1.96× the speed"


def test_a_bound_the_data_cannot_set_reads_short_and_a_level_is_never_certainty() -> None:
    """With df 1 and Holm over many segments a bound ran to forty digits (``×0.00–×1528233...``)
    and past the printed page, at "100 % CI" (2026-12-07)."""
    assert bound_text(0.456) == "0.46" and bound_text(0.0123, low=True, digits=3) == "0.012"
    assert bound_text(1.528233e89) == ">100" and bound_text(2.3e-10, low=True) == "<0.01"
    assert bound_text(None) == "∞" and bound_text(None, low=True) == "–"
    assert bound_text(float("inf")) == "∞" and bound_text(100.0) == "100.00"
    assert span_text(2.3e-10, 4.2e51, sep="–×") == "<0.01–×>100"
    assert [conf_words(x) for x in (0.95, 0.975, 0.997, 0.9996, 0.99996, 0.9999999, 1.0)] == [
        "95 %", "97.5 %", "99.7 %", "99.96 %", "99.996 %", "> 99.99 %", "100 %"
    ]  # fmt: skip


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), None, "x"])
def test_a_ratio_that_is_not_positive_and_finite_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="`ratio` must be a positive finite number"):
        ratio_words(bad)


# ------------------------------------------------------------------- per-category CIs


def _pairs(spec: dict[str, tuple[float, int, int]], *, seed: int = 0, instance: float = 0.02):
    """Pairs of one arm with the control: ``{category: (ratio, blocks, pairs per block)}``,
    an instance effect per block shared by the categories, and per-pair noise."""
    rng = np.random.default_rng(seed)
    shift = rng.normal(0, instance, size=16)
    rows = []
    for cat, (ratio, blocks, per_block) in spec.items():
        for b in range(blocks):
            for i in range(per_block):
                c = float(rng.lognormal(np.log(0.02), 0.2))
                e = c * ratio * float(np.exp(shift[b] + rng.normal(0, 0.03)))
                rows.append({"tpot_s_c": c, "tpot_s_e": e, "category": cat, "block": b,
                             "replicate": b, "prompt_id": f"{cat}{i}"})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_category_with_few_pairs_or_one_block_gets_no_interval() -> None:
    pairs = _pairs({"known": (0.51, 2, 1), "lonely": (0.6, 1, 10), "repeat": (0.49, 3, 4)})
    got = category_ratios(pairs, arm="draft", confidence_level=0.95)
    assert list(got) == ["known", "lonely", "repeat"]
    known, lonely = got["known"], got["lonely"]
    assert known.n_pairs == 2 and known.n_blocks == 2
    assert known.estimate == pytest.approx(0.51, rel=0.1)
    assert not known.has_interval and known.ci_low is None and known.df is None
    assert known.note == Reason(Code.TOO_FEW, {"what": "pairs", "need": MIN_CATEGORY_PAIRS})
    assert not lonely.has_interval and lonely.n_pairs == 10 and lonely.n_blocks == 1
    assert lonely.note == Reason(Code.TOO_FEW, {"what": "blocks", "need": 2})
    assert got["repeat"].has_interval and got["repeat"].df == 2


def test_an_effect_built_into_every_block_gets_an_interval_that_excludes_1() -> None:
    pairs = _pairs({"repeat": (0.5, 4, 5), "unseen": (1.0, 4, 5)}, seed=1)
    pairs.loc[len(pairs)] = {"tpot_s_c": 0.02, "tpot_s_e": 0.0, "category": "repeat",
                             "block": 0, "replicate": 0, "prompt_id": "zero"}  # fmt: skip
    got = category_ratios(pairs, arm="draft", confidence_level=0.95)
    repeat, unseen = got["repeat"], got["unseen"]
    assert repeat.n_pairs == 20 and repeat.n_blocks == 4 and repeat.df == 3  # zero TPOT left out
    assert repeat.ci_low < repeat.estimate < repeat.ci_high < 1
    assert repeat.estimate == pytest.approx(0.5, rel=0.1)
    assert repeat.reference == "control" and repeat.method.startswith("blocks (own-arm paired t")
    assert unseen.ci_low < 1 < unseen.ci_high  # no effect: the interval includes 1
    # same block model as the verdict: the mean over blocks of the log of each block's
    # traffic ratio (mean TPOT of the arm over the control's on the block's pairs)
    sel = pairs[(pairs["category"] == "repeat") & (pairs["tpot_s_e"] > 0)]
    means = sel.groupby("block")[["tpot_s_e", "tpot_s_c"]].mean()
    by_block = np.log(means["tpot_s_e"] / means["tpot_s_c"])
    assert repeat.estimate == pytest.approx(float(np.exp(by_block.mean())))
    wider = category_ratios(pairs, arm="draft", confidence_level=0.99)["repeat"]
    assert wider.ci_low < repeat.ci_low and wider.ci_high > repeat.ci_high


def test_with_an_aa_arm_each_category_is_against_both_controls() -> None:
    pairs = _pairs({"repeat": (0.5, 3, 4), "known": (0.8, 3, 4)}, seed=2)
    aa = _pairs({"repeat": (1.0, 3, 4)}, seed=3)
    got = category_ratios(pairs, arm="draft", confidence_level=0.95, aa_arm="aa", aa_pairs=aa)
    assert got["repeat"].reference == "controls"
    assert got["known"].reference == "control"  # the aa arm has no pairs of that category
    own = category_ratios(aa, arm="aa", confidence_level=0.95, aa_arm="aa")
    assert own["repeat"].reference == "control" and own["repeat"].has_interval


def test_bad_arguments_are_named() -> None:
    pairs = _pairs({"repeat": (0.5, 2, 4)})
    with pytest.raises(ValueError, match="`confidence_level`"):
        category_ratios(pairs, arm="draft", confidence_level=95)
    with pytest.raises(ValueError, match="`min_blocks`"):
        category_ratios(pairs, arm="draft", confidence_level=0.95, min_blocks=1)
    with pytest.raises(ValueError, match="`aa_pairs` needs `aa_arm`"):
        category_ratios(pairs, arm="draft", confidence_level=0.95, aa_pairs=pairs)
    assert category_ratios(pairs.iloc[:0], arm="draft", confidence_level=0.95) == {}


# ----------------------------------------------------------------- summary.json, report


def _write_run(tmp: Path, *, blocks: int = 3) -> Path:
    """An interleaved run of control, aa and spec: spec halves TPOT on "repeat" prompts,
    leaves "unseen" ones alone, and "known" prompts are too few for an interval."""
    from speclib.core.records import RequestRecord, append_record
    from speclib.params.experiment import ExperimentParams

    cats = ["repeat"] * 8 + ["unseen"] * 6 + ["known"] * 1
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(
        json.dumps({"id": f"p{i}", "category": c, "messages": [{"role": "user", "content": "q"}]})
        + "\n" for i, c in enumerate(cats)
    ))  # fmt: skip
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    params = ExperimentParams.model_validate({
        "name": "categories", "server": {"model": str(tmp)},
        "series": [{"name": "control"}, {"name": "spec", "speculative_config": spec}],
        "workload": {"prompts": str(prompts), "replicates": blocks, "max_tokens": 17},
        "protocol": {"aa": True}, "analysis": {"n_resamples": 200},
    })  # fmt: skip
    run = tmp / "run"
    run.mkdir()
    (run / "params.resolved.json").write_text(json.dumps(params.model_dump()))
    rng = np.random.default_rng(5)
    effect = {"repeat": 0.5, "unseen": 1.0, "known": 0.5}
    t = 1.0e9
    with (run / "requests.jsonl").open("w") as fh:
        for b in range(blocks):
            for p, cat in enumerate(cats):
                for arm in ("control", "aa", "spec"):
                    tpot = 0.02 * (effect[cat] if arm == "spec" else 1.0)
                    tpot *= float(np.exp(rng.normal(0, 0.03)))
                    offsets = tuple(0.02 + tpot * i for i in range(17))
                    append_record(fh, RequestRecord(
                        series=arm, replicate=b, prompt_id=f"p{p}", ok=True,
                        launch_id=f"{arm}-r{b}", block=f"r{b}", t_start=t, category=cat,
                        chunk_offsets_s=offsets, chunk_tokens=(1,) * 17,
                        done_offset_s=offsets[-1], output_tokens=17, text=f"answer {p}",
                        token_ids=tuple(range(17)), finish_reason="length",
                    ))  # fmt: skip
                    t += 1.0
    return run


def test_summary_and_report_carry_the_category_intervals(tmp_path: Path) -> None:
    from speclib.analysis.run_analysis import analyze_run
    from speclib.report.sections import conclusion

    run = _write_run(tmp_path)
    an = analyze_run(run)
    summary = json.loads((run / "summary.json").read_text())
    spec = next(c for c in summary["comparisons"] if c["experiment"] == "spec")
    cats = spec["tpot_ratio_by_category"]
    assert spec["tpot_ratio_by_category_note"] == CATEGORY_NOTE
    assert set(cats) == {"known", "repeat", "unseen"}
    repeat = cats["repeat"]
    keys = {"ratio", "ci_low", "ci_high", "confidence_level", "df", "n_pairs", "n_blocks"}
    assert keys | {"reference", "method", "note"} <= set(repeat)
    assert repeat["n_pairs"] == 24 and repeat["n_blocks"] == 3 and repeat["df"] == 2
    assert repeat["reference"] == "controls" and repeat["confidence_level"] == 0.95
    assert repeat["ci_high"] < 1 and repeat["ratio"] == pytest.approx(0.5, rel=0.05)
    known = cats["known"]
    assert known["ci_low"] is None and known["ci_high"] is None and known["df"] is None
    assert known["note"].startswith("too few pairs") and known["n_pairs"] == 3
    # the page shows one interval per category: the answer's segment's (Holm-adjusted)
    text = conclusion(an)
    arm = next(a for a in summary["answer"]["arms"] if a["arm"] == "spec" and a["level"] == 0)
    segs = {s["segment"]: s for s in arm["segments"] if s["cut"] == "category"}
    assert set(segs) == {"known", "repeat", "unseen"}
    seg = segs["repeat"]
    assert seg["confidence_level"] > repeat["confidence_level"]  # Holm widens it
    level = conf_words(seg["confidence_level"])
    span = f"×{seg['ci_low']:.2f}–×{seg['ci_high']:.2f}"
    assert (f"repeat {ratio_words(seg['estimate'])} ({level} CI {span}, df {seg['df']}, "
            f"{seg['n_pairs']} pairs in {seg['n_blocks']} blocks)") in text  # fmt: skip
    unadjusted = f"×{repeat['ci_low']:.2f}–×{repeat['ci_high']:.2f}"
    assert unadjusted == span or unadjusted not in text
    known_seg = segs["known"]
    assert known_seg["ci_low"] is None and known_seg["note"] is not None
    assert f"known {ratio_words(known_seg['estimate'])} (3 pairs in 3 blocks: " in text
    assert SEGMENT_CATEGORY_NOTE in text and CATEGORY_NOTE not in text
    assert "faster" not in text
