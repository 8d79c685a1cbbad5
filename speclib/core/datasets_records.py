"""What every prompt-set format adapter shares: the options and the result of one read, a
file's records each with where it sits, and the checks of a record's fields.

The adapters (:mod:`speclib.core.datasets_conversations`, :mod:`speclib.core.datasets_tabular`)
read a format's records with :func:`jsonl_records` or :func:`json_list_records`, check each
field with :func:`record_object`, :func:`record_id`, :func:`record_category`,
:func:`nonempty_text` and :func:`record_messages`, and end with :func:`finish_read` (ids
unique, at least one prompt). Every check raises :class:`PromptSetError` naming where the
record sits (``file:line``, ``file: record [i]`` or ``file: row [i]``) and what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from speclib.core.prompts import Prompt, PromptSetError

__all__ = [
    "DatasetRead",
    "Located",
    "ReadOptions",
    "WorkloadSection",
    "finish_read",
    "json_list_records",
    "jsonl_records",
    "nonempty_text",
    "read_prompt_file",
    "record_category",
    "record_id",
    "record_messages",
    "record_object",
    "show_value",
]

_ROLES = ("system", "user", "assistant")


class WorkloadSection(Protocol):
    """The fields of a params file's ``workload`` section that reading its prompts uses
    (the section itself, :class:`speclib.params.workload.WorkloadParams`, sits in a layer
    above: the prompt formats do not import the params)."""

    @property
    def format(self) -> str: ...
    @property
    def sharegpt_turns(self) -> str: ...
    @property
    def prompt_column(self) -> str: ...
    @property
    def category_column(self) -> str | None: ...
    @property
    def num_prompts(self) -> int | None: ...
    @property
    def sample(self) -> str: ...
    @property
    def sample_seed(self) -> int: ...
    @property
    def multi_turn(self) -> bool: ...


@dataclass(frozen=True)
class ReadOptions:
    """The format-specific options of ``workload`` (see :class:`WorkloadSection`)."""

    sharegpt_turns: str = "first"  # "first" | "history"
    prompt_column: str = "prompt"  # csv
    category_column: str | None = None  # csv; None: "category" when the file has it

    @classmethod
    def of(cls, workload: WorkloadSection) -> ReadOptions:
        """The options a ``workload`` section sets."""
        return cls(workload.sharegpt_turns, workload.prompt_column, workload.category_column)


@dataclass(frozen=True)
class DatasetRead:
    """A whole prompt set as read: prompts in file order, records seen, records skipped."""

    prompts: tuple[Prompt, ...]
    records: int
    skipped: int = 0


Located = tuple[str, Prompt]
"""``(where, prompt)``: where is ``"file:line"``, ``"file: record [i]"`` or ``"file: row [i]"``."""


def show_value(value: Any) -> str:
    """A record's value as JSON, cut to 80 characters, for an error message."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def read_prompt_file(path: Path) -> str:
    """The text of a prompt file (UTF-8, a BOM dropped)."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise PromptSetError(f"{path}: cannot read prompt file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise PromptSetError(f"{path}: not UTF-8 text ({exc.reason})") from None


def jsonl_records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` per non-blank line."""
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"{where}: not valid JSON ({exc.msg})") from None


def json_list_records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` per element of a JSON list."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptSetError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno})"
        ) from None
    for i, record in enumerate(data):
        yield f"{path}: record [{i}]", record


def record_id(value: Any, where: str, fmt: str, index: int) -> str:
    """The record's own id (stringified), or ``<fmt>-<index>`` when it has none."""
    if value is None or value == "":
        return f"{fmt}-{index}"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise PromptSetError(
            f"{where}: id must be a string or an integer (value: {show_value(value)})"
        )
    return str(value)


def record_category(value: Any, where: str) -> str:
    """The record's category (stringified), or ``default`` when it has none."""
    if value is None or value == "":
        return "default"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise PromptSetError(f"{where}: category must be a string (value: {show_value(value)})")
    return str(value)


def record_object(data: Any, where: str) -> dict[str, Any]:
    """``data``, which must be a JSON object."""
    if not isinstance(data, dict):
        raise PromptSetError(f"{where}: a record must be a JSON object (value: {show_value(data)})")
    return data


def nonempty_text(value: Any, where: str, what: str) -> str:
    """``value``, which must be a string that is not blank (``what`` names it)."""
    if not isinstance(value, str) or not value.strip():
        raise PromptSetError(
            f"{where}: {what} must be a non-empty string (value: {show_value(value)})"
        )
    return value


def record_messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    """A non-empty list of role/content messages (other keys of a message are dropped)."""
    if not isinstance(value, list) or not value:
        raise PromptSetError(
            f"{where}: 'messages' must be a non-empty list (value: {show_value(value)})"
        )
    out = []
    for i, m in enumerate(value):
        at = f"{where}: messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise PromptSetError(
                f"{at}: must be an object with a role ({', '.join(_ROLES)}) and content "
                f"(value: {show_value(m)})"
            )
        out.append({"role": m["role"], "content": nonempty_text(m.get("content"), at, "content")})
    return tuple(out)


def finish_read(path: Path, located: list[Located], records: int, skipped: int = 0) -> DatasetRead:
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
