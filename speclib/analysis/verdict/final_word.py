"""The final word of an arm at a load: the one function that makes it, in a fixed order.

What an arm is comes from five inputs, each computed elsewhere and none of them a word
that another overwrites: the TPOT rule's :class:`~speclib.analysis.verdict.decision.Decision`,
the gates' results (:mod:`speclib.analysis.verdict.gates`; each "pass", "fail" or "not
assessed"), a failure (every launch of the arm failed: :mod:`speclib.analysis.verdict.
run_rules`), why the outputs' correctness is unknown (a sampled run not scored), and the
segments' reason (:mod:`speclib.analysis.verdict.answer`: "mixed", or an "uneven" adopt).
:func:`final_word` weighs them in this order, the first that applies giving the word:

1. **failed** – every launch of the arm failed: nothing was measured (its cause is the one
   reason; no gate is listed);
2. **untrustworthy** – the bench gate failed (the A/A arm showed an effect, or a bench
   check that gates failed): the bench cannot tell an effect from noise;
3. **reject** – any other gate failed (errors, outputs, memory, TTFT, E2E, the mode);
4. **mixed** – the segments name one that gains and one that loses or gains nothing (the
   answer only says so when 1–3 do not apply);
5. **inconclusive** – the outputs' correctness is unknown and the TPOT word is "adopt";
6. the TPOT rule's word.

A gate "not assessed" never changes the word; it adds a reason. The reasons are the TPOT
rule's, then each failed gate, each gate not assessed, the correctness (when it changed the
word), "adoption ruled out" (a failed gate over a TPOT "adopt"), and the segments' reason.
The look of a run until decided reads the same function with the gates that are final at a
look (:data:`FINAL_GATES`; :mod:`speclib.analysis.verdict.still_open`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from speclib.analysis.verdict.decision import Decision
from speclib.analysis.verdict.gates import (
    BenchGate,
    Gate,
    GateEvidence,
    GateResult,
    assess_gates,
)
from speclib.core.jsonutil import jsonable
from speclib.core.reasons import Code, Reason
from speclib.core.verdict_words import GATED, Word

__all__ = ["FINAL_GATES", "Verdict", "apply_gates", "final_word"]

FINAL_GATES = ("mode", "bench")
"""Gates whose failure more blocks would not undo: a launch in the wrong mode, an
untrustworthy bench. The others are weighed once, on every block, after the stop."""


@dataclass(frozen=True)
class Verdict:
    """The final word for one arm at one load, the reasons behind it (each a
    :class:`~speclib.core.reasons.Reason`), the TPOT decision it started from and every gate
    checked."""

    word: Word
    reasons: tuple[Reason, ...]
    tpot_decision: Decision
    gates: tuple[GateResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


def final_word(
    tpot: Decision,
    *,
    gates: Sequence[GateResult] = (),
    failure: Reason | None = None,
    correctness_unknown: Reason | None = None,
    segments: Reason | None = None,
) -> Verdict:
    """The :class:`~speclib.analysis.verdict.gates.Verdict` of one arm at one load: its word
    and reasons, in the order of the module docstring, with ``tpot`` and ``gates``
    (none for a failed arm)."""
    if not isinstance(tpot, Decision):
        raise ValueError(f"`tpot` must be a Decision (got {type(tpot).__name__})")
    if failure is not None:
        return Verdict(Word.FAILED, (failure,), tpot, ())
    failed = [g for g in gates if g.failed]
    unknown = [g for g in gates if g.status == "not assessed"]
    reasons = [
        tpot.reason,
        *(Reason(Code.GATE_FAILED, {"gate": g.name, "detail": g.reason}) for g in failed),
        *(Reason(Code.GATE_NOT_ASSESSED, {"gate": g.name, "detail": g.reason}) for g in unknown),
    ]
    if any(g.name == BenchGate.name for g in failed):
        word = Word.UNTRUSTWORTHY
    elif failed:
        word = Word.REJECT
    elif correctness_unknown is not None and tpot.word == Word.ADOPT:
        word = Word.INCONCLUSIVE
        reasons.append(Reason(Code.CORRECTNESS_UNKNOWN, {"why": correctness_unknown}))
    else:
        word = tpot.word
    if failed and tpot.word == Word.ADOPT:
        reasons.append(Reason(Code.ADOPT_RULED_OUT))
    if segments is not None and word not in GATED:
        word = Word.MIXED if segments.code is Code.MIXED else word
        reasons.append(segments)
    return Verdict(word, tuple(reasons), tpot, tuple(gates))


def apply_gates(decision: Decision, evidence: GateEvidence, gates: Sequence[Gate]) -> Verdict:
    """The final word of ``decision`` under ``gates``, each assessing ``evidence``
    (:func:`~speclib.analysis.verdict.gates.assess_gates`), with the evidence's unknown
    correctness; no failure, no segments (see :func:`final_word`)."""
    return final_word(decision, gates=assess_gates(evidence, gates),
                      correctness_unknown=evidence.correctness_unknown)  # fmt: skip
