"""The tuning sweep: expansion of ``sweep`` in params, blocks in groups, pairing within a
block, the recommendation rule, and one small run with the stand-in server end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import yaml

from speclib.analysis.frames import pair_frame
from speclib.analysis.load.recommend import OUTCOMES, SweepArm, recommend
from speclib.analysis.stats.block_summary import block_summary
from speclib.core.reasons import Code, Reason
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError, load_params
from speclib.params.sweep import sweep_name
from speclib.run.design import Block, choose_design, plan_blocks, plan_groups
from tests.helpers import fake_servers_left
from tests.unit.test_robustness import REPO, _params

SWEEP_FILE = REPO / "params" / "cpu-demo-sweep.yaml"


def _sweep_yaml(tmp: Path, **series_over) -> Path:
    """cpu-demo-sweep.yaml with absolute prompts, its series changed by ``series_over``."""
    data = yaml.safe_load(SWEEP_FILE.read_text())
    data["workload"]["prompts"] = str(REPO / "prompts" / "demo-mixed.jsonl")
    for i, change in series_over.items():
        data["series"][int(i.removeprefix("s"))].update(change)
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ------------------------------------------------------------------------- expansion


def test_a_sweep_expands_into_one_named_series_per_value(tmp_path) -> None:
    params = load_params(_sweep_yaml(tmp_path), check_files=False)
    names = [s.name for s in params.series]
    assert names == [
        "control", "draft-k1", "draft-k2", "draft-k4", "draft-k6", "ngram-k2", "ngram-k4",
    ]  # fmt: skip
    k2 = params.series_by_name("draft-k2")
    assert k2.sweep_family == "draft" and k2.sweep_value == {"num_speculative_tokens": 2}
    assert k2.speculative_config == {
        "method": "draft_model", "model": "demo:draft", "num_speculative_tokens": 2,
    }  # fmt: skip
    assert params.series_by_name("ngram-k4").speculative_config["prompt_lookup_max"] == 4
    assert params.sweep_families == {
        "draft": ["draft-k1", "draft-k2", "draft-k4", "draft-k6"],
        "ngram": ["ngram-k2", "ngram-k4"],
    }
    assert [a.name for a in params.arms][-1] == "aa"
    assert "aa" in params.experiments and "draft-k6" in params.experiments


def test_several_keys_give_the_cartesian_product_and_other_keys_their_name(tmp_path) -> None:
    sweep = {"num_speculative_tokens": [2, 3], "prompt_lookup_max": [4, 5]}
    spec = {"method": "ngram", "prompt_lookup_min": 2}
    path = _sweep_yaml(tmp_path, s2={"speculative_config": spec, "sweep": sweep})
    names = [s.name for s in load_params(path, check_files=False).series]
    assert names[-4:] == [
        "ngram-k2-prompt_lookup_max4", "ngram-k2-prompt_lookup_max5",
        "ngram-k3-prompt_lookup_max4", "ngram-k3-prompt_lookup_max5",
    ]  # fmt: skip
    assert sweep_name("x", {"prompt_lookup_max": 3}) == "x-prompt_lookup_max3"
    assert sweep_name("x", {"model": "org/m 1", "flag": True}) == "x-modelorg_m_1-flagtrue"


def test_recorded_params_keep_the_family_and_value(tmp_path) -> None:
    params = load_params(_sweep_yaml(tmp_path), check_files=False)
    data = json.loads(params.model_dump_json())
    again = ExperimentParams.model_validate({**data, "source": None})
    assert again.sweep_families == params.sweep_families
    assert again.series_by_name("ngram-k2").sweep_value == {"num_speculative_tokens": 2}


def test_a_bad_value_names_the_expanded_series_and_the_key(tmp_path) -> None:
    path = _sweep_yaml(tmp_path, s1={"sweep": {"num_speculative_tokens": [1, 0]}})
    with pytest.raises(ParamsError) as err:
        load_params(path, check_files=False, check_vllm=False)
    text = str(err.value)
    assert "name='draft-k0'" in text and "sweep of 'draft'" in text
    assert "num_speculative_tokens must be a positive integer" in text


def test_the_installed_vllm_check_sees_the_expanded_configs(tmp_path) -> None:
    from speclib.vllm_facts.spec_schema import installed_spec_schema

    if installed_spec_schema().schema is None:
        pytest.skip("vLLM is not installed here: only the kit's own rules apply")
    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2}
    path = _sweep_yaml(
        tmp_path, s2={"speculative_config": spec, "sweep": {"prompt_lookup_maxx": [3]}}
    )
    with pytest.raises(ParamsError) as err:
        load_params(path, check_files=False)
    assert "name='ngram-prompt_lookup_maxx3'" in str(err.value)
    assert "speculative_config.prompt_lookup_maxx" in str(err.value)


@pytest.mark.parametrize(
    ("index", "change", "message"),
    [
        (0, {"sweep": {"num_speculative_tokens": [1, 2]}}, "the control"),
        (1, {"sweep": {"method": ["ngram"]}}, "one method per series"),
        (2, {"sweep": {"prompt_lookup_min": [1, 2]}}, "set it in one place only"),
        (1, {"sweep": {"num_speculative_tokens": []}}, "non-empty list"),
        (1, {"sweep": {"num_speculative_tokens": [2, 2]}}, "values repeat"),
        (1, {"sweep_family": "draft"}, "set by the kit"),
        (1, {"sweep_value": {"num_speculative_tokens": 1}}, "set by the kit"),
    ],
)
def test_malformed_sweeps_are_refused_before_anything_starts(tmp_path, index, change, message):
    path = _sweep_yaml(tmp_path, **{f"s{index}": change})
    with pytest.raises(ParamsError, match=message) as err:
        load_params(path, check_files=False, check_vllm=False)
    assert f"series[{index}]" in str(err.value)


def test_validate_lists_the_expanded_arms() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "validate", str(SWEEP_FILE)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "8 arms" in proc.stdout and "draft-k6 (draft_model, sweep of draft)" in proc.stdout


# ---------------------------------------------------------------------------- blocks


def test_on_24_gib_the_sweep_runs_in_two_interleaved_groups_per_replicate(tmp_path) -> None:
    params = load_params(_sweep_yaml(tmp_path), check_files=False)
    choice = choose_design(params, available_gib=20.0)
    assert choice.design == "interleaved" and choice.group_size == 5
    assert "interleaved in groups" in choice.reason
    blocks = plan_blocks(params, choice.design, group_size=choice.group_size)
    assert len(blocks) == 2 * params.workload.replicates == 6
    assert len({b.block for b in blocks}) == 6
    lids = [lid for b in blocks for lid in b.launch_ids]
    assert len(set(lids)) == len(lids) and "control-r0.1" in lids
    others = [a.name for a in params.arms if a.name != "control"]
    for rep in (0, 1, 2):
        mine = [b for b in blocks if b.replicate == rep]
        assert all("control" in b.arms and len(b.arms) <= 5 for b in mine)
        assert sum("aa" in b.arms for b in mine) >= 1
        placed = sorted(a for b in mine for a in b.arms if a != "control")
        assert placed == sorted(others)  # every arm exactly once per replicate
    assert blocks[0].arms == ("control", "draft-k1", "draft-k2", "draft-k4", "draft-k6")
    again = Block(blocks[1].block, blocks[1].replicate, blocks[1].arms)  # from the manifest
    assert again.group == 1 and again.launch_ids == blocks[1].launch_ids


def test_groups_are_balanced_and_need_room_for_the_control_and_one_arm() -> None:
    names = ["c", "a", "b", "d", "e", "f"]
    assert plan_groups(names, "c", 4) == [("c", "a", "b", "d"), ("c", "e", "f")]
    assert plan_groups(names, "c", 3) == [("c", "a", "b"), ("c", "d", "e"), ("c", "f")]
    assert plan_groups(names, "c", 6) == [tuple(names)]
    with pytest.raises(ValueError, match="group_size"):
        plan_groups(names, "c", 1)


# --------------------------------------------------------------------------- pairing


def _rows(series: str, block: str, tpot: float, replicate: int = 0) -> list[dict]:
    return [
        {"series": series, "replicate": replicate, "level": 0, "prompt_id": f"p{i}",
         "repeat": 0, "ok": True, "tpot_s": tpot, "block": block}
        for i in range(3)
    ]  # fmt: skip


def test_an_arm_is_paired_with_the_control_of_its_own_block() -> None:
    df = pd.DataFrame(
        _rows("control", "r0", 1.0) + _rows("control", "r0.1", 2.0)
        + _rows("a", "r0", 0.5) + _rows("b", "r0.1", 1.5)
    )  # fmt: skip
    a = pair_frame(df, control="control", experiment="a").pairs
    b = pair_frame(df, control="control", experiment="b").pairs
    assert len(a) == len(b) == 3
    assert set(a["tpot_s_c"]) == {1.0} and set(a["block"]) == {"r0"}
    assert set(b["tpot_s_c"]) == {2.0} and set(b["block"]) == {"r0.1"}


def test_one_control_launch_per_replicate_pairs_by_replicate_as_before() -> None:
    df = pd.DataFrame(_rows("control", "control-r0", 1.0) + _rows("a", "a-r0", 0.5))
    pairs = pair_frame(df, control="control", experiment="a").pairs  # sequential design
    assert len(pairs) == 3 and set(pairs["block"]) == {0}
    old = pd.DataFrame(_rows("control", "x", 1.0) + _rows("a", "y", 0.5)).drop(columns="block")
    assert set(pair_frame(old, control="control", experiment="a").pairs["block"]) == {0}


# -------------------------------------------------------------------- recommendation


def _summary(effects: dict[str, float], blocks: int = 4, sd: float = 0.01, seed: int = 1):
    rng = np.random.default_rng(seed)
    means = {a: mu + rng.normal(0, sd, blocks) for a, mu in effects.items()}
    return block_summary(means, n_pairs={a: [8] * blocks for a in effects})


def _arms(verdicts: dict[str, str]) -> list[SweepArm]:
    return [
        SweepArm(a, {"num_speculative_tokens": int(a[1:])}, w, 0.8, (0.7, 0.9))
        for a, w in verdicts.items()
    ]


def test_the_smallest_k_within_delta_of_the_best_that_pays_is_recommended() -> None:
    summary = _summary({"k1": -0.10, "k2": -0.30, "k4": -0.32, "k6": -0.25})
    arms = _arms({"k1": "adopt", "k2": "adopt", "k4": "adopt", "k6": "adopt"})
    rec = recommend(arms, summary=summary, margin=0.05, confidence_level=0.95, family="d")
    assert rec.best_arm == "k4"  # the lowest ratio ...
    assert rec.outcome == "recommended" and rec.arm == "k2"  # ... but k2 is within 5 % of it
    assert rec.value == {"num_speculative_tokens": 2}
    assert (rec.ratio, rec.ci_low, rec.ci_high) == (0.8, 0.7, 0.9)
    tests = {t.arm: t for t in rec.tests}
    assert tests["k2"].within_margin and tests["k2"].ci_high < 1.05
    assert tests["k2"].shared_blocks == 4
    assert not tests["k1"].within_margin and tests["k1"].ratio_to_best > 1.2
    assert rec.reason.code is Code.SWEEP_RECOMMENDED
    assert (rec.reason["arm"], rec.reason["best"], rec.reason["smaller"]) == ("k2", "k4", ["k1"])
    t2 = tests["k2"]
    assert rec.reason["to_best"] == [t2.ratio_to_best, t2.ci_low, t2.ci_high]
    assert rec.reason["level"] == t2.confidence_level and rec.reason["margin"] == 0.05
    said = rec.to_dict()
    assert said["reason_code"] == rec.reason.to_dict()
    assert said["reason"].startswith("k2 (num_speculative_tokens = 2): ADOPT and its TPOT is ")


def test_with_a_clear_best_k_the_best_is_recommended() -> None:
    summary = _summary({"k1": -0.10, "k2": -0.20, "k4": -0.40, "k6": -0.30})
    arms = _arms({"k1": "adopt", "k2": "adopt", "k4": "adopt", "k6": "adopt"})
    rec = recommend(arms, summary=summary, margin=0.05)
    assert rec.arm == "k4" == rec.best_arm and not any(t.within_margin for t in rec.tests)
    assert rec.reason.code is Code.SWEEP_RECOMMENDED and rec.reason["to_best"] is None
    assert rec.reason["smaller"] == ["k1", "k2"]  # they pay, but not within δ of k4


def test_no_k_pays_is_a_valid_answer() -> None:
    summary = _summary({"k1": -0.01, "k2": 0.00, "k4": 0.05})
    arms = _arms({"k1": "equivalent", "k2": "equivalent", "k4": "worse"})
    rec = recommend(arms, summary=summary, margin=0.05)
    assert rec.outcome == "no_k_pays" and rec.arm is None and rec.value is None
    assert rec.reason.code is Code.SWEEP_NO_K_PAYS and rec.outcome in OUTCOMES
    assert rec.reason["arms"] == [["k1", "equivalent"], ["k2", "equivalent"], ["k4", "worse"]]


def test_an_arm_that_pays_but_is_not_within_delta_of_a_non_paying_best_is_undecided() -> None:
    summary = _summary({"k1": -0.10, "k4": -0.40})
    rec = recommend(_arms({"k1": "adopt", "k4": "inconclusive"}), summary=summary, margin=0.05)
    assert rec.outcome == "undecided" and rec.arm is None and rec.best_arm == "k4"
    assert rec.reason == Reason(Code.SWEEP_UNDECIDED, {"paying": ["k1"], "margin": 0.05,
                                                       "best": "k4"})  # fmt: skip


def test_arms_sharing_blocks_are_paired_so_the_controls_error_cancels() -> None:
    """d[a, b] = effect + the block's control error + the arm's own error: arms that share
    blocks are compared block by block (the control's error cancels); arms in different
    blocks are compared on their means (Welch), and their interval is wider."""
    rng = np.random.default_rng(7)
    control_error = rng.normal(0, 0.05, 4)
    own = {a: rng.normal(0, 0.005, 4) for a in ("k2", "k4")}
    means = {"k2": -0.30 + control_error + own["k2"], "k4": -0.32 + control_error + own["k4"]}
    shared = block_summary(means, n_pairs={a: [8] * 4 for a in means})
    nan = np.full(4, np.nan)
    apart = block_summary(
        {"k2": np.r_[means["k2"], nan], "k4": np.r_[nan, means["k4"]]},
        n_pairs={"k2": [8] * 4 + [0] * 4, "k4": [0] * 4 + [8] * 4},
    )
    arms = _arms({"k2": "adopt", "k4": "adopt"})
    one = recommend(arms, summary=shared, margin=0.05).tests[0]
    two = recommend(arms, summary=apart, margin=0.05).tests[0]
    assert one.shared_blocks == 4 and two.shared_blocks == 0
    assert one.ratio_to_best == pytest.approx(two.ratio_to_best)
    assert (two.ci_high - two.ci_low) > 3 * (one.ci_high - one.ci_low)
    assert one.within_margin and not two.within_margin


def test_a_noisy_arm_does_not_narrow_or_widen_another_arms_test() -> None:
    """Each test rests on its own two arms: a third, very noisy arm changes nothing."""
    quiet = _summary({"k2": -0.30, "k4": -0.32})
    rng = np.random.default_rng(3)
    noisy = block_summary(
        {"k2": quiet.mean[0], "k4": quiet.mean[1], "k8": -0.1 + rng.normal(0, 0.5, 4)},
        n_pairs={a: [8] * 4 for a in ("k2", "k4", "k8")},
    )
    arms = _arms({"k2": "adopt", "k4": "adopt"})
    a = recommend(arms, summary=quiet, margin=0.05).tests[0]
    b = recommend(arms, summary=noisy, margin=0.05).tests[0]
    assert (a.ci_low, a.ci_high) == pytest.approx((b.ci_low, b.ci_high))


def test_recommend_validates_its_inputs() -> None:
    summary = _summary({"k1": -0.1, "k2": -0.2})
    with pytest.raises(ValueError, match="`margin`"):
        recommend(_arms({"k1": "adopt"}), summary=summary, margin=1.5)
    with pytest.raises(ValueError, match="`confidence_level`"):
        recommend(_arms({"k1": "adopt"}), summary=summary, margin=0.05, confidence_level=2)
    with pytest.raises(ValueError, match="`summary`"):
        recommend(_arms({"k1": "adopt"}), summary={}, margin=0.05)
    with pytest.raises(ValueError, match="`arms`"):
        recommend([], summary=summary, margin=0.05)


# ------------------------------------------------------------ end to end (stand-in)


def ngram_sweep(ks: list[int]) -> dict:
    """The stand-in runs' experiment series: an ngram family "spec" swept over ``ks``."""
    return {
        "name": "spec",
        "speculative_config": {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3},
        "sweep": {"num_speculative_tokens": ks},
    }


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory) -> Path:
    """control + ngram sweep k ∈ {2, 3} + aa = 4 servers; memory per server set so that 3
    fit at once: each replicate runs in two blocks, {control, k2, k3} and {control, aa}."""
    tmp = tmp_path_factory.mktemp("sweep")
    path = _params(tmp, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["series"][1] = ngram_sweep([2, 3])
    per = psutil.virtual_memory().available / 2**30 * 0.85 / 3.5  # 3 fit, not 4
    data["protocol"] |= {"aa": True, "design": "auto", "memory_per_server_gib": per,
                         "max_replicates": None}  # fmt: skip
    data["workload"].update(replicates=2)
    path.write_text(yaml.safe_dump(data))
    out = tmp / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(path), "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=400, env={**os.environ},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    return out


def test_the_sweep_runs_in_groups_with_the_control_in_every_block(sweep_run: Path) -> None:
    manifest = json.loads((sweep_run / "manifest.json").read_text())
    assert manifest["design"]["group_size"] == 3
    assert sorted(b["block"] for b in manifest["blocks"]) == ["r0", "r0.1", "r1", "r1.1"]
    rows = [json.loads(x) for x in (sweep_run / "requests.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["phase"] == "measure"]
    assert all(r["ok"] for r in rows)
    blocks = {
        s: {r["block"] for r in rows if r["series"] == s} for s in {r["series"] for r in rows}
    }
    assert blocks["control"] == {"r0", "r0.1", "r1", "r1.1"}
    assert blocks["spec-k2"] == blocks["spec-k3"] == {"r0", "r1"}
    assert blocks["aa"] == {"r0.1", "r1.1"}
    launches = {p.name for p in (sweep_run / "launches").iterdir()}
    assert {"control-r0", "control-r0.1", "aa-r0.1", "spec-k3-r1"} <= launches
    assert len(rows) == (3 + 2) * 2 * 4  # (3 arms in r*, 2 in r*.1) x replicates x prompts


def test_the_summary_pairs_within_blocks_and_recommends(sweep_run: Path) -> None:
    from speclib.analysis.run_analysis import analyze_run

    an = analyze_run(sweep_run, write=False)
    by_name = {c.experiment: c for c in an.comparisons}
    assert set(by_name["aa"].pairs["block"]) == {"r0.1", "r1.1"}
    assert set(by_name["spec-k2"].pairs["block"]) == {"r0", "r1"}
    assert len(by_name["spec-k2"].pairs) == 8
    summary = json.loads((sweep_run / "summary.json").read_text())
    (rec,) = summary["recommendations"]
    assert rec["family"] == "spec" and rec["outcome"] in OUTCOMES
    assert {t["arm"] for t in rec["tests"]} | {rec["best_arm"]} == {"spec-k2", "spec-k3"}
    page = (sweep_run / "report.html").read_text()
    assert "recommended: spec" in page
    assert "TPOT ratio vs k (num_speculative_tokens)" in page  # the sweep figure
    assert "2 blocks per replicate" in page and "r0.1: control, aa" in page
