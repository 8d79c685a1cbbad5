"""The run's warnings: what the analysis says beside the verdicts, never a veto.

:func:`run_warnings` collects them for ``summary.json``: security advisories of the
installed vLLM (from the manifest), failed launches and saturated clients, per-request spec
metrics that do not add up to the ``/metrics`` deltas, prefix-cache hits in a measured
window, blocks whose records came from several hosts (:func:`block_host_warnings`),
streams the client read late (:func:`late_read_warnings`), a sampling check that could not
score, and missing or empty records.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from speclib.analysis.speculation.launches import LaunchMetrics
from speclib.core.records import LATE_CHUNKS_FLAG
from speclib.core.rundir import RunDir

__all__ = [
    "block_host_warnings",
    "late_read_warnings",
    "launch_warnings",
    "run_warnings",
]


def launch_warnings(statuses: list[dict[str, Any]], lms: list[LaunchMetrics]) -> list[str]:
    out = []
    for s in statuses:
        if not s.get("ok"):
            out.append(f"launch {s['launch_id']} failed: {(s.get('error') or '')[:300]}")
        if (s.get("client") or {}).get("saturated"):
            out.append(
                f"launch {s['launch_id']}: the client used most of a core; its "
                "latencies are upper bounds"
            )
    for m in lms:
        if m.reconciliation is not None and not m.reconciliation.matches:
            out.append(
                f"launch {m.launch_id}: per-request spec metrics do not add up to "
                f"the /metrics deltas ({m.reconciliation.explanation})"
            )
        if m.prefix_cache is not None and m.prefix_cache.hits:
            out.append(
                f"launch {m.launch_id}: {m.prefix_cache.hits:g} prefix-cache hits "
                "during the measured requests (a warm cache favours this series)"
            )
    return out


def run_warnings(
    rd: RunDir, statuses: list[dict[str, Any]], lms: list[LaunchMetrics], df: pd.DataFrame
) -> list[str]:
    out = [
        f"installed vLLM is affected by security advisory {a['id']} ({a['summary']}; fixed "
        f"in {a['fixed_in']})"
        for a in rd.read_manifest().get("security_advisories", [])
    ]
    out += launch_warnings(statuses, lms)
    out += block_host_warnings(df)
    out += late_read_warnings(df)
    if rd.scoring_error.exists():
        why = rd.scoring_error.read_text("utf-8")[:500]
        out.append(f"the sampling check could not score the outputs ({why}): correctness unknown")
    if not rd.requests.exists() or df.empty:
        out.append("no measured request records")
    if not rd.requests.exists() or not rd.requests.read_bytes().strip():
        out.append("requests.jsonl is empty")
    return out


def late_read_warnings(df: pd.DataFrame) -> list[str]:
    """One warning when the client read some streams late (``records.read_late``).

    Chunks that wait for the client to be scheduled arrive in one read with the same stamp:
    a late first chunk overstates TTFT and understates TPOT. Both arms of a pair run through
    the same client, so the paired ratio stays unbiased but gets noisier; on a small host
    it means the client competes with the servers for CPU (``protocol.server_nice``).
    """
    if df.empty or "read_late" not in df:
        return []
    late = df.loc[df["ok"].astype(bool), ["series", "read_late"]]
    if not late["read_late"].any():
        return []
    counts = late.groupby("series", sort=False)["read_late"].agg(["sum", "size"])
    per = ", ".join(f"{name} {int(n)}/{total}" for name, (n, total) in counts.iterrows())
    n_late = int(counts["sum"].sum())
    return [
        f"the client read {n_late} of {len(late)} streams late ({per}): in each, "
        f"{LATE_CHUNKS_FLAG} or more chunks arrived in one read, so the client was not "
        "scheduled in time and their TTFT is overstated, their TPOT understated; on a busy "
        "host raise protocol.server_nice or give the client a free core"
    ]


def block_host_warnings(df: pd.DataFrame) -> list[str]:
    """Host is a level of the design: pairs are formed within a block, and a block runs on
    one host (``protocol.executor: ray``), so no pair crosses hosts. One warning per block
    whose records say they ran on more than one host (records without a host ran here)."""
    if df.empty or "host" not in df or "block" not in df:
        return []
    hosts = df.assign(host=df["host"].fillna("(this host)")).groupby("block")["host"].unique()
    return [
        f"block {block}: its records come from {len(h)} hosts ({', '.join(sorted(h))}); "
        "pairs within it cross hosts"
        for block, h in hosts.items()
        if len(h) > 1
    ]
