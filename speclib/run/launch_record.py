"""What one launch observes and records besides its requests: status, mode, counters.

:class:`SeriesResult` is a launch's ``status.json``. :func:`verify_mode` checks that the
server ran in the mode its params ask for (speculation on or off) from the ``/metrics``
spec-decode counters, the per-request spec metrics, multi-token chunks and the server log.
:func:`snapshot` / :func:`settled_snapshot` save ``/metrics`` to a launch's folder (a
missing endpoint is data, not a crash; :func:`settled_snapshots` waits for several servers'
counters at once). :func:`not_attempted` turns requests that were never
sent into records that say why. :func:`crosscheck_arm` runs the optional ``vllm bench``
cross-check on a launch's server after the kit's last snapshot. A block that ran elsewhere
(a Ray task) gets its statuses here too: :func:`mark_unfinished` when it never returned,
:func:`stamp_status` to say where it ran.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speclib.core.prompts import Prompt
from speclib.core.records import RequestRecord
from speclib.core.rundir import LaunchDir, RunDir, write_json_atomic
from speclib.params.experiment import ExperimentParams
from speclib.params.server import SeriesParams
from speclib.run.launching import api_key
from speclib.serve.httpapi import fetch_metrics, served_model

__all__ = [
    "SeriesResult",
    "crosscheck_arm",
    "external_model",
    "mark_unfinished",
    "merge_clients",
    "not_attempted",
    "outcome_dict",
    "settled_snapshot",
    "settled_snapshots",
    "snapshot",
    "stamp_status",
    "verify_mode",
]


@dataclass(frozen=True)
class SeriesResult:
    """What happened in one launch (also written to ``launches/<id>/status.json``)."""

    series: str
    replicate: int
    launch_id: str
    ok: bool
    error: str | None
    started_at: float
    ended_at: float
    server_ready_s: float | None
    n_ok: int
    n_failed: int
    n_not_attempted: int
    aborted_reason: str | None
    mode_check: dict[str, Any]
    memory: dict[str, Any] | None
    client: dict[str, Any]
    base_url: str | None
    command: list[str] | None
    concurrency: int
    levels: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    block: str | None = None
    design: str | None = None
    block_arms: list[str] = field(default_factory=list)
    scheduling: dict[str, Any] = field(default_factory=dict)  # server vs client for CPU
    error_cause: str | None = None  # the last exception line of the server's log
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify_mode(
    series: SeriesParams,
    *,
    spec_delta: Any,
    records: list[RequestRecord],
    log_text: str,
    external: bool = False,
    per_request_flag: bool | None = None,
) -> dict[str, Any]:
    """Check the server ran in the mode the params ask for; ``ok`` False says why not.

    Evidence: the ``/metrics`` spec-decode counters over the measured window, the
    per-request spec metrics in the responses, tokens per chunk, and the server log. An
    experiment (any method, external endpoints included) needs at least one of the first
    three; with none, its mode is unverified and the analysis leaves its records out.
    Responses must carry spec metrics only where the server was started with
    ``--per-request-spec-decode-metrics`` (``per_request_flag``; None: as the params ask),
    which a vLLM without that flag never is.
    """
    if per_request_flag is None:
        per_request_flag = series.wants_per_request_metrics
    ok_recs = [r for r in records if r.ok]
    with_spec = sum(1 for r in ok_recs if r.spec)
    multi = sum(1 for r in ok_recs if r.chunk_tokens and max(r.chunk_tokens) > 1)
    drafts = getattr(spec_delta, "num_drafts", None) or 0
    log_spec = "speculative_config=SpeculativeConfig" in log_text or (
        "speculative" in log_text.lower() and "speculative_config=None" not in log_text
    )
    info: dict[str, Any] = {
        "expected": "off" if series.is_control else "on",
        "spec_counter_drafts": drafts,
        "requests_with_spec_metrics": with_spec,
        "requests_with_multi_token_chunks": multi,
        "requests_ok": len(ok_recs),
        "log_mentions_speculation": log_spec if log_text else None,
    }
    problems = []
    if series.is_control:
        if drafts > 0:
            problems.append(f"control series but /metrics counted {drafts} drafts")
        if with_spec:
            problems.append(f"control series but {with_spec} responses carried spec metrics")
    elif ok_recs:
        if drafts == 0 and with_spec == 0 and multi == 0:
            problems.append(
                "mode unverified: speculative series but no /metrics drafts, no per-request "
                "spec metrics and no multi-token chunks show speculation"
            )
        elif per_request_flag and with_spec == 0 and not external:
            problems.append("speculative series but no response carried spec metrics")
    info["ok"] = not problems
    info["problems"] = problems
    return info


def snapshot(base_url: str, path: Path, api_key_: str | None) -> str:
    """Save the server's ``/metrics`` now to ``path`` and return it (a failure is a comment)."""
    try:
        text = fetch_metrics(base_url, api_key=api_key_)
    except Exception as exc:  # a missing /metrics is data, not a crash
        text = f"# speclib: could not fetch /metrics: {type(exc).__name__}: {exc}\n"
    path.write_text(text, encoding="utf-8")
    return text


def _spec_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith(("vllm:spec_decode", "vllm:prefix"))]


def settled_snapshot(base_url: str, path: Path, api_key_: str | None) -> str:
    """Snapshot after the counters stopped moving (the engine updates them a bit late)."""
    prev = snapshot(base_url, path, api_key_)
    for _ in range(10):
        time.sleep(0.3)
        cur = snapshot(base_url, path, api_key_)
        if _spec_lines(cur) == _spec_lines(prev):
            return cur
        prev = cur
    return prev


def settled_snapshots(targets: Sequence[tuple[str, Path]], api_key_: str | None) -> list[str]:
    """:func:`settled_snapshot` of several servers (``(base_url, path)`` each) at once, in
    the order given: each waits out its own counters, none waits for another's."""
    if len(targets) < 2:
        return [settled_snapshot(url, path, api_key_) for url, path in targets]
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        return list(pool.map(lambda t: settled_snapshot(t[0], t[1], api_key_), targets))


def not_attempted(
    specs: list[Any], done: set[tuple[str, int]], base: dict[str, Any], reason: str
) -> list[RequestRecord]:
    """Records (``ok=False``) for the specs never sent, each saying why."""
    return [
        RequestRecord(
            **base,
            prompt_id=s.prompt_id,
            repeat=s.repeat,
            category=s.category,
            turn=s.turn,
            ok=False,
            error=f"not attempted: {reason}",
            extra={"attempted": False},
        )
        for s in specs
        if (s.prompt_id, s.repeat) not in done
    ]


def _unique(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(v for v in values if v is not None))


def merge_clients(items: list[dict[str, Any]]) -> dict[str, Any]:
    """One launch's client summary from the summaries of its calls (times summed).

    Takes :func:`outcome_dict` items, or summaries made by this function (a level's, merged
    again into the launch's). The loop-lag figures are the worst over the calls (max of the
    p99s, max of the maxima): a late read shows as a late probe tick in the same window.
    ``client_process`` lists where the client ran (``worker``, or ``in-process …``; several
    joined by ``; ``), ``client_pids`` the processes that ran it.
    """
    items = [i for i in items if i]
    if not items:
        return {}
    pids = [p for i in items for p in (i.get("client_pids") or [i.get("client_pid")])]
    return {
        "wall_s": sum(i.get("wall_s") or 0 for i in items),
        "cpu_s": sum(i.get("cpu_s") or 0 for i in items),
        "loop_cpu_s": sum(i.get("loop_cpu_s") or i.get("cpu_s") or 0 for i in items),
        "saturated": any(i.get("saturated") for i in items),
        "event_loop": items[0].get("event_loop"),
        "stamp_source": items[0].get("stamp_source"),
        "loop_lag_p99_s": max(i.get("loop_lag_p99_s") or 0.0 for i in items),
        "loop_lag_max_s": max(i.get("loop_lag_max_s") or 0.0 for i in items),
        "client_process": "; ".join(_unique([i.get("client_process") for i in items])) or None,
        "client_pids": _unique(pids),
    }


def outcome_dict(outcome: Any) -> dict[str, Any]:
    """A client run's outcome as JSON, without the per-request lists."""
    if outcome is None:
        return {}
    data = dict(outcome.to_dict()) if hasattr(outcome, "to_dict") else asdict(outcome)
    data.pop("not_attempted", None)
    data.pop("not_attempted_index", None)
    return data


def external_model(base_url: str, api_key_: str | None) -> str:
    """The model id an external endpoint serves."""
    return served_model(base_url, api_key=api_key_)


def _crosscheck_brief(check: dict[str, Any]) -> dict[str, Any]:
    if check.get("error"):
        return {"error": str(check["error"])[:500]}
    row = next((r for r in check.get("rows", ()) if r["metric"] == "median TPOT"), {})
    return {
        "verdict": check.get("verdict"),
        "median_tpot_kit_ms": row.get("kit"),
        "median_tpot_vllm_bench_ms": row.get("vllm_bench"),
        "diff": row.get("diff"),
    }


def crosscheck_arm(
    params: ExperimentParams,
    files: LaunchDir,
    lid: str,
    arm: Any,
    prompts: list[Prompt],
    records: list[RequestRecord],
    replicate: int = 0,
) -> dict[str, Any] | None:
    """``vllm bench serve`` on one arm's server after the kit's last snapshot (if asked),
    in the first replicate block only (one cross-check per arm is enough to compare the
    clients, and each costs about a minute).

    ``arm`` has ``base_url``, ``model``, ``external`` and ``alive()``. Never raises: a bench
    that cannot run is recorded as ``{"error": ...}`` in ``crosscheck.json``. Returns the
    brief that ``status.json`` keeps (None when the cross-check is off).
    """
    if not params.protocol.crosscheck_vllm_bench or replicate != 0:
        return None
    if not arm.alive():
        died = {"error": "the server died before the vllm bench cross-check"}
        write_json_atomic(files.crosscheck, died)
        return _crosscheck_brief(died)
    from speclib.run.bench_crosscheck import crosscheck_launch

    salted = params.protocol.cache_policy != "off" or arm.external
    check = crosscheck_launch(
        params,
        launch_dir=files.root,
        base_url=arm.base_url,
        model=arm.model,
        prompts=prompts,
        records=records,
        api_key=api_key(params),
        cache_salt=f"{lid}-vllm-bench-{secrets.token_hex(4)}" if salted else None,
    )
    return _crosscheck_brief(check)


def mark_unfinished(
    rd: RunDir, params: ExperimentParams, block: dict[str, Any], design: str, why: str
) -> None:
    """A failed ``status.json`` for every launch of ``block``, whose run never returned
    (its Ray task failed or was cancelled): ``why`` is its error and abort reason."""
    for series, lid in zip(block["arms"], block["launch_ids"], strict=True):
        now = time.time()
        status = SeriesResult(
            series=series,
            replicate=block["replicate"],
            launch_id=lid,
            ok=False,
            error=why,
            started_at=now,
            ended_at=now,
            server_ready_s=None,
            n_ok=0,
            n_failed=0,
            n_not_attempted=0,
            aborted_reason=why,
            mode_check={},
            memory=None,
            client={},
            base_url=None,
            command=None,
            concurrency=params.workload.levels[0].concurrency,
            block=block["block"],
            design=design,
            block_arms=list(block["arms"]),
        )
        write_json_atomic(rd.status_path(lid), status.to_dict())


def stamp_status(rd: RunDir, lid: str, **extra: Any) -> None:
    """Add ``extra`` to the ``extra`` entry of a launch's ``status.json`` (none: nothing)."""
    status = rd.read_status(lid)
    if status is not None:
        status["extra"] = {**(status.get("extra") or {}), **extra}
        write_json_atomic(rd.status_path(lid), status)
