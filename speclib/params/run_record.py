"""The params as a run folder records them: written once when the run starts, read by
every later step.

A batch run checks its params file once (:func:`speclib.run.preflight.checked_params`) and
hands it in here (:func:`write_record`): the file is copied to ``params.yaml`` and its
validated form written to ``params.resolved.json`` (the prompts' path made absolute). Setup,
each block's series notebook (on this host or on a Ray worker), the look between blocks, the
scoring and the analysis read the params from that record (:func:`recorded_params`), never
from the path the user typed: what ran is what the folder says ran.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from pydantic import ValidationError

from speclib.core.rundir import RunDir, write_json_atomic
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError

__all__ = ["recorded_params", "write_record"]


def write_record(params: ExperimentParams, rd: RunDir) -> None:
    """Record ``params`` in ``rd``: the file copied to ``params.yaml`` (once: a resumed run
    keeps the copy it started with) and ``params.resolved.json``, the params as validated
    with the prompts' path made absolute and the file's path kept (``source``), so relative
    model paths resolve where they did."""
    data = params.model_dump()
    data["workload"]["prompts"] = str(params.resolve_path(params.workload.prompts))
    rd.root.mkdir(parents=True, exist_ok=True)
    if params.source and Path(params.source).is_file() and not rd.params_copy.exists():
        shutil.copyfile(params.source, rd.params_copy)
    write_json_atomic(rd.params_resolved, data)


def recorded_params(path: str | os.PathLike[str]) -> ExperimentParams:
    """The params a run recorded (``params.resolved.json``), validated again.

    Settings this version of the kit no longer has are dropped, so a run folder written by
    an older kit can be re-analysed (with today's defaults for what changed). ``source``
    stays the file the run was started with (a path only: the file need not exist), so a
    relative model path resolves against that file's folder as it did at the start.
    A record that cannot be read or is no longer valid is a
    :class:`~speclib.params.loader.ParamsError` naming the file (exit 2).
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ParamsError(f"{path}: not a file; restore it from a copy of the run folder")
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no params recorded in this run folder: start it with `speclib run` "
            "or the 00_setup notebook with its params_file"
        )
    try:
        data = json.loads(path.read_text("utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        kept = {k: v for k, v in data.items() if k in ExperimentParams.model_fields}
        for name, info in ExperimentParams.model_fields.items():
            model, section = info.annotation, kept.get(name)
            if isinstance(section, dict) and hasattr(model, "model_fields"):
                kept[name] = {k: v for k, v in section.items() if k in model.model_fields}
    except (OSError, ValueError) as exc:  # damaged: not JSON, not an object
        first = str(exc).splitlines()[0][:300]
        raise ParamsError(
            f"{path}: cannot be read as the run's params ({first}); restore it from a copy "
            "of the run folder"
        ) from None
    try:
        return ExperimentParams.model_validate(kept)
    except ValidationError as exc:  # readable, but params this kit no longer accepts
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ParamsError(
            f"{path}: the params the run recorded are not valid for this kit: {where}: "
            f"{err['msg'].removeprefix('Value error, ')}{more}"
        ) from None
