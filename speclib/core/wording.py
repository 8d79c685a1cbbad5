"""A TPOT ratio in words: the one place a ratio becomes "less time" or "the speed".

A TPOT ratio is experiment TPOT over control TPOT: time per output token, so below 1 the
experiment is faster. ``×0.51`` is **49 % less time per token**, which is **1.96× the
speed** (1 / 0.51), not "49 % faster": the two scales are not the same, and far from 1 they
differ a lot. Every sentence of the kit that turns a TPOT ratio into words (report,
terminal, analysis reasons) goes through these functions, so one ratio reads the same
everywhere. They live in the core layer so that every layer may use them. So does
:data:`STATUS_MARKS`, the one mark per check or gate status (report and terminal alike).

Example::

    >>> ratio_words(0.51)
    '×0.51: 49 % less time per token, 1.96× the speed'
    >>> ratio_words(1.14)
    '×1.14: 14 % more time per token, 0.88× the speed'
"""

from __future__ import annotations

import math

__all__ = [
    "STATUS_MARKS",
    "bound_text",
    "ratio_words",
    "span_text",
    "speed_words",
    "time_change_words",
]

STATUS_MARKS = {"pass": "✔", "fail": "✘", "not assessed": "–"}
"""The mark of a gate's or bench check's status; "not assessed" never reads as a pass."""


def bound_text(value: float | None, *, low: bool = False, digits: int = 2) -> str:
    """An interval's bound on the ratio scale at ``digits`` decimals; one beyond ×0.01 or
    ×100 (a block or two: few degrees of freedom) is said as such, not as forty digits that
    ran past the printed page (2026-12-07); a missing or infinite one is ``–`` (low) or
    ``∞`` (high). Every interval the kit writes (report, terminal, reasons) goes through it.

    >>> bound_text(0.456), bound_text(4.2e51), bound_text(2e-10, low=True), bound_text(None)
    ('0.46', '>100', '<0.01', '∞')
    """
    if value is None:
        return "–" if low else "∞"
    if not math.isfinite(value):
        return "∞"
    if low and value < 0.01:
        return "<0.01"
    if not low and value > 100:
        return ">100"
    return f"{value:.{digits}f}"


def span_text(low: float | None, high: float | None, *, digits: int = 2, sep: str = ", ") -> str:
    """An interval's two bounds (:func:`bound_text`) joined by ``sep``: ``0.45, 0.58``."""
    return f"{bound_text(low, low=True, digits=digits)}{sep}{bound_text(high, digits=digits)}"


def _check(ratio: float) -> float:
    try:
        value = float(ratio)
    except (TypeError, ValueError):
        raise ValueError(f"`ratio` must be a positive finite number (got {ratio!r})") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"`ratio` must be a positive finite number (got {ratio!r})")
    return value


def time_change_words(ratio: float) -> str:
    """The change in time per token: ``"49 % less time per token"`` for ``0.51``,
    ``"14 % more time per token"`` for ``1.14``, ``"the same time per token"`` when the
    change rounds to 0 %."""
    value = _check(ratio)
    change = round(abs(value - 1) * 100)
    if change == 0:
        return "the same time per token"
    return f"{change} % {'less' if value < 1 else 'more'} time per token"


def speed_words(ratio: float) -> str:
    """The speed relative to the control, ``1 / ratio``: ``"1.96× the speed"`` for ``0.51``."""
    return f"{1 / _check(ratio):.2f}× the speed"


def ratio_words(ratio: float) -> str:
    """A TPOT ratio with both readings, e.g.
    ``"×0.51: 49 % less time per token, 1.96× the speed"``."""
    value = _check(ratio)
    return f"×{value:.2f}: {time_change_words(value)}, {speed_words(value)}"
