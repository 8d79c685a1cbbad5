"""One replicate block: start its arms' servers together, warm up, alternate requests, stop.

This is what the ``10_series`` notebook calls. A block holds one launch per arm: every arm
in the interleaved design, a single arm in the sequential one (then it behaves exactly like
a one-server launch). For each arm it obtains a server (see :mod:`speclib.run.launching`;
all arms start in parallel), samples its memory and, with several arms, the CPU of every
server tagged with the arm being served (:mod:`speclib.serve.cpu`); takes ``/metrics``
snapshots before warm-up and around each load level; sends the warm-up requests; in a
multi-turn run, has the control answer the earlier turns once (or reads those answers from
the run folder, :mod:`speclib.run.history`) and expands each question into one prompt per
turn; then, per load level, sends the prompts in alternation slots
(:func:`speclib.run.design.plan_slots`): at concurrency 1 each prompt goes to every arm
back to back in a fresh random order. Every
record is appended to ``requests.jsonl`` with its block, slot and position in the slot.
After the last level it runs the optional ``vllm bench`` cross-check per arm, stops every
server, verifies each arm's mode (speculation on or off) and writes each launch's
``status.json``. A server that fails to start or dies fails its own arm only; the others go
on, and what was not sent is recorded as not attempted.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from speclib.core.datasets import workload_prompts
from speclib.core.prometheus import CounterResetError, parse_prometheus, spec_counters_delta
from speclib.core.records import read_records
from speclib.core.rundir import RunDir, write_json_atomic
from speclib.core.turns import sent_prompt_count
from speclib.measure.worker import close_shared_worker, shared_worker
from speclib.params.run_record import recorded_params
from speclib.run.alternate import measure_levels
from speclib.run.arms import Arm, stamp, start_all, warm_up
from speclib.run.design import Block, block_id, group_launch_id
from speclib.run.history import block_prompts
from speclib.run.launch_record import (
    SeriesResult,
    crosscheck_arm,
    merge_clients,
    settled_snapshots,
    snapshot,
    verify_mode,
)
from speclib.run.launching import api_key
from speclib.run.mtp_weights import launch_mtp_weights
from speclib.run.synthetic_truth import TRUTH_METHODS, acceptance_truth, metrics_window
from speclib.serve import process as srv
from speclib.serve.cpu import CpuSampler
from speclib.serve.memory import MemorySampler
from speclib.serve.priority import place_client

__all__ = ["run_block"]


def _status(
    params, arm: Arm, replicate: int, block: str, design: str, error: str | None, n_prompts: int
):
    wl = params.workload
    n_total = sum(wl.repeats_at(lv, n_prompts) * n_prompts for lv in wl.levels)
    n_ok = sum(r.ok for r in arm.records)
    ready = None
    if arm.handle is not None and arm.handle.ready_at is not None:
        ready = arm.handle.ready_at - arm.handle.started_at
    return SeriesResult(
        series=arm.name,
        replicate=replicate,
        launch_id=arm.lid,
        ok=error is None,
        error=_clip(error) if error else None,
        started_at=arm.started,
        ended_at=time.time(),
        server_ready_s=ready,
        n_ok=n_ok,
        n_failed=len(arm.records) - n_ok,
        n_not_attempted=max(0, n_total - len(arm.records)),
        aborted_reason=arm.aborted,
        mode_check={},
        memory=arm.sampler.summary().to_dict() if isinstance(arm.sampler, MemorySampler) else None,
        client=merge_clients([lv.get("client") or {} for lv in arm.levels]),
        base_url=arm.base_url if arm.external else None,
        command=srv.redact_argv(arm.spec.argv) if arm.spec else arm.command,
        concurrency=params.workload.levels[0].concurrency,
        levels=arm.levels,
        cache={
            "policy": params.protocol.cache_policy,
            "external": arm.external,
            "fixed_salt": bool(params.protocol.cache_salt),
        },
        block=block,
        design=design,
        block_arms=[],
        scheduling={
            **(arm.handle.scheduling if arm.handle is not None else {}),
            **arm.client_placement,
        },
        extra={"start_after": list(arm.start_after)},
    )


def _clip(error: str, limit: int = 4000) -> str:
    """An error for ``status.json``: its first line (the message) and the end of the rest
    (the log's last lines), at most about ``limit`` characters."""
    if len(error) <= limit:
        return error
    head, _, rest = error.partition("\n")
    return f"{head[:500]}\n…\n{rest[-(limit - 500) :]}"


def _conclude(
    params, rd: RunDir, arm: Arm, replicate, block, design, arms_in_block, n_prompts: int
) -> Any:
    """Mode check and ``status.json`` of one arm after its server stopped (``n_prompts``:
    the prompts the block sends per level and repeat)."""
    if arm.start_error:
        result = _status(params, arm, replicate, block, design, arm.start_error, n_prompts)
    else:
        log_text = srv.tail(arm.files.server_log, lines=2000) if arm.handle else ""
        try:
            delta = spec_counters_delta(parse_prometheus(arm.before), parse_prometheus(arm.after))
        except (CounterResetError, ValueError):
            delta = None
        mode = verify_mode(
            arm.series,
            spec_delta=delta,
            records=arm.records,
            log_text=log_text,
            external=arm.external,
            per_request_flag=arm.spec is not None
            and "--per-request-spec-decode-metrics" in arm.spec.argv,
        )
        error = None
        if arm.died_during:
            cause = srv.root_cause(log_text)
            error = (
                f"server died during the series (exit code {arm.handle.process.poll()})"
                + (f": {cause}" if cause else "")
                + f"; last lines of its log:\n{srv.tail(arm.files.server_log, lines=30)}"
            )
        elif not mode["ok"]:
            error = "mode check failed: " + "; ".join(mode["problems"])
        elif not any(r.ok for r in arm.records):
            error = "no request succeeded"
        status = _status(params, arm, replicate, block, design, error, n_prompts)
        result = replace(status, mode_check=mode)
    extra = dict(result.extra)
    if arm.crosscheck is not None:
        extra["crosscheck"] = arm.crosscheck
    truth = _truth(params, rd, arm)
    if truth is not None:
        extra["acceptance_truth"] = truth
    weights = _mtp_weights(params, arm)
    if weights is not None:
        extra["mtp_step_weights"] = weights
    cause = srv.root_cause(srv.tail(arm.files.server_log, lines=400)) if result.error else None
    result = replace(result, block_arms=list(arms_in_block), extra=extra, error_cause=cause)
    write_json_atomic(arm.files.status, result.to_dict())
    return result


def _truth(params, rd: RunDir, arm: Arm) -> dict[str, Any] | None:
    """The acceptance a synthetic draft must give on the outputs of this arm's ``/metrics``
    window (never fails the block: a problem is written instead)."""
    try:
        if (arm.series.speculative_config or {}).get("method") not in TRUTH_METHODS:
            return None
        window = metrics_window(
            list(read_records(rd.requests)),
            arm.lid,
            warmup_requests=params.workload.warmup_requests,
        )
        return acceptance_truth(params, arm.series, window)
    except Exception as exc:  # a bad declaration must not lose the block's records
        return {"error": f"{type(exc).__name__}: {exc}"}


def _mtp_weights(params, arm: Arm) -> dict[str, Any] | None:
    """What an MTP arm's guesses read (never fails the block: a problem is written instead)."""
    try:
        return launch_mtp_weights(params, arm.series)
    except Exception as exc:  # an unreadable checkpoint must not lose the block's records
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_block(
    run_dir: str | Path,
    replicate: int = 0,
    arms: Sequence[str] | None = None,
    *,
    design: str = "interleaved",
    block: str | None = None,  # "" or None: the replicate's first block
    show_progress: bool = True,
) -> list[SeriesResult]:
    """Run one block (``arms``, default every arm, of replicate ``replicate``) with the
    params recorded in ``run_dir`` (:mod:`speclib.params.run_record`).

    ``block`` is the block's id from the manifest (default ``r<replicate>``, or the launch
    id in the sequential design); a later group of a replicate (``r0.1``, arms that do not
    all fit together) gives its launches their own ids (``control-r0.1``).
    Request failures are records, never exceptions; a server that fails to start fails its
    own arm (``status.json`` says why). Interrupts stop every server, write a failed status
    for each arm not yet concluded, and are re-raised.
    """
    rd = RunDir.at(run_dir)
    params = recorded_params(rd.params_resolved)
    names = list(arms) if arms else [a.name for a in params.arms]
    block = block or block_id(design, replicate, names[0] if len(names) == 1 else None)
    group = Block(block, replicate, tuple(names)).group
    questions = list(workload_prompts(params).prompts)
    n_prompts = sent_prompt_count(questions, params.workload)
    lids = [group_launch_id(n, replicate, group) for n in names]
    runs = [
        Arm(params.series_by_name(n), lid, rd.launch_files(lid))
        for n, lid in zip(names, lids, strict=True)
    ]
    for arm in runs:
        arm.files.root.mkdir(parents=True, exist_ok=True)
    try:
        _run(params, rd, runs, questions, replicate, block, show_progress)
    except BaseException as exc:
        why = f"{type(exc).__name__}: {exc}"
        for arm in runs:
            if not arm.files.status.exists():
                status = _status(params, arm, replicate, block, design, why, n_prompts)
                tb = traceback.format_exc()[-4000:]
                status = replace(status, extra={**status.extra, "traceback": tb})
                write_json_atomic(arm.files.status, status.to_dict())
        raise
    finally:
        # The block's client worker ends with the block. Left running to the kernel's exit,
        # it kept the kernel from stopping when asked (ipykernel signals every child in its
        # process group and waits for them to be gone): each block's kernel stopped only
        # when jupyter_client killed it after 2.5 s; closed here, the kernel stops in 0.2 s.
        close_shared_worker()
    return [_conclude(params, rd, a, replicate, block, design, names, n_prompts) for a in runs]


def _run(params, rd: RunDir, runs: list[Arm], questions, replicate: int, block: str, show):
    key = api_key(params)
    with contextlib.ExitStack() as stack:
        start_all(params, rd, runs, stack)
        live = [a for a in runs if a.start_error is None]
        for arm in live:
            if arm.handle is not None:
                label = {"launch_id": arm.lid, "series": arm.name}
                arm.sampler = stack.enter_context(
                    MemorySampler(arm.handle.pid, arm.files.memory, label=label)
                )
        for arm in live:
            snapshot(arm.base_url, arm.files.metrics_before_warmup, key)
            warm_up(
                params,
                rd,
                arm,
                questions,
                stamp(arm, replicate, block, 0, params.workload.levels[0]),
            )
        prompts = block_prompts(params, rd, questions, live, block)
        placement = place_client(shared_worker().pid, [a.handle.pid for a in live if a.handle])
        befores = settled_snapshots([(a.base_url, a.files.metrics_before) for a in live], key)
        for arm, before in zip(live, befores, strict=True):
            arm.client_placement = placement
            arm.before = before
        pids = {a.name: a.handle.pid for a in live if a.handle is not None}
        cpu = CpuSampler(pids, {a.name: a.files.cpu for a in live}) if len(pids) > 1 else None
        with cpu or contextlib.nullcontext():
            measure_levels(params, rd, live, prompts, replicate, block, cpu, show)
        alive = [a for a in live if a.alive()]
        afters = settled_snapshots([(a.base_url, a.files.metrics_after) for a in alive], key)
        for arm, after in zip(alive, afters, strict=True):
            arm.after = after
        for arm in live:
            arm.died_during = arm.handle is not None and not arm.handle.alive()
            arm.crosscheck = crosscheck_arm(
                params, arm.files, arm.lid, arm, prompts, arm.records, replicate
            )
