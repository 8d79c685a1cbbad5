"""The verdict rules of issue 11 on synthetic run folders (the analysis is a pure function of
the records): one launch per arm cannot decide; the A/A arm is the bench's noise floor and a
forced A/A effect turns every verdict into "untrustworthy"; unequal idle load does too;
run-until-decided looks use O'Brien-Fleming-type levels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from speclib.analysis.run_analysis import analyze_run
from speclib.analysis.verdict.run_rules import decision_confidence
from speclib.core.records import RequestRecord, append_record
from speclib.params.experiment import ExperimentParams

REPO = Path(__file__).resolve().parents[2]
N_TOKENS = 33


def _params(tmp: Path, *, blocks: int, aa: bool, **protocol) -> ExperimentParams:
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"q {i}"}]}) + "\n"
            for i in range(16)
        )
    )
    series = [{"name": "control"}]
    series.append(
        {
            "name": "spec",
            "speculative_config": {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "prompt_lookup_max": 3,
            },
        }
    )
    return ExperimentParams.model_validate(
        {
            "name": "synthetic",
            "server": {"model": str(tmp)},
            "series": series,
            "workload": {"prompts": str(prompts), "replicates": blocks, "max_tokens": N_TOKENS},
            "protocol": {"aa": aa, **protocol},
            "analysis": {"n_resamples": 300},
        }
    )


def _record(arm: str, block: int, prompt: int, tpot: float, t: float) -> RequestRecord:
    ttft = 0.02
    offsets = tuple(ttft + tpot * i for i in range(N_TOKENS))
    return RequestRecord(
        series=arm,
        replicate=block,
        prompt_id=f"p{prompt}",
        ok=True,
        launch_id=f"{arm}-r{block}",
        block=f"r{block}",
        t_start=t,
        chunk_offsets_s=offsets,
        chunk_tokens=(1,) * N_TOKENS,
        done_offset_s=offsets[-1],
        output_tokens=N_TOKENS,
        text=f"answer {prompt}",
        token_ids=tuple(range(N_TOKENS)),
        finish_reason="length",
    )


def _write_run(tmp: Path, params: ExperimentParams, effects: dict[str, float], seed: int = 0):
    """Records of an interleaved run: per-prompt base, an instance effect per server, noise."""
    rng = np.random.default_rng(seed)
    run = tmp / "run"
    run.mkdir()
    data = params.model_dump()
    (run / "params.resolved.json").write_text(json.dumps(data))
    arms = [a.name for a in params.arms]
    base = rng.lognormal(np.log(0.02), 0.2, size=16)
    t = 1.0e9
    with (run / "requests.jsonl").open("w") as fh:
        for b in range(params.workload.replicates):
            instance = {a: rng.normal(0, 0.01) for a in arms}
            for p in range(16):
                for a in arms:
                    noise = rng.normal(0, 0.03)
                    tpot = base[p] * effects.get(a, 1.0) * np.exp(instance[a] + noise)
                    append_record(fh, _record(a, b, p, float(tpot), t))
                    t += 1.0
    return run


def _by(summary: dict) -> dict:
    return {c["experiment"]: c for c in summary["comparisons"]}


def test_one_launch_per_arm_without_aa_cannot_decide(tmp_path: Path) -> None:
    params = _params(tmp_path, blocks=1, aa=False)
    run = _write_run(tmp_path, params, {"spec": 0.5})
    comps = _by(json.loads((analyze_run(run) and run / "summary.json").read_text()))
    spec = comps["spec"]
    assert spec["decision"] == "inconclusive"
    assert spec["tpot_ratio"] == pytest.approx(0.5, rel=0.1)
    assert spec["metrics"]["tpot"]["note"].startswith("no degrees of freedom")
    # the launch-blind prompt-level interval would have claimed a decision
    naive = spec["metrics"]["tpot_prompt_level"]
    assert naive["ci_high"] < 0.95


def test_two_blocks_with_aa_decide_a_large_effect_and_show_the_noise_floor(tmp_path) -> None:
    params = _params(tmp_path, blocks=2, aa=True)
    run = _write_run(tmp_path, params, {"spec": 0.5})
    an = analyze_run(run)
    comps = _by(json.loads((run / "summary.json").read_text()))
    assert comps["spec"]["decision"] == "adopt", comps["spec"]["reasons"]
    assert comps["spec"]["ci_method"].startswith("blocks (own-arm paired t vs mean of control")
    assert comps["aa"]["role"] == "aa"
    assert comps["aa"]["decision"] in ("equivalent", "inconclusive")
    assert [c.experiment for c in an.noise_floor] == ["aa"]
    from speclib.report.sections import verdict_html

    first = verdict_html(an)
    assert "noise floor" in first and "Bench trust" in first
    # records without the server's stamps leave the instrument check "not assessed", so the
    # first screen does not claim "No false effect" (it needs every check to pass)
    assert an.trust["checks"][0]["status"] == "not assessed"
    assert "No false effect" not in first


def test_a_forced_aa_effect_makes_every_verdict_untrustworthy(tmp_path: Path) -> None:
    params = _params(tmp_path, blocks=3, aa=True)
    run = _write_run(tmp_path, params, {"spec": 0.5, "aa": 1.3})  # a broken bench
    an = analyze_run(run)
    comps = _by(json.loads((run / "summary.json").read_text()))
    assert comps["aa"]["tpot_decision"] == "worse"
    assert comps["spec"]["decision"] == "untrustworthy"
    assert any("A/A arm" in r for r in comps["spec"]["reasons"])
    bench = next(g for g in comps["spec"]["gates"] if g["name"] == "bench")
    assert not bench["passed"]
    from speclib.report.sections import conclusion

    assert "not trustworthy" in conclusion(an)


def test_unequal_idle_load_between_arms_is_a_bench_problem(tmp_path: Path) -> None:
    params = _params(tmp_path, blocks=2, aa=False)
    run = _write_run(tmp_path, params, {"spec": 0.5})
    (run / "manifest.json").write_text(json.dumps({"hardware": {"cpu_count": 2}}))
    for block in (0, 1):
        for arm, idle in (("control", 0.05), ("spec", 1.4)):  # spec idles very hot
            launch = run / "launches" / f"{arm}-r{block}"
            launch.mkdir(parents=True)
            status = {"launch_id": f"{arm}-r{block}", "series": arm, "block": f"r{block}"}
            status.update(ok=True, started_at=block, replicate=block)
            (launch / "status.json").write_text(json.dumps(status))
            rows, cpu, t = [], 0.0, 0.0
            for step in range(40):
                serving = "control" if step % 2 == 0 else "spec"
                rows.append({"t": t, "serving": serving, "cpu_s": cpu})
                cpu += 0.9 if serving == arm else idle
                t += 1.0
            (launch / "cpu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    an = analyze_run(run)
    assert an.bench_problem and "unequally" in an.bench_problem
    idle = an.idle_load.set_index(["block", "arm"])
    assert idle.loc[("r0", "control"), "background_cores"] == pytest.approx(1.4, abs=0.01)
    assert idle.loc[("r0", "spec"), "background_cores"] == pytest.approx(0.05, abs=0.01)
    # 0.9 + 1.4 cores wanted on the 2 cores of the synthetic machine: 33 % unmet for control
    assert "could not be met" in an.bench_problem
    assert _by(an.summary())["spec"]["decision"] == "untrustworthy"


def test_idle_load_without_contention_is_reported_not_gated() -> None:
    from speclib.analysis.health.idle_load import idle_load_problem

    frame = pd.DataFrame(
        {
            "block": ["r1", "r1"],
            "arm": ["draft", "aa"],
            "idle_cores": [0.1, 0.1],
            "serving_cores": [1.14, 1.47],
            "background_cores": [0.60, 0.34],  # measured on the CPU demo: 1.74 and 1.81 cores
            "seconds_served": [9.0, 8.0],
        }
    )
    assert idle_load_problem(frame, cores=2, max_gap=0.025) is None
    assert idle_load_problem(frame, cores=1, max_gap=0.025) is not None


def test_run_until_decided_spends_alpha_over_the_looks(tmp_path: Path) -> None:
    params = _params(tmp_path, blocks=2, aa=True, max_replicates=4)
    levels = [decision_confidence(params, b)[0] for b in (2, 3, 4)]
    assert all(0.95 < lvl < 1 for lvl in levels)  # each look at a stricter level
    assert sum(1 - lvl for lvl in levels) == pytest.approx(0.05, rel=1e-6)
    assert levels[0] > levels[1] > levels[2]  # O'Brien-Fleming: little α spent early
    plain = _params(tmp_path, blocks=2, aa=True)
    assert decision_confidence(plain, 2) == (0.95, None)


def test_a_launch_in_the_wrong_mode_is_left_out_and_rejects_its_series(tmp_path: Path) -> None:
    params = _params(tmp_path, blocks=2, aa=True)
    run = _write_run(tmp_path, params, {"spec": 0.5})
    launch = run / "launches" / "spec-r1"
    launch.mkdir(parents=True)
    status = {"launch_id": "spec-r1", "series": "spec", "block": "r1", "ok": False}
    status["mode_check"] = {"ok": False, "problems": ["speculative series but no drafting"]}
    (launch / "status.json").write_text(json.dumps(status))
    (run / "manifest.json").write_text(json.dumps({"hardware": {"cpu_count": 2}}))  # a kit run
    comps = _by(analyze_run(run).summary())
    spec = comps["spec"]
    assert spec["decision"] == "reject"
    gate = next(g for g in spec["gates"] if g["name"] == "mode")
    assert not gate["passed"] and "spec-r1 excluded" in gate["detail"]
    assert spec["n_pairs"] == 16  # only block r0's pairs are left
    assert comps["aa"]["decision"] != "reject"


def test_drift_table_skips_pairs_without_tpot_and_finds_a_shared_shift() -> None:
    from speclib.analysis.health.drift import drift_sentence, drift_table

    rows = []
    for i in range(24):
        level = 0.024 if i < 10 else 0.015  # a regime shift that hits both arms
        for arm, factor in (("control", 1.0), ("spec", 0.6)):
            tpot = level * factor
            if arm == "spec" and i == 5:
                tpot = float("nan")  # a one-token output: no TPOT
            rows.append(
                {"series": arm, "replicate": 0, "level": 0, "prompt_id": f"p{i}", "repeat": 0,
                 "ok": True, "phase": "measure", "t_start": 100.0 + 2 * i + (arm == "spec"),
                 "tpot_s": tpot}
            )  # fmt: skip
    table = drift_table(pd.DataFrame(rows), control="control", arms=["spec"])
    control = table[table["arm"] == "control"].iloc[0]
    spec = table[table["arm"] == "spec"].iloc[0]
    assert control["shift"] and spec["shift"]
    assert spec["paired_shift"] is False and spec["cancelled"] is True
    assert "cancelled by the design" in drift_sentence(table)


# ------------------------------------------------------------ the A/A arm as a bench check


def test_the_aa_row_reads_as_a_bench_check_everywhere(tmp_path: Path) -> None:
    params = _params(tmp_path, blocks=3, aa=True)
    run = _write_run(tmp_path, params, {"spec": 0.5})
    an = analyze_run(run)
    aa = _by(json.loads((run / "summary.json").read_text()))["aa"]
    assert aa["reasons"][0].startswith("bench check: resolution ±")
    assert "(δ = ±5 %) at " in aa["reasons"][0] and "over 3 blocks" in aa["reasons"][0]
    assert aa["extra_pairs_needed"] is None
    check_text = aa["reasons"][0]  # the other reasons are the gates' (TTFT, E2E, errors)
    assert not any(w in check_text for w in ("adopt", "worse", "pairs"))
    assert not any("would likely reach" in r for r in aa["reasons"])
    assert aa["bench_check"]["text"] == aa["reasons"][0]
    assert aa["bench_check"]["df"] == 2
    noise = an.summary()["noise"][0]["aa"]
    assert noise["reason"] == aa["reasons"][0]
    check = next(c for c in an.trust["checks"] if c["check"] == "A/A")
    assert check["detail"].startswith("bench check: resolution ±")
    assert check["figure"].startswith("resolution ±")
    from speclib.report.sections import noise_floor_html

    assert "Bench check: resolution ±" in noise_floor_html(an)


def _calibration_params(tmp: Path, **protocol) -> ExperimentParams:
    data = _params(tmp, blocks=3, aa=True).model_dump()
    data["series"] = [{"name": "control"}]
    data["protocol"].update(max_replicates=6, target_resolution=0.10, **protocol)
    return ExperimentParams.model_validate(data)


def _calibration_run(tmp: Path, params: ExperimentParams, effects: list[float]):
    """A calibration run folder whose first blocks are done, and an executor that writes
    each added block: the A/A arm's TPOT is the control's times ``exp(effects[block])``."""
    return _looked_run(tmp, params, lambda rep: {"aa": float(np.exp(effects[rep]))})


def _looked_run(tmp: Path, params: ExperimentParams, factors):
    """A run folder whose first blocks are done, and an executor that writes each added
    block: arm ``a``'s TPOT in block ``rep`` is the control's times ``factors(rep)[a]``."""
    from speclib.core.rundir import RunDir
    from speclib.run.design import plan_blocks

    run = tmp / "run"
    run.mkdir()
    (run / "params.resolved.json").write_text(json.dumps(params.model_dump()))
    base = np.random.default_rng(0).lognormal(np.log(0.02), 0.2, size=16)
    executed: list[int] = []

    def write_block(rep: int) -> None:
        arms = {"control": 1.0, **factors(rep)}
        with (run / "requests.jsonl").open("a") as fh:
            for p in range(16):
                for arm, f in arms.items():
                    append_record(fh, _record(arm, rep, p, float(base[p] * f), 1e9 + rep))
        for arm in arms:  # a whole folder: each launch's status and counts
            lid = f"{arm}-r{rep}"
            (run / "launches" / lid).mkdir(parents=True)
            status = {"launch_id": lid, "series": arm, "replicate": rep, "ok": True}
            (run / "launches" / lid / "status.json").write_text(
                json.dumps({**status, "n_ok": 16, "n_failed": 0})
            )

    def execute(block):
        executed.append(block["replicate"])
        write_block(block["replicate"])
        return []

    first = plan_blocks(params, "interleaved", range(params.workload.replicates))
    for b in first:
        write_block(b.replicate)
    manifest = {"design": {"design": "interleaved", "reason": "test"},
                "blocks": [b.to_dict() for b in first]}  # fmt: skip
    (run / "manifest.json").write_text(json.dumps(manifest))
    return RunDir.at(run), execute, executed


def _hand_blocks(effects: list[float], target: float) -> int:
    """Blocks at which t[m - 1] * s / sqrt(m) <= log(1 + target), the block SD s held."""
    from scipy import stats

    s, m = np.std(effects, ddof=1), len(effects)
    while stats.t.ppf(0.975, m - 1) * s / np.sqrt(m) > np.log1p(target):
        m += 1
    return m


def test_a_calibration_stops_when_its_target_resolution_is_reached(tmp_path: Path) -> None:
    from speclib.app.block_loop import until_decided
    from speclib.app.run_folder import ReadyRun
    from speclib.run.manifest import read_plan

    params = _calibration_params(tmp_path)
    effects = [0.06, -0.06, 0.0, 0.0, 0.0, 0.0]  # ±16.1 % after 3 blocks, ±8.1 % after 4
    rd, execute, executed = _calibration_run(tmp_path, params, effects)
    logs: list[str] = []
    until_decided(
        ReadyRun(params, rd, read_plan(rd), resume=False), execute=execute, log=logs.append
    )
    assert executed == [3]
    stopping = rd.read_manifest()["stopping"]
    assert (stopping["code"], stopping["blocks"]) == ("resolution", 4)
    assert (stopping["at_least"], stopping["at_most"]) == (3, 6)
    looks = [line for line in logs if line.startswith("look after")]
    assert len(looks) == 2 and "would need 5 blocks" in looks[0]  # ±16.1 % after 3: not yet
    summary = analyze_run(rd.root).summary()
    assert summary["stopping"]["code"] == "resolution" and summary["stopping"]["open"] == []
    assert summary["calibration"]["reached"] and summary["calibration"]["blocks"] == 4
    # the width alone decides: no alpha spent, the interval at analysis.confidence
    assert decision_confidence(params, 4)[0] == 0.95
    assert summary["comparisons"][0]["confidence_level"] == pytest.approx(0.95)


def test_a_calibration_that_runs_out_of_blocks_says_how_many_it_would_need(tmp_path) -> None:
    from speclib.app.block_loop import until_decided
    from speclib.app.run_folder import ReadyRun
    from speclib.run.manifest import read_plan

    params = _calibration_params(tmp_path)
    effects = [0.2, -0.2, 0.15, -0.15, 0.2, -0.2]
    rd, execute, executed = _calibration_run(tmp_path, params, effects)
    until_decided(
        ReadyRun(params, rd, read_plan(rd), resume=False), execute=execute, log=lambda _: None
    )
    assert executed == [3, 4, 5]
    need = _hand_blocks(effects, 0.10)
    assert need > 6
    stopping = rd.read_manifest()["stopping"]
    assert (stopping["code"], stopping["blocks"], stopping["at_most"]) == ("cap", 6, 6)
    found = analyze_run(rd.root).summary()["calibration"]
    assert not found["reached"] and found["blocks"] == 6 and found["blocks_needed"] == need


def _experiment_run(tmp: Path, params: ExperimentParams, factor: float, block_sd: float):
    """An experiment run folder whose first blocks are done, and an executor that writes each
    added block: the spec arm's TPOT is the control's times ``factor`` and a block effect."""
    rng = np.random.default_rng(3)
    return _looked_run(
        tmp, params, lambda rep: {"spec": factor * float(np.exp(rng.normal(0, block_sd)))}
    )


@pytest.mark.parametrize(
    ("factor", "word", "final"),
    [(0.6, "adopt", "adopt"), (1.5, "worse", "reject"), (1.0, "equivalent", "equivalent")],
)
def test_an_experiment_runs_until_its_tpot_verdict_is_decided(tmp_path, factor, word, final):
    """The look between blocks reads the verdicts the first screen shows: blocks are added
    while the arm's TPOT verdict is inconclusive, the run stops at the first look that
    decides it, and the final analysis of the same blocks says the same word (the look is
    that analysis). At ×1.5 the E2E gate says "reject" from the first look on: the run goes
    on all the same, since the gates are weighed once, after the stop (no α is spent on
    looking at them)."""
    from speclib.analysis.run_look import look_at_run
    from speclib.app.block_loop import until_decided
    from speclib.app.run_folder import ReadyRun
    from speclib.run.manifest import read_plan

    params = _params(tmp_path, blocks=2, aa=False, max_replicates=6)
    rd, execute, executed = _experiment_run(tmp_path, params, factor, block_sd=0.01)
    first = look_at_run(rd)
    assert not first.decided  # 2 blocks, 1 df, a strict first look
    assert [(o.arm, o.segment) for o in first.open] == [("spec", None)]
    logs: list[str] = []
    until_decided(
        ReadyRun(params, rd, read_plan(rd), resume=False), execute=execute, log=logs.append
    )
    stopping = rd.read_manifest()["stopping"]
    assert executed and stopping["blocks"] == 2 + len(executed) < 6, logs
    assert stopping["code"] == "decided"
    looks = [line for line in logs if line.startswith("look after")]
    assert len(looks) == len(executed) + 1, logs
    summary = analyze_run(rd.root).summary()
    assert summary["stopping"]["open"] == [] and summary["stopping"]["code"] == "decided"
    spec = _by(summary)["spec"]
    assert (spec["tpot_decision"], spec["decision"]) == (word, final)
