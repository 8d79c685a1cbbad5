"""Multi-turn conversations (``workload.multi_turn``): the earlier turns' answers, and every
question expanded into one prompt per turn.

Turn 2 of an MT-Bench question depends on the answer to turn 1, so the arms would get
different inputs if each answered its own. The kit therefore fixes the history once: the
control answers every earlier turn greedily before any measured request
(:mod:`speclib.run.history`), the answers are written to ``turn_history.jsonl``
(:func:`write_turn_history`, one :class:`TurnAnswer` per line) and every arm of every block
gets the same history (:func:`read_turn_history`, :func:`history_answers`).

:func:`expand_turns` turns each question into one prompt per turn, ids ``<qid>#t1``,
``<qid>#t2``, …, in question order and turn order within a question; turn k sends user t1,
assistant a1, …, user tk. :func:`history_prompts` are the prompts that ask for the answers
of one turn. :func:`measured_prompts` is what a run folder's records were sent: the
workload's prompts, expanded with the run's history for a multi-turn run. Pure, except
reading and writing the history file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from speclib.core.datasets import workload_prompts
from speclib.core.datasets_records import WorkloadSection
from speclib.core.prompts import Prompt
from speclib.core.rundir import RunDir

__all__ = [
    "TurnAnswer",
    "TurnHistoryError",
    "expand_turns",
    "history_answers",
    "history_prompts",
    "measured_prompts",
    "read_turn_history",
    "sent_prompt_count",
    "turn_messages",
    "turn_prompt_id",
    "write_turn_history",
]


class TurnHistoryError(ValueError):
    """The turn history is missing, malformed or does not cover the run's questions."""


@dataclass(frozen=True)
class TurnAnswer:
    """The control's greedy answer to one turn of one question, as fed to every arm.

    ``turn`` is 1-based; ``messages`` is what was sent to get the answer (user t1, assistant
    a1, …, user t``turn``); ``answer`` the text, ``finish_reason`` and ``output_tokens`` as
    the server reported them; ``series``, ``launch_id`` and ``block`` say where it was made.
    """

    question_id: str
    turn: int
    messages: tuple[dict[str, str], ...]
    answer: str
    finish_reason: str | None
    output_tokens: int | None
    series: str = ""
    launch_id: str = ""
    block: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON line of this answer."""
        return {
            "question_id": self.question_id,
            "turn": self.turn,
            "messages": [dict(m) for m in self.messages],
            "answer": self.answer,
            "finish_reason": self.finish_reason,
            "output_tokens": self.output_tokens,
            "series": self.series,
            "launch_id": self.launch_id,
            "block": self.block,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> TurnAnswer:
        """Parse one line; :class:`TurnHistoryError` naming ``where`` when it is malformed."""
        if not isinstance(data, dict):
            raise TurnHistoryError(f"{where}: each line must be a JSON object")
        qid, turn, answer = data.get("question_id"), data.get("turn"), data.get("answer")
        if not isinstance(qid, str) or not qid:
            raise TurnHistoryError(f"{where}: 'question_id' must be a non-empty string")
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
            raise TurnHistoryError(f"{where}: 'turn' must be a positive integer (value: {turn!r})")
        if not isinstance(answer, str):
            raise TurnHistoryError(f"{where}: 'answer' must be a string (question {qid!r})")
        messages = data.get("messages") or []
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
        ):
            raise TurnHistoryError(f"{where}: 'messages' must be a list of role/content objects")
        return cls(
            question_id=qid,
            turn=turn,
            messages=tuple({"role": m.get("role"), "content": m["content"]} for m in messages),
            answer=answer,
            finish_reason=data.get("finish_reason"),
            output_tokens=data.get("output_tokens"),
            series=data.get("series") or "",
            launch_id=data.get("launch_id") or "",
            block=data.get("block") or "",
        )


def turn_prompt_id(question_id: str, turn: int) -> str:
    """The prompt id of turn ``turn`` (1-based) of a question: ``<question_id>#t<turn>``."""
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise ValueError(f"`turn` must be a positive integer (got {turn!r})")
    return f"{question_id}#t{turn}"


def _turns(question: Prompt) -> tuple[str, ...]:
    """A question's user turns (a prompt without ``turns`` is one turn: its last message)."""
    return question.turns or (question.messages[-1]["content"],)


def turn_messages(
    question: Prompt, turn: int, answers: Sequence[str]
) -> tuple[dict[str, str], ...]:
    """What turn ``turn`` of ``question`` sends: user t1, assistant a1, …, user t``turn``.

    ``answers`` are the question's answers to the earlier turns, in order (more are
    ignored); fewer than ``turn - 1`` raise ``ValueError``.
    """
    turns = _turns(question)
    if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= len(turns):
        raise ValueError(f"`turn` must be in 1..{len(turns)} for {question.id!r} (got {turn!r})")
    if len(answers) < turn - 1:
        raise ValueError(
            f"turn {turn} of {question.id!r} needs {turn - 1} earlier answer(s), got {len(answers)}"
        )
    out: list[dict[str, str]] = []
    for k in range(turn - 1):
        out += [{"role": "user", "content": turns[k]}, {"role": "assistant", "content": answers[k]}]
    out.append({"role": "user", "content": turns[turn - 1]})
    return tuple(out)


def _turn_prompt(question: Prompt, turn: int, answers: Sequence[str]) -> Prompt:
    return Prompt(
        id=turn_prompt_id(question.id, turn),
        messages=turn_messages(question, turn, answers),
        category=question.category,
        turns=question.turns,
        turn=turn,
    )


def history_prompts(
    questions: Sequence[Prompt], turn: int, answers: Mapping[str, Sequence[str]]
) -> list[Prompt]:
    """The prompts that ask for the answers of turn ``turn``: one per question that has a
    later turn (a last turn's answer is never history), with the earlier ``answers``."""
    return [
        _turn_prompt(q, turn, answers.get(q.id, ())) for q in questions if len(_turns(q)) > turn
    ]


def expand_turns(questions: Sequence[Prompt], answers: Mapping[str, Sequence[str]]) -> list[Prompt]:
    """One prompt per turn of every question, question by question and turn by turn within
    one (``q1#t1``, ``q1#t2``, ``q2#t1``, …); each carries its ``turn`` and its question's
    category. ``answers[qid]`` are the question's earlier answers (at least one fewer than
    its turns)."""
    out = []
    for q in questions:
        mine = answers.get(q.id, ())
        out += [_turn_prompt(q, k, mine) for k in range(1, len(_turns(q)) + 1)]
    return out


def sent_prompt_count(questions: Sequence[Prompt], workload: WorkloadSection) -> int:
    """Prompts a block sends per load level and repeat: one per question, or one per turn
    of every question with ``workload.multi_turn``."""
    if not workload.multi_turn:
        return len(questions)
    return sum(len(_turns(q)) for q in questions)


def write_turn_history(path: str | os.PathLike[str], answers: Sequence[TurnAnswer]) -> None:
    """Write the history as one JSON line per answer, whole or not at all (a temporary
    file renamed), so a crash never leaves a partial history for a later block to read."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    text = "".join(json.dumps(a.to_json(), ensure_ascii=False) + "\n" for a in answers)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_turn_history(path: str | os.PathLike[str]) -> list[TurnAnswer]:
    """Every answer of a ``turn_history.jsonl``; :class:`TurnHistoryError` naming the file and
    line of a malformed one."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TurnHistoryError(f"{path}: cannot read the turn history: {exc.strerror}") from None
    out = []
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TurnHistoryError(f"{path}:{no}: not valid JSON ({exc.msg})") from None
        out.append(TurnAnswer.from_json(data, f"{path}:{no}"))
    return out


def history_answers(
    history: Sequence[TurnAnswer], questions: Sequence[Prompt], *, source: str = "history"
) -> dict[str, list[str]]:
    """Each question's earlier answers in turn order, checked to cover every turn but its
    last; :class:`TurnHistoryError` naming ``source`` and the first answer missing."""
    by_key = {(a.question_id, a.turn): a.answer for a in history}
    out: dict[str, list[str]] = {}
    for q in questions:
        needed = range(1, len(_turns(q)))
        missing = [k for k in needed if (q.id, k) not in by_key]
        if missing:
            raise TurnHistoryError(
                f"{source}: no answer to turn {missing[0]} of question {q.id!r}: the history "
                "does not match this run's questions"
            )
        out[q.id] = [by_key[(q.id, k)] for k in needed]
    return out


class _HasWorkload(Protocol):
    @property
    def workload(self) -> WorkloadSection: ...

    def resolve_path(self, value: str) -> Path: ...


def measured_prompts(params: _HasWorkload, run_dir: str | os.PathLike[str]) -> list[Prompt]:
    """The prompts a run's measured records were sent: the workload's prompts, or with
    ``workload.multi_turn`` one per turn with the history in the run folder's
    ``turn_history.jsonl`` (:class:`TurnHistoryError` when it is missing or short)."""
    questions = list(workload_prompts(params).prompts)
    if not params.workload.multi_turn:
        return questions
    path = RunDir.at(run_dir).turn_history
    answers = history_answers(read_turn_history(path), questions, source=str(path))
    return expand_turns(questions, answers)
