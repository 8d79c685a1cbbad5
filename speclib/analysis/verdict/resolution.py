"""The A/A arm as a bench check: its resolution against δ, and the blocks that would sharpen it.

The A/A arm (``protocol.aa``) is a second copy of the control: its true TPOT ratio is 1 by
construction, so its interval says how finely this bench resolves a ratio, not whether
something is faster. More data cannot make it "adopt" or "worse" (if it did, the bench
would be broken), so its row never carries the planning text of an experiment; it reads as
a **bench check**:

* **resolution** – the half-width of its ratio interval, ``h = (log hi - log lo) / 2`` on
  the log scale (the block interval is symmetric there), shown as ``±(e^h - 1)``: an
  interval centred on 1 with resolution at most δ lies inside ``(1/(1 + δ), 1 + δ)``, so
  inside ``(1 - δ, 1 + δ)`` ("equivalent");
* **blocks needed** – with the interval's own degrees of freedom (``df = blocks - 1`` for
  the block interval) and its observed block SD ``s = h · sqrt(m) / t[df, q]`` held (m
  blocks, ``q = (1 + confidence) / 2``), the half-width after ``m'`` blocks is
  ``t[df + m' - m, q] · s / sqrt(m')``; the blocks needed are the smallest ``m' >= m``
  where that is at most ``log(1 + target)`` (the target is δ for "equivalent", or a
  calibration's ``protocol.target_resolution``), ``None`` ("not reachable") when no
  ``m'`` up to :data:`MAX_BLOCKS` would do or the interval has no degrees of freedom. No
  "more pairs" advice: pairs narrow only the request-noise part, while a block's instance
  effect (one server per arm and block) is what dominates an A/A interval;
* **false effect** – the interval's word by the decision rule: "adopt" or "worse" on an arm
  without an effect means the bench's noise is larger than its intervals admit (the A/A
  gate of :mod:`speclib.analysis.verdict.tpot_verdict` then makes every verdict "untrustworthy");
  an interval that excludes 1 but stays inside ``(1 - δ, 1 + δ)`` is an instance effect
  smaller than δ, which the rule does not act on.

:func:`bench_check` returns a frozen :class:`BenchCheck` (its :meth:`~BenchCheck.text` is
the A/A row's reason everywhere: ``summary.json``, the trust panel, the terminal, the
report); :func:`calibration` says whether a calibration run reached its target resolution
and, if not, how many blocks it would need. Pure functions.

Stopping a calibration when the width first reaches the target looks at the width only,
never at where the interval lies, so it spends no α; but it stops when the block SD happens
to be low, so the resolution reached is slightly optimistic (simulated with normal block
contrasts, 3 to 6 blocks, target ±10 %, 100 000 runs: the 95 % interval at the stop covered
1 in 92–95 % of runs, lowest when the bench needs 6 blocks or more;
``tests/unit/test_resolution.py`` repeats it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from speclib.analysis.stats.ratio_interval import RatioInterval
from speclib.analysis.stats.t_interval import t_critical, t_width_scale
from speclib.analysis.verdict.decision import Decision, decide
from speclib.core.jsonutil import jsonable
from speclib.core.reason_text import render
from speclib.core.reasons import Code, Reason
from speclib.core.verdict_words import FALSE_EFFECT, Word

__all__ = [
    "MAX_BLOCKS",
    "BenchCheck",
    "Calibration",
    "bench_check",
    "blocks_for",
    "calibration",
    "half_width",
]

MAX_BLOCKS = 1_000
"""Above this many blocks a target resolution counts as not reachable."""


def _check_target(value: Any, name: str) -> float:
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool)
    if not (ok and 0 < value < 1):
        raise ValueError(f"`{name}` must be a number in (0, 1) (got {value!r})")
    return float(value)


def _check_ci(ci: Any) -> RatioInterval:
    if not isinstance(ci, RatioInterval):
        raise ValueError(f"`ci` must be a RatioInterval (got {type(ci).__name__})")
    return ci


def half_width(ci: RatioInterval) -> float | None:
    """The interval's half-width on the log scale, ``(log hi - log lo) / 2`` (None when the
    interval is undefined, e.g. ``(0, inf)`` from one block)."""
    lo, hi = _check_ci(ci).ci_low, ci.ci_high
    if not (0 < lo <= hi < math.inf):
        return None
    return (math.log(hi) - math.log(lo)) / 2


def _df(ci: RatioInterval) -> int:
    return int(ci.df) if ci.df is not None else ci.n_blocks - 1


def blocks_for(
    half_width_log: float, *, n_blocks: int, df: int, confidence_level: float, target: float
) -> int | None:
    """Total blocks at which the half-width would likely be at most ``log(1 + target)``.

    ``half_width_log`` is today's log half-width after ``n_blocks`` blocks on ``df`` degrees
    of freedom at ``confidence_level``. The block SD it implies is held and every added
    block adds one degree of freedom (see the module docstring). Returns ``n_blocks`` when
    today's half-width already meets the target, None when ``df < 1`` or no count up to
    :data:`MAX_BLOCKS` would.
    """
    target = _check_target(target, "target")
    _check_target(confidence_level, "confidence_level")
    if not (isinstance(half_width_log, (int, float)) and half_width_log >= 0):
        raise ValueError(f"`half_width_log` must be a non-negative number (got {half_width_log!r})")
    if df < 1 or n_blocks < 1:
        return None
    blocks = np.arange(n_blocks, max(MAX_BLOCKS, n_blocks) + 1)
    widths = half_width_log * t_width_scale(
        n_blocks=n_blocks, df=df, confidence_level=confidence_level, blocks=blocks
    )
    hit = np.flatnonzero(widths <= math.log1p(target) * (1 + 1e-12))
    return int(blocks[hit[0]]) if hit.size else None


@dataclass(frozen=True)
class BenchCheck:
    """The A/A arm read as a bench check.

    ``resolution`` is ``e^h - 1`` for the log half-width ``h`` (None: undefined interval);
    ``word`` the decision rule's word on the interval; ``false_effect`` whether that word is
    "adopt" or "worse"; ``excludes_one`` whether the interval lies off 1; ``blocks_needed``
    the total blocks at which the resolution would likely be at most δ (None: not
    reachable); ``block_sd_log`` the block SD implied by the interval.
    """

    resolution: float | None
    margin: float
    confidence_level: float
    n_blocks: int
    df: int
    block_sd_log: float | None
    word: Word
    excludes_one: bool
    false_effect: bool
    blocks_needed: int | None
    estimate: float
    ci_low: float
    ci_high: float

    @property
    def more_blocks(self) -> int | None:
        """Blocks to add before the interval would likely be "equivalent" (None when it
        already is, when only its centre keeps it out, or when not reachable)."""
        if self.word == Word.EQUIVALENT or self.blocks_needed is None:
            return None
        more = self.blocks_needed - self.n_blocks
        return more if more > 0 else None

    def reason(self) -> Reason:
        """The check as data: the A/A row's reason everywhere (``summary.json``, the trust
        panel, the terminal, the report)."""
        values = {
            "resolution": self.resolution, "margin": self.margin,
            "level": self.confidence_level, "n_blocks": self.n_blocks, "df": self.df,
            "block_sd_log": self.block_sd_log, "word": self.word,
            "excludes_one": self.excludes_one, "false_effect": self.false_effect,
            "blocks_needed": self.blocks_needed, "more_blocks": self.more_blocks,
            "max_blocks": MAX_BLOCKS, "ratio": self.estimate, "low": self.ci_low,
            "high": self.ci_high,
        }  # fmt: skip
        return Reason(Code.BENCH_CHECK, values)

    def short(self) -> str:
        """The figure of the trust panel: "resolution ±x % (δ = ±5 %): <outlook>"."""
        return render(Reason(Code.BENCH_RESOLUTION, self.reason().values))

    def text(self) -> str:
        """The A/A row's reason in words, e.g. "bench check: resolution ±3.6 % (δ = ±5 %) at
        95 % over 4 blocks; equivalent; the interval 0.962–1.035 covers 1: the A/A arm
        shows no effect"."""
        return render(self.reason())

    def decision(self) -> Decision:
        """The A/A arm's :class:`~speclib.analysis.verdict.decision.Decision`: the rule's word with
        this check as its reason; the only planning it carries is blocks towards
        "equivalent" (never pairs, never "adopt" or "worse")."""
        more = self.more_blocks
        return Decision(
            self.word, self.reason(), self.margin, self.confidence_level,
            extra_pairs_needed=None, extra_launches_needed=more,
            target_word=Word.EQUIVALENT if more is not None else None,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping, with the text and its data (``reason``)."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}
        return {**out, "more_blocks": self.more_blocks, "text": self.text(),
                "reason": self.reason().to_dict()}  # fmt: skip


def bench_check(ci: RatioInterval, *, margin: float) -> BenchCheck:
    """The A/A arm's interval ``ci`` as a bench check at margin δ = ``margin``."""
    ci = _check_ci(ci)
    margin = _check_target(margin, "margin")
    word = decide(ci, margin=margin).word
    h = half_width(ci)
    df = _df(ci)
    sd = needed = None
    if h is not None and df >= 1:
        sd = h * math.sqrt(ci.n_blocks) / t_critical(df, confidence_level=ci.confidence_level)
        needed = blocks_for(h, n_blocks=ci.n_blocks, df=df,
                            confidence_level=ci.confidence_level, target=margin)  # fmt: skip
    return BenchCheck(
        resolution=None if h is None else math.expm1(h), margin=margin,
        confidence_level=ci.confidence_level, n_blocks=ci.n_blocks, df=df, block_sd_log=sd,
        word=word, excludes_one=not (ci.ci_low <= 1 <= ci.ci_high),
        false_effect=word in FALSE_EFFECT, blocks_needed=needed, estimate=ci.estimate,
        ci_low=ci.ci_low, ci_high=ci.ci_high,
    )  # fmt: skip


@dataclass(frozen=True)
class Calibration:
    """Whether a calibration run reached its target resolution.

    ``resolution`` is the coarsest A/A resolution over the load levels (None when some
    level has none), ``blocks`` the blocks it rests on, ``blocks_needed`` the total blocks
    at which the coarsest level would likely reach ``target`` (None: not reachable).
    """

    target: float
    resolution: float | None
    reached: bool
    blocks: int
    blocks_needed: int | None
    confidence_level: float | None

    def reason(self) -> Reason:
        """The calibration as data."""
        values = {
            "target": self.target, "resolution": self.resolution, "reached": self.reached,
            "blocks": self.blocks, "blocks_needed": self.blocks_needed,
            "level": self.confidence_level, "max_blocks": MAX_BLOCKS,
        }  # fmt: skip
        return Reason(Code.CALIBRATION, values)

    def text(self) -> str:
        """One sentence: the resolution reached against the target, and what it would need."""
        return render(self.reason())

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping, with the text and its data (``reason``)."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}
        return {**out, "text": self.text(), "reason": self.reason().to_dict()}


def calibration(cis: Sequence[RatioInterval], *, target: float) -> Calibration:
    """Did the A/A intervals ``cis`` (one per load level) reach half-width ``target``?"""
    target = _check_target(target, "target")
    cis = [_check_ci(c) for c in cis]
    if not cis:
        return Calibration(target, None, False, 0, None, None)
    widths = [half_width(c) for c in cis]
    blocks = max(c.n_blocks for c in cis)
    if any(w is None for w in widths):
        return Calibration(target, None, False, blocks, None, cis[0].confidence_level)
    worst = max(range(len(cis)), key=lambda i: widths[i])  # type: ignore[arg-type,return-value]
    ci, h = cis[worst], float(widths[worst])  # type: ignore[arg-type]
    needed = blocks_for(h, n_blocks=ci.n_blocks, df=_df(ci),
                        confidence_level=ci.confidence_level, target=target)  # fmt: skip
    reached = math.expm1(h) <= target * (1 + 1e-12)
    return Calibration(target, math.expm1(h), reached, ci.n_blocks, needed, ci.confidence_level)
