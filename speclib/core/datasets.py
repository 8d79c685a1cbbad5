"""Prompt sets in the formats users have on disk, read into the kit's :class:`Prompt`, and the
one entry point through which every part of the kit gets a run's prompts.

``workload.format`` picks the adapter (a dict dispatch table, :data:`ADAPTERS`):

- ``speclib``: the kit's own JSONL (:func:`speclib.core.prompts.load_prompts`, unchanged);
- ``sharegpt``: a JSON list of records (or one record per line) with ``conversations`` (or
  ``conversation``) of ``{"from": "human"|"gpt"|"system", "value": ...}`` turns, or of
  ``{"role", "content"}`` turns; ``workload.sharegpt_turns`` sends the first human turn
  (``first``) or the conversation up to its last human turn (``history``); a turn with empty
  text counts as absent, and records without a human turn are skipped and counted;
- ``spec-bench`` and ``mt-bench``: ``question.jsonl`` lines ``{"question_id", "category",
  "turns"}``; turn 1 is sent, every turn is kept in :attr:`Prompt.turns`;
- ``jsonl``: ``prompt`` (a string) or ``messages`` (role/content), optional ``id`` and
  ``category``, other keys ignored;
- ``csv``: a prompt column (``workload.prompt_column``) and an optional category column;
  an ``id`` column is used when present;
- ``hf-disk``: a folder written by ``datasets.Dataset.save_to_disk`` (columns as for
  ``jsonl``), only when the ``datasets`` package is installed.

Nothing is downloaded. A malformed record raises :class:`PromptSetError` naming the file and
the line (JSON list: the record index; CSV: the line; hf-disk: the row) and what is wrong.
Ids are the record's own (stringified) or ``<format>-<index>`` (0-based record index), and
must be unique. :func:`workload_prompts` reads the set, draws the sample
(:mod:`speclib.core.prompt_sampling`) and returns the prompts with their provenance (file
hash, records read and skipped, sampling, how many short) for the manifest.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import importlib
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from speclib.core.params import WorkloadParams
from speclib.core.prompt_sampling import PromptSample, sample_prompts
from speclib.core.prompts import Prompt, PromptSetError, load_prompts

__all__ = [
    "ADAPTERS",
    "DatasetRead",
    "LoadedPrompts",
    "ReadOptions",
    "dataset_sha256",
    "load_workload_prompts",
    "read_dataset",
    "workload_prompts",
]

_ROLES = ("system", "user", "assistant")
_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
_NEEDS_DATASETS = (
    "{path}: format 'hf-disk' reads a Hugging Face datasets folder, which needs the datasets "
    "package (not installed here): pip install datasets (or pip install 'speclib[datasets]')"
)


@dataclass(frozen=True)
class ReadOptions:
    """The format-specific options of ``workload`` (see :class:`WorkloadParams`)."""

    sharegpt_turns: str = "first"  # "first" | "history"
    prompt_column: str = "prompt"  # csv
    category_column: str | None = None  # csv; None: "category" when the file has it

    @classmethod
    def of(cls, workload: WorkloadParams) -> ReadOptions:
        """The options a ``workload`` section sets."""
        return cls(workload.sharegpt_turns, workload.prompt_column, workload.category_column)


@dataclass(frozen=True)
class DatasetRead:
    """A whole prompt set as read: prompts in file order, records seen, records skipped."""

    prompts: tuple[Prompt, ...]
    records: int
    skipped: int = 0


@dataclass(frozen=True)
class LoadedPrompts:
    """The prompts a run sends, in send order, and where they came from (for the manifest:
    path, format, sha256, records_read, skipped, sample, sample_seed, requested, returned,
    short_by)."""

    prompts: tuple[Prompt, ...]
    provenance: dict[str, Any]


class _HasWorkload(Protocol):
    """What :func:`workload_prompts` needs of an ``ExperimentParams``."""

    @property
    def workload(self) -> WorkloadParams: ...

    def resolve_path(self, value: str) -> Path: ...


_Located = tuple[str, Prompt]  # (where: "file:line" or "file: record [i]", prompt)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise PromptSetError(f"{path}: cannot read prompt file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise PromptSetError(f"{path}: not UTF-8 text ({exc.reason})") from None


def _jsonl_records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` per non-blank line."""
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"{where}: not valid JSON ({exc.msg})") from None


def _json_list_records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` per element of a JSON list."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptSetError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno})"
        ) from None
    for i, record in enumerate(data):
        yield f"{path}: record [{i}]", record


def _record_id(value: Any, where: str, fmt: str, index: int) -> str:
    if value is None or value == "":
        return f"{fmt}-{index}"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise PromptSetError(f"{where}: id must be a string or an integer (value: {_show(value)})")
    return str(value)


def _category(value: Any, where: str) -> str:
    if value is None or value == "":
        return "default"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise PromptSetError(f"{where}: category must be a string (value: {_show(value)})")
    return str(value)


def _object(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise PromptSetError(f"{where}: a record must be a JSON object (value: {_show(data)})")
    return data


def _text(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PromptSetError(f"{where}: {what} must be a non-empty string (value: {_show(value)})")
    return value


def _messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    """A non-empty list of role/content messages (other keys of a message are dropped)."""
    if not isinstance(value, list) or not value:
        raise PromptSetError(
            f"{where}: 'messages' must be a non-empty list (value: {_show(value)})"
        )
    out = []
    for i, m in enumerate(value):
        at = f"{where}: messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise PromptSetError(
                f"{at}: must be an object with a role ({', '.join(_ROLES)}) and content "
                f"(value: {_show(m)})"
            )
        out.append({"role": m["role"], "content": _text(m.get("content"), at, "content")})
    return tuple(out)


def _finish(path: Path, located: list[_Located], records: int, skipped: int = 0) -> DatasetRead:
    """Unique ids, at least one prompt."""
    seen: dict[str, str] = {}
    for where, prompt in located:
        if prompt.id in seen:
            first = seen[prompt.id]
            raise PromptSetError(f"{where}: duplicate id {prompt.id!r} (first at {first})")
        seen[prompt.id] = where
    if not located:
        raise PromptSetError(
            f"{path}: the prompt set is empty ({records} record(s) read, {skipped} skipped)"
        )
    return DatasetRead(tuple(p for _, p in located), records, skipped)


# --- speclib -------------------------------------------------------------------------------


def _read_speclib(path: Path, options: ReadOptions) -> DatasetRead:
    prompts = load_prompts(path)
    return DatasetRead(tuple(prompts), records=len(prompts))


# --- sharegpt ------------------------------------------------------------------------------


def _sharegpt_turn(turn: Any, where: str) -> dict[str, str]:
    if isinstance(turn, dict) and "from" in turn:
        speaker, text = turn.get("from"), turn.get("value")
    elif isinstance(turn, dict) and "role" in turn:
        speaker, text = turn.get("role"), turn.get("content")
    else:
        raise PromptSetError(
            f"{where}: a turn must be an object with 'from' and 'value' (or 'role' and "
            f"'content') (value: {_show(turn)})"
        )
    role = _SHAREGPT_ROLES.get(speaker.lower()) if isinstance(speaker, str) else None
    if role is None:
        raise PromptSetError(
            f"{where}: unknown speaker {speaker!r} (known: {', '.join(_SHAREGPT_ROLES)})"
        )
    if not isinstance(text, str):
        raise PromptSetError(f"{where}: the turn's text must be a string (value: {_show(text)})")
    return {"role": role, "content": text}


def _sharegpt_turns(record: dict[str, Any], where: str) -> list[dict[str, str]]:
    key = "conversations" if "conversations" in record else "conversation"
    turns = record.get(key)
    if not isinstance(turns, list):
        raise PromptSetError(
            f"{where}: needs 'conversations' (or 'conversation'), a list of turns "
            f"(value: {_show(turns)})"
        )
    return [_sharegpt_turn(t, f"{where}: {key}[{j}]") for j, t in enumerate(turns)]


def _sharegpt_messages(turns: list[dict[str, str]], mode: str) -> tuple[dict[str, str], ...]:
    """The messages to send; empty when the conversation has no human turn."""
    kept = [t for t in turns if t["content"].strip()]
    users = [i for i, t in enumerate(kept) if t["role"] == "user"]
    if not users:
        return ()
    if mode == "first":
        return (kept[users[0]],)
    return tuple(kept[: users[-1] + 1])


def _read_sharegpt(path: Path, options: ReadOptions) -> DatasetRead:
    text = _read_text(path)
    is_list = text.lstrip().startswith("[")
    records = _json_list_records(path, text) if is_list else _jsonl_records(path, text)
    located: list[_Located] = []
    count = 0
    for index, (where, data) in enumerate(records):
        count += 1
        record = _object(data, where)
        messages = _sharegpt_messages(_sharegpt_turns(record, where), options.sharegpt_turns)
        if not messages:
            continue
        pid = _record_id(record.get("id"), where, "sharegpt", index)
        category = _category(record.get("category"), where)
        located.append((where, Prompt(id=pid, messages=messages, category=category)))
    return _finish(path, located, count, count - len(located))


# --- spec-bench / mt-bench -----------------------------------------------------------------


def _question(data: Any, where: str, fmt: str, index: int) -> Prompt:
    record = _object(data, where)
    turns = record.get("turns")
    if not isinstance(turns, list) or not turns:
        raise PromptSetError(f"{where}: 'turns' must be a non-empty list (value: {_show(turns)})")
    for j, turn in enumerate(turns):
        _text(turn, where, f"turns[{j}]")
    return Prompt(
        id=_record_id(record.get("question_id"), where, fmt, index),
        messages=({"role": "user", "content": turns[0]},),
        category=_category(record.get("category"), where),
        turns=tuple(turns),
    )


def _read_questions(path: Path, options: ReadOptions, *, fmt: str) -> DatasetRead:
    records = list(_jsonl_records(path, _read_text(path)))
    located = [(w, _question(d, w, fmt, i)) for i, (w, d) in enumerate(records)]
    return _finish(path, located, len(records))


# --- jsonl / hf-disk -----------------------------------------------------------------------


def _generic(data: Any, where: str, fmt: str, index: int) -> Prompt:
    """A record with ``prompt`` or ``messages``, optional ``id`` and ``category``."""
    record = _object(data, where)
    has_prompt, has_messages = record.get("prompt") is not None, record.get("messages") is not None
    if has_prompt == has_messages:
        which = "both" if has_prompt else "neither"
        raise PromptSetError(
            f"{where}: needs exactly one of 'prompt' (a string) or 'messages' (a list of "
            f"role/content), has {which}"
        )
    if has_prompt:
        messages = ({"role": "user", "content": _text(record["prompt"], where, "'prompt'")},)
    else:
        messages = _messages(record["messages"], where)
    return Prompt(
        id=_record_id(record.get("id"), where, fmt, index),
        messages=messages,
        category=_category(record.get("category"), where),
    )


def _read_jsonl(path: Path, options: ReadOptions) -> DatasetRead:
    records = list(_jsonl_records(path, _read_text(path)))
    located = [(w, _generic(d, w, "jsonl", i)) for i, (w, d) in enumerate(records)]
    return _finish(path, located, len(records))


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


def _read_hf_disk(path: Path, options: ReadOptions) -> DatasetRead:
    located: list[_Located] = []
    for index, row in enumerate(_hf_rows(path)):
        where = f"{path}: row [{index}]"
        located.append((where, _generic(row, where, "hf-disk", index)))
    return _finish(path, located, len(located))


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


def _read_csv(path: Path, options: ReadOptions) -> DatasetRead:
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""))
    if not reader.fieldnames:
        raise PromptSetError(f"{path}: no header row (an empty CSV file)")
    prompt_col, category_col = _csv_columns(path, list(reader.fieldnames), options)
    located: list[_Located] = []
    for index, row in enumerate(reader):
        where = f"{path}:{reader.line_num}"
        text = _text(row.get(prompt_col), where, f"column {prompt_col!r}")
        category = row.get(category_col) if category_col else None
        prompt = Prompt(
            id=_record_id(row.get("id"), where, "csv", index),
            messages=({"role": "user", "content": text},),
            category=_category(category, where),
        )
        located.append((where, prompt))
    return _finish(path, located, len(located))


ADAPTERS: dict[str, Callable[[Path, ReadOptions], DatasetRead]] = {
    "speclib": _read_speclib,
    "sharegpt": _read_sharegpt,
    "spec-bench": functools.partial(_read_questions, fmt="spec-bench"),
    "mt-bench": functools.partial(_read_questions, fmt="mt-bench"),
    "jsonl": _read_jsonl,
    "csv": _read_csv,
    "hf-disk": _read_hf_disk,
}
"""``workload.format`` → the function reading a whole set in that format."""


def read_dataset(
    path: str | Path, fmt: str = "speclib", *, options: ReadOptions | None = None
) -> DatasetRead:
    """Read the whole prompt set at ``path`` in format ``fmt``; raise :class:`PromptSetError`
    naming the file and line (or record, row) of a malformed record."""
    if fmt not in ADAPTERS:
        raise ValueError(f"`fmt` must be one of {', '.join(ADAPTERS)}, got {fmt!r}")
    return ADAPTERS[fmt](Path(path), options or ReadOptions())


def dataset_sha256(path: str | Path) -> str:
    """SHA-256 of a prompt file's bytes; for a folder, over its files' relative names and
    bytes in sorted order."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        if path.is_dir():
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _provenance(path: Path, fmt: str, read: DatasetRead, sample: PromptSample) -> dict[str, Any]:
    return {
        "path": str(path),
        "sha256": dataset_sha256(path),
        "format": fmt,
        "records_read": read.records,
        "skipped": read.skipped,
        "sample": sample.method,
        "sample_seed": sample.seed,
        "requested": sample.requested,
        "returned": len(sample.prompts),
        "short_by": sample.short_by,
    }


def load_workload_prompts(path: str | Path, workload: WorkloadParams) -> LoadedPrompts:
    """The prompts ``workload`` sends, read from ``path`` (already resolved), with provenance."""
    path = Path(path)
    read = read_dataset(path, workload.format, options=ReadOptions.of(workload))
    sample = sample_prompts(
        read.prompts, workload.num_prompts, method=workload.sample, seed=workload.sample_seed
    )
    return LoadedPrompts(sample.prompts, _provenance(path, workload.format, read, sample))


def workload_prompts(params: _HasWorkload) -> LoadedPrompts:
    """The prompts an experiment sends, in send order, with their provenance: the one entry
    point every caller uses, so every series receives the same prompts in the same order."""
    return load_workload_prompts(params.resolve_path(params.workload.prompts), params.workload)
