"""The interval of a ratio experiment / control: the one type every ratio's interval is.

A TPOT (or TTFT, E2E) ratio of an arm to the control, with its confidence interval, is one
frozen :class:`RatioInterval`, whoever computed it: the block model's paired t-interval on
an arm's own block contrasts (:mod:`speclib.analysis.stats.block_intervals`: the verdict's,
a segment's, a category's, the gates' TTFT and E2E), the undecidable "no interval" where
the block model has nothing to stand on, or the launch-blind pair bootstrap kept as
information (:mod:`speclib.analysis.stats.paired`). What differs between them is said by
data, never by a sentence: :class:`IntervalMethod` (which interval), ``reference`` (the
block interval's: the control, or the mean of the two control servers), ``df``, the
estimand (:class:`speclib.core.estimand.Estimand`), and the diagnostics of its kind
(:class:`BlockDiagnostics`, :class:`BootstrapDiagnostics`).

:meth:`RatioInterval.from_t` is the one exp-transform of a t-interval on the log scale
(:class:`speclib.analysis.stats.t_interval.TInterval`) into a ratio interval; one without
degrees of freedom becomes ``(0, inf)``, which no rule decides. :attr:`RatioInterval.label`
names the interval as the report and ``summary.json`` show it, e.g. ``"blocks (own-arm
paired t vs mean of control and aa, df=2)"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from speclib.analysis.stats.t_interval import TInterval
from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable
from speclib.core.reason_text import interval_label, render
from speclib.core.reasons import Reason

__all__ = [
    "BlockDiagnostics",
    "BootstrapDiagnostics",
    "IntervalMethod",
    "RatioInterval",
]


class IntervalMethod(StrEnum):
    """Which interval a :class:`RatioInterval` is."""

    BLOCKS = "blocks"
    """The block model's paired t-interval on the arm's own block contrasts."""
    NO_BLOCKS = "no_blocks"
    """The block model could form none (no two blocks hold what it needs): ``(0, inf)``."""
    BCA = "BCa"
    """The pair bootstrap, BCa."""
    PERCENTILE = "percentile"
    """The pair bootstrap, expanded percentile."""
    TWO_STAGE = "two-stage"
    """The two-stage bootstrap over launches, then pairs within each."""
    DEGENERATE = "degenerate"
    """One pair: ``(0, inf)``."""

    @property
    def of_blocks(self) -> bool:
        """Whether the interval comes from the block model (its df grow with blocks only)."""
        return self in (IntervalMethod.BLOCKS, IntervalMethod.NO_BLOCKS)


@dataclass(frozen=True)
class BlockDiagnostics:
    """What a block interval says besides its bounds.

    ``se_log`` is the standard error of the log estimate (inf without degrees of freedom),
    ``se_within_log`` the part of it prompt-level noise alone would give,
    ``instance_share`` the share of the estimate's variance due to instance effects, and
    ``more_blocks_help`` whether that share exceeds one half (each None when within-block
    variances are unknown). ``own_df``, ``heterogeneity_f`` and ``heterogeneity_p``: the
    arm's own block-to-block variance of its log-ratio over the pooled one and its
    approximate two-sided F-test p-value (None below 2 own df)."""

    se_log: float
    se_within_log: float | None = None
    instance_share: float | None = None
    more_blocks_help: bool | None = None
    own_df: int = 0
    heterogeneity_f: float | None = None
    heterogeneity_p: float | None = None


@dataclass(frozen=True)
class BootstrapDiagnostics:
    """What a pair-bootstrap interval says besides its bounds: the Wilcoxon signed-rank
    p-value on the log-ratios (information, never the rule), the variance components of
    the per-pair log-ratios between and within launches and the between share, whether
    more launches would narrow it faster than more prompts, and the resamples."""

    wilcoxon_p: float | None
    between_launch_share: float | None
    more_launches_help: bool | None
    var_between: float | None
    var_within: float | None
    n_resamples: int


@dataclass(frozen=True)
class RatioInterval:
    """A ratio experiment / control with its confidence interval.

    ``estimate``, ``ci_low`` and ``ci_high`` are ratios (below 1: the experiment is
    faster); ``(0, inf)`` when the interval cannot be formed (then :attr:`decidable` is
    False and ``note`` says why). ``method`` is which interval (:class:`IntervalMethod`),
    ``df`` its degrees of freedom (a block interval's: its blocks minus one; None for a
    bootstrap), ``n_pairs`` and ``n_blocks`` what it rests on, ``estimand`` which ratio it
    is, ``reference`` a block interval's ("control", or "controls": the mean of the
    control and the A/A arm), ``mixed`` whether it is for a user's traffic mix,
    ``median_delta`` the median paired difference ``experiment - control`` in the input's
    unit (None: not computed), ``note`` why it is undecidable or how it was formed (a
    :class:`~speclib.core.reasons.Reason`: no degrees of freedom, a zero width, a
    bootstrap's fallback), and ``blocks`` / ``bootstrap`` the diagnostics of its kind.
    """

    estimate: float
    ci_low: float
    ci_high: float
    confidence_level: float
    method: IntervalMethod
    n_pairs: int
    n_blocks: int
    df: int | None = None
    estimand: Estimand = Estimand.TYPICAL
    reference: str | None = None
    mixed: bool = False
    median_delta: float | None = None
    note: Reason | None = None
    blocks: BlockDiagnostics | None = None
    bootstrap: BootstrapDiagnostics | None = None

    @classmethod
    def from_t(
        cls, t: TInterval, *, n_pairs: int, estimand: Estimand, reference: str | None = None,
        note: Reason | None = None, blocks: BlockDiagnostics | None = None,
    ) -> RatioInterval:  # fmt: skip
        """The block interval whose log is the t-interval ``t`` (the one exp-transform):
        ``(0, inf)`` without degrees of freedom; ``n_blocks`` is ``t.n``, ``df`` ``t.n - 1``."""
        low, high = (math.exp(t.low), math.exp(t.high)) if t.decidable else (0.0, math.inf)
        return cls(
            estimate=math.exp(t.mean), ci_low=low, ci_high=high,
            confidence_level=float(t.confidence_level), method=IntervalMethod.BLOCKS,
            n_pairs=int(n_pairs), n_blocks=int(t.n), df=int(t.n) - 1, estimand=estimand,
            reference=reference, note=note, blocks=blocks,
        )  # fmt: skip

    @property
    def decidable(self) -> bool:
        """False when the interval has no degrees of freedom or no finite bounds: no rule
        can decide on it."""
        no_df = self.df is not None and self.df < 1
        return not no_df and 0 < self.ci_low <= self.ci_high < math.inf

    @property
    def label(self) -> str:
        """The interval's name as the report and ``summary.json`` show it
        (:func:`speclib.core.reason_text.interval_label`)."""
        return interval_label(str(self.method), self.reference, self.df, self.mixed)

    @property
    def described(self) -> dict[str, Any]:
        """What a reason says of the interval: its bounds, level and what it rests on."""
        return {
            "ratio": self.estimate, "low": self.ci_low, "high": self.ci_high,
            "level": self.confidence_level, "method": str(self.method),
            "reference": self.reference, "df": self.df, "mixed": self.mixed,
            "n_pairs": self.n_pairs, "n_blocks": self.n_blocks,
        }  # fmt: skip

    def with_median_delta(self, median_delta: float | None) -> RatioInterval:
        """The same interval with the pairs' median difference."""
        return replace(self, median_delta=median_delta)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping: every field, ``method`` as :attr:`label` (``method_kind`` the
        member), ``decidable``, and the diagnostics of its kind flattened in."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("blocks", "bootstrap"):
                continue
            out[f.name] = jsonable(getattr(self, f.name))
        out["method"] = self.label
        out["method_kind"] = str(self.method)
        out["note"] = render(self.note) if self.note is not None else None
        out["decidable"] = self.decidable
        for extra in (self.blocks, self.bootstrap):
            if extra is not None:
                out.update({f.name: jsonable(getattr(extra, f.name)) for f in fields(extra)})
        return out
