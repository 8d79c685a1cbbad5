"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` in fast tests only.

It accepts vLLM's arguments, refuses what vLLM refuses the way vLLM does (exit code 1 and a
message in the log), then serves scripted streams with :mod:`fakeserver`: one token per
chunk without ``--speculative-config``; with it, chunks of ``1 + accepted`` tokens, a
shorter per-token time, per-request spec metrics (with
``--per-request-spec-decode-metrics``) and growing spec counters on ``/metrics``. A model
folder named ``draft`` served alone steps ``FAKE_VLLM_DRAFT_STEP_FACTOR`` (0.25) as long.
Behaviour knobs come from ``FAKE_VLLM_*`` environment variables so tests can script a
crash mid-series or a slow start; ``FAKE_VLLM_LATE_READ_PLAIN=1`` (or ``_SPEC``) holds a
plain (speculative) server's token chunks and writes them at once, as a client that was not
scheduled in time reads them, while ``--enable-per-request-metrics`` stamps stay on time.
``FAKE_VLLM_LOAD_STEP_S`` (``FAKE_VLLM_SPEC_LOAD_STEP_S`` for a speculative server) lengthens
every step by that much per other request in flight: a server whose speed falls with load.
``FAKE_VLLM_NO_DRAFT_MATCH=<text>`` makes a speculative server find no proposal for a request
whose last message contains the text, as an n-gram lookup without a match: one token per
chunk at a plain step's time (``FAKE_VLLM_NO_DRAFT_STEP_FACTOR`` times it, default 1.0) and
no draft on ``/metrics`` or in its per-request metrics. Without
``--per-request-spec-decode-metrics`` a speculative server still counts its drafts on
``/metrics``, as vLLM does.
``FAKE_VLLM_SPEC_BY_PROMPT`` (JSON ``{prompt text: {"accepted": a, "step_factor": f}}``) gives a
speculative server another script for the requests whose last message is that text: chunks
of ``1 + a`` tokens, each step ``f`` × ``FAKE_VLLM_STEP_S`` long, no per-request spec metrics,
so an arm's effect can differ by prompt category in a known way.
``FAKE_VLLM_REQUEST_LOG=<folder>`` appends every finished request's body to
``<folder>/<pid>.jsonl`` (with ``speculative``: whether this server speculates), so a test
can check what each arm was sent after the servers are gone.
``FAKE_VLLM_JIT_AT_REQUEST=N`` makes a speculative server log, once its N-th request has
finished, the line vLLM 0.26 logs for a Triton kernel compiled while serving.
The real kit never uses this file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakeserver import Script, _serve, _State


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--speculative-config")
    p.add_argument("--per-request-spec-decode-metrics")
    p.add_argument("--served-model-name")
    p.add_argument("--enable-per-request-metrics", action="store_true")
    args, _ = p.parse_known_args(argv)
    return args


def _refuse(msg: str) -> None:
    print(f"ERROR {time.strftime('%H:%M:%S')} {msg}", flush=True)
    sys.exit(1)


def _script(spec: dict | None, with_metrics: bool, model: str = "") -> Script:
    n = int(os.environ.get("FAKE_VLLM_TOKENS", "16"))
    step = float(os.environ.get("FAKE_VLLM_STEP_S", "0.004"))
    if Path(model).name == "draft":  # a draft served alone is this much cheaper per step
        step *= float(os.environ.get("FAKE_VLLM_DRAFT_STEP_FACTOR", "0.25"))
    if spec is None:
        return Script(n_tokens=n, ttft_s=0.01, step_s=step, tokens_per_chunk=1)
    k = int(spec.get("num_speculative_tokens", 3))
    accepted = min(k, int(os.environ.get("FAKE_VLLM_ACCEPTED", "2")))
    per_chunk = accepted + 1
    steps = -(-(n - 1) // per_chunk)
    metrics = {
        "num_spec_steps": steps,
        "num_draft_tokens": steps * k,
        "num_accepted_draft_tokens": (n - 1) - steps,
        "draft_acceptance_rate": ((n - 1) - steps) / (steps * k),
        "mean_acceptance_length": 1 + ((n - 1) - steps) / steps,
        "acceptance_histogram": [0] * (k + 1),
        "num_spec_tokens": k,
    }
    return Script(
        n_tokens=n,
        ttft_s=0.01,
        step_s=step * 1.3,
        tokens_per_chunk=(1, per_chunk),
        spec=metrics,
        send_spec=with_metrics,
    )


def _no_draft_script(drafted: Script, k: int) -> Script:
    """What a speculative server does for a request whose proposer finds nothing."""
    plain = float(os.environ.get("FAKE_VLLM_STEP_S", "0.004"))
    factor = float(os.environ.get("FAKE_VLLM_NO_DRAFT_STEP_FACTOR", "1.0"))
    metrics = {
        "num_spec_steps": 0,
        "num_draft_tokens": 0,
        "num_accepted_draft_tokens": 0,
        "draft_acceptance_rate": 0.0,
        "mean_acceptance_length": 1.0,
        "acceptance_histogram": [0] * (k + 1),
        "num_spec_tokens": k,
    }
    return replace(drafted, step_s=plain * factor, tokens_per_chunk=1, spec=metrics)


def main(argv: list[str]) -> int:
    args = _args(argv)
    print(f"INFO fake vLLM starting: {' '.join(argv)}", flush=True)
    spec = json.loads(args.speculative_config) if args.speculative_config else None
    if args.per_request_spec_decode_metrics not in (None, "none") and spec is None:
        _refuse("--per-request-spec-decode-metrics requires speculative decoding to be enabled")
    if spec and "tensor_parallel_size" in spec:
        _refuse(
            "'tensor_parallel_size' is not a valid argument in the speculative_config. "
            "Please pass 'draft_tensor_parallel_size' instead."
        )
    for path in (args.model, (spec or {}).get("model")):
        if path and path.startswith("/") and not Path(path).is_dir():
            _refuse(f"Invalid repository ID or local directory specified: '{path}'")
    time.sleep(float(os.environ.get("FAKE_VLLM_START_S", "0.2")))
    if spec:
        print(f"INFO speculative_config={json.dumps(spec)}", flush=True)
    script = _script(spec, bool(args.per_request_spec_decode_metrics), args.model)
    late = os.environ.get("FAKE_VLLM_LATE_READ_" + ("SPEC" if spec else "PLAIN")) == "1"
    load = float(os.environ.get("FAKE_VLLM_" + ("SPEC_" if spec else "") + "LOAD_STEP_S", "0"))
    script = replace(
        script, timing_metrics=args.enable_per_request_metrics, late_read=late, load_step_s=load
    )
    keyed = {}
    if spec:
        step = float(os.environ.get("FAKE_VLLM_STEP_S", "0.004"))
        for text, knob in json.loads(os.environ.get("FAKE_VLLM_SPEC_BY_PROMPT", "{}")).items():
            per = int(knob.get("accepted", 0)) + 1
            factor = float(knob.get("step_factor", 1.0))
            chunks = (1, per) if per > 1 else 1
            keyed[text] = replace(script, step_s=step * factor, tokens_per_chunk=chunks, spec=None)
    state = _State(keyed, script, None)
    no_draft = os.environ.get("FAKE_VLLM_NO_DRAFT_MATCH")
    if spec and no_draft:
        k = int(spec.get("num_speculative_tokens", 3))
        state.by_substring = ((no_draft, _no_draft_script(script, k)),)
    if os.environ.get("FAKE_VLLM_DIE_ONLY_SPEC") and spec is None:
        os.environ.pop("FAKE_VLLM_DIE_AFTER_REQUESTS", None)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    asyncio.run(_run(state, sock, speculative=spec is not None))
    return 0


def _log_bodies(state: _State, logged: int, speculative: bool) -> int:
    """Append the bodies of the requests finished since ``logged`` to the request log."""
    folder = os.environ.get("FAKE_VLLM_REQUEST_LOG")
    if not folder or len(state.log) <= logged:
        return logged
    with state.lock:
        new = list(state.log[logged:])
    path = Path(folder) / f"{os.getpid()}.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        for ex in new:
            fh.write(json.dumps({"speculative": speculative, "body": ex.body}) + "\n")
    return logged + len(new)


async def _run(state: _State, sock: socket.socket, *, speculative: bool = False) -> None:
    await _serve(state, sock)
    print("INFO Application startup complete.", flush=True)
    die_after = os.environ.get("FAKE_VLLM_DIE_AFTER_REQUESTS")
    jit_at = int(os.environ.get("FAKE_VLLM_JIT_AT_REQUEST", "0")) if speculative else 0
    logged = 0
    while True:
        await asyncio.sleep(0.02)
        logged = _log_bodies(state, logged, speculative)
        if jit_at and len(state.log) >= jit_at:
            jit_at = 0  # once, as vLLM 0.26 logs a kernel it compiles while serving
            print(
                f"(EngineCore pid={os.getpid()}) WARNING {time.strftime('%m-%d %H:%M:%S')} "
                "[jit_monitor.py:135] Triton kernel JIT compilation during inference: "
                "rejection_greedy_sample_kernel. This causes a latency spike; consider "
                "extending warmup to cover this shape/config.",
                flush=True,
            )
        if die_after and len(state.log) >= int(die_after):
            print(
                "ERROR engine core died (scripted)\nTraceback (most recent call last):\n"
                '  File "fake_vllm.py", line 1, in step\n'
                "AssertionError: Synthetic acceptance not supported with CPU sampling\n"
                "\x1b[1;36m(APIServer pid=1)\x1b[0m ERROR 12-01 15:00:01 [serving.py:2] "
                "Engine core died. See stack trace above for the root cause.",
                flush=True,
            )
            os._exit(3)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
