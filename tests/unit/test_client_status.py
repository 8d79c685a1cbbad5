"""What a launch's ``status.json`` says about its client: where it ran and how late its
event loop was (the loop-lag probe's p99 and max, worst over the launch's runs).

The end-to-end test runs one real block (``run_block``) with the stand-in vLLM
(``tests/fake_vllm.py``) started by the kit, so the figures come from the real client
worker through the real status writer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from speclib.measure import RunOutcome
from speclib.run.launch_record import merge_clients, outcome_dict
from tests.helpers import process_gone

pytestmark = [pytest.mark.unit, pytest.mark.timeout(240)]


def _outcome(p99: float, worst: float, *, process: str = "worker", pid: int = 11) -> RunOutcome:
    return RunOutcome(
        n_ok=1,
        n_failed=0,
        n_not_attempted=0,
        not_attempted=(),
        not_attempted_index=(),
        aborted=False,
        aborted_reason=None,
        wall_s=1.0,
        cpu_s=0.1,
        loop_cpu_s=0.05,
        saturated=False,
        event_loop="uvloop",
        stamp_source="protocol",
        loop_lag_p99_s=p99,
        loop_lag_max_s=worst,
        client_process=process,
        client_pid=pid,
    )


def test_the_lag_figures_merge_by_max_over_runs_and_levels() -> None:
    level0 = merge_clients(
        [outcome_dict(_outcome(0.002, 0.004)), outcome_dict(_outcome(0.03, 0.2))]
    )
    level1 = merge_clients([outcome_dict(_outcome(0.01, 0.05, pid=12))])
    launch = merge_clients([level0, level1])
    assert (level0["loop_lag_p99_s"], level0["loop_lag_max_s"]) == (0.03, 0.2)
    assert (launch["loop_lag_p99_s"], launch["loop_lag_max_s"]) == (0.03, 0.2)
    assert launch["wall_s"] == 3.0 and launch["client_pids"] == [11, 12]
    assert launch["client_process"] == "worker"


def test_a_fallback_to_in_process_shows_next_to_the_worker() -> None:
    why = "in-process (worker failed: the client worker did not report ready within 60 s)"
    merged = merge_clients(
        [outcome_dict(_outcome(0.0, 0.0)), outcome_dict(_outcome(0.0, 0.0, process=why, pid=7))]
    )
    assert merged["client_process"] == f"worker; {why}"
    assert merged["client_pids"] == [11, 7]


def test_each_launch_status_carries_its_client_lag_and_worker(tmp_path: Path) -> None:
    """... and the block's client worker ends with the block (left to the kernel's exit,
    it held each block's kernel 2.5 s past its stop)."""
    from speclib.core.rundir import RunDir
    from speclib.measure.worker import close_shared_worker
    from speclib.params.loader import load_params
    from speclib.params.run_record import write_record
    from speclib.run.replicate_block import run_block
    from tests.unit.test_robustness import _params

    path = _params(tmp_path, n_prompts=3)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"switch_pause_s": 0.1}
    # 3 levels of one pass over the prompts each (min_waves 1: no repeats at c=2)
    data["workload"].update(concurrency=[1, 2], request_rates=[20.0], min_waves=1)
    path.write_text(yaml.safe_dump(data))
    rd = RunDir.at(tmp_path / "run")
    write_record(load_params(path), rd)  # what a run's setup records: the block reads it
    path.unlink()  # the block needs no params file
    try:
        results = run_block(rd.root, 0, show_progress=False)
    finally:
        close_shared_worker()
    assert [r.ok for r in results] == [True, True], [r.error for r in results]
    for name in ("control", "spec"):
        status = json.loads(
            (tmp_path / "run" / "launches" / f"{name}-r0" / "status.json").read_text()
        )
        client = status["client"]
        assert client["client_process"] == "worker"
        assert len(client["client_pids"]) == 1 and client["client_pids"][0] != os.getpid()
        levels = [lv["client"] for lv in status["levels"]]
        assert len(levels) == 3 and all(lv["n_ok"] == 3 for lv in status["levels"])
        assert client["loop_lag_max_s"] == max(lv["loop_lag_max_s"] for lv in levels)
        assert client["loop_lag_p99_s"] == max(lv["loop_lag_p99_s"] for lv in levels)
        assert 0 <= client["loop_lag_p99_s"] <= client["loop_lag_max_s"]
        assert process_gone(client["client_pids"][0], timeout_s=0.5)
