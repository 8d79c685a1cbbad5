"""The client worker: the load generator in its own process, against the stand-in server.

Real processes throughout: the worker is ``python -m speclib.measure.worker_process``, the
server the scripted stand-in (:mod:`tests.fakeserver`), and "the caller died" is a real
``python -c`` parent killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from speclib.core.records import RequestRecord
from speclib.core.rundir import RunDir
from speclib.measure import run_requests_sync
from speclib.measure.worker import (
    ClientWorker,
    ClientWorkerError,
    close_shared_worker,
    run_requests_isolated,
    shared_worker,
)
from tests.fakeserver import FakeServer, Script
from tests.helpers import process_gone
from tests.unit.test_client import SPEC, spec_for

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
# what a record says besides its timings: must be the same whichever process sent it
SAME = ("prompt_id", "ok", "error", "status", "text", "chunk_tokens", "token_ids", "spec")
SAME += ("prompt_tokens", "output_tokens", "finish_reason", "series", "launch_id", "phase")


@pytest.fixture
def server():
    with FakeServer(default=Script(n_tokens=6, ttft_s=0.02, step_s=0.005)) as srv:
        yield srv


@pytest.fixture
def worker():
    with ClientWorker() as w:
        yield w


def _job(server: FakeServer, keys: list[str], **kwargs) -> dict:
    kwargs.setdefault("concurrency", 1)
    return dict(
        base_url=server.base_url,
        specs=[spec_for(k) for k in keys],
        series="ctl",
        replicate=0,
        launch_id="L1",
        **kwargs,
    )


def _facts(records: list[RequestRecord]) -> list[tuple]:
    return sorted(tuple(getattr(r, f) for f in SAME) for r in records)


def test_the_worker_gives_the_records_the_client_gives_in_process(server, worker) -> None:
    server.set_scripts(
        {
            "short": Script(n_tokens=3, ttft_s=0.01, step_s=0.002),
            "spec": Script(n_tokens=9, tokens_per_chunk=(3, 2), spec=SPEC),
            "fails": Script(status=500),
        }
    )
    keys = ["short", "spec", "fails", "other"]
    here: list[RequestRecord] = []
    there: list[RequestRecord] = []
    local = run_requests_sync(**_job(server, keys, concurrency=2), sink=here.append)
    remote = worker.run(**_job(server, keys, concurrency=2), sink=there.append)
    assert len(there) == 4 and _facts(there) == _facts(here)
    assert (remote.n_ok, remote.n_failed) == (local.n_ok, local.n_failed) == (3, 1)
    assert remote.client_process == "worker" and remote.client_pid == worker.pid
    assert local.client_process == "in-process" and local.client_pid == os.getpid()
    assert worker.pid != os.getpid()
    assert remote.loop_lag_max_s >= remote.loop_lag_p99_s >= 0  # the worker's own loop


def test_the_sink_gets_each_record_as_its_request_finishes(server, worker) -> None:
    server.set_scripts({}, default=Script(n_tokens=3, ttft_s=0.3, step_s=0.01))
    arrived: list[tuple[float, RequestRecord]] = []
    progress: list[int] = []
    outcome = worker.run(
        **_job(server, ["a", "b", "c"]),
        sink=lambda rec: arrived.append((time.perf_counter(), rec)),
        progress=progress.append,
    )
    ended = time.perf_counter()
    assert [r.prompt_id for _, r in arrived] == ["a", "b", "c"] and outcome.n_ok == 3
    assert progress == [1, 1, 1]
    # perf_counter is CLOCK_MONOTONIC, shared by processes: the first record reached the
    # caller before the worker even sent the last request, well before the run ended
    first_seen = arrived[0][0]
    assert first_seen < arrived[2][1].t_send_mono
    assert ended - first_seen > 0.5


def test_an_exception_in_the_worker_is_raised_in_the_caller(server, worker) -> None:
    with pytest.raises(ClientWorkerError, match="ValueError: `concurrency` must be") as info:
        worker.run(**_job(server, ["a"], concurrency=0), sink=lambda rec: None)
    assert isinstance(info.value, RuntimeError) and info.value.kind == "ValueError"
    assert "Traceback" in info.value.remote_traceback
    got: list[RequestRecord] = []
    assert worker.run(**_job(server, ["a"]), sink=got.append).n_ok == 1  # still serving


def test_a_failing_sink_stops_the_run_and_its_error_is_raised(server, worker) -> None:
    server.set_scripts({}, default=Script(n_tokens=3, ttft_s=0.05, step_s=0.01))
    seen: list[str] = []

    def sink(rec: RequestRecord) -> None:
        seen.append(rec.prompt_id)
        if len(seen) == 2:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        worker.run(**_job(server, [f"k{i}" for i in range(20)]), sink=sink)
    assert seen == ["k0", "k1"] and len(server.exchanges()) < 20  # it stopped sending
    got: list[RequestRecord] = []
    assert worker.run(**_job(server, ["a"]), sink=got.append).n_ok == 1


def test_the_workers_death_mid_run_is_an_error_and_keeps_the_records_so_far(server) -> None:
    server.set_scripts({}, default=Script(n_tokens=3, ttft_s=0.05, step_s=0.01))
    seen: list[str] = []
    with ClientWorker() as w:

        def sink(rec: RequestRecord) -> None:
            seen.append(rec.prompt_id)
            os.kill(w.pid, signal.SIGKILL)

        with pytest.raises(ClientWorkerError, match=f"pid {w.pid}.* exited with code -9 during"):
            w.run(**_job(server, ["a", "b", "c", "d"]), sink=sink)
        assert seen == ["a"] and not w.alive()


def test_arguments_that_cannot_travel_are_refused_before_the_worker_sees_them(
    server, worker
) -> None:
    with pytest.raises(TypeError, match="cannot be sent to the client worker"):
        worker.run(**_job(server, ["a"]), transport=lambda *a: None, sink=lambda rec: None)
    got: list[RequestRecord] = []
    assert worker.run(**_job(server, ["a"]), sink=got.append).n_ok == 1


def test_an_interrupt_in_the_caller_kills_the_worker_and_is_reraised(server) -> None:
    def sink(rec: RequestRecord) -> None:
        raise KeyboardInterrupt

    with ClientWorker() as w:
        with pytest.raises(KeyboardInterrupt):
            w.run(**_job(server, ["a", "b", "c"]), sink=sink)
        assert not w.alive()
        with pytest.raises(ClientWorkerError, match="has exited"):
            w.run(**_job(server, ["a"]), sink=lambda rec: None)


_PARENT = textwrap.dedent(
    """
    import os, sys, time
    from speclib.measure.worker import ClientWorker
    w = ClientWorker()
    if sys.argv[1] == "fork" and os.fork() == 0:  # a child keeps a copy of the pipes
        time.sleep(60)
        os._exit(0)
    print(w.pid, flush=True)
    time.sleep(60)
    """
)


@contextlib.contextmanager
def _parent(mode: str):
    """A real caller process that starts a worker; yields (caller, worker pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PARENT, mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,  # its own group: cleanup kills the forked child too
    )
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"the parent did not start a worker: {line!r}"
        yield proc, int(line)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_worker_stays_in_its_callers_session_and_exits_when_the_caller_dies() -> None:
    with _parent("plain") as (caller, pid):
        assert os.getsid(pid) == os.getsid(caller.pid)  # not a session leader of its own
        assert os.getpgid(pid) == os.getpgid(caller.pid)
        assert psutil.Process(pid).ppid() == caller.pid
        os.kill(caller.pid, signal.SIGKILL)  # no cleanup code runs: only the pipe closes
        assert process_gone(pid, 5.0), "the worker outlived its caller"


def test_the_worker_exits_when_its_caller_dies_even_if_a_fork_holds_the_pipe() -> None:
    with _parent("fork") as (caller, pid):
        os.kill(caller.pid, signal.SIGKILL)  # stdin stays open in the forked child
        assert process_gone(pid, 5.0), "the worker outlived its caller"


def test_closing_the_worker_ends_its_process(worker) -> None:
    pid = worker.pid
    assert psutil.pid_exists(pid)
    worker.close()
    assert process_gone(pid, 5.0)


def test_the_shared_worker_is_reused_replaced_when_dead_and_closed(server) -> None:
    close_shared_worker()
    try:
        first = shared_worker()
        assert shared_worker() is first
        got: list[RequestRecord] = []
        outcome = run_requests_isolated(**_job(server, ["a", "b"]), sink=got.append)
        assert outcome.client_process == "worker" and outcome.client_pid == first.pid
        os.kill(first.pid, signal.SIGKILL)  # dies between runs: the next run takes another
        outcome = run_requests_isolated(**_job(server, ["c"]), sink=got.append)
        second = shared_worker()
        assert second.pid != first.pid and second.alive() and not first.alive()
        assert outcome.client_process == "worker" and outcome.client_pid == second.pid
        assert [r.prompt_id for r in got] == ["a", "b", "c"]
    finally:
        close_shared_worker()
    assert process_gone(second.pid, 5.0)


def test_without_a_worker_the_run_happens_in_process_and_says_why(server, monkeypatch) -> None:
    close_shared_worker()
    monkeypatch.setattr(sys, "executable", "/bin/false")  # a real child that cannot serve
    try:
        got: list[RequestRecord] = []
        outcome = run_requests_isolated(**_job(server, ["a", "b"]), sink=got.append)
    finally:
        close_shared_worker()
    assert len(got) == 2 and outcome.n_ok == 2 and outcome.client_pid == os.getpid()
    assert outcome.client_process.startswith("in-process (worker failed: the client worker")
    assert "before it was ready" in outcome.client_process


def test_send_appends_each_record_while_the_run_goes(server, tmp_path) -> None:
    from speclib.params.loader import load_params
    from speclib.run.arms import Arm, send
    from tests.unit.test_robustness import _params

    server.set_scripts({}, default=Script(n_tokens=3, ttft_s=0.25, step_s=0.01))
    params = load_params(_params(tmp_path))
    rd = RunDir.at(tmp_path / "run")
    rd.root.mkdir()
    arm = Arm(params.series_by_name("control"), "control-r0", rd.launch_files("control-r0"))
    arm.base_url = server.base_url
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if rd.requests.exists():
                seen.append(len(rd.requests.read_text().splitlines()))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stamp = {"replicate": 0, "block": "r0", "level": 0, "request_rate": None, "concurrency": 1}
    try:
        records, outcome = send(
            params, rd, arm, [spec_for(k) for k in "abc"], stamp, phase="measure", concurrency=1
        )
    finally:
        done.set()
        watcher.join()
        close_shared_worker()
    assert [r.prompt_id for r in records] == ["a", "b", "c"]
    assert all(r.block == "r0" and r.level == 0 for r in records)
    assert {1, 2} <= set(seen)  # lines appeared one by one while the run went on
    assert len(rd.requests.read_text().splitlines()) == 3
    assert outcome.client_process == "worker" and outcome.client_pid != os.getpid()
