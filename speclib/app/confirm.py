"""The confirmation run of a k schedule: a params file with the schedule as one more arm.

A schedule chosen from a sweep is a prediction; :func:`confirmation_params` turns a run's
recommended schedule (:mod:`speclib.analysis.load.k_schedule`) into a params file that serves,
on the same prompts and load levels, the control, the **best fixed k** (the arm chosen at
the most levels, ties to the lower load) and the **schedule** (``num_speculative_tokens``
= its largest k and ``num_speculative_tokens_per_batch_size``), interleaved in the same
number of replicate blocks, so the schedule gets its own verdict against the control and
stands beside the best fixed k. The file is validated (:func:`speclib.params.loader.
load_params`, which checks the ``speculative_config`` against the installed vLLM) before it
is written; ``speclib schedule RUN --out FILE`` is the command.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from speclib.analysis.load.k_schedule import KSchedule
from speclib.analysis.run_analysis import analyze_run
from speclib.core.rundir import RunDir
from speclib.params.loader import ParamsError, load_params

__all__ = ["ConfirmError", "confirmation_params", "write_confirmation"]

SCHEDULE_SUFFIX = "-schedule"


class ConfirmError(ValueError):
    """The run has no schedule to confirm (the message says why)."""


def _pick(schedules: tuple[KSchedule, ...], family: str | None) -> KSchedule:
    found = [s for s in schedules if family in (None, s.family)]
    if not found:
        have = ", ".join(s.family for s in schedules) or "none"
        raise ConfirmError(
            f"no k schedule {'for ' + repr(family) + ' ' if family else ''}in this run "
            f"(schedules: {have}); a schedule needs a sweep over num_speculative_tokens at "
            "two or more concurrency levels"
        )
    with_entries = [s for s in found if s.entries]
    if not with_entries:
        raise ConfirmError("no schedule to confirm: " + "; ".join(s.text for s in found))
    return with_entries[0]


def _best_fixed(schedule: KSchedule) -> str:
    counts = Counter(c.arm for c in schedule.choices if c.arm and c.k)
    top = max(counts.values())
    return next(c.arm for c in schedule.choices if c.arm and counts.get(c.arm) == top)


def confirmation_params(run_dir: str | os.PathLike[str], *, family: str | None = None) -> dict:
    """The params (as a mapping for YAML) of the confirmation run of ``run_dir``'s schedule."""
    from speclib.analysis.health.integrity import check_integrity

    rd = RunDir.at(run_dir)
    if not rd.root.is_dir():
        raise ConfirmError(f"run folder {rd.root} does not exist (check the path)")
    found = check_integrity(rd.root)
    if found.problems:
        listed = "".join(f"\n  - {p}" for p in found.problems[:12])
        raise ConfirmError(
            f"{rd.root}: the run's records are not whole, and a schedule is recommended only "
            f"from a whole run; restore the named files from a copy of the run folder{listed}"
        )
    schedule = _pick(analyze_run(rd.root, write=False).load.schedules, family)
    data = json.loads(Path(rd.params_resolved).read_text("utf-8"))
    by_name = {s["name"]: s for s in data["series"]}
    fixed = _best_fixed(schedule)
    control = next(s for s in data["series"] if not s.get("speculative_config"))
    data["series"] = [
        {"name": control["name"]},
        {"name": fixed, "speculative_config": by_name[fixed]["speculative_config"]},
        {"name": schedule.family + SCHEDULE_SUFFIX,
         "speculative_config": schedule.speculative_config},
    ]  # fmt: skip
    data["name"] = f"{data['name']}-schedule"
    data["description"] = (
        f"Confirmation of the k schedule recommended by {rd.root.name} ({schedule.text}): "
        f"the control, the best fixed k ({fixed}) and the schedule, same prompts and loads."
    )
    for key in ("source", "output_dir"):
        data.pop(key, None)
    data.get("analysis", {}).pop("measure_draft_cost", None)
    return data


def write_confirmation(
    run_dir: str | os.PathLike[str], out: str | os.PathLike[str], *, family: str | None = None
) -> Path:
    """Write the confirmation params file (validated first); return its path."""
    data = confirmation_params(run_dir, family=family)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    try:
        load_params(tmp)
    except ParamsError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfirmError(f"the confirmation params do not validate: {exc}") from exc
    os.replace(tmp, path)
    return path


def describe(data: dict[str, Any]) -> str:
    """One line per arm of a confirmation params mapping."""
    return "\n".join(
        f"  {s['name']}: {json.dumps(s.get('speculative_config'))}" for s in data["series"]
    )
