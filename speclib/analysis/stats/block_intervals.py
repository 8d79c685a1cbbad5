"""Block-level ratio CIs for the interleaved design: one t-interval per arm, on its own noise.

In the interleaved design every replicate **block** starts a fresh server for each arm
(control, optionally an ``aa`` arm that is a second copy of the control, and the
experiments) and alternates requests between the arms prompt by prompt, so time drift and
regime shifts hit all arms of a block alike and cancel in the paired log-ratios. What
remains is one *instance effect* per server and block plus per-request noise. This module
turns the per-block log-ratios ``d[a, b]`` (arm ``a`` vs the control of block ``b``, over
the block's paired prompts) into one frozen :class:`BlockArmCI` per arm. Which ratio ``d``
is comes with the summary (:mod:`speclib.analysis.stats.block_summary`): the verdict's is
the traffic's, ``log(mean arm TPOT / mean control TPOT)``; the typical request's is the
mean of the per-pair log-ratios. The model and the interval below hold for either, and
every result carries its estimand. It only computes; the decision words live in
:mod:`speclib.analysis.verdict.decision`; the t-interval itself is
:func:`speclib.analysis.stats.t_interval.t_interval`.

**Model.** With ``y[arm, b]`` the log of an arm's server's TPOT over block ``b``'s prompts
(the log of its mean TPOT for the traffic's ratio, the mean of its log TPOTs for the
typical request's)::

    y[arm, b] = beta_b + theta_arm + e[arm, b],   e ~ N(0, sigma_arm^2) independent,
    sigma_arm^2 = sigma_L,arm^2 + sigma_w,arm^2 / n,

``beta_b`` absorbs everything the arms of a block share (drift, regime, the prompt mix),
``sigma_L,arm`` is the SD of the instance effect of one server of that arm and
``sigma_w,arm^2 / n`` the request noise of a mean over ``n`` prompts. **Each arm has its own
variance**: a speculative arm's per-pair variance was 10–50× the A/A arm's in the demo, and
with one variance pooled over all arms a noisy arm's 95 % interval covered only 89–92 %.
Only the control and the ``aa`` arm (two copies of one server) are exchangeable.

**Interval.** For each arm the function forms one *contrast* per block in which the arm
ran, ``c[a, b] = y[a, b] - reference_b``, which removes ``beta_b``:

* ``reference="control"`` (default): ``c[a, b] = d[a, b]``, the arm against the control;
* ``reference="controls"``: ``c[a, b] = d[a, b] - d[aa, b] / 2``, the arm against the mean
  of the two control servers (the aa arm's effect is 0 by construction). It averages two
  instance draws, so the interval is narrower. An arm that ran in a block without the aa
  arm (a sweep interleaved in groups) is compared with the control alone.

The contrasts of one arm are independent across blocks with one common variance
(``sigma_a^2 + sigma_c^2`` or ``sigma_a^2 + sigma_c^2 / 2``) whatever the other arms' noise,
so the **paired t-interval on the arm's own contrasts** – ``mean ± t[m-1, 1-α/2] · s / sqrt(m)``
over its ``m`` blocks – is exact under the model, and one arm's interval does not move when
another arm gets noisier. Blocks get equal weights: the instance part of a block's variance
does not shrink with its pair count, and weights proportional to the pairs (right only
when request noise dominates) would make ``s`` the wrong scale. The price of honesty is
degrees of freedom: an arm's own instance variance has ``m - 1`` of them, whatever is
pooled elsewhere (see ``tests/benchmarks/bench_coverage.py`` for coverage and power by
number of blocks). It is reported as a ratio (``exp``).

**One block.** With one block there are no degrees of freedom: one launch per arm cannot
separate the effect from launch-to-launch noise. The interval is then ``(0, inf)``,
``df == 0``, ``decidable`` is False and ``note`` says why; any interval rule then says
"inconclusive". (An aa arm does not change this: the arm's own instance variance is still
unseen.)

**Pooled fit (diagnostics).** The additive two-way model (block + arm) fitted to all cells
by least squares gives a pooled residual variance ``BlockAnalysis.sigma2`` with
``BlockAnalysis.df`` degrees of freedom. No TPOT interval uses it; it is the scale of the
heterogeneity check below and of the sweep recommendation
(:mod:`speclib.analysis.load.recommend`).

**Components.** When the within-block variance of the pair log-ratios is known, each arm
also carries the standard error that prompt-level noise alone would give
(``se_within_log``), the estimated instance share of the variance of its estimate, and
``more_blocks_help`` (True when the instance part dominates: more prompts per block
cannot narrow the interval much, more blocks can). ``heterogeneity_p`` compares an arm's
own block-to-block variance of ``d`` with the pooled one (an F ratio; approximate, since
the arm's residuals are part of the pool): information, not a gate.

The per-block summaries it starts from are :mod:`speclib.analysis.stats.block_summary`.
This docstring states the model, its reference and its degrees of freedom, so that the
code can be read against them.

Example::

    summary = summarize_blocks(df.log_ratio, arm=df.arm, block=df.replicate)
    result = block_ratio_cis(summary, aa_arm="aa", reference="controls")
    for ci in result.arms.values():
        print(ci.arm, ci.estimate, ci.ci_low, ci.ci_high, ci.df, ci.method)
    print("noise floor", result.aa.ci_low, result.aa.ci_high)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.stats.block_summary import BlockSummary
from speclib.analysis.stats.t_interval import t_interval
from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable

__all__ = [
    "ONE_BLOCK_NOTE",
    "REFERENCES",
    "BlockAnalysis",
    "BlockArmCI",
    "block_ratio_cis",
]

REFERENCES = ("control", "controls")
ONE_BLOCK_NOTE = (
    "no degrees of freedom for the instance variance: one launch per arm cannot separate "
    "the effect from launch-to-launch noise; the interval is (0, inf) and cannot decide – "
    "run more replicate blocks"
)


@dataclass(frozen=True)
class BlockArmCI:
    """One arm's ratio (arm / reference) with its block-level t-interval and diagnostics.

    ``estimate``, ``ci_low``, ``ci_high`` are ratios (below 1: the arm is faster).
    ``reference`` is what the arm's contrasts are against (``"control"``, or ``"controls"``:
    the mean of the control and the aa arm). ``df`` is the interval's degrees of freedom,
    the arm's own blocks minus one (0: cannot decide, the interval is ``(0, inf)``),
    ``se_log`` the standard error of the log estimate (inf when ``df == 0``).
    ``se_within_log`` is the part of it due to prompt-level noise, ``instance_share`` the
    share of the estimate's variance due to instance effects, and ``more_blocks_help``
    whether that share exceeds one half (None when within-block variances are unknown).
    ``own_df``, ``heterogeneity_f`` and ``heterogeneity_p``: the arm's own block-to-block
    variance of ``d`` over the pooled ``2 sigma^2`` and its approximate two-sided F-test
    p-value (None below 2 own df). :attr:`method` describes the interval in words;
    ``estimand`` says which ratio it is (:class:`speclib.core.estimand.Estimand`: the
    summary's).
    """

    arm: str
    reference: str
    estimate: float
    ci_low: float
    ci_high: float
    confidence_level: float
    df: int
    n_blocks: int
    n_pairs: int
    se_log: float
    se_within_log: float | None
    instance_share: float | None
    more_blocks_help: bool | None
    own_df: int
    heterogeneity_f: float | None
    heterogeneity_p: float | None
    note: str | None = None
    estimand: Estimand = Estimand.TYPICAL

    @property
    def decidable(self) -> bool:
        """False when the interval has no degrees of freedom (it is ``(0, inf)``)."""
        return self.df > 0 and math.isfinite(self.se_log)

    @property
    def method(self) -> str:
        """What the interval is, e.g. ``"blocks (own-arm paired t vs control, df=1)"``."""
        return _method(self.reference, self.df)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (includes ``decidable`` and ``method``)."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}
        out["decidable"] = self.decidable
        out["method"] = self.method
        return out


@dataclass(frozen=True)
class BlockAnalysis:
    """All arms of one block analysis at one confidence level.

    ``arms`` maps each experiment arm (every arm but the aa arm) to its :class:`BlockArmCI`;
    ``aa`` is the aa arm's own interval against the control (None without an aa arm).
    ``reference`` is the requested reference (each arm's own is in its interval). ``df`` and
    ``sigma2`` come from the pooled additive fit, a diagnostic that no TPOT interval uses:
    its residual degrees of freedom and variance of one server's block mean (log scale,
    ``sigma_L^2 + sigma_w^2 / n`` averaged over arms); ``var_instance`` is the instance part
    (None when within-block variances are unknown). ``note`` is set when no experiment's
    interval can decide.
    """

    arms: dict[str, BlockArmCI]
    aa: BlockArmCI | None
    reference: str
    confidence_level: float
    df: int
    n_blocks: int
    sigma2: float | None
    var_instance: float | None
    note: str | None = None
    estimand: Estimand = Estimand.TYPICAL

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


# --------------------------------------------------------------------------- validation


def _check_summary(summary: Any) -> BlockSummary:
    if not isinstance(summary, BlockSummary):
        raise ValueError(f"`summary` must be a BlockSummary (got {type(summary).__name__})")
    shape = (len(summary.arms), len(summary.blocks))
    if not summary.arms or len(set(summary.arms)) != len(summary.arms):
        raise ValueError(f"`summary.arms` must be non-empty and unique (got {summary.arms!r})")
    for name in ("mean", "n_pairs", "pair_var"):
        value = getattr(summary, name)
        if value is not None and np.shape(value) != shape:
            raise ValueError(f"`summary.{name}` must have shape {shape} (got {np.shape(value)})")
    present = summary.n_pairs > 0
    if np.any(summary.n_pairs < 0) or not np.all(np.isfinite(summary.mean[present])):
        raise ValueError("`summary` must hold finite means where `n_pairs` > 0")
    empty = [a for a, row in zip(summary.arms, present, strict=True) if not row.any()]
    if empty:
        raise ValueError(f"`summary` arm(s) {empty} have no pairs in any block")
    return summary


def _check_options(
    summary: BlockSummary, aa_arm: str | None, reference: str, confidence_level: float
) -> None:
    if not (isinstance(confidence_level, (float, int)) and 0 < confidence_level < 1):
        raise ValueError(f"`confidence_level` must be in (0, 1) (got {confidence_level!r})")
    if reference not in REFERENCES:
        raise ValueError(f"`reference` must be one of {REFERENCES} (got {reference!r})")
    if aa_arm is not None and aa_arm not in summary.arms:
        raise ValueError(f"`aa_arm` {aa_arm!r} is not one of the arms {summary.arms}")
    if reference == "controls" and aa_arm is None:
        raise ValueError('`reference="controls"` needs `aa_arm` (the second control)')
    if aa_arm is not None and len(summary.arms) < 2 and reference == "controls":
        raise ValueError('`reference="controls"` needs at least one arm besides `aa_arm`')


# ------------------------------------------------------------------------ the fit


@dataclass(frozen=True)
class _Fit:
    """Least-squares fit of the additive model: per-arm weights over cells, sigma^2, df."""

    estimate: NDArray  # (n_arms,) log effects (NaN for arms without a column)
    weights: NDArray  # (n_arms, A_total, B) weights of each estimate on the cell means
    unscaled_var: NDArray  # (n_arms,) variance of each estimate in units of sigma^2
    rss: float
    df: int


def _fit(y: NDArray, present: NDArray, fixed: NDArray) -> _Fit:
    """Fit ``y[arm, b] = beta_b + theta_arm`` over present cells; row 0 is the control.

    ``fixed[i]`` marks arms whose effect is fixed at 0 (the control, and the aa arm with
    ``reference="controls"``). Returns weights for the non-control arms (rows 1..).
    """
    n_arm, n_block = y.shape
    rows, cols = np.nonzero(present)
    free = np.flatnonzero(~fixed)
    design = np.zeros((rows.size, n_block + free.size))
    design[np.arange(rows.size), cols] = 1.0
    for k, arm in enumerate(free):
        design[rows == arm, n_block + k] = 1.0
    pinv = np.linalg.pinv(design)
    rank = int(np.linalg.matrix_rank(design))
    resid = y[rows, cols] - design @ (pinv @ y[rows, cols])
    weights = np.zeros((n_arm - 1, n_arm, n_block))
    for k, arm in enumerate(free):
        if arm > 0:
            weights[arm - 1, rows, cols] = pinv[n_block + k]
    estimate = np.einsum("kab,ab->k", weights, np.where(present, y, 0.0))
    estimate[fixed[1:]] = np.nan
    unscaled = (weights**2).sum(axis=(1, 2))
    return _Fit(estimate, weights, unscaled, float(resid @ resid), rows.size - rank)


def _levels(summary: BlockSummary) -> tuple[NDArray, NDArray]:
    """Cell means with the control as row 0 (level 0) and the presence mask."""
    present = np.vstack([np.ones(len(summary.blocks), bool), summary.n_pairs > 0])
    y = np.vstack([np.zeros(len(summary.blocks)), np.where(present[1:], summary.mean, 0.0)])
    return y, present


def _cell_within(summary: BlockSummary, present: NDArray) -> NDArray | None:
    """Within-block variance of each cell mean, ``pair_var / (2 n)``; control: arm average."""
    if summary.pair_var is None:
        return None
    arm_part = np.divide(summary.pair_var, 2.0 * summary.n_pairs, where=present[1:],
                         out=np.zeros(summary.mean.shape))  # fmt: skip
    if not np.all(np.isfinite(arm_part[present[1:]])):
        return None
    control = arm_part.sum(axis=0) / np.maximum(present[1:].sum(axis=0), 1)
    return np.vstack([control, arm_part])


# ----------------------------------------------------------------------- public API


def _own_spread(d: NDArray, pooled_var_d: float, df: int) -> tuple[int, float | None, float | None]:
    """The arm's own block-to-block variance of ``d`` against the pooled one (F ratio)."""
    own_df = d.size - 1
    if own_df < 2 or df < 1 or pooled_var_d <= 0:
        return max(own_df, 0), None, None
    f = float(np.var(d, ddof=1) / pooled_var_d)
    p = 2 * min(special.fdtr(own_df, df, f), special.fdtrc(own_df, df, f))
    return own_df, f, float(min(1.0, p))


@dataclass(frozen=True)
class _Contrasts:
    """One arm's per-block contrasts against its reference, and their within variances."""

    values: NDArray  # (m,) c[a, b] over the blocks the arm ran in
    within: NDArray | None  # (m,) request-noise variance of each c (None: unknown)
    reference: str


def _contrasts(summary: BlockSummary, k: int, aa_k: int | None, reference: str) -> _Contrasts:
    """``c[a, b]`` of arm ``k``: ``d`` (vs control) or ``d - d_aa / 2`` (vs both controls).

    With ``reference="controls"`` an arm that ran in a block without the aa arm is compared
    with the control alone (every block of one arm must have the same contrast variance).
    """
    present = summary.n_pairs[k] > 0
    d = summary.mean[k][present]
    n = summary.n_pairs[k][present]
    var = None if summary.pair_var is None else summary.pair_var[k][present] / n
    use_aa = reference == "controls" and aa_k is not None and aa_k != k
    if use_aa and not np.all(summary.n_pairs[aa_k][present] > 0):
        use_aa = False
    if not use_aa:
        ok = var is not None and np.all(np.isfinite(var))
        return _Contrasts(d, var if ok else None, "control")
    d_aa = summary.mean[aa_k][present]
    within = None
    if var is not None:
        var_aa = summary.pair_var[aa_k][present] / summary.n_pairs[aa_k][present]
        # Var(d - d_aa/2) = Var d + Var d_aa / 4 - Var(control mean), Var d_aa = 2 Var(control)
        within = np.maximum(var - var_aa / 4, 0.0)
        within = within if np.all(np.isfinite(within)) else None
    return _Contrasts(d - d_aa / 2, within, "controls")


def _method(reference: str, df: int) -> str:
    """The interval's description, as the report shows it."""
    against = "vs mean of control and aa" if reference == "controls" else "vs control"
    return f"blocks (own-arm paired t {against}, df={df})"


def _arm_ci(
    k: int, summary: BlockSummary, contrasts: _Contrasts, pooled: _Fit, *,
    confidence_level: float,
) -> BlockArmCI:  # fmt: skip
    """The paired t-interval of arm ``summary.arms[k]`` on its own block contrasts."""
    c = contrasts.values
    m = c.size
    t = t_interval(c, confidence_level=confidence_level)
    est = t.mean
    d = summary.mean[k][summary.n_pairs[k] > 0]
    pooled_var_d = 2 * pooled.rss / pooled.df if pooled.df > 0 else 0.0
    own_df, f, p = _own_spread(d, pooled_var_d, pooled.df)
    common = {
        "arm": summary.arms[k], "reference": contrasts.reference, "estimate": math.exp(est),
        "confidence_level": float(confidence_level), "df": m - 1, "n_blocks": m,
        "n_pairs": int(summary.n_pairs[k].sum()), "own_df": own_df, "heterogeneity_f": f,
        "heterogeneity_p": p, "estimand": summary.estimand,
    }  # fmt: skip
    if not t.decidable:
        return BlockArmCI(ci_low=0.0, ci_high=math.inf, se_log=math.inf, se_within_log=None,
                          instance_share=None, more_blocks_help=None, note=ONE_BLOCK_NOTE,
                          **common)  # fmt: skip
    var_total = t.se**2
    within = contrasts.within
    var_within = None if within is None else float(within.sum()) / m**2
    share = None
    if var_within is not None and var_total > 0:
        share = float(max(0.0, var_total - var_within) / var_total)
    return BlockArmCI(
        ci_low=math.exp(t.low), ci_high=math.exp(t.high), se_log=t.se,
        se_within_log=None if var_within is None else math.sqrt(var_within),
        instance_share=share, more_blocks_help=None if share is None else bool(share > 0.5),
        note="all block contrasts agree exactly: zero-width interval" if t.se == 0 else None,
        **common,
    )  # fmt: skip


def block_ratio_cis(
    summary: BlockSummary,
    *,
    aa_arm: str | None = None,
    reference: str = "control",
    confidence_level: float = 0.95,
) -> BlockAnalysis:
    """Block-level t-intervals of every arm's ratio to the control, each on its own noise.

    ``summary`` holds ``d[a, b]`` for every non-control arm (see :func:`summarize_blocks`
    and :func:`block_summary`); ``aa_arm`` names the arm that is a second copy of the
    control, if any; ``reference`` is ``"control"`` or ``"controls"`` (see the module
    docstring; the aa arm's own interval is always against the control). An arm whose
    block contrasts all agree exactly gets a zero-width interval and a
    :class:`~speclib.analysis.stats.base.DegenerateDataWarning`.
    """
    summary = _check_summary(summary)
    _check_options(summary, aa_arm, reference, confidence_level)
    y, present = _levels(summary)
    fixed = np.zeros(len(summary.arms) + 1, bool)
    fixed[0] = True
    pooled = _fit(y, present, fixed)
    tiny = 1e-24 * max(1.0, float(np.abs(y).max()) ** 2) * y.size
    if pooled.rss <= tiny:
        pooled = replace(pooled, rss=0.0)
    aa_k = None if aa_arm is None else summary.arms.index(aa_arm)
    opts = {"confidence_level": confidence_level}
    arms = {
        a: _arm_ci(k, summary, _contrasts(summary, k, aa_k, reference), pooled, **opts)
        for k, a in enumerate(summary.arms)
        if a != aa_arm
    }
    aa = None
    if aa_k is not None:
        aa = _arm_ci(aa_k, summary, _contrasts(summary, aa_k, None, "control"), pooled, **opts)
    flat = [ci.arm for ci in (*arms.values(), aa) if ci is not None and ci.se_log == 0]
    if flat:
        warnings.warn(f"arm(s) {flat}: all block contrasts agree exactly: the intervals have "
                      "zero width", DegenerateDataWarning, stacklevel=2)  # fmt: skip
    within = _cell_within(summary, present)
    sigma2 = pooled.rss / pooled.df if pooled.df > 0 else None
    var_instance = None
    if sigma2 is not None and within is not None:
        var_instance = float(max(0.0, sigma2 - float(within[present].mean())))
    undecidable = all(not ci.decidable for ci in arms.values()) if arms else True
    return BlockAnalysis(
        arms=arms, aa=aa, reference=reference, confidence_level=float(confidence_level),
        df=pooled.df, n_blocks=int(present[0].sum()), sigma2=sigma2, var_instance=var_instance,
        note=ONE_BLOCK_NOTE if undecidable else None, estimand=summary.estimand,
    )  # fmt: skip
