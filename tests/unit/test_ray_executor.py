"""``protocol.executor: ray`` on a local Ray cluster, with the stand-in server.

The cluster is ``ray.init(num_cpus=2)`` in this process; ``speclib run`` (the real CLI, in a
child process) joins it through ``protocol.ray_address``. Two replicate blocks, each
reserving one CPU, run at the same time; their records, launch folders and notebooks come
back into the one run folder with the host they ran on, and the analysis runs on them.
Ctrl-C of ``speclib run`` mid-block cancels the tasks and leaves no server, kernel or busy
Ray worker behind, and the run folder says what was kept. The cluster is shut down at the
end and no raylet or GCS process is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import ray
import yaml

from tests.unit.test_robustness import REPO, _params

pytestmark = pytest.mark.unit

LAUNCHES = ("control-r0", "spec-r0", "control-r1", "spec-r1")
N_CANCELLED = 16  # prompts: a block of ~25 s at 0.05 s a token, cut 1 s after it starts
_TASK_TITLE = "speclib-block"  # the Ray task's name, in a busy worker's process title


def _descendants(*words: str) -> list[psutil.Process]:
    """Live descendants of this process (the Ray cluster's) whose command line has a word."""
    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if any(w in " ".join(p.cmdline()) for w in words):
                out.append(p)
        except psutil.Error:
            continue
    return _alive(out)


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _wait_dead(procs: list[psutil.Process], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [" ".join(p.cmdline())[:160] for p in _alive(procs)]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs; shut down after, with no raylet/GCS left behind."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    yield address
    procs = _descendants("raylet", "gcs_server", "ray::")
    assert any("gcs_server" in " ".join(p.cmdline()) for p in procs)
    ray.shutdown()
    left = _wait_dead(procs, timeout=20)
    assert not left, f"Ray processes left after shutdown: {left}"


def _ray_params(tmp: Path, address: str, n_prompts: int, step_s: float) -> Path:
    path = _params(tmp, n_prompts=n_prompts, server={"env": {"FAKE_VLLM_STEP_S": str(step_s)}})
    data = yaml.safe_load(path.read_text())
    data["protocol"] |= {
        "design": "interleaved",
        "executor": "ray",
        "ray_address": address,
        "ray_cpus_per_server": 0.5,  # a block of 2 servers reserves 1 of the 2 CPUs
        "max_replicates": None,
    }
    data["workload"]["replicates"] = 2
    path.write_text(yaml.safe_dump(data))
    return path


def _lines(run: Path) -> list[dict]:
    path = run / "requests.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x] if path.exists() else []


def test_two_blocks_run_in_parallel_into_one_run_folder(tmp_path, cluster):
    params = _ray_params(tmp_path, cluster, n_prompts=12, step_s=0.02)
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(run)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "executor ray" in proc.stderr
    lines = _lines(run)
    assert {x["launch_id"] for x in lines} == {"control-r0", "spec-r0", "control-r1", "spec-r1"}
    assert {x["host"] for x in lines} == {socket.gethostname()}
    spans = {}
    for block in ("r0", "r1"):
        recs = [x for x in lines if x["block"] == block]
        spans[block] = (min(x["t_start"] for x in recs), max(x["t_start"] for x in recs))
    (a0, a1), (b0, b1) = spans["r0"], spans["r1"]
    assert a0 < b1 and b0 < a1, f"the blocks did not overlap in time: {spans}"
    for lid in ("control-r0", "spec-r0", "control-r1", "spec-r1"):
        folder = run / "launches" / lid
        status = json.loads((folder / "status.json").read_text())
        assert status["ok"], status["error"]
        assert status["extra"]["ray"]["host"] == socket.gethostname()
        assert (folder / "server.log").exists() and (folder / "command.json").exists()
        assert (folder / "metrics_after.prom").exists()
    assert (run / "notebooks" / "10_series-r0.ipynb").exists()
    assert (run / "notebooks" / "10_series-r1.ipynb").exists()
    manifest = json.loads((run / "manifest.json").read_text())
    blocks = manifest["executor"]["blocks"]
    assert {b["state"] for b in blocks.values()} == {"done"}
    assert all(b["resources"] == {"CPU": 1.0} for b in blocks.values())
    summary = json.loads((run / "summary.json").read_text())
    # no block's pairs cross hosts (a late-read warning on a busy machine also says "host")
    assert not any("cross hosts" in w for w in summary.get("warnings", [])), summary["warnings"]
    assert (run / "report.html").exists()
    assert not _wait_dead(_descendants("fake_vllm.py", "ipykernel", _TASK_TITLE), timeout=15)


def test_ctrl_c_cancels_the_tasks_leaves_no_process_and_resume_finishes(tmp_path, cluster):
    params = _ray_params(tmp_path, cluster, n_prompts=N_CANCELLED, step_s=0.05)
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(run)],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        servers = _descendants("fake_vllm.py --model")
        if len(servers) >= 4 and len(_descendants(_TASK_TITLE)) >= 2:
            break
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.communicate()[1][-3000:]}")
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the blocks never started their servers")
    time.sleep(1.0)  # mid-block: requests are flowing
    started = _descendants(_TASK_TITLE, "ipykernel", "fake_vllm.py", "speclib.serve.supervisor")
    kinds = " ".join(" ".join(p.cmdline()) for p in started)
    assert "ipykernel" in kinds and "supervisor" in kinds, kinds[:2000]
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    left = _wait_dead(started, timeout=10)
    assert not left, f"left after Ctrl-C: {left}"
    assert not _descendants("fake_vllm.py", "ipykernel", _TASK_TITLE)  # none started late
    assert "cancelled" in err
    manifest = json.loads((run / "manifest.json").read_text())
    states = {name: b["state"] for name, b in manifest["executor"]["blocks"].items()}
    assert states == {"r0": "cancelled", "r1": "cancelled"}
    for lid in ("control-r0", "spec-r0", "control-r1", "spec-r1"):
        status = json.loads((run / "launches" / lid / "status.json").read_text())
        assert not status["ok"] and "records were not kept" in status["error"]
    # --resume runs the cancelled blocks again, whole, on the cluster: one full set of
    # records per launch, none left from the cancelled tasks.
    done = subprocess.run(
        [sys.executable, "-m", "speclib", "run", "--resume", str(run)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    manifest = json.loads((run / "manifest.json").read_text())
    assert {b["state"] for b in manifest["executor"]["blocks"].values()} == {"done"}
    measured = [x for x in _lines(run) if x["phase"] == "measure"]
    per_launch = {lid: sum(x["launch_id"] == lid for x in measured) for lid in LAUNCHES}
    assert per_launch == dict.fromkeys(LAUNCHES, N_CANCELLED), per_launch
    assert not _wait_dead(_descendants("fake_vllm.py", "ipykernel", _TASK_TITLE), timeout=15)


def test_executor_ray_without_ray_names_the_field_and_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from speclib.params.loader import ParamsError, load_params

    path = _params(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"executor": "ray"}
    path.write_text(yaml.safe_dump(data))
    assert load_params(path).protocol.executor == "ray"  # ray is installed here
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert "protocol.executor" in str(err.value)
    assert "pip install 'speclib[ray]'" in str(err.value)


def test_a_block_reserves_cpus_per_server_and_its_gpus(tmp_path):
    from speclib.app.ray_executor import block_resources
    from speclib.params.loader import load_params

    path = _params(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"executor": "ray", "ray_cpus_per_server": 2}
    data["server"]["tensor_parallel_size"] = 2
    path.write_text(yaml.safe_dump(data))
    params = load_params(path)
    block = {"block": "r0", "arms": ["control", "spec"], "launch_ids": ["control-r0", "spec-r0"]}
    assert block_resources(params, block, cluster_gpus=0) == {"CPU": 4.0}
    assert block_resources(params, block, cluster_gpus=8) == {"CPU": 4.0, "GPU": 2.0}
    data["protocol"]["ray_gpus_per_block"] = 1
    path.write_text(yaml.safe_dump(data))
    assert block_resources(load_params(path), block, cluster_gpus=8)["GPU"] == 1.0


def test_a_block_whose_records_come_from_two_hosts_is_warned():
    import pandas as pd

    from speclib.analysis.health.run_warnings import block_host_warnings

    one = pd.DataFrame({"block": ["r0", "r0", "r1"], "host": ["a", "a", "b"]})
    assert block_host_warnings(one) == []
    here = pd.DataFrame({"block": ["r0", "r0"], "host": [None, None]})  # the local executor
    assert block_host_warnings(here) == []
    two = pd.DataFrame({"block": ["r0", "r0", "r1"], "host": ["a", "b", "b"]})
    (warning,) = block_host_warnings(two)
    assert warning.startswith("block r0: its records come from 2 hosts (a, b)")
    assert "cross hosts" in warning  # what the run test above looks for
