"""The history of a multi-turn run: the control's greedy answers to the earlier turns,
generated once and fed to every arm of every block.

Turn 2 of a question depends on the answer to turn 1; if each arm answered for itself, the
arms would be measured on different inputs. So the first block that runs with a live
control asks it, after the warm-ups and before any measured request, for every earlier
turn's answer: greedy (temperature 0), ``workload.history_tokens`` output tokens, turn by
turn (turn 2's answers need turn 1's), unmeasured, from the kit's own client in its client
worker, as warm-ups are sent, and with a cache salt of their own when prefix caching is on
(the control's cache must not hold the measured turns' prefixes). The answers go to
``RUN_DIR/turn_history.jsonl`` (:mod:`speclib.core.turns`), written whole or not at all;
every later block, and a resumed run, reads that file instead. A failed history request
fails the block (the arms would otherwise get different inputs): a later block with a live
control tries again.

:func:`block_prompts` is what a block measures: the workload's prompts, or one prompt per
turn of every question with the history.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from speclib.core.prompts import Prompt
from speclib.core.records import RequestRecord
from speclib.core.rundir import TURN_HISTORY_FILE, RunDir
from speclib.core.turns import (
    TurnAnswer,
    TurnHistoryError,
    expand_turns,
    history_answers,
    history_prompts,
    read_turn_history,
    sent_prompt_count,
    turn_prompt_id,
    write_turn_history,
)
from speclib.params.experiment import ExperimentParams
from speclib.run.arms import Arm
from speclib.run.launching import api_key
from speclib.run.requests import history_request_specs

__all__ = ["block_prompts", "ensure_history", "generate_history", "history_provenance"]


def history_provenance(params: ExperimentParams, questions: Sequence[Prompt]) -> dict[str, Any]:
    """The manifest's ``multi_turn`` entry: how the history is made (by the control,
    greedy, with which ``max_tokens``), where it is written, and how many prompts the
    questions expand into."""
    return {
        "history_file": TURN_HISTORY_FILE,
        "generated_by": "control",
        "series": params.control_name,
        "temperature": 0.0,
        "max_tokens": params.workload.history_tokens,
        "when": "once, in the first block with a live control, before any measured request",
        "questions": len(questions),
        "prompts": sent_prompt_count(questions, params.workload),
    }


def block_prompts(
    params: ExperimentParams, rd: RunDir, questions: Sequence[Prompt], arms: list[Arm], block: str
) -> list[Prompt]:
    """The prompts a block measures: ``questions`` as they are, or with
    ``workload.multi_turn`` one per turn of each, with the run's history
    (:func:`ensure_history`)."""
    if not params.workload.multi_turn:
        return list(questions)
    return expand_turns(questions, ensure_history(params, rd, questions, arms, block=block))


def ensure_history(
    params: ExperimentParams,
    rd: RunDir,
    questions: Sequence[Prompt],
    arms: list[Arm],
    *,
    block: str,
) -> dict[str, list[str]]:
    """Each question's earlier answers: read from ``turn_history.jsonl`` when a block wrote
    it before, else generated now by this block's control (:func:`generate_history`) and
    written. Raises :class:`TurnHistoryError` when neither is possible."""
    path = rd.turn_history
    if not path.exists():
        control = _live_control(params, arms, block)
        write_turn_history(path, generate_history(params, control, questions, block=block))
    return history_answers(read_turn_history(path), questions, source=str(path))


def _live_control(params: ExperimentParams, arms: list[Arm], block: str) -> Arm:
    for arm in arms:
        if arm.name == params.control_name and arm.start_error is None and arm.alive():
            return arm
    raise TurnHistoryError(
        f"block {block}: workload.multi_turn needs the control's answers to the earlier turns "
        f"and there is no turn history yet, but the control {params.control_name!r} is not "
        "up in this block: no measured request was sent (a later block with the control "
        "generates the history)"
    )


def generate_history(
    params: ExperimentParams, control: Arm, questions: Sequence[Prompt], *, block: str
) -> list[TurnAnswer]:
    """The control's greedy answer to every turn but the last of every question, turn by
    turn; one :class:`TurnAnswer` each, in question order within a turn."""
    answers: dict[str, list[str]] = {q.id: [] for q in questions}
    out: list[TurnAnswer] = []
    turn = 1
    while prompts := history_prompts(questions, turn, answers):
        got = _send(params, control, prompts)
        asked = {turn_prompt_id(q.id, turn): q.id for q in questions}
        for p in prompts:
            qid, rec = asked[p.id], got[p.id]
            answers[qid].append(rec.text)
            out.append(_answer(qid, p, rec, control, block))
        turn += 1
    return out


def _answer(qid: str, p: Prompt, rec: RequestRecord, control: Arm, block: str) -> TurnAnswer:
    return TurnAnswer(
        question_id=qid,
        turn=p.turn or 1,
        messages=p.messages,
        answer=rec.text,
        finish_reason=rec.finish_reason,
        output_tokens=rec.output_tokens,
        series=control.name,
        launch_id=control.lid,
        block=block,
    )


def _send(
    params: ExperimentParams, control: Arm, prompts: list[Prompt]
) -> dict[str, RequestRecord]:
    """Send one turn's history requests to the control; every record by prompt id, or
    :class:`TurnHistoryError` when any failed."""
    from speclib.measure.worker import run_requests_isolated

    salted = params.protocol.cache_policy != "off" or control.external
    specs = history_request_specs(
        prompts,
        params,
        model=control.model,
        cache_salt=f"history-{secrets.token_hex(4)}" if salted else None,
    )
    got: list[RequestRecord] = []
    run_requests_isolated(
        base_url=control.base_url,
        specs=specs,
        concurrency=max(level.concurrency for level in params.workload.levels),
        sink=got.append,
        series=control.name,
        replicate=0,
        launch_id=control.lid,
        phase="history",
        timeout_s=params.workload.request_timeout_s,
        api_key=api_key(params),
    )
    ok = {r.prompt_id: r for r in got if r.ok}
    if len(ok) < len(specs):
        failed = [r for r in got if not r.ok]
        first = failed[0].error if failed else "not sent"
        raise TurnHistoryError(
            f"turn history: {len(specs) - len(ok)} of {len(specs)} requests to the control "
            f"({control.lid}) failed, so the later turns have no history (first: {first})"
        )
    return ok
