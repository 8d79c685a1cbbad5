"""What a person sees in the terminal: live progress, plain lines, verdicts, interruptions.

The runs go through the real CLI, papermill and notebooks, against ``tests/fake_vllm.py``
(a stand-in server started through ``server.launcher``); the terminal is a real
pseudo-terminal (pexpect). The watcher's logic is also checked on a run folder written by
hand, with a scripted clock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import psutil
import pytest
import yaml

from speclib.app.progress import RunWatcher

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fake_vllm.py"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def _fake_params(tmp: Path, n_prompts: int = 10) -> Path:
    """Control vs ngram on the stand-in server; prompts beside the params file."""
    lines = [
        {"id": f"p{i}", "category": "c", "messages": [{"role": "user", "content": f"n {i}"}]}
        for i in range(n_prompts)
    ]
    (tmp / "prompts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    data = {
        "name": "term",
        "server": {
            "model": str(tmp),
            "launcher": [sys.executable, str(FAKE)],
            "start_timeout_s": 30,
        },
        "series": [{"name": "control"}, {"name": "spec", "speculative_config": spec}],
        "workload": {
            "prompts": "prompts.jsonl",  # relative to the params file
            "max_tokens": 16,
            "warmup_requests": 1,
            "request_timeout_s": 20,
        },
        "analysis": {"n_resamples": 300},
    }
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "FAKE_VLLM_STEP_S": "0.05", "PYTHONUNBUFFERED": "1", **extra}


def _speclib(args: list[str], *, cwd: Path = REPO, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "speclib", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=240,
        env=_env(**extra),
    )


def _decision(run: Path) -> str:
    (comparison,) = json.loads((run / "summary.json").read_text())["comparisons"]
    return comparison["decision"]


def _fake_servers() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "fake_vllm.py --model" in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(p)
    return out


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One run with stdout and stderr on pipes (no terminal), shared by the analyze tests."""
    tmp = tmp_path_factory.mktemp("plain")
    params = _fake_params(tmp)
    proc = _speclib(["run", str(params), "--out", str(tmp / "run")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp, proc


def test_live_progress_and_verdict_table_in_a_terminal(tmp_path):
    params = _fake_params(tmp_path)
    run = tmp_path / "run"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "speclib", "run", str(params), "--out", str(run)],
        cwd=str(REPO),
        env=_env(TERM="xterm-256color"),
        dimensions=(40, 140),
        timeout=180,
    )
    seen: list[tuple[float, bytes]] = []
    while True:
        try:
            seen.append((time.monotonic(), child.read_nonblocking(65536, timeout=180)))
        except pexpect.EOF:
            break
    child.close()
    raw = b"".join(chunk for _, chunk in seen)
    text = ANSI.sub(b"", raw).decode("utf-8", "replace")
    assert child.exitstatus == 0, text[-3000:]
    counts = {int(m) for m in re.findall(r"(\d+)/20 requests", text)}
    assert len(counts) >= 5, counts  # the counter moved while requests ran
    done_at = [t for t, c in seen if b"20/20 requests" in ANSI.sub(b"", c)]
    first_at = [t for t, c in seen if re.search(rb"\b[1-9]/20 requests", ANSI.sub(b"", c))]
    assert first_at and done_at and done_at[0] - first_at[0] > 3  # updates during the run
    assert "starting 2 servers" in text and "servers ready after" in text
    assert re.search(r"ETA \d+:\d\d", text)
    assert "\r" in text  # redrawn in place
    table = text[text.rindex("┃ experiment") :]
    for word in ("TPOT ratio", "CI", "verdict", "reason", "spec", "c=1", _decision(run)):
        assert word in table, word
    assert "report:" in table and str(run / "report.html") in table
    assert "without encryption" not in text
    assert "Traceback" not in text


def test_plain_lines_without_a_terminal(plain_run):
    tmp, proc = plain_run
    assert "\r" not in proc.stdout and "\r" not in proc.stderr
    assert "\x1b[" not in proc.stderr  # no cursor moves either
    lines = proc.stderr.splitlines()
    progress = [x for x in lines if "/20 requests" in x]
    assert 1 <= len(progress) <= 4, lines  # phase changes and at most one line per 10 s
    assert any("servers ready after" in x for x in lines)
    assert _decision(tmp / "run") in proc.stdout and "TPOT ratio" in proc.stdout
    assert "without encryption" not in proc.stderr
    assert (tmp / "run" / "notebooks" / "10_series-r0.kernel.log").exists()


def test_json_prints_one_object_on_stdout(plain_run, tmp_path):
    tmp, _ = plain_run
    run = tmp_path / "run"
    shutil.copytree(tmp / "run", run)
    proc = _speclib(["analyze", str(run), "--json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # the whole of stdout is one JSON object
    assert out["report"] == str(run / "report.html")
    (verdict,) = out["verdicts"]
    assert verdict["experiment"] == "spec" and verdict["decision"] == _decision(run)
    assert set(verdict) == {"experiment", "load", "tpot_ratio", "tpot_ratio_ci", "decision"} | {
        "reasons"
    }


def test_analyze_with_a_relative_params_from_another_folder(plain_run, tmp_path):
    tmp, _ = plain_run
    shutil.copytree(tmp / "run", tmp_path / "run")
    shutil.copy(tmp / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(tmp / "prompts.jsonl", tmp_path / "prompts.jsonl")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _speclib(["analyze", "../run", "--params", "../params.yaml", "--quiet"], cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"report: {tmp_path / 'run' / 'report.html'}"
    assert proc.stderr == ""  # quiet: nothing but errors


def test_analyze_a_folder_with_only_records_and_params(plain_run, tmp_path):
    tmp, _ = plain_run
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(tmp / "run" / "requests.jsonl", only / "requests.jsonl")
    proc = _speclib(["analyze", str(only), "--params", str(tmp / "params.yaml")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (only / "params.resolved.json").exists()
    assert _decision(only) in proc.stdout and "spec" in proc.stdout


@pytest.mark.parametrize("moment", ["starting", "measuring"])
def test_sigterm_mid_launch_ends_with_one_line_and_no_traceback(tmp_path, moment):
    params = _fake_params(tmp_path, n_prompts=40)
    run = tmp_path / "run"
    extra = {"FAKE_VLLM_START_S": "4"} if moment == "starting" else {}
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(run)],
        cwd=REPO,
        env=_env(**extra),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        logs = list(run.glob("launches/*/server.log"))
        records = (run / "requests.jsonl").exists() and (run / "requests.jsonl").stat().st_size
        if (moment == "starting" and len(logs) == 2) or (moment == "measuring" and records):
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"the run never reached {moment}")
    time.sleep(1)
    os.kill(proc.pid, signal.SIGTERM)  # a supervisor stopping the kit process only
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "Error" not in err and "Task exception" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: servers stopped; kept "), last
    assert f"speclib run --resume {run}" in last
    for lid in ("control-r0", "spec-r0"):  # the kernel stopped its servers and said why
        status = json.loads((run / "launches" / lid / "status.json").read_text())
        assert not status["ok"] and status["error"].startswith("KeyboardInterrupt")
    assert out == ""
    deadline = time.monotonic() + 15
    while _fake_servers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _fake_servers(), "a server survived the interruption"


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _append(path: Path, **rec: object) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps({"block": "r0", "concurrency": 1, **rec}) + "\n")


def test_watcher_follows_a_run_folder_phase_by_phase(tmp_path):
    params = _fake_params(tmp_path, n_prompts=5)
    run = tmp_path / "run"
    data = yaml.safe_load(params.read_text())
    data["workload"]["prompts"] = str(tmp_path / "prompts.jsonl")
    data["workload"]["concurrency"] = [1, 2]
    from speclib.core.params import ExperimentParams

    _write(run / "params.resolved.json", ExperimentParams.model_validate(data).model_dump())
    now = [100.0]
    events: list = []
    w = RunWatcher(run, on_event=events.append, clock=lambda: now[0])
    assert w.poll().phase == "setup"
    blocks = [{"block": "r0", "arms": ["control", "spec"], "launch_ids": ["c-r0", "s-r0"]}]
    _write(run / "manifest.json", {"blocks": blocks})
    assert w.poll().phase == "setup"  # no server started yet
    (run / "launches" / "c-r0").mkdir(parents=True)
    (run / "launches" / "c-r0" / "server.log").write_text("# argv: [...]\nINFO loading\n")
    state = w.poll()
    assert (state.phase, state.block, state.total) == ("starting", "r0", 2 * 2 * 5)
    assert [(s.launch_id, s.last_line) for s in state.starting] == [("c-r0", "INFO loading")]
    now[0] += 30
    reqs = run / "requests.jsonl"
    _append(reqs, launch_id="c-r0", phase="warmup", ok=True)
    assert w.poll().phase == "warmup"
    assert events[-1].text == "block r0: servers ready after 30 s"
    for i in range(4):
        now[0] += 2
        _append(reqs, launch_id="c-r0", phase="measure", ok=i != 2, error="HTTP 500")
        state = w.poll()
    assert (state.phase, state.done, state.failed) == ("measuring", 4, 1)
    assert state.eta_s == pytest.approx((20 - 4) / (3 / 6))  # 3 more requests in 6 s
    assert events[-1].error and "c-r0: a request failed: HTTP 500" in events[-1].text
    _append(reqs, launch_id="s-r0", phase="measure", ok=False, error="not attempted: x")
    assert w.poll().not_attempted == 1
    reqs.write_text(reqs.read_text().splitlines()[0] + "\n")  # --resume moved records aside
    assert w.poll().done == 0
    _write(run / "launches" / "c-r0" / "status.json", {"ok": True, "started_at": time.time()})
    err = {"ok": False, "error": "server died\nmore", "started_at": time.time()}
    _write(run / "launches" / "s-r0" / "status.json", err)
    assert w.poll().phase == "finishing"
    assert events[-1].text == "FAILED s-r0: server died" and events[-1].error
    _write(run / "notebooks" / "20_analysis.ipynb", {})
    assert w.poll().phase == "analysis"
    (run / "report.html").write_text("<html>")
    assert w.poll().phase == "report"


def test_ctrl_c_in_a_terminal_stops_cleanly(tmp_path):
    params = _fake_params(tmp_path, n_prompts=40)
    run = tmp_path / "run"
    child = pexpect.spawn(
        sys.executable,
        ["-m", "speclib", "run", str(params), "--out", str(run)],
        cwd=str(REPO),
        env=_env(TERM="xterm-256color"),
        dimensions=(40, 140),
        timeout=120,
    )
    child.expect(r"[1-9]/80 requests")
    child.sendintr()  # Ctrl-C: SIGINT to the terminal's foreground process group
    child.expect(pexpect.EOF)
    child.close()
    text = ANSI.sub(b"", child.before).decode("utf-8", "replace")
    assert child.exitstatus == 130, text[-3000:]
    assert "Traceback" not in text and "Error" not in text, text[-3000:]
    last = text.strip().splitlines()[-1]
    assert last.startswith("interrupted: servers stopped; kept "), last
    assert "control-r0: stopped by the interruption" in text
    deadline = time.monotonic() + 15
    while _fake_servers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _fake_servers(), "a server survived the interruption"


def test_verdict_table_and_json_from_a_summary(tmp_path):
    import io

    from speclib.app.runner import RunResult
    from speclib.app.terminal import outcome_json, print_verdicts

    row = {
        "experiment": "draft-k4",
        "load": "c=4",
        "tpot_ratio": 0.812345,
        "tpot_ratio_ci": [0.78, 0.85],
        "decision": "adopt",
        "reasons": ["upper bound below 0.95", "gates passed"],
        "n_pairs": 40,
    }
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"comparisons": [row, {**row, "tpot_ratio": None}]}))
    out = io.StringIO()
    print_verdicts(summary, stream=out)
    text = out.getvalue()
    for cell in ("draft-k4", "c=4", "0.812", "0.780–0.850", "adopt", "upper bound below 0.95"):
        assert cell in text, cell
    assert "–" in text.split("0.812")[1]  # the row without a ratio shows a dash
    result = RunResult(tmp_path, tmp_path / "report.html", summary, ("spec-r1",))
    data = json.loads(outcome_json(result))
    assert data["failed_launches"] == ["spec-r1"]
    assert data["verdicts"][0] == {k: row[k] for k in row if k != "n_pairs"}
    empty = io.StringIO()
    print_verdicts(tmp_path / "missing.json", stream=empty)
    assert empty.getvalue().strip() == "no comparison in the summary"


def test_plain_lines_never_exceed_160_characters():
    import io

    from speclib.app.terminal import MAX_LINE, Display

    out = io.StringIO()
    display = Display("/nonexistent", stream=out)
    display.write("FAILED draft-k4-r0: " + "x" * 500)
    display.write("short")
    lines = out.getvalue().splitlines()
    assert [len(x) <= MAX_LINE for x in lines] == [True, True]
    assert lines[0].endswith("…") and lines[1] == "short"
