"""Alternating the measured requests between the arms of a block, load level by level.

For each load level :func:`measure_levels` first warms every arm up at the level's own
concurrency (:func:`speclib.run.arms.warm_up_level`, ``workload.level_warmup``), then
prepares every arm's requests (``workload.repeats_at``: at least ``workload.min_waves``
waves of the level's concurrency; bodies encoded before any clock starts), plans the
alternation slots (:func:`speclib.run.design.plan_slots`; at concurrency 1 a slot is one
prompt sent to every arm back to back in a fresh random order; with
``protocol.switch_pause_s``, slots of several prompts, sent in an order drawn per slot and
block, and a quiet pause at each switch of arm, :func:`settle`), snapshots each server's
``/metrics`` before and after the level, sends slot by slot while tagging the CPU sampler
with the arm being served, stops sending to an arm whose failure share
passes ``workload.max_error_rate``, and records what was never sent.
"""

from __future__ import annotations

import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from speclib.core.records import RequestRecord, append_record
from speclib.core.rundir import RunDir
from speclib.params.experiment import ExperimentParams
from speclib.params.protocol import LoadLevel
from speclib.run.arms import Arm, cache_salt, level_warmup_count, send, stamp, warm_up_level
from speclib.run.design import Slot, plan_slots, slot_size
from speclib.run.launch_record import (
    merge_clients,
    not_attempted,
    outcome_dict,
    settled_snapshots,
    snapshot,
)
from speclib.run.launching import api_key
from speclib.run.requests import arrival_offsets, make_request_specs

__all__ = [
    "Level",
    "check_abort",
    "finish_level",
    "measure_levels",
    "prepare_level",
    "serve_slot",
    "settle",
    "slot_offsets",
]

_MIN_SENT_FOR_ABORT = 4  # an arm is stopped for errors only after this many requests


@dataclass
class Level:
    """One load level of a block: each arm's prepared requests and the shared schedule."""

    index: int
    level: LoadLevel
    specs: dict[str, list[Any]]
    offsets: list[float] | None
    slots: list[Slot]
    sent: dict[str, list[RequestRecord]] = field(default_factory=dict)
    outcomes: dict[str, list[Any]] = field(default_factory=dict)
    last_arm: str | None = None  # the arm served last, and when its requests ended
    last_end: float = field(default_factory=time.monotonic)


def settle(lv: Level, name: str, pause_s: float) -> float:
    """Wait until ``pause_s`` has passed since another arm's requests ended (no wait when
    ``name`` was served last); returns the seconds waited. See ``protocol.switch_pause_s``:
    the previous arm's worker busy-polls for 1 s after its last read."""
    if lv.last_arm == name or pause_s <= 0:
        return 0.0
    wait = lv.last_end + pause_s - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    return max(wait, 0.0)


def prepare_level(
    params, arms: list[Arm], prompts, replicate: int, i: int, level, nonce, block: str = ""
):
    """Every arm's prepared requests of load level ``i``, its arrival offsets and its slots.

    The arms' order in each slot is drawn from ``protocol.seed``, the replicate and the
    level; the order of the requests within each slot from those and the block too (so the
    groups of one replicate differ), reproducibly."""
    specs = {
        a.name: make_request_specs(
            prompts,
            params,
            model=a.model,
            repeats=params.workload.repeats_at(level, len(prompts)),
            cache_salt=cache_salt(params, a, i, nonce),
        )
        for a in arms
    }
    n = len(next(iter(specs.values())))
    offsets = None
    if level.request_rate:
        offsets = arrival_offsets(
            n,
            rate=level.request_rate,
            seed=params.workload.arrival_seed,
            replicate=replicate,
            level=i,
        )
    rng = random.Random(f"{params.protocol.seed}-{replicate}-{i}")
    size = slot_size(params, level.concurrency, len(arms))
    item_rng = random.Random(f"{params.protocol.seed}-{replicate}-{block}-{i}-items")
    slots = plan_slots(n, [a.name for a in arms], size=size, rng=rng, item_rng=item_rng)
    return Level(i, level, specs, offsets, slots)


def slot_offsets(offsets: list[float] | None, items: tuple[int, ...]) -> list[float] | None:
    """The arrival offsets of one slot's requests, from the slot's start: the level's
    schedule belongs to the positions, so the k-th request sent takes the k-th earliest
    time of the slot's items whatever order the items were shuffled into."""
    if offsets is None or not items:
        return None
    times = sorted(offsets[j] for j in items)
    return [t - times[0] for t in times]


def serve_slot(params, rd, lv: Level, slot: Slot, arms: dict[str, Arm], ctx) -> None:
    """Send one slot's requests to every arm in the slot's order, tagging the CPU sampler."""
    replicate, block, cpu, progress = ctx
    for pos, name in enumerate(slot.order):
        arm = arms[name]
        if arm.aborted or not arm.alive():
            continue
        specs = [lv.specs[name][j] for j in slot.items]
        offsets = slot_offsets(lv.offsets, slot.items)
        conc = len(specs) if lv.level.request_rate else lv.level.concurrency
        fields = stamp(arm, replicate, block, lv.index, lv.level)
        fields.update(slot=slot.index, slot_pos=pos)
        settle(lv, name, params.protocol.switch_pause_s)
        if cpu is not None:
            cpu.serving(name)
        try:
            recs, outcome = send(
                params,
                rd,
                arm,
                specs,
                fields,
                phase="measure",
                concurrency=conc,
                offsets=offsets,
                progress=progress,
            )
        finally:
            if cpu is not None:
                cpu.serving(None)
            lv.last_arm, lv.last_end = name, time.monotonic()
        lv.sent.setdefault(name, []).extend(recs)
        lv.outcomes.setdefault(name, []).append(outcome)
        check_abort(params, arm, lv.sent[name], outcome)


def check_abort(params: ExperimentParams, arm: Arm, sent: list[RequestRecord], outcome) -> None:
    """Stop sending to ``arm`` when its failures pass ``workload.max_error_rate``."""
    reason = getattr(outcome, "aborted_reason", None)
    failed = sum(not r.ok for r in sent)
    share = failed / len(sent) if sent else 0.0
    if reason:
        arm.aborted = reason
    elif len(sent) >= _MIN_SENT_FOR_ABORT and share > params.workload.max_error_rate:
        arm.aborted = (
            f"stopped: {failed} of {len(sent)} requests failed "
            f"(> max_error_rate {params.workload.max_error_rate:g})"
        )


def finish_level(rd: RunDir, arms: list[Arm], lv: Level, replicate: int, block: str) -> None:
    """Record what was never sent, and each arm's level summary, after a load level."""
    for arm in arms:
        sent = lv.sent.get(arm.name, [])
        done = {(r.prompt_id, r.repeat) for r in sent}
        specs = lv.specs[arm.name]
        if len(done) < len(specs):
            why = arm.aborted or ("server died" if not arm.alive() else "not sent")
            base = {"series": arm.name, "launch_id": arm.lid}
            base.update(stamp(arm, replicate, block, lv.index, lv.level))
            with rd.requests.open("a", encoding="utf-8") as fh:
                for rec in not_attempted(specs, done, base, why):
                    append_record(fh, rec)
        arm.records += sent
        outcomes = [outcome_dict(o) for o in lv.outcomes.get(arm.name, [])]
        arm.levels.append(
            {
                "level": lv.index,
                "concurrency": lv.level.concurrency,
                "request_rate": lv.level.request_rate,
                "label": lv.level.label,
                "n_ok": sum(r.ok for r in sent),
                "n_failed": sum(not r.ok for r in sent),
                "n_not_attempted": len(specs) - len(sent),
                "slots": len(lv.slots),
                "client": merge_clients(outcomes),
            }
        )


def _progress(total: int, desc: str, show: bool):
    if not show:
        return None, lambda: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, unit="req", leave=True)
    return bar.update, bar.close


def measure_levels(params, rd, arms: list[Arm], prompts, replicate: int, block: str, cpu, show):
    """Every load level of a block, requests alternating between the live arms."""
    key = api_key(params)
    nonce = secrets.token_hex(4)
    by_name = {a.name: a for a in arms}
    if not arms:
        return
    for i, level in enumerate(params.workload.levels):
        n_warm = level_warmup_count(params, i, level)
        for arm in arms:
            if n_warm and arm.alive() and not arm.aborted:
                warm_up_level(
                    params, rd, arm, prompts, stamp(arm, replicate, block, i, level), n_warm
                )
        lv = prepare_level(params, arms, prompts, replicate, i, level, nonce, block)
        for arm in arms:
            if arm.alive():
                snapshot(arm.base_url, arm.files.metrics_level(i, "before"), key)
        total = sum(len(s) for s in lv.specs.values())
        update, close = _progress(total, f"{block} {level.label}", show)
        try:
            for slot in lv.slots:
                serve_slot(params, rd, lv, slot, by_name, (replicate, block, cpu, update))
        finally:
            close()
        alive = [a for a in arms if a.alive()]
        settled_snapshots([(a.base_url, a.files.metrics_level(i, "after")) for a in alive], key)
        finish_level(rd, arms, lv, replicate, block)
