"""``speclib run --detach``: the run goes on in a session of its own while its log is read."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import psutil

from tests.helpers import fake_servers_left
from tests.unit.test_robustness import _params, _run


def test_a_detached_run_returns_at_once_and_finishes_in_its_own_session(tmp_path: Path) -> None:
    params = _params(tmp_path, n_prompts=4)
    out = tmp_path / "run"
    started = time.monotonic()
    proc = _run(["run", str(params), "--detach", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 30
    pid = int(re.search(r"pid (\d+)", proc.stdout).group(1))
    if psutil.pid_exists(pid):
        assert os.getsid(pid) != os.getsid(0)  # its own session: a closed terminal cannot stop it
    log = out / "run.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and "summary:" not in log.read_text():
        time.sleep(1)
    text = log.read_text()
    assert "summary:" in text and "block r0" in text, text[-2000:]
    assert (out / "summary.json").is_file() and (out / "report.html").is_file()
    assert not fake_servers_left()
