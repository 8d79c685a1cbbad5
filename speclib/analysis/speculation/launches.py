"""What each server launch left in the run folder, read back: counters, memory, cross-checks.

Per launch the run writes ``/metrics`` snapshots before and after its load levels (and per
level), memory samples and, when ``vllm bench serve`` ran on the same server,
``crosscheck.json``. :func:`launch_metrics` turns the snapshots into counter deltas and
reconciles them with the records of every request sent between them
(:func:`window_records`); :func:`memory_frame`, :func:`with_cache_hits` and
:func:`read_crosschecks` gather the rest for the report. Missing or unreadable files are
data ("no /metrics snapshots"), never an exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from speclib.analysis.speculation.acceptance import Reconciliation, reconcile
from speclib.analysis.speculation.drafting import LaunchDrafting, launch_drafting, request_drafting
from speclib.core.prometheus import (
    CounterResetError,
    PrefixCacheDelta,
    SpecCounters,
    parse_prometheus,
    prefix_cache_delta,
    spec_counters_delta,
)
from speclib.core.rundir import RunDir

__all__ = [
    "LaunchMetrics",
    "crosscheck_summary",
    "crosscheck_warnings",
    "launch_metrics",
    "memory_frame",
    "read_crosschecks",
    "window_records",
    "with_cache_hits",
]


@dataclass(frozen=True)
class LaunchMetrics:
    """``/metrics`` deltas of one launch over its window (its level warm-ups and measured
    requests: :func:`window_records`), and the reconciliation."""

    launch_id: str
    series: str
    spec: SpecCounters | None
    prefix_cache: PrefixCacheDelta | None
    reconciliation: Reconciliation | None
    note: str | None = None
    drafting: LaunchDrafting | None = None  # decode steps from the streams against /metrics
    mtp_weights: dict[str, Any] | None = None  # what an MTP guess reads (status.json extra)

    def to_dict(self) -> dict[str, Any]:
        """The mapping written to ``summary.json``."""
        rec = self.reconciliation
        return {
            "launch_id": self.launch_id,
            "series": self.series,
            "spec": self.spec.to_dict() if self.spec else None,
            "prefix_cache": None
            if self.prefix_cache is None
            else {"queries": self.prefix_cache.queries, "hits": self.prefix_cache.hits},
            "reconciliation": None
            if rec is None
            else {
                "matches": rec.matches,
                "n_requests": rec.n_requests,
                "n_with_metrics": rec.n_with_metrics,
                "requests": rec.requests.to_dict(),
                "server": rec.server.to_dict(),
                "diff_drafts": rec.diff_drafts,
                "diff_draft_tokens": rec.diff_draft_tokens,
                "diff_accepted_tokens": rec.diff_accepted_tokens,
                "explanation": rec.explanation,
            },
            "note": self.note,
            "drafting": self.drafting.to_dict() if self.drafting else None,
        }


def _read_prom(path: Path) -> dict[Any, float] | None:
    try:
        return parse_prometheus(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def window_records(records: pd.DataFrame, launch_id: str, *, warmup_requests: int) -> pd.DataFrame:
    """The records of every request a launch's server got between its ``metrics_before`` and
    ``metrics_after`` snapshots: its level warm-ups and its measured requests.

    ``records`` holds the run's records of every phase in ``requests.jsonl``'s order (each
    appended as it finished); ``warmup_requests`` is the run's ``workload.warmup_requests``.
    The runner (``speclib/run/replicate_block.py``) sends a server its series' warm-up, the
    launch's first ``warmup_requests`` records of phase ``warmup`` (one at a time, all
    finished before anything else is sent to it), then takes ``metrics_before``; then per
    load level a warm-up at the level's own concurrency (``workload.level_warmup``: records
    of phase ``warmup`` stamped with that level) and the level's measured requests; then
    ``metrics_after``. So every record of the launch but the series' warm-up lies between
    the two, failed and not-attempted ones included (they add nothing to a stream).

    Why this window and not the per-level ones (``metrics_l<i>_before/after``, which hold
    the measured requests only): both of the launch's snapshots wait for the counters to
    settle, where a level's ``before`` is taken right after its warm-up without waiting (a
    warm-up's last step may still be counted after it); and the launch's deltas, which
    acceptance and the drafted share are read from, include the level warm-ups, so traffic
    from outside during a warm-up must show too. Counting the warm-ups' own streams and
    spec metrics compares like with like over the whole window, each request (warm-up or
    measured) with the same slack for a last step cut by ``max_tokens`` or a stop.
    """
    if records.empty or "launch_id" not in records:
        return records
    mine = records[records["launch_id"] == launch_id]
    if "phase" not in mine:
        return mine
    warm = (mine["phase"] == "warmup").to_numpy()
    series_warmup = warm & (warm.cumsum() <= warmup_requests)
    return mine[~series_warmup]


def launch_metrics(
    rd: RunDir, status: dict[str, Any], records: pd.DataFrame, *, warmup_requests: int
) -> LaunchMetrics:
    """``/metrics`` deltas over one launch's window, reconciled with the records of every
    request sent in it (:func:`window_records`: ``records`` holds every phase, in
    ``requests.jsonl``'s order)."""
    lid, series = status["launch_id"], status["series"]
    weights = (status.get("extra") or {}).get("mtp_step_weights")
    weights = weights if isinstance(weights, dict) and "c" in weights else None
    files = rd.launch_files(lid)
    before = _read_prom(files.metrics_before)
    after = _read_prom(files.metrics_after)
    if before is None or after is None:
        return LaunchMetrics(
            lid, series, None, None, None, "no /metrics snapshots", mtp_weights=weights
        )
    try:
        spec = spec_counters_delta(before, after)
    except CounterResetError as exc:
        return LaunchMetrics(
            lid, series, None, None, None, f"counters reset: {exc}", mtp_weights=weights
        )
    cache = prefix_cache_delta(before, after)
    mine = window_records(records, lid, warmup_requests=warmup_requests)
    specs = [s if isinstance(s, dict) else None for s in mine.get("spec", [])]
    asked = _asked_per_request(status)
    rec = reconcile(specs, spec) if asked and (spec.present or any(specs)) else None
    drafting = None
    if "--speculative-config" in str(status.get("command") or ""):
        k = _num_speculative_tokens(status) or len(spec.accepted_per_pos) or None
        chunks = list(mine.get("chunk_tokens", []))
        reqs = [request_drafting(c, s, k=k) for c, s in zip(chunks, specs, strict=True)]
        drafting = launch_drafting(lid, series, reqs, spec, k=k)
    return LaunchMetrics(lid, series, spec, cache, rec, drafting=drafting, mtp_weights=weights)


_K = re.compile(r"[\"']num_speculative_tokens[\"']\s*:\s*(\d+)")


def _num_speculative_tokens(status: dict[str, Any]) -> int | None:
    """The ``num_speculative_tokens`` in a launch's recorded command (None: not there)."""
    found = _K.search(str(status.get("command") or ""))
    return int(found.group(1)) if found else None


def _asked_per_request(status: dict[str, Any]) -> bool:
    """Whether the responses can be reconciled with ``/metrics``: a speculative server
    started without ``--per-request-spec-decode-metrics`` (a vLLM that lacks it) has no
    per-request metrics to add up, and its ``/metrics`` deltas stand alone. A plain server
    is reconciled (no drafts on either side), and so is a launch without a recorded command
    (an external server, older run folders)."""
    command = status.get("command")
    if command is None or "--speculative-config" not in command:
        return True
    return "--per-request-spec-decode-metrics" in command


def memory_frame(rd: RunDir, statuses: list[dict[str, Any]]) -> pd.DataFrame:
    """Every launch's memory samples: columns ``series``, ``launch_id``, ``t``, ``rss_bytes``."""
    rows = []
    for s in statuses:
        path = rd.launch_files(s["launch_id"]).memory
        if not path.exists():
            continue
        for line in path.read_text("utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            rows.append(
                {
                    "series": s["series"],
                    "launch_id": s["launch_id"],
                    "t": row.get("t"),
                    "rss_bytes": row.get("rss_bytes"),
                }
            )
    return pd.DataFrame(rows, columns=["series", "launch_id", "t", "rss_bytes"])


def with_cache_hits(rows: pd.DataFrame, lms: list[LaunchMetrics]) -> pd.DataFrame:
    """Add the prefix-cache hits and queries (tokens) of the measured windows per series.

    Empty when no launch of a series has the counters (e.g. an external server without
    ``/metrics``); 0 hits is what every arm should show.
    """
    if rows.empty or "series" not in rows.columns:
        return rows
    hits, queries = [], []
    for name in rows["series"]:
        deltas = [m.prefix_cache for m in lms if m.series == name and m.prefix_cache is not None]
        hits.append(sum(d.hits for d in deltas) if deltas else None)
        queries.append(sum(d.queries for d in deltas) if deltas else None)
    return rows.assign(prefix_cache_hits=hits, prefix_cache_queries=queries)


def read_crosschecks(rd: RunDir, statuses: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Each launch's ``crosscheck.json`` (vllm bench on the same server), labelled."""
    out = []
    for s in statuses:
        path = rd.launch_files(s["launch_id"]).crosscheck
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        labels = {"series": s["series"], "replicate": s["replicate"], "launch_id": s["launch_id"]}
        out.append({**labels, **data})
    return tuple(out)


def crosscheck_warnings(checks: tuple[dict[str, Any], ...]) -> list[str]:
    """One warning per cross-check that failed or whose verdict says the kit may be off."""
    out = []
    for c in checks:
        if c.get("error"):
            out.append(
                f"launch {c['launch_id']}: vllm bench cross-check failed: {c['error'][:300]}"
            )
        elif c.get("verdict") in ("disagree", "too noisy", "kit off", "kit read late"):
            out.append(
                f"launch {c['launch_id']}: the kit's median TPOT and vllm bench serve's on the "
                f"same server differ by more than {100 * c.get('tolerance', 0):g} % "
                f"({c['verdict']})"
            )
    return out


def crosscheck_summary(check: dict[str, Any]) -> dict[str, Any]:
    """A launch's vllm bench cross-check without the bench's per-request detail."""
    out = {k: v for k, v in check.items() if k != "bench"}
    bench = check.get("bench") or {}
    out["bench_argv"] = bench.get("argv")
    return out
