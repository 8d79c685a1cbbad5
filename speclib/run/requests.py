"""Request preparation: the prompts of one step turned into ready-to-send requests.

:func:`make_request_specs` encodes every request body before any clock starts (repeats
interleaved: every prompt once, then again per further repeat); :func:`arrival_offsets`
gives the seeded Poisson arrival times of an open-loop load level, identical for every
series; :func:`warmup_prompts` derives warm-up prompts that share no prefix with the
measured ones. Used by the measured launches (:mod:`speclib.run.replicate_block`) and by the
``vllm bench`` cross-check (:mod:`speclib.run.bench_crosscheck`), so both send the same requests.
:func:`history_request_specs` are the unmeasured greedy requests that answer the earlier
turns of a multi-turn run (:mod:`speclib.run.history`).
"""

from __future__ import annotations

import random
from typing import Any

from speclib.core.prompts import Prompt
from speclib.params.experiment import ExperimentParams

__all__ = ["arrival_offsets", "history_request_specs", "make_request_specs", "warmup_prompts"]


def make_request_specs(
    prompts: list[Prompt],
    params: ExperimentParams,
    *,
    model: str,
    repeats: int,
    cache_salt: str | None = None,
) -> list[Any]:
    """The prepared requests (bodies encoded before any clock starts), repeats interleaved."""
    from speclib.measure import RequestSpec, build_request_body

    wl = params.workload
    specs = []
    for rep in range(repeats):
        for p in prompts:
            body = build_request_body(
                model=model,
                messages=p.as_messages(),
                max_tokens=wl.max_tokens,
                temperature=wl.temperature,
                top_p=wl.top_p,
                top_k=wl.top_k,
                seed=wl.seed,
                ignore_eos=wl.ignore_eos,
                min_tokens=wl.min_tokens,
                cache_salt=cache_salt,
            )
            specs.append(
                RequestSpec(prompt_id=p.id, repeat=rep, category=p.category, body=body, turn=p.turn)
            )
    return specs


def history_request_specs(
    prompts: list[Prompt],
    params: ExperimentParams,
    *,
    model: str,
    cache_salt: str | None = None,
) -> list[Any]:
    """The requests answering one earlier turn of a multi-turn run: greedy (temperature 0,
    top_p 1, no top_k, seed or min_tokens), ``workload.history_tokens`` output tokens,
    stopping at the end-of-sequence token even with ``workload.ignore_eos`` (an answer,
    not a measurement)."""
    from speclib.measure import RequestSpec, build_request_body

    specs = []
    for p in prompts:
        body = build_request_body(
            model=model,
            messages=p.as_messages(),
            max_tokens=params.workload.history_tokens,
            temperature=0.0,
            top_p=1.0,
            top_k=None,
            seed=None,
            ignore_eos=False,
            min_tokens=None,
            cache_salt=cache_salt,
        )
        specs.append(
            RequestSpec(prompt_id=p.id, repeat=0, category=p.category, body=body, turn=p.turn)
        )
    return specs


def arrival_offsets(n: int, *, rate: float, seed: int, replicate: int, level: int) -> list[float]:
    """Seeded Poisson arrival times (s from the start): identical for every series."""
    rng = random.Random(f"{seed}-{replicate}-{level}")
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def warmup_prompts(prompts: list[Prompt], n: int) -> list[Prompt]:
    """Warm-up prompts whose first tokens differ from every measured prompt (no shared
    prefix blocks), so warming up does not warm the measured prompts' cache."""
    out = []
    for i in range(n):
        src = prompts[i % len(prompts)]
        msgs = ({"role": "user", "content": f"Warm-up {i}. " + src.messages[-1]["content"]},)
        out.append(Prompt(id=f"warmup-{i}", messages=msgs, category="warmup"))
    return out
