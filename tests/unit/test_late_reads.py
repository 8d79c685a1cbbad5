"""A client that reads streams late, through the whole kit (stand-in server, real processes).

The stand-in holds a plain server's token chunks and writes them at once after the last is
due (``FAKE_VLLM_LATE_READ_PLAIN=1``): exactly what the client sees when it is not scheduled
in time, while the server's own stamps (``--enable-per-request-metrics``) stay on schedule.
The kit must count the late streams per arm, take the verdict's TPOT from the server's
stamps, find the two instruments disagreeing on the plain launches, say the bench cannot be
trusted (first screen, summary.json, terminal) and decide nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from speclib.core.records import read_late, read_records, server_tpot_s
from tests.helpers import fake_servers_left
from tests.unit.test_robustness import REPO, _params

# Every test here reads timings that a busy neighbour moves (beside the real servers of the
# parallel tier, the spec arm's streams were read late too and the client's ratio fell to
# x0.35): they run in the serial tier, with nothing else running.
pytestmark = pytest.mark.alone


def _run(tmp: Path, *, late: bool) -> tuple[Path, subprocess.CompletedProcess]:
    path = _params(tmp, n_prompts=6)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"aa": True, "design": "interleaved", "switch_pause_s": 0,
                        "max_replicates": None}  # fmt: skip
    data["workload"].update(replicates=2)
    path.write_text(yaml.safe_dump(data))
    out = tmp / "run"
    # on time: 20 ms steps, so only a stall of 40 ms or more reads 3 chunks together
    step = "0.006" if late else "0.02"
    env = {**os.environ, "FAKE_VLLM_TOKENS": "12", "FAKE_VLLM_STEP_S": step}
    if late:
        env["FAKE_VLLM_LATE_READ_PLAIN"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    return out, proc


@pytest.fixture(scope="module")
def late_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    return _run(tmp_path_factory.mktemp("late"), late=True)


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_late_streams_are_counted_per_arm(late_run):
    run, _ = late_run
    recs = [r for r in read_records(run / "requests.jsonl") if r.phase == "measure" and r.ok]
    late = {}
    for r in recs:
        late.setdefault(r.series, []).append(read_late(r))
    assert all(late["control"]) and all(late["aa"])  # plain servers: held back
    assert not any(late["spec"])
    checks = {c["check"]: c for c in _summary(run)["bench_trust"]["checks"]}
    assert checks["late reads"]["status"] == "fail"
    assert checks["late reads"]["per_arm"] == {"control": "12/12", "spec": "0/12", "aa": "12/12"}


def test_the_verdict_uses_the_servers_stamps_and_excludes_nothing(late_run):
    run, _ = late_run
    summary = _summary(run)
    assert summary["instrument"]["tpot"] == "server"
    recs = [r for r in read_records(run / "requests.jsonl") if r.phase == "measure"]
    assert all(server_tpot_s(r) > 0 for r in recs)  # on time, though read late
    spec = next(c for c in summary["comparisons"] if c["experiment"] == "spec")
    assert spec["pairing"]["n_pairs_used"] == 12 and spec["pairing"]["excluded"] == {}
    # the client's ratio is meaningless (control TPOT ~0); the server's is the stand-in's
    ratios = spec["pairing"]["ratio_by_instrument"]
    assert ratios["client"] is None or ratios["client"] > 2
    assert ratios["server"] == pytest.approx(1.3 / 3, rel=0.25)
    assert any(r.startswith("sensitivity:") for r in spec["reasons"]), spec["reasons"]
    per_request = summary["request_instruments"]
    assert len(per_request) == 36 and all(r["tpot_server_s"] > 0 for r in per_request)


def test_instruments_disagree_on_the_plain_launches_and_nothing_is_decided(late_run):
    run, proc = late_run
    summary = _summary(run)
    rows = {r["launch_id"]: r for r in summary["instrument_agreement"]}
    for lid in ("control-r0", "control-r1", "aa-r0", "aa-r1"):
        assert rows[lid]["agrees"] is False and rows[lid]["tpot_gap"] < -0.5, rows[lid]
    trust = summary["bench_trust"]
    assert trust["untrustworthy"] and not trust["trusted"]
    checks = {c["check"]: c["status"] for c in trust["checks"]}
    assert checks["instruments agree"] == "fail"
    spec = next(c for c in summary["comparisons"] if c["experiment"] == "spec")
    assert spec["decision"] == "untrustworthy", spec["reasons"]
    first = (run / "report.html").read_text().split("Evidence")[0]
    assert "Bench trust: FAILED" in first and "No false effect" not in first
    assert "bench trust: FAILED" in proc.stdout + proc.stderr


@pytest.mark.alone
def test_a_client_on_time_passes_the_late_and_exclusion_checks(tmp_path):
    """Marked ``alone``: a quiet bench must pass, so nothing else may run beside it. Beside the
    real servers of the other worker, 3 of 36 streams of a fresh clone's run read 40 ms late
    (2026-12-04), and the check rightly failed."""
    run, _ = _run(tmp_path, late=False)
    summary = _summary(run)
    checks = {c["check"]: c for c in summary["bench_trust"]["checks"]}
    assert checks["late reads"]["status"] == "pass", checks["late reads"]
    assert checks["exclusions"]["status"] == "pass", checks["exclusions"]
    assert summary["instrument"]["tpot"] == "server"
    rows = summary["instrument_agreement"]
    assert len(rows) == 6 and all(r["n_server_stamped"] == r["n_ok"] == 6 for r in rows)
