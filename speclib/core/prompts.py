"""Prompt sets: load and validate a JSONL prompt file, hash it, and scan it for things that
should not be in a benchmark (personal data, secrets).

Each line is ``{"id": str, "messages": [{"role": ..., "content": ...}, ...],
"category": str}``. Every series of an experiment receives the same prompts in the same
order; the content hash goes into the manifest so a report names exactly what was sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Prompt", "PromptSetError", "load_prompts", "prompts_sha256", "scan_sensitive"]

_ROLES = ("system", "user", "assistant")


class PromptSetError(ValueError):
    """A prompt file is missing, empty or malformed; the message names file and line."""


@dataclass(frozen=True)
class Prompt:
    """One prompt of a set.

    ``turns`` keeps every user turn of a multi-turn question (MT-bench, Spec-Bench);
    ``messages`` is what is sent: turn 1 in a single-turn run. A multi-turn run sends one
    prompt per turn (:func:`speclib.core.turns.expand_turns`): its ``messages`` carry the
    history and ``turn`` says which turn it is (1-based; None outside a multi-turn run).
    """

    id: str
    messages: tuple[dict[str, str], ...]
    category: str = "default"
    turns: tuple[str, ...] = ()
    turn: int | None = None

    def as_messages(self) -> list[dict[str, str]]:
        """The messages as a fresh list of dicts (safe to hand to a request body)."""
        return [dict(m) for m in self.messages]


def _check_message(m: Any, where: str, pid: str) -> None:
    if not isinstance(m, dict):
        raise PromptSetError(f"{where}: must be an object with role and content (id {pid!r})")
    unknown = set(m) - {"role", "content"}
    if unknown:
        raise PromptSetError(f"{where}: unknown key(s) {sorted(unknown)} (id {pid!r})")
    if m.get("role") not in _ROLES:
        raise PromptSetError(
            f"{where}: role must be one of {', '.join(_ROLES)} (value: {m.get('role')!r}, "
            f"id {pid!r})"
        )
    content = m.get("content")
    if not isinstance(content, str) or not content.strip():
        raise PromptSetError(
            f"{where}: content must be a non-empty string (value: {content!r}, id {pid!r})"
        )


def _parse_line(data: Any, where: str) -> Prompt:
    if not isinstance(data, dict):
        raise PromptSetError(f"{where}: each line must be a JSON object")
    unknown = set(data) - {"id", "messages", "category", "note"}
    if unknown:
        raise PromptSetError(f"{where}: unknown key(s) {sorted(unknown)}")
    pid = data.get("id")
    if not isinstance(pid, str) or not pid:
        raise PromptSetError(f"{where}: 'id' must be a non-empty string (value: {pid!r})")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PromptSetError(f"{where}: 'messages' must be a non-empty list (id {pid!r})")
    for i, m in enumerate(messages):
        _check_message(m, f"{where}: messages[{i}]", pid)
    category = data.get("category", "default")
    if not isinstance(category, str):
        raise PromptSetError(f"{where}: 'category' must be a string (id {pid!r})")
    msgs = tuple({"role": m["role"], "content": m["content"]} for m in messages)
    return Prompt(id=pid, messages=msgs, category=category)


def load_prompts(path: str | Path, *, limit: int | None = None) -> list[Prompt]:
    """Read a JSONL prompt set; ids must be unique; ``limit`` keeps the first N prompts."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PromptSetError(f"{path}: cannot read prompt file: {exc.strerror}") from exc
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}  # id -> line number
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"{where}: not valid JSON ({exc.msg})") from None
        prompt = _parse_line(data, where)
        if prompt.id in seen:
            raise PromptSetError(
                f"{where}: duplicate id {prompt.id!r} (first on line {seen[prompt.id]})"
            )
        seen[prompt.id] = no
        prompts.append(prompt)
    if not prompts:
        raise PromptSetError(f"{path}: the prompt set is empty")
    return prompts[:limit] if limit else prompts


def prompts_sha256(path: str | Path) -> str:
    """SHA-256 of the prompt file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_PATTERNS: dict[str, re.Pattern[str]] = {
    "email address": re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
    "phone number": re.compile(r"(?<![\w.])\+?\d[\d\s().-]{8,}\d(?![\w.])"),
    "API key or token": re.compile(
        r"\b(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|"
        r"gh[pousr]_[A-Za-z0-9]{30,}|xox[abprs]-[A-Za-z0-9-]{10,}|"
        r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
    ),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "card-like number": re.compile(r"\b(?:\d[ -]?){13,16}\b"),
}


def scan_sensitive(prompts: list[Prompt]) -> dict[str, list[str]]:
    """Map each kind of sensitive-looking content to the ids of the prompts that contain it.

    A heuristic: the kit is for synthetic or de-identified prompts, and warns before a run.
    """
    found: dict[str, list[str]] = {}
    for prompt in prompts:
        text = "\n".join([*(m["content"] for m in prompt.messages), *prompt.turns])
        for kind, pattern in _PATTERNS.items():
            if pattern.search(text):
                found.setdefault(kind, []).append(prompt.id)
    return found
