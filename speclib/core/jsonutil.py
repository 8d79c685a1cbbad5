"""JSON-safe values: the one conversion every ``to_dict`` and ``summary.json`` goes through.

Result objects hold numpy scalars, tuples, NaN and pandas' missing markers; ``json.dumps``
accepts none of them (or writes ``NaN``, which is not JSON). :func:`jsonable` turns such a
value, recursively, into plain Python: numbers stay numbers, a non-finite float or a missing
marker becomes ``None``, tuples become lists, mapping keys become strings, and an object
with a ``to_dict()`` method is replaced by what that returns.

numpy and pandas are not imported here (the core layer needs neither): their types are
looked up in ``sys.modules``, since a value of theirs can only exist once they are loaded.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["json_lines", "jsonable"]


def _is_numpy_scalar(value: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.generic)


def _is_numpy_array(value: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def _is_pandas_missing(value: Any) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and (value is pd.NA or value is pd.NaT)


def jsonable(value: Any) -> Any:
    """``value`` as JSON-safe Python: numpy scalars → Python, NaN/inf/NA/NaT → ``None``.

    Containers are converted recursively (tuples, lists and numpy arrays → lists, dict keys
    → ``str``);
    an object with ``to_dict()`` (e.g. :class:`~speclib.analysis.stats.paired.RatioCI`) is
    replaced by its mapping; anything else (``str``, ``None``) is returned as is.
    """
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or _is_numpy_array(value):
        return [jsonable(v) for v in value]
    if _is_numpy_scalar(value):
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if _is_pandas_missing(value):
        return None
    return value


def json_lines(
    lines: Sequence[str | bytes], *, skip_damaged: bool = False
) -> Iterator[dict[str, Any]]:
    """Parse the lines of a JSONL file written by appending: blank lines are skipped, a torn
    last line (a crash mid-write) is dropped, a broken line before it raises; with
    ``skip_damaged`` (a run decided on incomplete records, whose damaged lines are already
    named) every line that is not a JSON object (or not UTF-8) is dropped."""
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if i == len(lines) - 1 or skip_damaged:
                continue
            raise
        if isinstance(data, dict) or not skip_damaged:
            yield data
