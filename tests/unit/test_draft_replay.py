"""The second acceptance instrument on a run folder, with a known truth and no vLLM.

A tiny Llama (built from a GGUF as the real demo models are) serves as the target and, in a
second arm, as its own draft: a draft that is its target accepts every token it drafts, so
``speclib.run.draft_replay.replay_run`` must count acceptance 1.0 at every position and
``ceil((n - 1) / (k + 1))`` steps per answer, over exactly the requests of the launch's
``/metrics`` window (its level warm-up and measured requests, not its series warm-up), with
the warm-up prompts rebuilt as the runner wrote them and a record whose prompt tokens are
not the chat template's left out. One answer is cut and marked stop-ended: its EOS, which
the stream leaves out, is counted as its last token, and since EOS is not the tiny target's
greedy token there, that answer's last step accepts one draft of two. The recorded answers are
the target's own greedy answers, so transformers' target must reproduce every token. Real
answers of a real pair, against vLLM's counters: ``tests/integration/test_smollm2_real.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from speclib.analysis.speculation.replay_check import replay_rows
from speclib.core.records import RequestRecord, append_record
from speclib.core.rundir import RunDir, write_json_atomic
from speclib.demo.gguf_checkpoint import convert_gguf
from speclib.params.experiment import ExperimentParams
from speclib.params.run_record import write_record
from speclib.run.draft_replay import replay_run
from speclib.run.requests import warmup_prompts
from tests.unit.test_packaged_model import _tiny_gguf

pytestmark = pytest.mark.unit

K = 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("tiny")
    _tiny_gguf(base / "tiny.gguf")
    convert_gguf(base / "tiny.gguf", base / "model")
    return base / "model"


def _greedy(model_dir: Path, messages: list[dict], n: int) -> tuple[int, tuple[int, ...]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    prompt = list(ids["input_ids"])
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0)  # fmt: skip
    return len(prompt), tuple(int(t) for t in out[0, len(prompt) :])


def test_a_draft_that_is_its_target_accepts_everything(tiny: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "category": cat, "messages": [{"role": "user", "content": text}]}
            for i, (cat, text) in enumerate([("a", "ab c"), ("b", "c d e")])]  # fmt: skip
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    params = ExperimentParams.model_validate(
        {"name": "t", "server": {"model": str(tiny)},
         "series": [{"name": "control"},
                    {"name": "self-k2", "speculative_config": {
                        "method": "draft_model", "model": str(tiny), "num_speculative_tokens": K}}],
         "workload": {"prompts": str(prompts), "temperature": 0.0, "max_tokens": 9,
                      "warmup_requests": 1}}
    )  # fmt: skip
    rd = RunDir.at(tmp_path / "run")
    write_record(params, rd)
    measured = [(r["id"], r["category"], r["messages"]) for r in rows]
    warm = [(p.id, "warmup", list(p.as_messages())) for p in warmup_prompts(
        [type("P", (), {"messages": r["messages"]})() for r in rows], 2)]  # fmt: skip
    answers = {pid: _greedy(tiny, msgs, 9) for pid, _, msgs in measured + warm}
    with rd.requests.open("w", encoding="utf-8") as fh:

        def add(series: str, pid: str, cat: str, phase: str, level: int = 0, **kw) -> None:
            n_prompt, ids = answers[pid]
            fields = {"prompt_tokens": n_prompt, "token_ids": ids, "output_tokens": len(ids),
                      "finish_reason": "length", **kw}  # fmt: skip
            append_record(fh, RequestRecord(
                series=series, replicate=0, prompt_id=pid, ok=True, launch_id=f"{series}-r0",
                phase=phase, category=cat, level=level, text="x", **fields))  # fmt: skip

        for series in ("control", "self-k2"):
            add(series, "warmup-0", "warmup", "warmup")  # the series' warm-up: outside
            add(series, "warmup-1", "warmup", "warmup")  # the level's warm-up: inside
            for pid, cat, _ in measured:
                add(series, pid, cat, "measure")
        # a stop-ended answer (its EOS left out of the stream) and a mismatched prompt count
        ids = answers["p0"][1]
        add("self-k2", "p0", "a", "measure", level=1, token_ids=ids[:5], finish_reason="stop")
        add("self-k2", "p1", "b", "measure", level=1, prompt_tokens=3)
    for series in ("control", "self-k2"):
        status = {"launch_id": f"{series}-r0", "series": series, "started_at": 1.0}
        write_json_atomic(rd.status_path(f"{series}-r0"), status)
    replay = json.loads(replay_run(rd.root, device="cpu", log=lambda _m: None).read_text())
    (launch,) = replay["launches"]
    assert launch["launch_id"] == "self-k2-r0" and launch["k"] == K
    assert launch["requests"] == 4 and launch["skipped"] == 1  # warmup-1, p0, p1, short p0
    lengths = [len(answers["warmup-1"][1]), len(answers["p0"][1]), len(answers["p1"][1]), 6]
    steps = sum(math.ceil((n - 1) / (K + 1)) for n in lengths)
    assert launch["num_drafts"] == steps  # the short answer: 5 tokens and its EOS
    assert launch["accepted_per_pos"] == [steps, steps - 1]  # its EOS is no greedy token
    check = replay["target_check"]  # every token the target's greedy one but that EOS
    assert check["positions"] - check["same"] == 1 and check["answers"] == 4
    assert replay["target_check"]["prompt_token_mismatch"] == 1
    kinds = replay["control_answers"]["self-k2"]
    assert set(kinds) == {"a", "b"} and kinds["a"]["mean_acceptance_length"] == K + 1
    # vLLM's counters as the summary holds them: the same counts agree, 2 fewer do not
    for accepted, within in (([steps, steps - 1], True), ([steps, steps - 3], False)):
        metrics = [{"launch_id": "self-k2-r0", "spec": {"present": True, "num_drafts": steps,
                    "accepted_per_pos": accepted}}]  # fmt: skip
        (row,) = replay_rows(replay, metrics)
        assert row["within"] is within and row["replayed_accepted_per_pos"] == [steps, steps - 1]
