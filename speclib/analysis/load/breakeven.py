"""Where speculation stops paying: the break-even load of one experiment, with an interval.

Given one experiment's TPOT ratio to the control at several load levels of one kind (closed
loop concurrencies, or Poisson request rates), each with its confidence interval as the
verdict table shows it, :func:`break_even` finds

* **pays up to**: the highest measured load at which the speed-up is shown (interval wholly
  below ``1 - margin``), counting up from the lowest load with no level in between that
  fails (a speed-up that comes back at a higher load is reported, not bridged);
* **break-even**: the load at which the point estimate reaches 1, interpolated linearly in
  load between the two measured levels around it (exact when the ratio is linear in load,
  as it is when the step cost of each arm grows linearly with the batch);
* **its interval**: from the load at which the interval's *upper* bound reaches 1 (below it
  the speed-up is shown) to the load at which its *lower* bound reaches 1 (above it the
  slow-down is shown), each interpolated the same way. An end beyond the measured range is
  open and says so (``low_open``, ``high_open``); the interval inverts the per-level
  intervals (pointwise, not simultaneous over the levels), which the caption says.

``status`` says which case holds: ``"crosses"`` (the estimate reaches 1 inside the range),
``"pays throughout"`` (below 1 at every level: the break-even lies above the highest load),
``"never pays"`` (at or above 1 at every level: it lies below the lowest), or
``"no data"``. The function only computes; the words are in :attr:`BreakEven.text`.

Example::

    be = break_even(loads=[1, 4, 12], estimate=[0.6, 0.8, 1.1], ci_low=[0.55, 0.7, 1.0],
                    ci_high=[0.65, 0.9, 1.2], margin=0.05, confidence_level=0.95)
    be.estimate, (be.low, be.high), be.text
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from speclib.core.jsonutil import jsonable

__all__ = ["AXES", "STATUSES", "BreakEven", "break_even", "load_text"]

AXES = ("concurrency", "request_rate")
STATUSES = ("crosses", "pays throughout", "never pays", "no data")


@dataclass(frozen=True)
class BreakEven:
    """One experiment's break-even load on one axis (see the module docstring)."""

    series: str
    axis: str
    loads: tuple[float, ...]
    status: str
    pays_up_to: float | None
    estimate: float | None
    low: float | None
    high: float | None
    low_open: bool
    high_open: bool
    confidence_level: float
    margin: float
    text: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (``summary.json``'s ``break_even`` entries)."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


def load_text(value: float | None, axis: str) -> str:
    """A load in words: ``c=4`` or ``2.5 req/s``."""
    if value is None:
        return "?"
    if axis == "concurrency":
        return f"c={value:.3g}" if value != int(value) else f"c={int(value)}"
    return f"{value:.3g} req/s"


def _validated(
    loads: ArrayLike, estimate: ArrayLike, ci_low: ArrayLike, ci_high: ArrayLike
) -> tuple[np.ndarray, ...]:
    arrays = [np.asarray(v, dtype=float).ravel() for v in (loads, estimate, ci_low, ci_high)]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError("loads, estimate, ci_low and ci_high must have the same length")
    x = arrays[0]
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("loads must be positive finite numbers")
    if len(np.unique(x)) != n:
        raise ValueError("loads must be distinct")
    order = np.argsort(x)
    return tuple(a[order] for a in arrays)


def _crossing(x: np.ndarray, y: np.ndarray) -> float | None:
    """The first load at which ``y`` (ratios) reaches 1 going up, interpolated linearly;
    None when it never does. ``y[0] >= 1`` returns ``x[0]``."""
    for i, v in enumerate(y):
        if not np.isfinite(v):
            continue
        if v >= 1.0:
            if i == 0:
                return float(x[0])
            prev = y[i - 1]
            if not np.isfinite(prev):
                return float(x[i])
            return float(x[i - 1] + (1.0 - prev) / (v - prev) * (x[i] - x[i - 1]))
    return None


def break_even(
    *,
    loads: ArrayLike,
    estimate: ArrayLike,
    ci_low: ArrayLike,
    ci_high: ArrayLike,
    margin: float,
    confidence_level: float,
    series: str = "",
    axis: str = "concurrency",
) -> BreakEven:
    """The break-even load of one experiment from its per-level ratios and intervals."""
    if not 0 < margin < 1:
        raise ValueError(f"margin must be in (0, 1), got {margin!r}")
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    x, est, lo, hi = _validated(loads, estimate, ci_low, ci_high)
    keep = np.isfinite(est) & np.isfinite(lo) & np.isfinite(hi)
    x, est, lo, hi = x[keep], est[keep], lo[keep], hi[keep]
    common = {"series": series, "axis": axis, "loads": tuple(float(v) for v in x),
              "confidence_level": confidence_level, "margin": margin}  # fmt: skip
    if len(x) < 2:
        return BreakEven(**common, status="no data", pays_up_to=None, estimate=None,
                         low=None, high=None, low_open=False, high_open=False,
                         text=f"{series}: fewer than two load levels with an interval: "
                         "no break-even")  # fmt: skip
    pays = hi < 1.0 - margin
    up_to = None
    for v, p in zip(x, pays, strict=True):
        if not p:
            break
        up_to = float(v)
    point = _crossing(x, est)
    low = _crossing(x, hi)
    high = _crossing(x, lo)
    status = "crosses" if point is not None and est[0] < 1.0 else (
        "never pays" if est[0] >= 1.0 else "pays throughout")  # fmt: skip
    if status == "never pays":
        point = None
    found = BreakEven(
        **common,
        status=status,
        pays_up_to=up_to,
        estimate=point,
        low=low if low is not None and hi[0] < 1.0 else None,
        high=high,
        low_open=bool(hi[0] >= 1.0),
        high_open=high is None,
        text="",
    )
    after = int(np.searchsorted(x, up_to, side="right")) if up_to is not None else len(x)
    return _with_text(found, pays_again=bool(up_to is not None and pays[after:].any()))


def _with_text(be: BreakEven, *, pays_again: bool) -> BreakEven:
    ax, first, last = be.axis, be.loads[0], be.loads[-1]
    pays = (
        f"pays up to {load_text(be.pays_up_to, ax)} (interval below {1 - be.margin:g})"
        if be.pays_up_to is not None
        else f"no speed-up shown even at {load_text(first, ax)}"
    )
    level = f"{round(be.confidence_level * 100, 1):g} %"
    if be.low is None and not be.low_open:
        span = f"{level} interval wholly above {load_text(last, ax)}"
    else:
        low = f"≤ {load_text(first, ax)}" if be.low_open else load_text(be.low, ax)
        high = f"> {load_text(last, ax)}" if be.high_open else load_text(be.high, ax)
        span = f"{level} interval {low} to {high}"
    if be.status == "crosses":
        where = f"break-even at {load_text(be.estimate, ax)} ({span})"
    elif be.status == "pays throughout":
        where = (
            f"no break-even in the measured range: the estimate is below 1 at every level up to "
            f"{load_text(last, ax)}; the break-even lies above it ({span})"
        )
    else:
        where = (
            f"no break-even in the measured range: not faster even at {load_text(first, ax)}"
            f" ({span})"
        )
    again = " The speed-up is shown again at a higher load (not bridged)." if pays_again else ""
    return dataclasses.replace(be, text=f"{be.series}: {pays}; {where}.{again}")
