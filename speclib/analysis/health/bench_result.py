"""``vllm bench serve``'s result, imported: the requests it timed and its summary.

:func:`parse_bench_result` / :func:`load_bench_result` read the result JSON that
``vllm bench serve --save-detailed`` writes as a :class:`BenchResult` (with its per-request
detail, :class:`BenchRequest`); :func:`merge_bench_results` pools several runs of the same
load. A result that cannot be read raises :class:`BenchCheckError`. The comparison with the
kit's own records is :mod:`speclib.analysis.health.bench_agreement`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

__all__ = [
    "BenchCheckError",
    "BenchRequest",
    "BenchResult",
    "load_bench_result",
    "merge_bench_results",
    "parse_bench_result",
    "vllm_ms",
]


class BenchCheckError(RuntimeError):
    """``vllm bench serve`` could not run or wrote no usable result; says why, with its log."""


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


def vllm_ms(values: Sequence[float], how: str) -> float | None:
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
            out[key] = value if value is not None else vllm_ms(values, how)
    return out


_LATENCY_FIELDS = (
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
)


def _latency_fields(summary: Mapping[str, float | None]) -> dict[str, float | None]:
    """The latency summary values a :class:`BenchResult` keeps."""
    return {name: summary[name] for name in _LATENCY_FIELDS}


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
        **_latency_fields(summary),
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
        **_latency_fields(summary),
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
    return replace(result, result_path=str(path))
