"""Server lifecycle against real child processes (a scripted stand-in, not a mock).

The stand-in is ``tests/fakeserver.py`` run as a child: it serves ``/health`` and chat
completions like vLLM. Failures are small ``python -c`` children that exit or hang.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from speclib.serve import process as srv
from tests.helpers import process_gone

FAKE = Path(__file__).resolve().parents[1] / "fakeserver.py"


def _spec(tmp_path: Path, argv: list[str], port: int, **kw) -> srv.LaunchSpec:
    return srv.LaunchSpec(
        argv=tuple(argv),
        host="127.0.0.1",
        port=port,
        served_model="fake-model",
        log_path=tmp_path / "server.log",
        pidfile=tmp_path / "server.pid",
        **kw,
    )


def test_build_argv_control_has_no_spec_flags():
    argv = srv.build_vllm_argv(model="m", host="127.0.0.1", port=8000)
    assert "--speculative-config" not in argv
    assert "--per-request-spec-decode-metrics" not in argv
    assert argv[1:3] == ("-m", "vllm.entrypoints.openai.api_server")
    assert "--no-enable-prefix-caching" in argv
    with pytest.raises(ValueError, match="per_request_metrics needs speculative_config"):
        srv.build_vllm_argv(model="m", host="h", port=1, per_request_metrics=True)


def test_build_argv_experiment_is_one_json_object():
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    argv = srv.build_vllm_argv(
        model="m", host="127.0.0.1", port=1, speculative_config=spec, per_request_metrics=True
    )
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == spec
    j = argv.index("--per-request-spec-decode-metrics")
    assert argv[j + 1] == "summary"


def test_redact_argv():
    assert srv.redact_argv(["x", "--api-key", "s3cret", "--api-key=abc"]) == [
        "x",
        "--api-key",
        "***",
        "--api-key=***",
    ]


def test_start_failure_raises_fast_with_exit_code_and_log_tail(tmp_path):
    code = (
        "import sys, time; print('loading model...'); time.sleep(0.5); "
        "print('ValueError: Invalid repository ID or local directory'); sys.exit(3)"
    )
    spec = _spec(tmp_path, [sys.executable, "-c", code], srv.free_port(), start_timeout_s=120)
    t0 = time.monotonic()
    with pytest.raises(srv.ServerStartError) as info:
        srv.launch(spec)
    assert time.monotonic() - t0 < 10  # not after the 120 s timeout
    assert info.value.returncode == 3
    assert "exited with code 3" in str(info.value)
    assert "Invalid repository ID" in info.value.log_tail
    assert not spec.pidfile.exists()


def test_start_timeout_is_reported_and_child_killed(tmp_path):
    spec = _spec(
        tmp_path,
        [sys.executable, "-c", "import time; time.sleep(600)"],
        srv.free_port(),
        start_timeout_s=1.5,
    )
    with pytest.raises(srv.ServerStartError, match=r"start_timeout_s=1\.5"):
        srv.launch(spec)
    pids = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and "time.sleep(600)" in " ".join(p.info["cmdline"])
    ]
    assert all(process_gone(pid) for pid in pids)


def test_port_in_use_is_refused_before_launch(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        spec = _spec(tmp_path, [sys.executable, "-c", "pass"], port)
        with pytest.raises(srv.PortInUseError, match=f"port {port}"):
            srv.launch(spec)
    assert not (tmp_path / "server.log").exists()


def test_ready_then_stop_kills_whole_group(tmp_path):
    port = srv.free_port()
    # A shell that leaves a grandchild in the group, then runs the stand-in server.
    script = f"sleep 600 & exec {sys.executable} {FAKE} --port {port}"
    spec = _spec(tmp_path, ["bash", "-c", script], port, start_timeout_s=60)
    handle = srv.launch(spec)
    try:
        assert handle.alive()
        assert json.loads(spec.pidfile.read_text())["pid"] == handle.pid
        kids = psutil.Process(handle.pid).children(recursive=True)
        assert any("sleep" in " ".join(k.cmdline()) for k in kids)
    finally:
        handle.stop(grace_s=5)
    assert process_gone(handle.pid)
    assert all(process_gone(k.pid) for k in kids)
    assert not spec.pidfile.exists()


def test_reap_pidfile_kills_a_server_left_behind(tmp_path):
    # The supervisor stops the server when the kit dies (tests/unit/test_supervisor.py); the
    # pidfile is the last resort should the supervisor die too. Stand-in: a server group
    # started with no supervisor at all, recorded the way launch() records it.
    port = srv.free_port()
    argv = ["bash", "-c", f"sleep 600 & exec {sys.executable} {FAKE} --port {port}"]
    server = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while srv.port_is_free("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.1)
        kids = psutil.Process(server.pid).children(recursive=True)
        assert any("sleep" in " ".join(k.cmdline()) for k in kids)
        info = {"pid": server.pid, "pgid": server.pid, "argv": [sys.executable, str(FAKE)]}
        info["argv"] += ["--port", str(port)]
        (tmp_path / "server.pid").write_text(json.dumps(info))
        killed = srv.reap_pidfile(tmp_path / "server.pid")
        assert killed == [server.pid]
        server.wait(timeout=10)
        assert all(process_gone(k.pid) for k in kids)
        assert not (tmp_path / "server.pid").exists()
    finally:
        server.kill()
        server.wait()


def test_reap_leaves_unrelated_process_alone(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "server.pid").write_text(
            json.dumps({"pid": other.pid, "pgid": other.pid, "argv": ["python", "-m", "vllm"]})
        )
        assert srv.reap_pidfile(tmp_path / "server.pid") == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_model_class_facts_are_kept_between_private_launch_caches(tmp_path, monkeypatch):
    """vLLM inspects a model class in a fresh subprocess unless its private cache holds the
    facts: what one launch learnt is kept for the next (measured: 14 s of a start)."""
    from speclib.run.launching import keep_modelinfos, seed_modelinfos

    monkeypatch.setenv("SPECLIB_CACHE", str(tmp_path / "kit"))
    first, second = tmp_path / "l1" / "vllm-cache", tmp_path / "l2" / "vllm-cache"
    assert seed_modelinfos(first) == 0 and not (first / "modelinfos").exists()
    (first / "modelinfos").mkdir(parents=True)
    facts = '{"hash": "abc", "modelinfo": {}}'
    (first / "modelinfos" / "vllm-llama-LlamaForCausalLM.json").write_text(facts)
    keep_modelinfos(first)
    assert seed_modelinfos(second) == 1
    assert (second / "modelinfos" / "vllm-llama-LlamaForCausalLM.json").read_text() == facts
    assert not list((tmp_path / "kit" / "vllm-modelinfos").glob(".*.tmp"))


def test_root_cause_is_the_last_exception_line_not_vllms_pointer(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "(EngineCore pid=12) ERROR 12-01 15:00:00 [core.py:1] EngineCore hit a fatal error.\n"
        "Traceback (most recent call last):\n"
        '  File "sampler.py", line 9, in forward\n'
        "AssertionError: Synthetic acceptance not supported with CPU sampling\n"
        "\x1b[1;36m(APIServer pid=3)\x1b[0m ERROR 12-01 15:00:01 [serving.py:2] Engine core "
        "died. See stack trace above for the root cause.\n"
    )
    text = srv.tail(log)
    assert "\x1b" not in text
    assert srv.root_cause(text) == (
        "AssertionError: Synthetic acceptance not supported with CPU sampling"
    )
    assert srv.root_cause("INFO all fine\n") is None


def test_reap_leaves_a_pidfile_that_is_not_the_kits_alone(tmp_path):
    for text in ("12345", "[1, 2]", '"x"', '{"pid": "abc"}', "{}"):
        (tmp_path / "server.pid").write_text(text)
        assert srv.reap_pidfile(tmp_path / "server.pid") == []  # no traceback, nothing killed


def test_reap_leaves_a_server_whose_supervisor_still_runs(tmp_path):
    """A live supervisor means a live run (it stops its server when its kit goes): its
    server is never reaped, even with the command line recorded."""
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    supervisor = subprocess.Popen(  # what a supervisor's command line holds
        [sys.executable, "-c", "import time; time.sleep(60)", "speclib.serve.supervisor"]
    )
    try:
        time.sleep(0.3)
        argv = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
        info = {"pid": server.pid, "pgid": server.pid, "supervisor_pid": supervisor.pid}
        (tmp_path / "server.pid").write_text(json.dumps({**info, "argv": argv}))
        assert srv.reap_pidfile(tmp_path / "server.pid") == []
        assert server.poll() is None
        supervisor.kill()
        supervisor.wait()
        assert srv.reap_pidfile(tmp_path / "server.pid") == [server.pid]  # now it is left
        server.wait(timeout=10)
    finally:
        for p in (server, supervisor):
            p.kill()
            p.wait()
