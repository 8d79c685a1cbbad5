"""A re-decision: another params file's ``analysis`` section applied to a finished run.

``speclib analyze RUN_DIR --params FILE`` decides the run's records again under FILE's
``analysis`` section (margin, confidence, gates). That is legitimate only for the same
experiment: :func:`redecision` refuses a file whose servers, series, workload or protocol
differ from the run's own params (naming each field that differs), and otherwise says which
``analysis`` fields changed from the run's own, so every output can say the rule was changed
after the run. The prompt set is compared by content, not by path, so a copy of the params
file and prompts in another folder is the same experiment, and so is a copy of the run's own
``params.yaml`` whose relative prompt path is the run's (read against the run's original
params file when it is not there against the copy).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.params.experiment import ExperimentParams

__all__ = ["Redecision", "redecision"]

_SAME_EXPERIMENT = ("server", "series", "workload", "protocol")
"""Sections that describe what was run: a re-decision may not change them."""
_RUN_LENGTH = ("max_replicates", "budget_min")
"""``protocol`` fields that only bound how many blocks run until decided may add: a
re-decision may differ there (the records hold the blocks that ran, and the looks are
replayed from the run's own plan, whatever the file says; a params.yaml of an older kit
lacks them, so it reads today's defaults)."""
_MAX_NAMED = 8


@dataclass(frozen=True)
class Redecision:
    """Which ``analysis`` fields a params file changes from the run's own params.

    ``changed``: ``(field, the run's value, the value applied now)`` per changed field."""

    params_file: str
    changed: tuple[tuple[str, Any, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``redecision`` entry of ``summary.json``."""
        return {
            "params_file": self.params_file,
            "changed": [{"field": f, "run": old, "now": new} for f, old, new in self.changed],
        }

    def line(self) -> str:
        """One line: the rule was changed after the run, field by field."""
        if not self.changed:
            return f"re-decided with {self.params_file}: the same analysis rule as the run's own"
        fields = "; ".join(f"{f} {old!r} → {new!r}" for f, old, new in self.changed)
        return (
            f"re-decided after the run with {self.params_file}: {fields} "
            "(the run's own params.yaml says otherwise)"
        )


def _diff(old: Any, new: Any, path: str) -> list[tuple[str, Any, Any]]:
    """Every leaf where ``new`` differs from ``old`` (dotted paths, list indices in [])."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in [*old, *(k for k in new if k not in old)]:
            out += _diff(old.get(key), new.get(key), f"{path}.{key}")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in _diff(a, b, f"{path}[{i}]")
        ]
    return [] if old == new else [(path, old, new)]


def _prompt_digest(params: ExperimentParams, run: ExperimentParams | None = None) -> str:
    """The prompt set's content hash (its path when it cannot be read). ``run``: the run's
    own params, when ``params`` is a file given for it: a prompt path that is not there
    relative to that file is read as the run's own ``params.yaml`` wrote it, relative to
    the run's original params file (a copy of ``RUN_DIR/params.yaml`` is its prompts')."""
    path = params.resolve_path(params.workload.prompts)
    if run is not None and not path.exists():
        path = run.resolve_path(params.workload.prompts)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else str(path)
    except OSError:
        return str(path)


def _experiment(params: ExperimentParams, run: ExperimentParams | None = None) -> dict[str, Any]:
    data = params.model_dump(include=set(_SAME_EXPERIMENT))
    data["workload"]["prompts"] = _prompt_digest(params, run)
    for key in _RUN_LENGTH:
        data["protocol"].pop(key, None)
    return data


def redecision(run: ExperimentParams, other: ExperimentParams, *, source: str) -> Redecision:
    """What applying ``other``'s ``analysis`` section to a run of ``run`` changes.

    Raises :class:`ValueError` naming the fields when ``other`` is another experiment
    (its servers, series, workload or protocol differ from the run's)."""
    differs = _diff(_experiment(run), _experiment(other, run), "")
    if differs:
        named = [f.lstrip(".") for f, _, _ in differs]
        shown = ", ".join(named[:_MAX_NAMED]) + (
            f" and {len(named) - _MAX_NAMED} more" if len(named) > _MAX_NAMED else ""
        )
        raise ValueError(
            f"{source}: a params file of another experiment: {shown} differ(s) from the "
            f"run's own params. --params may change only the analysis section (margin, "
            "confidence, gates); copy the run's params.yaml and edit that section"
        )
    changed = _diff(
        run.analysis.model_dump(mode="json"), other.analysis.model_dump(mode="json"), "analysis"
    )
    return Redecision(params_file=str(Path(source)), changed=tuple(changed))
