"""Records as pandas DataFrames: the one call a notebook user needs, and the pairing step.

:func:`load_records` reads ``requests.jsonl`` of a run folder into a DataFrame with one row
per request (raw fields, derived TTFT/TPOT/E2E recomputed from the raw ones, flattened
per-request acceptance). :func:`pair_frame` matches control and experiment requests by
replicate, load level, prompt and repeat (and block, when the control ran in several blocks
per replicate), keeping only pairs where both succeeded, and counts what was dropped on
each side. :func:`finite_median` summarises a column (per-category ratios are in
:mod:`speclib.analysis.verdict.categories`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from speclib.core.records import (
    RequestRecord,
    e2e_s,
    read_late,
    read_records,
    server_tpot_s,
    server_ttft_s,
    tpot_s,
    ttft_s,
)
from speclib.core.rundir import RunDir

__all__ = [
    "PairedFrame",
    "finite_median",
    "load_records",
    "pair_frame",
    "records_frame",
]

_KEY = ["replicate", "level", "prompt_id", "repeat"]
_CARRIED = (
    "ok",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "tpot_client_s",
    "tpot_server_s",
    "tpot_excluded",
    "read_late",
    "output_tokens",
    "prompt_tokens",
    "text",
    "token_ids",
    "category",
    "turn",
    "spec_rate",
    "spec_mean_len",
    "spec_steps",
    "chunk_tokens",
    "chunk_offsets_s",
    "n_chunks",
    "t_start",
)
"""Columns :func:`pair_frame` carries into the pairs (when the frame has them)."""


def _spec_fields(spec: dict[str, Any] | None) -> dict[str, Any]:
    if not spec:
        return {
            "spec_rate": None,
            "spec_mean_len": None,
            "spec_draft_tokens": None,
            "spec_accepted": None,
            "spec_steps": None,
            "spec_no_drafts": None,
        }
    drafts = spec.get("num_draft_tokens")
    no_drafts = drafts == 0
    return {
        "spec_rate": None if no_drafts else spec.get("draft_acceptance_rate"),
        "spec_mean_len": None if no_drafts else spec.get("mean_acceptance_length"),
        "spec_draft_tokens": drafts,
        "spec_accepted": spec.get("num_accepted_draft_tokens"),
        "spec_steps": spec.get("num_spec_steps"),
        "spec_no_drafts": no_drafts,
    }


def _row(rec: RequestRecord) -> dict[str, Any]:
    row = asdict(rec)
    row["ttft_s"] = ttft_s(rec)
    row["tpot_s"] = tpot_s(rec)
    row["e2e_s"] = e2e_s(rec)
    row["tpot_client_s"], row["ttft_client_s"] = row["tpot_s"], row["ttft_s"]
    row["tpot_server_s"], row["ttft_server_s"] = server_tpot_s(rec), server_ttft_s(rec)
    row["attempted"] = rec.extra.get("attempted", True) if rec.extra else True
    row["n_chunks"] = len(rec.chunk_tokens)
    row["read_late"] = read_late(rec)
    row["t_end"] = rec.t_start + row["e2e_s"] if row["e2e_s"] is not None else None
    row.update(_spec_fields(rec.spec))
    return row


def records_frame(records: list[RequestRecord]) -> pd.DataFrame:
    """A DataFrame of records (one row each), derived metrics recomputed from raw fields.

    ``turn`` (a nullable integer) is the turn of a multi-turn run's prompt, missing
    elsewhere and in records written before the field existed.

    ``tpot_s``/``ttft_s`` are the client's here (also in ``tpot_client_s``/``ttft_client_s``);
    ``tpot_server_s``/``ttft_server_s`` the server's own stamps (NaN without them). The
    analysis sets ``tpot_s`` to the verdict's instrument
    (:func:`speclib.analysis.health.instrument.apply_instrument`)."""
    rows = [_row(r) for r in records]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    if "level" not in df:
        df["level"] = 0
    numeric = ("ttft_s", "tpot_s", "e2e_s", "spec_rate", "spec_mean_len", "t_end")
    for col in (*numeric, "tpot_client_s", "ttft_client_s", "tpot_server_s", "ttft_server_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df["turn"] = pd.to_numeric(df["turn"], errors="coerce").astype("Int64")
    return df


def load_records(
    run_dir: str | os.PathLike[str], *, phase: str | None = "measure", skip_damaged: bool = False
) -> pd.DataFrame:
    """All request records of a run folder as a DataFrame (``phase=None`` keeps warm-up;
    ``skip_damaged``: a run decided on incomplete records drops its damaged lines)."""
    path = RunDir.at(run_dir).requests
    if not Path(path).exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a speclib run folder?")
    df = records_frame(list(read_records(path, skip_damaged=skip_damaged)))
    if phase is not None and not df.empty:
        df = df[df["phase"] == phase].reset_index(drop=True)
    return df


@dataclass(frozen=True)
class PairedFrame:
    """Matched control/experiment rows and the counts of what could not be paired."""

    pairs: pd.DataFrame  # columns <metric>_c, <metric>_e, replicate, prompt_id, repeat, ...
    n_control: int
    n_experiment: int
    dropped_control_failed: int
    dropped_experiment_failed: int
    dropped_both_failed: int
    unmatched: int

    def to_dict(self) -> dict[str, int]:
        return {
            "n_pairs": len(self.pairs),
            "n_control": self.n_control,
            "n_experiment": self.n_experiment,
            "dropped_control_failed": self.dropped_control_failed,
            "dropped_experiment_failed": self.dropped_experiment_failed,
            "dropped_both_failed": self.dropped_both_failed,
            "unmatched": self.unmatched,
        }


def _blocks_per_replicate(control_rows: pd.DataFrame) -> int:
    """Most blocks the control ran in within one replicate (1 without a ``block`` column)."""
    if "block" not in control_rows.columns or not len(control_rows):
        return 1
    counts = control_rows.dropna(subset=["block"]).groupby("replicate")["block"].nunique()
    return int(counts.max()) if len(counts) else 1


def pair_frame(df: pd.DataFrame, *, control: str, experiment: str) -> PairedFrame:
    """Match ``experiment`` rows to ``control`` rows by replicate, load level, prompt, repeat.

    When the control ran in several blocks of one replicate (arms interleaved in groups,
    see :mod:`speclib.run.design`), the block is part of the key too: an arm is always
    paired with the control of its own block. ``pairs`` has a ``block`` column: the block id
    then, else the replicate (the unit of the block-level statistics either way).

    ``df`` needs ``series``, ``ok`` and the key columns (a missing ``level`` counts as level
    0, as in :func:`records_frame`); latencies, output tokens and text, category, turn,
    acceptance and chunk sizes come along, suffixed ``_c`` and ``_e``, when ``df`` has them
    (``category`` and ``turn`` also unsuffixed, from either side).
    """
    if "level" not in df.columns:
        df = df.assign(level=0)
    missing = [c for c in ("series", *_KEY, "ok") if c not in df.columns]
    if missing:
        raise ValueError(f"pair_frame: DataFrame lacks column(s) {missing}")
    by_block = _blocks_per_replicate(df[df["series"] == control]) > 1
    key = [*_KEY, "block"] if by_block else _KEY
    cols = [*key, *(c for c in _CARRIED if c in df.columns)]
    c = df[df["series"] == control][cols]
    e = df[df["series"] == experiment][cols]
    merged = c.merge(e, on=key, how="outer", suffixes=("_c", "_e"), indicator=True)
    both = merged[merged["_merge"] == "both"]
    ok_c = both["ok_c"].astype(bool)
    ok_e = both["ok_e"].astype(bool)
    valid = both[ok_c & ok_e].copy()
    for m in ("tpot_s", "ttft_s", "e2e_s"):
        if m in cols:
            valid[f"{m}_c"] = pd.to_numeric(valid[f"{m}_c"], errors="coerce")
            valid[f"{m}_e"] = pd.to_numeric(valid[f"{m}_e"], errors="coerce")
    if "category" in cols:
        valid["category"] = valid["category_c"].fillna(valid["category_e"])
    if "turn" in cols:
        valid["turn"] = valid["turn_c"].fillna(valid["turn_e"])
    if not by_block:
        valid["block"] = valid["replicate"]
    return PairedFrame(
        pairs=valid.drop(columns=["_merge"]).reset_index(drop=True),
        n_control=len(c),
        n_experiment=len(e),
        dropped_control_failed=int((~ok_c & ok_e).sum()),
        dropped_experiment_failed=int((ok_c & ~ok_e).sum()),
        dropped_both_failed=int((~ok_c & ~ok_e).sum()),
        unmatched=int((merged["_merge"] != "both").sum()),
    )


def finite_median(values: pd.Series, *, positive: bool = False) -> float | None:
    """Median of the finite numeric values of a column (non-numbers, NaN and inf skipped);
    ``None`` if none. With ``positive`` only values above 0 count (a TPOT of 0 or below is a
    measurement artefact, e.g. one chunk, not a fast request)."""
    vals = pd.to_numeric(values, errors="coerce")
    keep = np.isfinite(vals.to_numpy(float)) & ((vals > 0).to_numpy() if positive else True)
    vals = vals[keep]
    return float(vals.median()) if len(vals) else None
