"""Per-block summaries of paired log-ratios: the input of the block-level intervals.

:func:`summarize_blocks` turns per-pair log-ratios labelled by arm and replicate block into
a :class:`BlockSummary` (per arm and block: the mean log-ratio ``d[a, b]``, the number of
pairs, the within-cell variance); :func:`block_summary` builds one from those figures
directly. :func:`speclib.analysis.stats.block_intervals.block_ratio_cis` turns a summary into one
interval per arm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from speclib.core.jsonutil import jsonable

__all__ = [
    "BlockSummary",
    "block_summary",
    "float_array",
    "summarize_blocks",
]


@dataclass(frozen=True, eq=False)
class BlockSummary:
    """Per-block summaries of the paired log-ratios, one row per non-control arm.

    ``mean[i, j]`` is ``d[arms[i], blocks[j]]``, the mean of ``log(arm / control)`` over the
    pairs of that block (NaN when the arm has no pairs in the block); ``n_pairs[i, j]`` the
    number of pairs (0 when missing); ``pair_var[i, j]`` the sample variance (ddof 1) of
    those log-ratios, or None when unknown (then no within-block components are reported).
    """

    arms: tuple[str, ...]
    blocks: tuple[Any, ...]
    mean: NDArray[np.float64]
    n_pairs: NDArray[np.int64]
    pair_var: NDArray[np.float64] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


def float_array(values: Any, name: str, ndim: int = 1) -> NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be an array of numbers ({exc})") from None
    if arr.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-dimensional (got shape {arr.shape})")
    return arr


def _codes(labels: Any, n: int, name: str) -> tuple[NDArray[np.intp], tuple[Any, ...]]:
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size != n:
        raise ValueError(f"`{name}` must hold one label per pair ({n}); got shape {arr.shape}")
    if arr.dtype == object and any(v is None for v in arr):
        raise ValueError(f"`{name}` must not hold missing (None) labels")
    if arr.dtype.kind == "f" and np.any(np.isnan(arr)):
        raise ValueError(f"`{name}` must not hold missing (NaN) labels")
    try:
        uniq, codes = np.unique(arr, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"`{name}` labels must be comparable ({exc})") from None
    return codes.astype(np.intp), tuple(u.item() if hasattr(u, "item") else u for u in uniq)


def block_summary(
    means: Mapping[str, ArrayLike],
    *,
    n_pairs: Mapping[str, ArrayLike],
    pair_var: Mapping[str, ArrayLike] | None = None,
    blocks: ArrayLike | None = None,
) -> BlockSummary:
    """A :class:`BlockSummary` from per-arm sequences over the same blocks.

    ``means[arm][j]`` is ``d[arm, block j]`` (NaN, with ``n_pairs`` 0, when the arm is
    missing in that block); ``n_pairs`` and the optional ``pair_var`` have the same keys
    and lengths. ``blocks`` names the blocks (default ``0 .. B-1``).
    """
    if not isinstance(means, Mapping) or not means:
        raise ValueError("`means` must be a non-empty mapping of arm name to block means")
    arms = tuple(str(a) for a in means)
    rows = [float_array(means[a], f"means[{a!r}]") for a in means]
    if len({r.size for r in rows}) != 1 or rows[0].size == 0:
        raise ValueError("`means` must give every arm the same, non-zero number of blocks")
    mean = np.vstack(rows)
    if not isinstance(n_pairs, Mapping) or set(n_pairs) != set(means):
        raise ValueError("`n_pairs` must be a mapping with the same arms as `means`")
    counts = np.vstack([float_array(n_pairs[a], f"n_pairs[{a!r}]") for a in means])
    if counts.shape != mean.shape or np.any(counts < 0) or np.any(counts != np.round(counts)):
        raise ValueError(f"`n_pairs` must hold non-negative integers of shape {mean.shape}")
    var = None
    if pair_var is not None:
        if not isinstance(pair_var, Mapping) or set(pair_var) != set(means):
            raise ValueError("`pair_var` must be a mapping with the same arms as `means`")
        var = np.vstack([float_array(pair_var[a], f"pair_var[{a!r}]") for a in means])
        if var.shape != mean.shape or np.any(var[counts > 1] < 0):
            raise ValueError(f"`pair_var` must hold non-negative numbers of shape {mean.shape}")
    labels = tuple(range(mean.shape[1])) if blocks is None else tuple(np.asarray(blocks).tolist())
    if len(labels) != mean.shape[1]:
        raise ValueError(f"`blocks` must name {mean.shape[1]} blocks (got {len(labels)})")
    return BlockSummary(arms, labels, mean, counts.astype(np.int64), var)


def summarize_blocks(log_ratio: ArrayLike, *, arm: ArrayLike, block: ArrayLike) -> BlockSummary:
    """Per-block summaries from pair-level data: one log-ratio per (arm, block, pair).

    ``log_ratio[i]`` is ``log(arm TPOT / control TPOT)`` of pair i (same prompt, repeat and
    load level in the same block), ``arm[i]`` the experiment or aa arm it belongs to and
    ``block[i]`` its replicate block.
    """
    values = float_array(log_ratio, "log_ratio")
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("`log_ratio` must hold at least one pair, all finite")
    arm_code, arms = _codes(arm, values.size, "arm")
    block_code, blocks = _codes(block, values.size, "block")
    shape = (len(arms), len(blocks))
    flat = arm_code * shape[1] + block_code
    n = np.bincount(flat, minlength=shape[0] * shape[1]).reshape(shape)
    sums = np.bincount(flat, values, shape[0] * shape[1]).reshape(shape)
    mean = np.divide(sums, n, out=np.full(shape, np.nan), where=n > 0)
    dev = values - mean.ravel()[flat]
    ss = np.bincount(flat, dev**2, shape[0] * shape[1]).reshape(shape)
    var = np.divide(ss, n - 1, out=np.full(shape, np.nan), where=n > 1)
    return BlockSummary(tuple(str(a) for a in arms), blocks, mean, n.astype(np.int64), var)
