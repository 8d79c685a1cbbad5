"""The tabular formats: prompt sets of one row a prompt, read into the kit's :class:`Prompt`.

- ``jsonl``: ``prompt`` (a string) or ``messages`` (role/content), optional ``id`` and
  ``category``, other keys ignored (:func:`read_jsonl`);
- ``csv``: a prompt column (``workload.prompt_column``) and an optional category column;
  an ``id`` column is used when present (:func:`read_csv`);
- ``hf-disk``: a folder written by ``datasets.Dataset.save_to_disk`` (columns as for
  ``jsonl``), only when the ``datasets`` package is installed (:func:`read_hf_disk`).

:mod:`speclib.core.datasets` dispatches to these; the record checks are
:mod:`speclib.core.datasets_records`'.
"""

from __future__ import annotations

import csv
import importlib
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from speclib.core.datasets_records import (
    DatasetRead,
    Located,
    ReadOptions,
    finish_read,
    jsonl_records,
    nonempty_text,
    read_prompt_file,
    record_category,
    record_id,
    record_messages,
    record_object,
)
from speclib.core.prompts import Prompt, PromptSetError

__all__ = ["read_csv", "read_hf_disk", "read_jsonl"]

_NEEDS_DATASETS = (
    "{path}: format 'hf-disk' reads a Hugging Face datasets folder, which needs the datasets "
    "package (not installed here): pip install datasets (or pip install 'speclib[datasets]')"
)


# --- jsonl / hf-disk -----------------------------------------------------------------------


def _generic(data: Any, where: str, fmt: str, index: int) -> Prompt:
    """A record with ``prompt`` or ``messages``, optional ``id`` and ``category``."""
    record = record_object(data, where)
    has_prompt, has_messages = record.get("prompt") is not None, record.get("messages") is not None
    if has_prompt == has_messages:
        which = "both" if has_prompt else "neither"
        raise PromptSetError(
            f"{where}: needs exactly one of 'prompt' (a string) or 'messages' (a list of "
            f"role/content), has {which}"
        )
    if has_prompt:
        messages = (
            {"role": "user", "content": nonempty_text(record["prompt"], where, "'prompt'")},
        )
    else:
        messages = record_messages(record["messages"], where)
    return Prompt(
        id=record_id(record.get("id"), where, fmt, index),
        messages=messages,
        category=record_category(record.get("category"), where),
    )


def read_jsonl(path: Path, options: ReadOptions) -> DatasetRead:
    """A JSONL set of ``prompt`` or ``messages`` records."""
    records = list(jsonl_records(path, read_prompt_file(path)))
    located = [(w, _generic(d, w, "jsonl", i)) for i, (w, d) in enumerate(records)]
    return finish_read(path, located, len(records))


def _hf_rows(path: Path) -> Iterable[dict[str, Any]]:
    try:
        datasets = importlib.import_module("datasets")
    except ImportError:
        raise PromptSetError(_NEEDS_DATASETS.format(path=path)) from None
    if not path.is_dir():
        raise PromptSetError(f"{path}: format 'hf-disk' needs a folder written by save_to_disk")
    try:
        data = datasets.load_from_disk(str(path))
    except Exception as exc:  # not a datasets folder, or a newer layout
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PromptSetError(f"{path}: not a datasets folder ({first[:160]})") from None
    if isinstance(data, datasets.DatasetDict):
        if len(data) != 1:
            raise PromptSetError(
                f"{path}: holds the splits {sorted(data)}: point workload.prompts at one "
                f"split's folder (e.g. {path / sorted(data)[0]})"
            )
        data = next(iter(data.values()))
    return data


def read_hf_disk(path: Path, options: ReadOptions) -> DatasetRead:
    """A ``save_to_disk`` folder (one split) of ``prompt`` or ``messages`` rows."""
    located: list[Located] = []
    for index, row in enumerate(_hf_rows(path)):
        where = f"{path}: row [{index}]"
        located.append((where, _generic(row, where, "hf-disk", index)))
    return finish_read(path, located, len(located))


# --- csv -----------------------------------------------------------------------------------


def _csv_columns(path: Path, header: list[str], options: ReadOptions) -> tuple[str, str | None]:
    """The prompt column and the category column (or None)."""
    if options.prompt_column not in header:
        raise PromptSetError(
            f"{path}:1: no column {options.prompt_column!r} (columns: {header}); "
            "set workload.prompt_column"
        )
    if options.category_column is None:
        return options.prompt_column, "category" if "category" in header else None
    if options.category_column not in header:
        raise PromptSetError(
            f"{path}:1: no column {options.category_column!r} (columns: {header}); "
            "fix workload.category_column"
        )
    return options.prompt_column, options.category_column


def read_csv(path: Path, options: ReadOptions) -> DatasetRead:
    """A CSV set with a header row: a prompt column, optional category and ``id`` columns."""
    reader = csv.DictReader(io.StringIO(read_prompt_file(path), newline=""))
    if not reader.fieldnames:
        raise PromptSetError(f"{path}: no header row (an empty CSV file)")
    prompt_col, category_col = _csv_columns(path, list(reader.fieldnames), options)
    located: list[Located] = []
    for index, row in enumerate(reader):
        where = f"{path}:{reader.line_num}"
        text = nonempty_text(row.get(prompt_col), where, f"column {prompt_col!r}")
        category = row.get(category_col) if category_col else None
        prompt = Prompt(
            id=record_id(row.get("id"), where, "csv", index),
            messages=({"role": "user", "content": text},),
            category=record_category(category, where),
        )
        located.append((where, prompt))
    return finish_read(path, located, len(located))
