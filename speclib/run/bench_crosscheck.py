"""Cross-check orchestration: the kit and ``vllm bench serve`` on the same running server.

:func:`crosscheck_server` (``speclib crosscheck``) measures one running server with both
clients in alternating rounds, from the same prompts and sampling, and writes
``crosscheck.json``; :func:`crosscheck_launch` (called by :mod:`speclib.run.replicate_block` while
a measured launch's server is still up) runs the bench once on the launch's first
closed-loop level and compares it with the kit's records of that level. Both read the
server's ``/metrics`` around each side's traffic (acceptance, the server's own TPOT).
The requests come from :mod:`speclib.run.requests`, the bench from
:mod:`speclib.run.vllm_bench`, and the comparison from
:mod:`speclib.analysis.health.bench_agreement`;
:class:`BenchCheckError` (defined there, since reading a result can raise it) is
re-exported here for callers of the orchestrators.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from speclib.analysis.health.bench_agreement import (
    DEFAULT_TOLERANCE,
    CrossCheck,
    compare_with_kit,
    server_tpot_ms,
)
from speclib.analysis.health.bench_result import BenchCheckError, BenchResult, merge_bench_results
from speclib.core.datasets import workload_prompts
from speclib.core.prometheus import spec_counters_delta
from speclib.core.records import append_record, tpot_s
from speclib.core.rundir import LaunchDir
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import load_params
from speclib.params.server import resolve_model_ref
from speclib.run.requests import make_request_specs, warmup_prompts
from speclib.run.vllm_bench import run_vllm_bench
from speclib.serve.httpapi import fetch_metrics, served_model, server_root

__all__ = ["BenchCheckError", "crosscheck_launch", "crosscheck_server"]


def _tokenizer_for(params: Any, tokenizer_dir: str | None) -> str:
    """A local tokenizer for vllm bench: given, else the params' model if local or demo."""
    if tokenizer_dir:
        return tokenizer_dir
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


def _round_medians(
    benches: Sequence[BenchResult], records: Sequence[Any], rounds: int
) -> list[tuple[str, int, float]]:
    """``(side, round, median TPOT ms)`` of every run of either side that has one."""
    medians = [("vllm bench", r, b.median_tpot_ms) for r, b in enumerate(benches)]
    for r in range(rounds):
        tpots = [t for rec in records if rec.replicate == r and rec.ok and (t := tpot_s(rec))]
        medians.append(("kit", r, 1000 * statistics.median(tpots) if tpots else None))
    return [m for m in medians if m[2] is not None]  # type: ignore[misc]


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
    from speclib.measure import run_requests_sync

    if not isinstance(params, ExperimentParams):
        params = load_params(params)
    wl = params.workload
    levels = wl.concurrency if isinstance(wl.concurrency, list) else [wl.concurrency]
    conc = concurrency or int(levels[0])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompts = list(workload_prompts(params).prompts)
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
    check = compare_with_kit(
        merge_bench_results(benches),
        records,
        tolerance=tolerance,
        kit_acceptance_rate=accepted / drafted if drafted else None,
        kit_acceptance_length=1 + accepted / drafts if drafts else None,
        round_medians=_round_medians(benches, records, rounds),
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

    For :mod:`speclib.run.replicate_block`, after the measured requests and the final ``/metrics``
    snapshot (so the bench's traffic pollutes none of the kit's counters). Runs vllm bench
    once on the first closed-loop load level with the workload's prompts, repeats and
    sampling, compares it with that level's successful records (acceptance from the level's
    ``metrics_l<i>_before/after.prom`` snapshots, as vllm bench takes its own from
    ``/metrics``), writes ``launch_dir/crosscheck.json`` and returns the same dict:
    :meth:`CrossCheck.to_dict`, or ``{"error": ...}`` when the bench could not run.
    """
    files = LaunchDir(Path(launch_dir))
    try:
        result = _crosscheck_launch(
            params,
            files,
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
    files.crosscheck.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def _crosscheck_launch(
    params: Any,
    files: LaunchDir,
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
    """:func:`crosscheck_launch` without the error handling: the check as a dict."""
    wl = params.workload
    level = next((i for i, lv in enumerate(wl.levels) if lv.request_rate is None), None)
    if level is None:
        raise ValueError("no closed-loop load level to cross-check (vllm bench runs closed loop)")
    out = files.vllm_bench
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
    before, after = files.metrics_level(level, "before"), files.metrics_level(level, "after")
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
