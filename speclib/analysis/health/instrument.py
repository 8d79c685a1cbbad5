"""Two instruments per request, which one the verdict uses, and what it leaves out and why.

The kit's client stamps every network read; on a busy host it can fail to be scheduled and
read a whole stream at once (measured on a fresh 2-core machine: 40–54 % of a plain arm's
streams, its mean TPOT 41 % below the server's). Every server the kit launches therefore
also stamps each request itself (vLLM's ``--enable-per-request-metrics``: queue time, first
token and mean inter-token latency on the engine's clock, see
:func:`speclib.core.records.server_tpot_s`), and each launch's ``/metrics`` histograms give a
third view per load level. This module:

- :func:`choose_instrument` — the verdict's TPOT comes from the server's stamps when every
  arm has them on its measured requests, else from the client for every arm (one instrument
  per comparison), guarded by the late-read test;
- :func:`apply_instrument` — sets the frame's ``tpot_s`` to the chosen instrument (the
  client's stays in ``tpot_client_s``) and writes each row's exclusion reason in
  ``tpot_excluded`` (None for a row the verdict may use), so no row is dropped silently;
- :func:`launch_agreement` — per launch and load level, the client's mean TPOT and TTFT
  against the server's own (per-request stamps, and the ``/metrics`` histograms over the
  same window), with the stated tolerances;
- :func:`exclusion_table` — per arm and level, how many measured requests were left out of
  the TPOT comparison and why.

Pure functions of the records and of the launches' files.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclib.core.prometheus import histogram_mean
from speclib.core.rundir import LaunchDir, RunDir

__all__ = [
    "EXCLUSION_GAP_LIMIT",
    "LATE_GAP_LIMIT",
    "LATE_SHARE_LIMIT",
    "TPOT_TOLERANCE",
    "TTFT_TOLERANCE_S",
    "InstrumentChoice",
    "apply_instrument",
    "choose_instrument",
    "exclusion_table",
    "launch_agreement",
]

TPOT_TOLERANCE = 0.03
"""A launch's client mean TPOT must lie within 3 % of the server's own over the same requests."""
TTFT_TOLERANCE_S = 0.010
"""… and its client mean TTFT within 10 ms of the server's (the API server's histogram)."""
LATE_SHARE_LIMIT = 0.05
"""At most 5 % of an arm's streams may be read late …"""
LATE_GAP_LIMIT = 0.05
"""… and the arms' late shares may differ by at most 5 points."""
EXCLUSION_GAP_LIMIT = 0.05
"""The arms' shares of requests left out of the TPOT comparison may differ by 5 points."""

_HIST_TPOT = "vllm:request_time_per_output_token_seconds"
_HIST_TTFT = "vllm:time_to_first_token_seconds"


@dataclass(frozen=True)
class InstrumentChoice:
    """The instrument of the verdict's TPOT (``"server"`` or ``"client"``) and why."""

    tpot: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _usable_ok(df: pd.DataFrame) -> pd.DataFrame:
    """Measured requests that succeeded with at least two output tokens."""
    ok = df["ok"].astype(bool)
    tokens = pd.to_numeric(df.get("output_tokens"), errors="coerce")
    return df[ok & (tokens >= 2)]


def choose_instrument(df: pd.DataFrame, arms: list[str]) -> InstrumentChoice:
    """The server's stamps when every arm's usable requests carry them, else the client."""
    if df.empty or "tpot_server_s" not in df:
        return InstrumentChoice("client", "no request carried the server's own stamps")
    usable = _usable_ok(df)
    missing = []
    for arm in arms:
        rows = usable[usable["series"] == arm]
        if len(rows) and rows["tpot_server_s"].isna().any():
            missing.append(f"{arm} ({int(rows['tpot_server_s'].isna().sum())}/{len(rows)})")
    if missing:
        return InstrumentChoice(
            "client",
            "requests without the server's stamps in " + ", ".join(missing) + ": every arm "
            "uses the client's stamps, and streams it read late are left out",
        )
    return InstrumentChoice(
        "server",
        "every arm's server stamped its own requests (vLLM --enable-per-request-metrics: "
        "mean inter-token latency on the engine's clock, which no client delay distorts); "
        "the client's stamps are the cross-check",
    )


def _reason(row: Any, tpot: float, instrument: str) -> str | None:
    if not bool(row.ok):
        return "failed"
    tokens = row.output_tokens
    if tokens is None or (isinstance(tokens, float) and math.isnan(tokens)) or tokens < 2:
        return "fewer than 2 output tokens"
    if tpot is None or not math.isfinite(tpot):
        return "no server stamp" if instrument == "server" else "no TPOT"
    if instrument == "client" and bool(row.read_late):
        return "read late"
    if tpot <= 0:
        return "TPOT not positive"
    return None


def apply_instrument(df: pd.DataFrame, choice: InstrumentChoice) -> pd.DataFrame:
    """A copy of ``df`` whose ``tpot_s`` is the chosen instrument's, with ``tpot_excluded``
    saying why a row cannot enter the TPOT comparison (None: it can)."""
    if df.empty:
        return df.assign(tpot_excluded=pd.Series(dtype=object))
    out = df.copy()
    col = "tpot_server_s" if choice.tpot == "server" else "tpot_client_s"
    out["tpot_s"] = pd.to_numeric(out[col], errors="coerce")
    if "read_late" not in out:
        out["read_late"] = False
    reasons = [
        _reason(row, tpot, choice.tpot)
        for row, tpot in zip(out.itertuples(index=False), out["tpot_s"], strict=True)
    ]
    out["tpot_excluded"] = pd.Series(reasons, index=out.index, dtype=object)
    out.loc[out["tpot_excluded"].notna(), "tpot_s"] = np.nan
    return out


def exclusion_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per arm and level: measured requests, those usable for TPOT, and each reason."""
    cols = ["series", "level", "n", "usable", "excluded", "excluded_share", "reasons"]
    if df.empty or "tpot_excluded" not in df:
        return pd.DataFrame(columns=cols)
    rows = []
    for (series, level), g in df.groupby(["series", "level"], sort=False):
        reasons = g["tpot_excluded"].dropna().value_counts().to_dict()
        n, excluded = len(g), int(g["tpot_excluded"].notna().sum())
        rows.append(
            {
                "series": series,
                "level": int(level),
                "n": n,
                "usable": n - excluded,
                "excluded": excluded,
                "excluded_share": excluded / n if n else 0.0,
                "reasons": {str(k): int(v) for k, v in reasons.items()},
            }
        )
    return pd.DataFrame(rows, columns=cols)


def _mean_ms(values: pd.Series) -> float | None:
    vals = pd.to_numeric(values, errors="coerce").dropna()
    return float(vals.mean() * 1e3) if len(vals) else None


def _window_hist(files: LaunchDir, level: int, name: str) -> tuple[float, int] | None:
    try:
        before = files.metrics_level(level, "before").read_text("utf-8")
        after = files.metrics_level(level, "after").read_text("utf-8")
    except OSError:
        return None
    return histogram_mean(before, after, name)


def _client_lag_ms(status: dict[str, Any], level: int) -> float | None:
    """The worst tick of the client's loop-lag probe in one launch's window at ``level``
    (ms, from its ``status.json``); None where the launch recorded none."""
    for item in status.get("levels") or ():
        if item.get("level") == level:
            lag = (item.get("client") or {}).get("loop_lag_max_s")
            return float(lag) * 1e3 if isinstance(lag, int | float) else None
    return None


def _agreement_row(
    lid: str, series: str, level: int, g: pd.DataFrame, rd: RunDir, status: dict[str, Any]
) -> dict:
    ok = g[g["ok"].astype(bool)]
    both = ok.dropna(subset=["tpot_client_s", "tpot_server_s"])
    hist_tpot = _window_hist(rd.launch_files(lid), level, _HIST_TPOT)
    hist_ttft = _window_hist(rd.launch_files(lid), level, _HIST_TTFT)
    client_tpot = _mean_ms(both["tpot_client_s"]) if len(both) else _mean_ms(ok["tpot_client_s"])
    server_tpot = _mean_ms(both["tpot_server_s"]) if len(both) else None
    if server_tpot is None and hist_tpot is not None:
        server_tpot = hist_tpot[0] * 1e3
    client_ttft = _mean_ms(ok["ttft_client_s"])
    server_ttft = hist_ttft[0] * 1e3 if hist_ttft else _mean_ms(ok.get("ttft_server_s"))
    tpot_gap = (
        client_tpot / server_tpot - 1
        if client_tpot is not None and server_tpot is not None and server_tpot > 0
        else None
    )
    ttft_gap = client_ttft - server_ttft if None not in (client_ttft, server_ttft) else None
    assessed = tpot_gap is not None or ttft_gap is not None
    agrees = None
    if assessed:
        agrees = (tpot_gap is None or abs(tpot_gap) <= TPOT_TOLERANCE) and (
            ttft_gap is None or abs(ttft_gap) <= TTFT_TOLERANCE_S * 1e3
        )
    return {
        "launch_id": lid,
        "series": series,
        "level": level,
        "block": str(g["block"].iloc[0]) if "block" in g and g["block"].notna().any() else None,
        "n_ok": len(ok),
        "n_server_stamped": int(ok["tpot_server_s"].notna().sum()),
        "n_read_late": int(ok["read_late"].astype(bool).sum()) if "read_late" in ok else 0,
        "client_tpot_ms": client_tpot,
        "server_tpot_ms": server_tpot,
        "hist_tpot_ms": hist_tpot[0] * 1e3 if hist_tpot else None,
        "hist_tpot_n": hist_tpot[1] if hist_tpot else None,
        "tpot_gap": tpot_gap,
        "client_ttft_ms": client_ttft,
        "server_ttft_ms": server_ttft,
        "engine_ttft_ms": _mean_ms(ok.get("ttft_server_s")),
        "hist_ttft_n": hist_ttft[1] if hist_ttft else None,
        "ttft_gap_ms": ttft_gap,
        "client_lag_max_ms": _client_lag_ms(status, level),
        "agrees": agrees,
    }


def launch_agreement(df: pd.DataFrame, run_dir: str | Path) -> pd.DataFrame:
    """Per launch and load level, the client's mean TPOT/TTFT against the server's own.

    TPOT: the client's mean over the requests the server stamped against the server's mean
    ``mean_itl_ms`` over the same requests (else the ``/metrics`` histogram over the level's
    window). TTFT: the client's mean against the API server's ``time_to_first_token``
    histogram over the window (else the engine's per-request stamps, which start later).
    ``client_lag_max_ms``: the worst tick of the client's loop-lag probe in the window (what
    bounds the client's own share of a TTFT lag). ``agrees`` is None when the launch has no
    server-side timing at all.
    """
    rd = RunDir.at(run_dir)
    if df.empty or "launch_id" not in df:
        return pd.DataFrame()
    statuses = {str(lid): rd.read_status(str(lid)) or {} for lid in df["launch_id"].unique()}
    rows = [
        _agreement_row(str(lid), str(g["series"].iloc[0]), int(level), g, rd, statuses[str(lid)])
        for (lid, level), g in df.groupby(["launch_id", "level"], sort=False)
    ]
    return pd.DataFrame(rows)
