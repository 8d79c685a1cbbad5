"""The server supervisor against real processes: nothing outlives the kit, even a SIGKILLed one.

The "server" is a stand-in tree shaped like vLLM's: a ``python -c`` parent that starts a
child which leaves the process group (``setsid``, like an engine core in its own session),
and an orphan whose parent exits at once (it re-parents to the supervisor, a subreaper),
then becomes ``tests/fakeserver.py`` so readiness works. The "kit" is a ``python -c`` child
that calls :func:`speclib.serve.process.launch`; the test SIGKILLs it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from speclib.serve import process as srv

FAKE = Path(__file__).resolve().parents[1] / "fakeserver.py"

# argv[1:] = token, port, path of the fake server
STANDIN = textwrap.dedent("""
    import os, subprocess, sys
    tok, port, fake = sys.argv[1:4]
    sleeper = "import os, time; os.setsid(); time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", sleeper, tok + "-engine"])
    spawn = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', *sys.argv[1:]])"
    subprocess.Popen([sys.executable, "-c", spawn, sleeper, tok + "-orphan"])
    os.execv(sys.executable, [sys.executable, fake, "--port", port])
""")


def _standin_argv(token: str, port: int) -> tuple[str, ...]:
    return (sys.executable, "-c", STANDIN, token, str(port), str(FAKE))


def _spec(tmp_path: Path, argv: tuple[str, ...], port: int) -> srv.LaunchSpec:
    return srv.LaunchSpec(
        argv=argv,
        host="127.0.0.1",
        port=port,
        served_model="fake-model",
        log_path=tmp_path / "server.log",
        pidfile=tmp_path / "server.pid",
        start_timeout_s=60,
    )


def _tagged(token: str) -> list[psutil.Process]:
    """Live processes whose command line carries ``token`` (the stand-in's whole tree)."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if token in " ".join(proc.info["cmdline"] or []) and (
                proc.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _survivors(pids: set[int], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{pid} {' '.join(proc.cmdline())[:120]}")
            except psutil.Error:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _wait_tagged(token: str, suffix: str, timeout: float = 20.0) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in _tagged(token + suffix):
            return proc
        time.sleep(0.05)
    raise AssertionError(f"no process tagged {token + suffix} appeared")


def test_sigkill_of_the_launcher_leaves_no_process(tmp_path):
    token = f"speclib-standin-{uuid.uuid4().hex[:8]}"
    port = srv.free_port()
    kit = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from speclib.serve import process as srv
        spec = srv.LaunchSpec(argv={_standin_argv(token, port)!r},
            host="127.0.0.1", port={port}, served_model="fake-model",
            log_path=Path({str(tmp_path / "server.log")!r}),
            pidfile=Path({str(tmp_path / "server.pid")!r}), start_timeout_s=60)
        h = srv.launch(spec)
        print("READY", h.pid, h.process.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", kit], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line
        server_pid, supervisor_pid = map(int, line.split()[1:3])
        engine = _wait_tagged(token, "-engine")
        orphan = _wait_tagged(token, "-orphan")
        assert os.getpgid(engine.pid) != server_pid  # it left the server's group
        assert orphan.ppid() == supervisor_pid  # re-parented to the subreaper, not init
        tree = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        assert {server_pid, supervisor_pid, engine.pid, orphan.pid} <= tree
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)  # only the kit, as a user's kill -9 would
        proc.wait(timeout=10)
        left = _survivors(tree | {p.pid for p in _tagged(token)}, timeout=10.0)
        print(f"tree of {len(tree)} processes gone {time.monotonic() - t0:.2f} s after SIGKILL")
        assert left == [], "processes outlived the SIGKILLed kit:\n" + "\n".join(left)
        assert "stdin closed" in (tmp_path / "server.log").read_text()
    finally:
        proc.kill()
        proc.wait()
        for p in _tagged(token):
            p.kill()


def test_server_status_is_the_supervisors_and_memory_pid_is_the_server(tmp_path):
    port = srv.free_port()
    handle = srv.launch(_spec(tmp_path, (sys.executable, str(FAKE), "--port", str(port)), port))
    try:
        assert str(FAKE) in psutil.Process(handle.pid).cmdline()  # what memory sampling walks
        assert handle.pid != handle.process.pid
        os.kill(handle.pid, signal.SIGKILL)
        assert handle.process.wait(timeout=10) == -signal.SIGKILL
        assert not handle.alive()
    finally:
        handle.stop(grace_s=2)


def test_sigterm_to_the_supervisor_stops_the_tree(tmp_path):
    token = f"speclib-standin-{uuid.uuid4().hex[:8]}"
    port = srv.free_port()
    handle = srv.launch(_spec(tmp_path, _standin_argv(token, port), port))
    try:
        _wait_tagged(token, "-engine")
        _wait_tagged(token, "-orphan")
        tree = {p.pid for p in psutil.Process(handle.process.pid).children(recursive=True)}
        os.kill(handle.process.pid, signal.SIGTERM)
        handle.process.wait(timeout=15)
        assert _survivors(tree, timeout=5.0) == []
        assert _tagged(token) == []
    finally:
        handle.stop(grace_s=2)


def test_command_that_cannot_run_raises_oserror(tmp_path):
    spec = _spec(tmp_path, ("/nonexistent/speclib-no-such-binary", "--port", "1"), srv.free_port())
    with pytest.raises(FileNotFoundError):
        srv.launch(spec)
    assert not spec.pidfile.exists()


def test_server_nice_reaches_every_process_of_the_tree_and_not_the_kit(tmp_path):
    """protocol.server_nice: the server and what it starts run at that niceness (so the
    kit's client wins the CPU on a busy host); the supervisor and the kit keep theirs."""
    token = f"speclib-standin-{uuid.uuid4().hex[:8]}"
    port = srv.free_port()
    spec = dataclasses.replace(_spec(tmp_path, _standin_argv(token, port), port), nice=7)
    handle = srv.launch(spec)
    try:
        engine = _wait_tagged(token, "-engine")
        orphan = _wait_tagged(token, "-orphan")
        base = os.nice(0)
        assert psutil.Process(handle.pid).nice() == base + 7
        assert engine.nice() == orphan.nice() == base + 7  # inherited, even out of the group
        assert psutil.Process(handle.process.pid).nice() == base  # the supervisor
    finally:
        handle.stop(grace_s=2)
