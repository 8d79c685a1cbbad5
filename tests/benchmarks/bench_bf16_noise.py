"""How far bf16 numerics move a target's ranking of its two likeliest tokens (for the default
of ``analysis.near_tie_nats``).

Along the control's greedy answers of a run folder (measured records' token ids, the prompts
chat-templated), the run's target runs once in float32 and once in bfloat16 (transformers,
on this machine's CPU or GPU). At every answer position the float32 model's two likeliest
tokens are read again in bf16; the change of the gap between their log-probabilities is
what bf16 rounding alone does to a near tie. Printed: its quantiles and maximum, how often
bf16 changed the greedy token, and how many positions float32 itself had within a few
tenths of a nat.

    .venv/bin/python -m tests.benchmarks.bench_bf16_noise runs/coder-cpu [--answers 8]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from speclib.core.records import read_records
    from speclib.core.rundir import RunDir
    from speclib.core.turns import measured_prompts
    from speclib.params.run_record import recorded_params
    from speclib.run.launching import resolve_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--answers", type=int, default=8, help="control answers to read (first N)")
    ap.add_argument("--tokens", type=int, default=200, help="answer tokens per answer, at most")
    args = ap.parse_args()
    rd = RunDir.at(args.run_dir)
    params = recorded_params(rd.params_resolved)
    folder = resolve_model(params.server.model, params)
    messages = {p.id: p.as_messages() for p in measured_prompts(params, rd.root)}
    seen, answers = set(), []
    for r in read_records(rd.requests):
        mine = r.series == params.control_name and r.phase == "measure" and r.ok
        if mine and r.token_ids and r.prompt_id not in seen:
            seen.add(r.prompt_id)
            answers.append((r.prompt_id, list(r.token_ids)[: args.tokens]))
    answers = answers[: args.answers]
    tok = AutoTokenizer.from_pretrained(folder)
    models = {
        dtype: AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
        for dtype in ("float32", "bfloat16")
    }
    changes, gaps, flips, n, started = [], [], 0, 0, time.perf_counter()
    for pid, answer in answers:
        prompt = tok.apply_chat_template(list(messages[pid]), add_generation_prompt=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        ids = torch.tensor([prompt + answer])
        with torch.inference_mode():
            lp = {
                dtype: torch.log_softmax(m(ids).logits[0, len(prompt) - 1 : -1].float(), -1)
                for dtype, m in models.items()
            }
        top = lp["float32"].topk(2, -1)
        first, second = top.indices[:, 0:1], top.indices[:, 1:2]
        gap32 = top.values[:, 0] - top.values[:, 1]
        b16 = lp["bfloat16"]
        gap16 = (b16.gather(1, first) - b16.gather(1, second))[:, 0]
        changes += (gap16 - gap32).abs().tolist()
        gaps += gap32.tolist()
        flips += int((b16.argmax(-1) != first[:, 0]).sum())
        n += len(answer)
    d, g = np.array(changes), np.array(gaps)
    quantiles = {f"p{q * 100:g}": round(float(np.quantile(d, q)), 4) for q in (0.5, 0.9, 0.99)}
    out = {
        "model": str(folder),
        "answers": len(answers),
        "positions": n,
        "seconds": round(time.perf_counter() - started, 1),
        "greedy_token_changed_by_bf16": flips,
        "change_of_top2_gap_nats": {**quantiles, "max": round(float(d.max()), 4)},
        "float32_top2_gap_below": {str(t): int((g < t).sum()) for t in (0.05, 0.1, 0.25, 0.5)},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
