"""The conversation formats: prompt sets whose records hold several turns, read into the
kit's :class:`Prompt`.

- ``sharegpt``: a JSON list of records (or one record per line) with ``conversations`` (or
  ``conversation``) of ``{"from": "human"|"gpt"|"system", "value": ...}`` turns, or of
  ``{"role", "content"}`` turns; ``workload.sharegpt_turns`` sends the first human turn
  (``first``) or the conversation up to its last human turn (``history``); a turn with empty
  text counts as absent, and records without a human turn are skipped and counted
  (:func:`read_sharegpt`);
- ``spec-bench`` and ``mt-bench``: ``question.jsonl`` lines ``{"question_id", "category",
  "turns"}``; turn 1 is sent, every turn is kept in :attr:`Prompt.turns`
  (:func:`read_questions`).

:mod:`speclib.core.datasets` dispatches to these; the record checks are
:mod:`speclib.core.datasets_records`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speclib.core.datasets_records import (
    DatasetRead,
    Located,
    ReadOptions,
    finish_read,
    json_list_records,
    jsonl_records,
    nonempty_text,
    read_prompt_file,
    record_category,
    record_id,
    record_object,
    show_value,
)
from speclib.core.prompts import Prompt, PromptSetError

__all__ = ["read_questions", "read_sharegpt"]

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


# --- sharegpt ------------------------------------------------------------------------------


def _sharegpt_turn(turn: Any, where: str) -> dict[str, str]:
    if isinstance(turn, dict) and "from" in turn:
        speaker, text = turn.get("from"), turn.get("value")
    elif isinstance(turn, dict) and "role" in turn:
        speaker, text = turn.get("role"), turn.get("content")
    else:
        raise PromptSetError(
            f"{where}: a turn must be an object with 'from' and 'value' (or 'role' and "
            f"'content') (value: {show_value(turn)})"
        )
    role = _SHAREGPT_ROLES.get(speaker.lower()) if isinstance(speaker, str) else None
    if role is None:
        raise PromptSetError(
            f"{where}: unknown speaker {speaker!r} (known: {', '.join(_SHAREGPT_ROLES)})"
        )
    if not isinstance(text, str):
        raise PromptSetError(
            f"{where}: the turn's text must be a string (value: {show_value(text)})"
        )
    return {"role": role, "content": text}


def _sharegpt_turns(record: dict[str, Any], where: str) -> list[dict[str, str]]:
    key = "conversations" if "conversations" in record else "conversation"
    turns = record.get(key)
    if not isinstance(turns, list):
        raise PromptSetError(
            f"{where}: needs 'conversations' (or 'conversation'), a list of turns "
            f"(value: {show_value(turns)})"
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


def read_sharegpt(path: Path, options: ReadOptions) -> DatasetRead:
    """A ShareGPT set (a JSON list or JSONL), records without a human turn skipped."""
    text = read_prompt_file(path)
    is_list = text.lstrip().startswith("[")
    records = json_list_records(path, text) if is_list else jsonl_records(path, text)
    located: list[Located] = []
    count = 0
    for index, (where, data) in enumerate(records):
        count += 1
        record = record_object(data, where)
        messages = _sharegpt_messages(_sharegpt_turns(record, where), options.sharegpt_turns)
        if not messages:
            continue
        pid = record_id(record.get("id"), where, "sharegpt", index)
        category = record_category(record.get("category"), where)
        located.append((where, Prompt(id=pid, messages=messages, category=category)))
    return finish_read(path, located, count, count - len(located))


# --- spec-bench / mt-bench -----------------------------------------------------------------


def _question(data: Any, where: str, fmt: str, index: int) -> Prompt:
    record = record_object(data, where)
    turns = record.get("turns")
    if not isinstance(turns, list) or not turns:
        raise PromptSetError(
            f"{where}: 'turns' must be a non-empty list (value: {show_value(turns)})"
        )
    for j, turn in enumerate(turns):
        nonempty_text(turn, where, f"turns[{j}]")
    return Prompt(
        id=record_id(record.get("question_id"), where, fmt, index),
        messages=({"role": "user", "content": turns[0]},),
        category=record_category(record.get("category"), where),
        turns=tuple(turns),
    )


def read_questions(path: Path, options: ReadOptions, *, fmt: str) -> DatasetRead:
    """A ``question.jsonl`` set (``fmt``: ``spec-bench`` or ``mt-bench``, for default ids)."""
    records = list(jsonl_records(path, read_prompt_file(path)))
    located = [(w, _question(d, w, fmt, i)) for i, (w, d) in enumerate(records)]
    return finish_read(path, located, len(records))
