"""Per-category and per-turn TPOT ratios with descriptive block-level intervals.

Prompts come in categories (``known``, ``repeat``, ``unseen``, ...) and an arm's TPOT
ratio differs between them: that says where a speed-up comes from. A ratio from a few
pairs is not a fact, though, so each category gets the interval of the **same block model
the TPOT verdict uses** (:func:`speclib.analysis.verdict.tpot_verdict.block_analysis`): the arm's
pairs of that category are summarised per replicate block, and a paired t-interval on the
arm's own block contrasts (against the mean of the two control servers when the A/A arm
has pairs of the category, else against the control), on ``blocks - 1`` degrees of
freedom, gives the ratio and its interval at the run's confidence.

A category gets **no interval** when its pairs sit in fewer than ``min_blocks`` blocks
(default 2: one block has no degrees of freedom) or number fewer than ``min_pairs``
(default :data:`MIN_CATEGORY_PAIRS`); its point estimate is then shown with the reason
("too few blocks", "too few pairs"), never with a number for an interval.

These intervals are **descriptive**: one per category and arm, not adjusted for
multiplicity (:data:`CATEGORY_NOTE`). Each category's *verdict*, Holm over every segment of
the run, is decided in :mod:`speclib.analysis.verdict.segments` and said by the answer
(:mod:`speclib.analysis.verdict.answer`).

A multi-turn run (``workload.multi_turn``) gets the same per turn of its questions
(:func:`turn_ratios`, :data:`TURN_NOTE`): whether speculation pays as differently on turn 2,
whose prompt carries the turn-1 answer, as on turn 1.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.stats.ratio_interval import RatioInterval
from speclib.analysis.verdict.tpot_verdict import block_analysis
from speclib.core.jsonutil import jsonable
from speclib.core.reason_text import render
from speclib.core.reasons import Code, Reason

__all__ = [
    "CATEGORY_NOTE",
    "MIN_CATEGORY_BLOCKS",
    "MIN_CATEGORY_PAIRS",
    "SEGMENT_CATEGORY_NOTE",
    "TURN_NOTE",
    "CategoryRatio",
    "category_ratios",
    "turn_ratios",
]

MIN_CATEGORY_PAIRS = 6
"""Fewest pairs of a category (over all blocks) that get an interval."""
MIN_CATEGORY_BLOCKS = 2
"""Fewest blocks with pairs of a category that get an interval (one block: no df)."""
CATEGORY_NOTE = (
    "per-category intervals are descriptive: not adjusted for multiplicity; "
    "each segment's verdict (Holm over every segment) is in the answer"
)
SEGMENT_CATEGORY_NOTE = (
    "per-category intervals are the segments' (cut by category): adjusted for multiplicity, "
    "Holm over every segment, as the answer gives them"
)
"""What the per-category intervals on a page are when they come from the answer's segments
(:meth:`speclib.analysis.verdict.answer.Answer.categories_of`)."""
TURN_NOTE = (
    "per-turn intervals are descriptive: not adjusted for multiplicity; "
    "the verdict is the pooled one"
)
_UNCATEGORISED = "uncategorised"


@dataclass(frozen=True)
class CategoryRatio:
    """One category's (or turn's) TPOT ratio (arm / reference) and, when there is enough
    data, its block-level interval. ``category`` names the group: the prompt category, or
    ``"turn 2"`` from :func:`turn_ratios`.

    ``interval`` is the block model's
    :class:`~speclib.analysis.stats.ratio_interval.RatioInterval` for the group (its
    ``estimate`` the mean over blocks of the arm's contrasts, as a ratio; below 1 the arm is
    faster; its ``reference`` ``"control"`` or ``"controls"``, the mean of the control and
    the A/A arm); ``n_pairs`` and ``n_blocks`` what the group holds; ``short`` why no
    interval is shown although the model gave one (too few pairs or blocks: "too few pairs
    for an interval, need 6"). The flat fields (``ci_low``, ``ci_high``, ``df``,
    ``method``) are None when there is no interval; ``note`` says why.
    """

    category: str
    interval: RatioInterval
    n_pairs: int
    n_blocks: int
    short: Reason | None = None

    @property
    def has_interval(self) -> bool:
        """True when the category got an interval."""
        return self.short is None and self.interval.decidable

    @property
    def estimate(self) -> float:
        """The group's ratio (the block model's, shown with or without an interval)."""
        return self.interval.estimate

    @property
    def ci_low(self) -> float | None:
        return self.interval.ci_low if self.has_interval else None

    @property
    def ci_high(self) -> float | None:
        return self.interval.ci_high if self.has_interval else None

    @property
    def confidence_level(self) -> float:
        return self.interval.confidence_level

    @property
    def df(self) -> int | None:
        return self.interval.df if self.has_interval else None

    @property
    def reference(self) -> str | None:
        return self.interval.reference

    @property
    def method(self) -> str | None:
        """The interval's name (None without one)."""
        return self.interval.label if self.has_interval else None

    @property
    def note(self) -> Reason | None:
        """Why there is no interval, or how it was formed (None: nothing to say)."""
        return self.short if self.short is not None else self.interval.note

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (``ratio`` is the estimate; the interval fields are None when
        there is no interval)."""
        out = {name: jsonable(getattr(self, name)) for name in _FLAT}
        out["note"] = render(self.note) if self.note is not None else None
        out["ratio"] = jsonable(self.estimate)
        return out


_FLAT = ("ci_low", "ci_high", "confidence_level", "df", "n_pairs", "n_blocks", "reference",
         "method")  # fmt: skip
"""A :class:`CategoryRatio`'s fields in ``summary.json``, in order (then ``note``, ``ratio``)."""


def _check(pairs: Any, confidence_level: float, min_pairs: int, min_blocks: int) -> None:
    if not isinstance(pairs, pd.DataFrame):
        raise ValueError(f"`pairs` must be a DataFrame (got {type(pairs).__name__})")
    if not (isinstance(confidence_level, (float, int)) and 0 < confidence_level < 1):
        raise ValueError(f"`confidence_level` must be in (0, 1) (got {confidence_level!r})")
    if not (isinstance(min_pairs, int) and min_pairs >= 2):
        raise ValueError(f"`min_pairs` must be an integer of at least 2 (got {min_pairs!r})")
    if not (isinstance(min_blocks, int) and min_blocks >= 2):
        raise ValueError(f"`min_blocks` must be an integer of at least 2 (got {min_blocks!r})")


def _usable(pairs: pd.DataFrame | None) -> pd.DataFrame:
    """The pairs with a finite, positive TPOT on both sides, with a category label and a
    turn (missing outside a multi-turn run)."""
    if pairs is None or not len(pairs) or "tpot_s_c" not in pairs or "tpot_s_e" not in pairs:
        return pd.DataFrame(columns=["tpot_s_c", "tpot_s_e", "block", "category", "turn"])
    c = pd.to_numeric(pairs["tpot_s_c"], errors="coerce").to_numpy(float)
    e = pd.to_numeric(pairs["tpot_s_e"], errors="coerce").to_numpy(float)
    keep = np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)
    out = pairs[keep].copy()
    out["tpot_s_c"], out["tpot_s_e"] = c[keep], e[keep]
    if "block" not in out:
        out["block"] = out["replicate"]
    cats = out["category"] if "category" in out else pd.Series(None, index=out.index)
    out["category"] = cats.fillna(_UNCATEGORISED).astype(str)
    turns = out["turn"] if "turn" in out else pd.Series(None, index=out.index)
    out["turn"] = pd.to_numeric(turns, errors="coerce").astype("Int64")
    return out


def _one(
    category: str, mine: pd.DataFrame, aa: pd.DataFrame | None, *, arm: str, aa_arm: str | None,
    confidence_level: float, min_pairs: int, min_blocks: int,
) -> CategoryRatio:  # fmt: skip
    by_arm = {arm: mine} if aa is None or not len(aa) else {arm: mine, aa_arm: aa}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        found = block_analysis(by_arm, aa_arm=aa_arm, confidence_level=confidence_level)
    assert found is not None
    ci = found.aa if arm == aa_arm else found.arms[arm]
    n_blocks = int(mine["block"].nunique())
    short = None
    if n_blocks < min_blocks:
        short = Reason(Code.TOO_FEW, {"what": "blocks", "need": min_blocks})
    elif len(mine) < min_pairs:
        short = Reason(Code.TOO_FEW, {"what": "pairs", "need": min_pairs})
    if short is not None or not ci.decidable:
        return CategoryRatio(category, ci, len(mine), n_blocks, short)
    return CategoryRatio(category, ci, ci.n_pairs, ci.n_blocks)


def category_ratios(
    pairs: pd.DataFrame,
    *,
    arm: str,
    confidence_level: float,
    aa_arm: str | None = None,
    aa_pairs: pd.DataFrame | None = None,
    min_pairs: int = MIN_CATEGORY_PAIRS,
    min_blocks: int = MIN_CATEGORY_BLOCKS,
) -> dict[str, CategoryRatio]:
    """Every prompt category's TPOT ratio of ``arm`` with its block-level interval.

    ``pairs`` are the arm's pairs with the control (:attr:`speclib.analysis.frames.
    PairedFrame.pairs`: ``tpot_s_c``, ``tpot_s_e``, ``category`` and ``block``, else
    ``replicate``); pairs without a finite positive TPOT on both sides are left out, a pair
    without a category counts as ``"uncategorised"``. ``aa_arm`` and ``aa_pairs`` are the
    A/A arm and its pairs, when the run has one: as in the verdict, each category is then
    compared with the mean of the two control servers (the A/A arm's own categories are
    against the control; pass ``arm=aa_arm`` for them). Returns one
    :class:`CategoryRatio` per category, in sorted order (empty without usable pairs).
    """
    mine, aa, opts = _prepare(pairs, arm, confidence_level, aa_arm, aa_pairs, min_pairs,
                              min_blocks)  # fmt: skip
    return {
        cat: _one(cat, mine[mine["category"] == cat],
                  None if aa is None else aa[aa["category"] == cat], **opts)
        for cat in sorted(set(mine["category"]))
    }  # fmt: skip


def turn_ratios(
    pairs: pd.DataFrame,
    *,
    arm: str,
    confidence_level: float,
    aa_arm: str | None = None,
    aa_pairs: pd.DataFrame | None = None,
    min_pairs: int = MIN_CATEGORY_PAIRS,
    min_blocks: int = MIN_CATEGORY_BLOCKS,
) -> dict[int, CategoryRatio]:
    """Every turn's TPOT ratio of ``arm`` in a multi-turn run, with its block-level interval.

    As :func:`category_ratios`, grouped by the pairs' ``turn`` (1-based) instead of their
    category; pairs without a turn are left out, so a run without turns gives an empty
    mapping. Keys are the turns in order, each :class:`CategoryRatio` named ``"turn k"``.
    """
    mine, aa, opts = _prepare(pairs, arm, confidence_level, aa_arm, aa_pairs, min_pairs,
                              min_blocks)  # fmt: skip
    turns = sorted(int(t) for t in set(mine["turn"].dropna()))
    return {
        t: _one(f"turn {t}", _of_turn(mine, t), None if aa is None else _of_turn(aa, t), **opts)
        for t in turns
    }


def _of_turn(pairs: pd.DataFrame, turn: int) -> pd.DataFrame:
    """The pairs of one turn (a missing turn matches none)."""
    return pairs[pairs["turn"].eq(turn).fillna(False).astype(bool)]


def _prepare(
    pairs: pd.DataFrame, arm: str, confidence_level: float, aa_arm: str | None,
    aa_pairs: pd.DataFrame | None, min_pairs: int, min_blocks: int,
) -> tuple[pd.DataFrame, pd.DataFrame | None, dict[str, Any]]:  # fmt: skip
    """The arguments checked; the arm's and the A/A arm's usable pairs; options of :func:`_one`."""
    _check(pairs, confidence_level, min_pairs, min_blocks)
    if aa_pairs is not None and aa_arm is None:
        raise ValueError("`aa_pairs` needs `aa_arm` (the name of the A/A arm)")
    mine = _usable(pairs)
    aa = _usable(aa_pairs) if aa_arm is not None and arm != aa_arm else None
    opts = {"arm": arm, "aa_arm": aa_arm, "confidence_level": confidence_level,
            "min_pairs": min_pairs, "min_blocks": min_blocks}  # fmt: skip
    return mine, aa, opts
