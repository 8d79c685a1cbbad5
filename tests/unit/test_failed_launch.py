"""A launch vLLM refuses: its arm is failed with vLLM's own error line, and keeps its command.

The stand-in server here exits as argparse does (code 2, ``prog: error: unrecognized
arguments: …``) when it is given a speculative config, so the control runs and the
experiment never starts: the run still finishes, and nothing reads as measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from tests.helpers import fake_servers_left
from tests.unit.test_robustness import FAKE, _params, _run

REFUSING = """\
import os, sys
if "--speculative-config" in sys.argv:
    sys.stderr.write("usage: api_server.py [-h]\\n")
    sys.stderr.write("api_server.py: error: unrecognized arguments: --made-up-flag summary\\n")
    sys.exit(2)
os.execv(sys.executable, [sys.executable, {fake!r}, *sys.argv[1:]])
"""


def _refused_run(tmp: Path) -> Path:
    launcher = tmp / "refusing_vllm.py"
    launcher.write_text(REFUSING.format(fake=str(FAKE)))
    path = _params(tmp, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["server"]["launcher"] = [sys.executable, str(launcher)]
    data["workload"]["replicates"] = 2
    data["protocol"] = {"switch_pause_s": 0, "max_replicates": None}
    path.write_text(yaml.safe_dump(data))
    proc = _run(["run", str(path), "--out", str(tmp / "run")])
    assert proc.returncode == 1, proc.stderr[-3000:]  # a run with failed launches says so
    assert "failed launches (2): spec-r0, spec-r1" in proc.stderr
    assert not fake_servers_left()
    return tmp / "run"


def test_a_refused_start_names_vllms_line_and_keeps_its_command(tmp_path: Path) -> None:
    run = _refused_run(tmp_path)
    status = json.loads((run / "launches" / "spec-r0" / "status.json").read_text())
    assert not status["ok"]
    assert (
        status["error_cause"]
        == "api_server.py: error: unrecognized arguments: --made-up-flag summary"
    )
    assert "--speculative-config" in status["command"]
    summary = json.loads((run / "summary.json").read_text())
    (comp,) = [c for c in summary["comparisons"] if c["experiment"] == "spec"]
    assert comp["decision"] == "failed"
    assert comp["error_rate_experiment"] is None  # never started: nothing was measured
    report = (run / "report.html").read_text()
    assert "could not be measured: api_server.py: error: unrecognized arguments" in report
    assert "unrecognized arguments: --made-up-flag" in report
    assert "keep speculative decoding off" not in report


def test_the_failure_headline_names_the_servers_own_error_whatever_the_kit_saw_first() -> None:
    """The runner's log line and the progress display's line for a failed launch are one
    headline: under load a server that dies at its first request can be seen as "no request
    succeeded" before its death is noticed, and the line printed first must still name the
    exception the server logged (a fresh clone's run, 2026-12-04, printed it without)."""
    from speclib.core.rundir import failure_headline

    cause = "AssertionError: Synthetic acceptance not supported with CPU sampling"
    for error in (
        "no request succeeded",
        "mode check failed: no spec-decode counters",
        f"server died during the series (exit code 3): {cause}; last lines of its log:\n...",
    ):
        line = failure_headline({"error": error, "error_cause": cause})
        assert line == f"{error.split(':', 1)[0]}: {cause}" and "\n" not in line, line
    assert failure_headline({"error": "no request succeeded\nmore"}) == "no request succeeded"
    assert failure_headline({}, "NameError: x") == "NameError: x"
    assert failure_headline({}) == "launch failed"


def test_the_runners_failed_line_carries_the_cause_from_status_json(tmp_path, monkeypatch):
    """execute_block's ``launch_id: error`` (logged by report_block) is the same headline."""
    from speclib.app import block_loop
    from speclib.core.rundir import RunDir, write_json_atomic

    rd = RunDir.at(tmp_path)
    cause = "ValueError: vocab size mismatch"
    write_json_atomic(rd.status_path("spec-r0"), {"error": "no request succeeded\nlog tail",
                                                  "error_cause": cause})  # fmt: skip
    write_json_atomic(rd.status_path("control-r0"), {"ok": True})
    monkeypatch.setattr(block_loop, "execute_notebook", lambda *a, **k: None)  # the block ran
    monkeypatch.setattr(block_loop, "reap_run", lambda rd: None)
    block = {"block": "r0", "replicate": 0, "arms": ["control", "spec"],
             "launch_ids": ["control-r0", "spec-r0"]}  # fmt: skip
    errors = block_loop.execute_block(rd, block, "interleaved")
    lines: list[str] = []
    assert block_loop.report_block(block, errors, log=lines.append) == ["spec-r0"]
    assert lines == [f"FAILED spec-r0: no request succeeded: {cause}"]
