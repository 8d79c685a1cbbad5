"""Right at load: a warm-up at each level's own concurrency, enough waves per level, and the
measured requests a server compiled a kernel during left out (issue 46).

A stand-in run through the CLI at concurrency 1 and 4 on 4 prompts: each arm gets a warm-up
of 4 requests sent together before the c=4 level, which is measured for 4 waves (16
requests); a speculative server that logs a Triton kernel compiled while serving has the
measured requests in flight at that second left out, with the reason, and ``summary.json``
lists the compile. The log parsing itself is checked on vLLM 0.26's own lines.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from speclib.analysis.health.compile_windows import REASON, compile_table, mark_compiles
from speclib.analysis.run_analysis import analyze_run
from speclib.core.compile_events import CompileEvent, compile_events, overlaps
from speclib.params.loader import load_params
from speclib.params.protocol import LoadLevel
from speclib.run.arms import level_warmup_count
from tests.helpers import fake_servers_left
from tests.unit.test_robustness import _lines, _params, _run

# as vLLM 0.26.0 wrote them on the H200 (evidence/gpu-h200, launch draft-k4-r0)
LOG = [
    "(EngineCore pid=1859) INFO 12-02 23:15:49 [monitor.py:53] torch.compile took 4.32 s in total",
    "(EngineCore pid=1859) WARNING 12-02 23:17:45 [jit_monitor.py:135] Triton kernel JIT "
    "compilation during inference: rejection_greedy_sample_kernel. This causes a latency "
    "spike; consider extending warmup to cover this shape/config.",
    "\x1b[1;36m(EngineCore pid=9)\x1b[0m INFO 12-31 23:59:59 [backends.py:1] Compiling a graph "
    "for compile range (1, 8192) takes 3.1 s",
    "(EngineCore pid=9) INFO 01-01 00:00:01 [x.py:1] nothing compiled here",
]


def test_compile_lines_are_read_with_their_time() -> None:
    events = compile_events(LOG, year=2026, utc_offset_s=3600)
    assert [e.kind for e in events] == ["triton-jit", "torch-compile"]
    assert events[0].what == "rejection_greedy_sample_kernel"
    want = dt.datetime(2026, 12, 2, 22, 17, 45, tzinfo=dt.UTC).timestamp()  # UTC+1 local
    assert events[0].t == want
    assert events[1].what == "Compiling a graph for compile range (1"
    # the second covers [t, t + 1): a request ending just before t or starting at t + 1 is clear
    assert overlaps(events[0], want - 5, want + 0.2) and overlaps(events[0], want + 0.9, want + 3)
    assert not overlaps(events[0], want - 5, want - 0.01) and not overlaps(events[0], want + 1, 9e9)


def test_requests_in_flight_during_a_compile_are_left_out_with_the_reason() -> None:
    event = CompileEvent(100.0, "triton-jit", "k")
    df = pd.DataFrame(
        {
            "launch_id": ["spec-r0", "spec-r0", "spec-r0", "control-r0"],
            "level": [0, 1, 1, 1],
            "t_start": [90.0, 99.5, 101.5, 99.5],
            "done_offset_s": [5.0, 1.0, 1.0, 1.0],
            "tpot_s": [0.01, 0.01, 0.01, 0.01],
            "tpot_excluded": [None, None, None, None],
        }
    )
    out = mark_compiles(df, {"spec-r0": [event]})
    assert out["tpot_excluded"].tolist() == [None, REASON, None, None]  # only its own server's
    assert out["tpot_s"].isna().tolist() == [False, True, False, False]
    [row] = compile_table(out, {"spec-r0": [event]})
    assert row["measured_requests"] == 1 and row["levels"] == [1]
    assert row["where"].startswith("measured requests")


def test_levels_get_enough_waves_and_their_own_warm_up(tmp_path: Path) -> None:
    params = load_params(_params(tmp_path, n_prompts=4))
    wl = params.workload
    assert wl.min_waves == 4 and wl.level_warmup
    assert wl.repeats_at(LoadLevel(concurrency=1), 4) == 1
    assert wl.repeats_at(LoadLevel(concurrency=4), 4) == 4
    assert wl.repeats_at(LoadLevel(concurrency=32), 32) == 4  # the GPU demo at c=32: 128
    assert wl.repeats_at(LoadLevel(concurrency=4, request_rate=2.0), 4) == 1  # paced by rate
    assert level_warmup_count(params, 0, LoadLevel(concurrency=1)) == 0  # the series warm-up
    assert level_warmup_count(params, 1, LoadLevel(concurrency=4)) == 4
    assert level_warmup_count(params, 0, LoadLevel(concurrency=8)) == 8


def test_a_run_warms_each_level_measures_four_waves_and_leaves_out_a_compile(
    tmp_path: Path,
) -> None:
    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["workload"]["concurrency"] = [1, 4]
    data["protocol"] = {"switch_pause_s": 0}
    path.write_text(yaml.safe_dump(data))
    env = {"FAKE_VLLM_STEP_S": "0.02", "FAKE_VLLM_JIT_AT_REQUEST": "12"}
    proc = _run(["run", str(path), "--out", str(tmp_path / "run")], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    recs = pd.DataFrame(_lines(tmp_path / "run"))
    for arm, g in recs.groupby("series"):
        warm = g[(g["phase"] == "warmup") & (g["level"] == 1)]
        assert len(warm) == 4 and set(warm["concurrency"]) == {4}, arm
        # sent together: the last left before the first came back
        assert warm["t_start"].max() < (warm["t_start"] + warm["done_offset_s"]).min()
        measured = g[(g["phase"] == "measure")]
        assert (measured.groupby("level").size() == pd.Series({0: 4, 1: 16})).all(), arm
        assert warm["t_start"].max() < measured[measured["level"] == 1]["t_start"].min()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    [jit] = summary["compile_events"]
    assert jit["launch_id"].startswith("spec") and jit["what"] == "rejection_greedy_sample_kernel"
    left_out = [
        e for e in summary["exclusions"] if e["series"] == "spec" and REASON in e["reasons"]
    ]
    assert jit["measured_requests"] >= 1  # the 12th request is a measured one at c=4
    assert jit["measured_requests"] == sum(e["reasons"][REASON] for e in left_out)
    assert jit["where"] == "measured requests (left out)" and jit["levels"] == [1]
    # each launch's /metrics window holds its level warm-up at c=4 (not the series' one):
    # counted with the measured requests, the counters add up, and nothing is blamed on
    # outside traffic
    assert not [w for w in summary["warnings"] if "/metrics" in w], summary["warnings"]
    for m in summary["launch_metrics"]:
        assert m["reconciliation"]["matches"] and m["reconciliation"]["n_requests"] == 4 + 16 + 4
        assert m["drafting"] is None or m["drafting"]["agrees"], m
    # the same run with outside traffic on the spec server beyond a cut last step per
    # request (k = 3 for each of its 24): flagged, naming the launch
    run = tmp_path / "outside"
    shutil.copytree(tmp_path / "run", run)
    after = run / "launches" / "spec-r0" / "metrics_after.prom"
    name = "vllm:spec_decode_num_accepted_tokens_total"
    after.write_text(
        "".join(
            f"{x.rsplit(' ', 1)[0]} {float(x.rsplit(' ', 1)[1]) + 3 * 24 + 1:g}\n"
            if x.startswith(name)
            else x + "\n"
            for x in after.read_text().splitlines()
        )
    )
    analyze_run(run)
    warnings = json.loads((run / "summary.json").read_text())["warnings"]
    flagged = [w for w in warnings if "outside traffic" in w]
    assert len(flagged) == 2 and all(w.startswith("launch spec-r0:") for w in flagged), warnings


@pytest.mark.parametrize("bad", [0, -1])
def test_min_waves_must_be_positive(tmp_path: Path, bad: int) -> None:
    from speclib.params.loader import ParamsError

    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["workload"]["min_waves"] = bad
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError, match="min_waves"):
        load_params(path)
