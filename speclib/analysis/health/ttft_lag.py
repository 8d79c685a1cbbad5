"""Whose is a TTFT lag: the client's, or the server's front end.

The client's TTFT runs from its send to its read of the first token; vLLM's histogram runs
from the API process's arrival stamp to the output processing of that token. Their gap per
launch window (:func:`speclib.analysis.health.instrument.launch_agreement`) grows under
load, and an equal gap in every arm of a block cancels in their comparison. A gap that
*differs* between arms was made either by a busy client or by the server's API process
(the work before its clock starts and the streaming after it stops, which under a burst of
requests takes tens of milliseconds and differs between configurations: measured on one
H200 at c = 32). The client's loop-lag probe tells them apart: a window's worst tick plus
one probe period (:data:`speclib.core.records.LAG_PERIOD_S`) bounds how late the client
can have read anything in it, so an arm-to-arm difference larger than that bound, in
windows where no stream was read late, is the server's. Then the client's TTFT, which
includes it as a user's does, stays comparable; otherwise the level's TTFT gate is not
assessed. Pure functions of the agreement frame.
"""

from __future__ import annotations

import pandas as pd

from speclib.analysis.health.instrument import TTFT_TOLERANCE_S
from speclib.core.records import LAG_PERIOD_S

__all__ = [
    "client_delay_bound_ms",
    "server_lag_note",
    "ttft_lag_causes",
    "ttft_lag_spreads",
    "ttft_problems",
]


def ttft_lag_spreads(agreement: pd.DataFrame) -> dict[int, float]:
    """Per load level, the largest spread (ms) of the client's TTFT lag behind the server's
    first-token stamp between the arms of one block: an offset all arms share cancels in
    their comparison, a spread does not."""
    if not len(agreement) or "ttft_gap_ms" not in agreement:
        return {}
    rows = agreement.dropna(subset=["ttft_gap_ms"])
    if "level" not in rows:
        rows = rows.assign(level=0)
    keys = ["level", "block"] if "block" in rows and rows["block"].notna().any() else ["level"]
    out: dict[int, float] = {}
    for key, g in rows.groupby(keys, sort=False):
        level = int(key[0] if isinstance(key, tuple) else key)
        gaps = g["ttft_gap_ms"].astype(float)
        spread = float(gaps.max() - gaps.min()) if len(gaps) > 1 else 0.0
        out[level] = max(out.get(level, 0.0), spread)
    return out


def client_delay_bound_ms(windows: pd.DataFrame) -> float | None:
    """The longest the client can have delayed a read in these launch windows (ms): the worst
    tick of its loop-lag probe plus one probe period (a stall shorter than a period can fall
    between two ticks). None where a window lacks the probe's figure or read a stream late
    (then the client may have lagged by any amount)."""
    if "client_lag_max_ms" not in windows or not len(windows):
        return None
    lags = pd.to_numeric(windows["client_lag_max_ms"], errors="coerce")
    late = pd.to_numeric(windows.get("n_read_late", 0), errors="coerce").fillna(0)
    if lags.isna().any() or (late > 0).any():
        return None
    return float(lags.max()) + LAG_PERIOD_S * 1e3


def ttft_lag_causes(agreement: pd.DataFrame) -> dict[int, tuple[float, float | None]]:
    """Per load level whose client TTFT lag differs between the arms of a block by more than
    the tolerance: ``(spread, bound)``. ``bound`` is the client's own delay bound
    (:func:`client_delay_bound_ms`) where it is smaller than the spread: the client cannot
    have made that difference, so the server made it (vLLM's API process works on each
    request before its TTFT clock starts and streams after it stops, and under load that
    takes longer in some configurations than in others). None: a busy client may have."""
    tol = TTFT_TOLERANCE_S * 1e3
    out: dict[int, tuple[float, float | None]] = {}
    lvl = agreement["level"] if "level" in agreement else pd.Series(0, index=agreement.index)
    for level, spread in ttft_lag_spreads(agreement).items():
        if spread <= tol:
            continue
        bound = client_delay_bound_ms(agreement[lvl == level])
        out[level] = (spread, bound if bound is not None and bound < spread else None)
    return out


def ttft_problems(agreement: pd.DataFrame, names: dict[int, str]) -> dict[int, str]:
    """Per load level whose client TTFT lag differs between arms by more than the
    tolerance, and not by the server's doing (:func:`ttft_lag_causes`), why its TTFT gate is
    not assessed (``names``: level → its load in words)."""
    tol = TTFT_TOLERANCE_S * 1e3
    return {
        level: (
            f"at {names.get(level, level)} the client read first tokens up to {spread:.1f} ms "
            f"later in one arm than in another (tolerance {tol:g} ms): a busy client, not the "
            "server; TTFT cannot be compared there (TPOT comes from the server's stamps)"
        )
        for level, (spread, bound) in ttft_lag_causes(agreement).items()
        if bound is None
    }


def server_lag_note(rows: pd.DataFrame, lag: pd.Series, causes: dict) -> str:
    """The instruments check's note where the arms' TTFT lags differ by the server's doing
    (``lag``: each window's absolute lag in ms; ``causes``: :func:`ttft_lag_causes`)."""
    levels = sorted(causes)
    spread = max(s for s, _ in causes.values())
    bound = max(b for _, b in causes.values())
    worst = float(lag[rows["level"].isin(levels)].max())
    return (
        f"; at level(s) {levels} (0 = the first load level) the lag reached {worst:.1f} ms and "
        f"differs between arms by up to {spread:.1f} ms, more than the client can have made: "
        f"it read every stream on time, and its loop-lag probe bounds any delay of its own to "
        f"{bound:.1f} ms. The difference is the server's: vLLM's API process works on "
        "each request before its TTFT clock starts and streams after it stops, and under that "
        "load it took longer in some arms. The client's TTFT includes it, as a user's does: "
        "the TTFT gate uses it"
    )
