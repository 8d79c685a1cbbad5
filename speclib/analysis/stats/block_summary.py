"""Per-block summaries of paired ratios: the input of the block-level intervals.

A :class:`BlockSummary` holds, per arm and replicate block, one log-ratio ``d[a, b]`` of the
arm against the control of that block, the number of pairs it rests on and its
within-block variance. Which ratio ``d`` is, is its estimand
(:class:`speclib.core.estimand.Estimand`, carried in :attr:`BlockSummary.estimand`):

* :func:`summarize_mean_ratios` — **the traffic's ratio** (and, given the decode tokens,
  the token-weighted one): ``d[a, b] = log(mean arm TPOT / mean control TPOT)`` over the
  block's paired prompts, each request counting once; with ``shares`` per group (a user's
  traffic mix over prompt categories) each side's mean is the share-weighted combination
  of the groups' means, and a block that lacks a group of positive share has no value.
  Its within-block variance is the delta method's: the variance of the linearised
  ``u_i = e_i / mean(e) - c_i / mean(c)`` (less the tokens' own terms for the
  token-weighted ratio) over the pairs, per group, weighted by the shares squared;
* :func:`summarize_blocks` — **the typical request**: ``d[a, b]`` the mean of the per-pair
  log-ratios (a geometric mean), its variance theirs;
* :func:`block_summary` builds one from those figures directly.

:func:`speclib.analysis.stats.block_intervals.block_ratio_cis` turns a summary into one
interval per arm, whatever its estimand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable

__all__ = [
    "BlockSummary",
    "block_summary",
    "float_array",
    "summarize_blocks",
    "summarize_mean_ratios",
]


@dataclass(frozen=True, eq=False)
class BlockSummary:
    """Per-block log-ratios against the control, one row per non-control arm.

    ``mean[i, j]`` is ``d[arms[i], blocks[j]]``, the block's log-ratio of that arm against
    the control, of the kind ``estimand`` names (the traffic's: the log of the ratio of mean
    TPOTs; the typical request's: the mean of the per-pair log-ratios); NaN when the arm
    has no pairs in the block. ``n_pairs[i, j]`` is the number of pairs (0 when missing);
    ``pair_var[i, j] / n_pairs[i, j]`` the within-block variance of ``d`` (for the typical
    request: the sample variance, ddof 1, of the pairs' log-ratios), or None when unknown
    (then no within-block components are reported).
    """

    arms: tuple[str, ...]
    blocks: tuple[Any, ...]
    mean: NDArray[np.float64]
    n_pairs: NDArray[np.int64]
    pair_var: NDArray[np.float64] | None = None
    estimand: Estimand = Estimand.TYPICAL

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
    estimand: Estimand = Estimand.TYPICAL,
) -> BlockSummary:
    """A :class:`BlockSummary` from per-arm sequences over the same blocks.

    ``means[arm][j]`` is ``d[arm, block j]`` (NaN, with ``n_pairs`` 0, when the arm is
    missing in that block); ``n_pairs`` and the optional ``pair_var`` have the same keys
    and lengths. ``blocks`` names the blocks (default ``0 .. B-1``); ``estimand`` says which
    ratio the means are the logs of.
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
    return BlockSummary(arms, labels, mean, counts.astype(np.int64), var, Estimand(estimand))


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


def _positive(values: Any, name: str, n: int) -> NDArray[np.float64]:
    arr = float_array(values, name)
    if arr.size != n:
        raise ValueError(f"`{name}` must hold one value per pair ({n}); got {arr.size}")
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"`{name}` must hold positive finite numbers")
    return arr


def _cell(
    te: NDArray, tc: NDArray, ke: NDArray, kc: NDArray, groups: NDArray, shares: NDArray
) -> tuple[float, float]:
    """``(d, within variance of d)`` of one arm and block: the log of the ratio of the
    share-weighted group means of ``te / ke`` (arm) and ``tc / kc`` (control); ``(nan, nan)``
    when a group of positive share has no pair here."""
    present = np.bincount(groups, minlength=shares.size)
    if np.any(present[shares > 0] == 0):
        return math.nan, math.nan
    w = shares[groups] / present[groups]  # each pair's weight: its group's share over its count
    sums = [float(np.dot(w, x)) for x in (te, ke, tc, kc)]
    d = math.log(sums[0] / sums[1]) - math.log(sums[2] / sums[3])
    u = te / sums[0] - ke / sums[1] - tc / sums[2] + kc / sums[3]  # the delta method
    var = 0.0
    for g in np.flatnonzero(shares > 0):
        ug = u[groups == g]
        if ug.size < 2:
            return d, math.nan
        var += shares[g] ** 2 * float(np.var(ug, ddof=1)) / ug.size
    return d, var


def summarize_mean_ratios(
    arm_tpot: ArrayLike,
    control_tpot: ArrayLike,
    *,
    arm: ArrayLike,
    block: ArrayLike,
    arm_tokens: ArrayLike | None = None,
    control_tokens: ArrayLike | None = None,
    group: ArrayLike | None = None,
    shares: Mapping[Any, float] | None = None,
) -> BlockSummary:
    """Per-block log-ratios of mean TPOT (the traffic's ratio), or of total decode time
    over total decode tokens (with ``arm_tokens`` and ``control_tokens``: the token-weighted
    ratio), from pair-level data.

    Pair ``i`` is one prompt sent to arm ``arm[i]`` and to the control in block
    ``block[i]``; ``arm_tpot[i]`` and ``control_tpot[i]`` are their TPOTs (positive), the
    optional ``*_tokens[i]`` their decode tokens (output tokens less the first). With
    ``group`` (a label per pair) and ``shares`` (group → share of the traffic, summing to 1)
    each side's mean over a block is ``Σ_g share_g · mean over the block's pairs of group g``;
    a block lacking a group of positive share gets no value (``n_pairs`` 0 there). Without
    them every pair of a block counts once. See the module docstring for the variance.
    """
    te = _positive(arm_tpot, "arm_tpot", np.size(arm_tpot))
    n = te.size
    if n == 0:
        raise ValueError("`arm_tpot` must hold at least one pair")
    tc = _positive(control_tpot, "control_tpot", n)
    if (arm_tokens is None) != (control_tokens is None):
        raise ValueError("`arm_tokens` and `control_tokens` go together")
    per_token = arm_tokens is not None
    ke = _positive(arm_tokens, "arm_tokens", n) if per_token else np.ones(n)
    kc = _positive(control_tokens, "control_tokens", n) if per_token else np.ones(n)
    te, tc = te * ke, tc * kc  # decode time (the TPOT itself when every weight is 1)
    arm_code, arms = _codes(arm, n, "arm")
    block_code, blocks = _codes(block, n, "block")
    if (group is None) != (shares is None):
        raise ValueError("`group` and `shares` go together")
    if group is None:
        group_code, share = np.zeros(n, np.intp), np.ones(1)
    else:
        group_code, names = _codes(group, n, "group")
        if not isinstance(shares, Mapping) or not shares:
            raise ValueError("`shares` must be a non-empty mapping of group to share")
        share = np.array([float(shares.get(g, 0.0)) for g in names])
        total = sum(float(v) for v in shares.values())
        if np.any(share < 0) or not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"`shares` must be non-negative and sum to 1 (got {dict(shares)})")
        if not np.any(share > 0):
            raise ValueError("`shares` gives no pair a positive share")
    shape = (len(arms), len(blocks))
    mean, var = np.full(shape, np.nan), np.full(shape, np.nan)
    counts = np.zeros(shape, np.int64)
    for i in range(shape[0]):
        for j in range(shape[1]):
            at = np.flatnonzero((arm_code == i) & (block_code == j))
            if not at.size:
                continue
            d, v = _cell(te[at], tc[at], ke[at], kc[at], group_code[at], share)
            if math.isfinite(d):
                mean[i, j], counts[i, j] = d, at.size
                var[i, j] = v * at.size  # pair_var / n_pairs is the variance of d
    estimand = Estimand.PER_TOKEN if per_token else Estimand.TRAFFIC
    return BlockSummary(tuple(str(a) for a in arms), blocks, mean, counts, var, estimand)
