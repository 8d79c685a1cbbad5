"""Ratio intervals and decisions built by hand for tests: a block interval or a bootstrap one,
by keyword (speclib/analysis/stats/ratio_interval.py), and the rule's decision on an interval
that says a given word."""

from __future__ import annotations

from typing import Any

from speclib.analysis.stats.ratio_interval import (
    BootstrapDiagnostics,
    IntervalMethod,
    RatioInterval,
)
from speclib.analysis.verdict.decision import Decision, decide
from speclib.core.estimand import Estimand


def block_interval(
    estimate: float, low: float, high: float, *, level: float = 0.95, blocks: int = 4,
    n_pairs: int = 40, df: int | None = None, **fields: Any,
) -> RatioInterval:  # fmt: skip
    """A block interval over ``blocks`` blocks (``df`` default ``blocks - 1``)."""
    return RatioInterval(
        estimate=estimate, ci_low=low, ci_high=high, confidence_level=level,
        method=IntervalMethod.BLOCKS, n_pairs=n_pairs, n_blocks=blocks,
        df=blocks - 1 if df is None else df, estimand=fields.pop("estimand", Estimand.TRAFFIC),
        median_delta=fields.pop("median_delta", 0.0), **fields,
    )  # fmt: skip


def bootstrap_interval(
    estimate: float, low: float, high: float, *, level: float = 0.95, launches: int = 1,
    n_pairs: int = 100, method: IntervalMethod = IntervalMethod.BCA,
    var_between: float | None = None, var_within: float | None = None,
    wilcoxon_p: float | None = None, between_share: float | None = None,
    more_launches_help: bool | None = None, df: int | None = None,
) -> RatioInterval:  # fmt: skip
    """A pair-bootstrap interval over ``launches`` launches."""
    diag = BootstrapDiagnostics(wilcoxon_p, between_share, more_launches_help, var_between,
                                var_within, 4000)  # fmt: skip
    return RatioInterval(
        estimate=estimate, ci_low=low, ci_high=high, confidence_level=level, method=method,
        n_pairs=n_pairs, n_blocks=launches, df=df, median_delta=-0.001, bootstrap=diag,
    )  # fmt: skip


_AT = {
    "adopt": (0.80, 0.75, 0.85),
    "equivalent": (1.00, 0.98, 1.02),
    "worse": (1.20, 1.10, 1.30),
    "inconclusive": (1.00, 0.90, 1.10),
}


def decision_of(word: str, *, margin: float = 0.05, level: float = 0.95) -> Decision:
    """The rule's own decision on a block interval that says ``word`` (its reason is the
    rule's, with the interval's numbers)."""
    found = decide(block_interval(*_AT[word], level=level), margin=margin)
    assert found.word == word
    return found
