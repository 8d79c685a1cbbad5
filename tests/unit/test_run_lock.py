"""One owner of a run folder at a time (issue #54): the run lock and the checks a run
folder passes before anything is touched.

The lock's other process is a real child holding it (the boundary), never a mock; the
refusals through the CLI, with a victim server left alive, are in
``tests/unit/test_run_folder_safety.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from speclib.app.run_folder import RunFolderRefused, check_run_folder
from speclib.app.run_lock import RunFolderBusy, hold_run, live_owner
from speclib.core.rundir import RunDir

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_the_owner_is_named_in_the_lock_and_the_lock_goes_with_it(tmp_path: Path) -> None:
    rd = RunDir.at(tmp_path / "run")
    with hold_run(rd, "run") as previous:
        assert previous is None
        named = json.loads(rd.run_lock.read_text())
        assert named["pid"] == os.getpid() and named["purpose"] == "run"
        assert named["host"] and named["command"] and named["started"] > 0
        assert live_owner(rd) is None  # this process: not another owner
        with hold_run(rd, "analyze") as inner:  # a run's own analysis: re-entrant
            assert inner is None
        assert rd.run_lock.exists()
    assert not rd.run_lock.exists()


def test_a_dead_owners_lock_is_taken_over_and_named(tmp_path: Path) -> None:
    rd = RunDir.at(tmp_path / "run")
    rd.root.mkdir()
    dead = {"pid": 999999, "started": 1.0, "host": "h", "command": ["speclib", "run"]}
    rd.run_lock.write_text(json.dumps({**dead, "purpose": "run"}))
    assert live_owner(rd) is None  # a file with nobody holding it
    with hold_run(rd, "run") as previous:
        assert previous is not None and previous.pid == 999999
        assert "a run (pid 999999 on h" in previous.line()


def test_a_live_owner_refuses_everyone_else_by_name(tmp_path: Path) -> None:
    rd = RunDir.at(tmp_path / "run")
    code = (
        "import sys, time\n"
        "from speclib.app.run_lock import hold_run\n"
        "from speclib.core.rundir import RunDir\n"
        "with hold_run(RunDir.at(sys.argv[1]), 'analyze'):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(rd.root)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        owner = live_owner(rd)
        assert owner is not None and owner.pid == child.pid and owner.purpose == "analyze"
        busy = rf"in use by an analysis \(pid {child.pid} "
        with pytest.raises(RunFolderBusy, match=busy), hold_run(rd, "run"):
            pass
        with pytest.raises(RunFolderBusy, match=f"kill {child.pid}"):
            check_run_folder(rd, resume=True)
    finally:
        child.kill()
        child.wait()
    with hold_run(rd, "run") as previous:  # its owner is gone: the folder is free
        assert previous is not None and previous.pid == child.pid


def test_a_run_folder_is_checked_before_anything_is_touched(tmp_path: Path) -> None:
    run = RunDir.at(tmp_path / "run")
    (run.root / "launches").mkdir(parents=True)
    other = RunDir.at(tmp_path / "other")
    other.root.mkdir()
    (other.root / "notes.txt").write_text("mine")
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (run, False, "holds a run; nothing was touched: `speclib run --resume"),
        (other, False, "holds other files; nothing was touched"),
        (other, True, "holds no run to continue"),
        (RunDir.at(tmp_path / "typo"), True, "the folder does not exist"),
        (RunDir.at(afile), False, "is a file"),
        (RunDir.at(run.root / "sub"), False, "inside the run folder"),
        (RunDir.at("/etc/speclib-run"), False, "a system folder"),
    ]
    for rd, resume, says in cases:
        with pytest.raises(RunFolderRefused, match=re.escape(says)):
            check_run_folder(rd, resume=resume)
    assert not (tmp_path / "typo").exists() and not (run.root / "sub").exists()
    check_run_folder(RunDir.at(tmp_path / "new"), resume=False)
    check_run_folder(run, resume=True)
    (run.root / "manifest.json").write_text('{"design": ')
    with pytest.raises(RunFolderRefused, match=r"manifest\.json cannot be read"):
        check_run_folder(run, resume=True)
    log_only = RunDir.at(tmp_path / "detached")
    log_only.root.mkdir()
    log_only.run_log.write_text("a detached run's log\n")
    check_run_folder(log_only, resume=False)  # a detached run's own log: still empty
