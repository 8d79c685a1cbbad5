"""The final word (speclib/analysis/verdict/final_word.py): made once, from the TPOT
decision, the gates, a failure, the unknown correctness and the segments, in the documented
order; checked on every pair of inputs that compete."""

from __future__ import annotations

import itertools

import pytest

from speclib.analysis.verdict.final_word import FINAL_GATES, final_word
from speclib.analysis.verdict.gates import GateResult
from speclib.core.reasons import Code, Reason, codes_of
from speclib.core.verdict_words import GATED, RULE_WORDS, Word
from tests.intervals import decision_of

pytestmark = pytest.mark.unit

FAILURE = Reason(Code.ARM_FAILED, {"arm": "spec", "cause": "OSError: no model"})
UNSCORED = Reason(Code.UNSCORED)
MIXED = Reason(Code.MIXED, {"arm": "spec"})
UNEVEN = Reason(Code.UNEVEN, {"arm": "spec"})
DETAIL = Reason(Code.NO_DF)


def gate(name: str, status: str) -> GateResult:
    return GateResult(name, status, DETAIL)


BENCH_FAILS, ERRORS_FAIL = gate("bench", "fail"), gate("errors", "fail")
TTFT_UNKNOWN, E2E_PASSES = gate("ttft", "not assessed"), gate("e2e", "pass")


@pytest.mark.parametrize("tpot", [str(w) for w in RULE_WORDS])
def test_without_failure_gate_or_segment_the_word_is_the_rules(tpot):
    verdict = final_word(decision_of(tpot), gates=[E2E_PASSES])
    assert verdict.word == tpot and codes_of(verdict.reasons) == [verdict.tpot_decision.reason.code]


def test_a_failure_wins_over_everything_and_lists_no_gate():
    verdict = final_word(decision_of("adopt"), gates=[BENCH_FAILS, ERRORS_FAIL],
                         failure=FAILURE, correctness_unknown=UNSCORED, segments=MIXED)  # fmt: skip
    assert verdict.word == Word.FAILED and verdict.reasons == (FAILURE,) and verdict.gates == ()


def test_a_failed_bench_gate_wins_over_every_other_gate():
    verdict = final_word(decision_of("adopt"), gates=[ERRORS_FAIL, BENCH_FAILS], segments=MIXED)
    assert verdict.word == Word.UNTRUSTWORTHY
    failed = [r["gate"] for r in verdict.reasons if r.code is Code.GATE_FAILED]
    assert failed == ["errors", "bench"]  # in the gates' order
    assert Code.MIXED not in codes_of(verdict.reasons)  # a segment never overrides a gate


def test_a_failed_gate_rejects_and_rules_adoption_out():
    adopt = final_word(decision_of("adopt"), gates=[ERRORS_FAIL, TTFT_UNKNOWN],
                       correctness_unknown=UNSCORED)  # fmt: skip
    assert adopt.word == Word.REJECT
    assert codes_of(adopt.reasons) == [Code.RULE_ADOPT, Code.GATE_FAILED, Code.GATE_NOT_ASSESSED,
                                       Code.ADOPT_RULED_OUT]  # fmt: skip
    worse = final_word(decision_of("worse"), gates=[ERRORS_FAIL])
    assert worse.word == Word.REJECT and Code.ADOPT_RULED_OUT not in codes_of(worse.reasons)


def test_unknown_correctness_turns_only_adopt_into_inconclusive():
    adopt = final_word(decision_of("adopt"), correctness_unknown=UNSCORED)
    assert adopt.word == Word.INCONCLUSIVE
    said = adopt.reasons[-1]
    assert said.code is Code.CORRECTNESS_UNKNOWN and said["why"] == UNSCORED
    for word in ("equivalent", "worse", "inconclusive"):
        assert final_word(decision_of(word), correctness_unknown=UNSCORED).word == word


def test_mixed_is_said_over_an_ungated_word_and_uneven_keeps_the_word():
    for word in RULE_WORDS:
        verdict = final_word(decision_of(str(word)), segments=MIXED)
        assert verdict.word == Word.MIXED and verdict.reasons[-1] == MIXED
    unscored = final_word(decision_of("adopt"), correctness_unknown=UNSCORED, segments=MIXED)
    assert unscored.word == Word.MIXED  # the segments name who gains, whatever the pooled word
    uneven = final_word(decision_of("adopt"), segments=UNEVEN)
    assert uneven.word == Word.ADOPT and uneven.reasons[-1] == UNEVEN


def test_a_gate_not_assessed_never_changes_the_word():
    for word in RULE_WORDS:
        verdict = final_word(decision_of(str(word)), gates=[TTFT_UNKNOWN, E2E_PASSES])
        assert verdict.word == word
        assert [r["gate"] for r in verdict.reasons if r.code is Code.GATE_NOT_ASSESSED] == ["ttft"]


@pytest.mark.parametrize(
    ("failure", "bench", "gate_fails", "segments", "unscored"),
    list(itertools.product([False, True], repeat=5)),
)
def test_the_order_holds_for_every_combination(failure, bench, gate_fails, segments, unscored):
    gates = [g for g, on in ((BENCH_FAILS, bench), (ERRORS_FAIL, gate_fails)) if on]
    verdict = final_word(
        decision_of("adopt"),
        gates=gates,
        failure=FAILURE if failure else None,
        correctness_unknown=UNSCORED if unscored else None,
        segments=MIXED if segments else None,
    )
    expected = (
        Word.FAILED if failure
        else Word.UNTRUSTWORTHY if bench
        else Word.REJECT if gate_fails
        else Word.MIXED if segments
        else Word.INCONCLUSIVE if unscored
        else Word.ADOPT
    )  # fmt: skip
    assert verdict.word == expected
    assert (verdict.word in GATED) is (failure or bench or gate_fails)


def test_the_gates_final_at_a_look_are_the_mode_and_the_bench():
    assert FINAL_GATES == ("mode", "bench")
    with pytest.raises(ValueError, match="`tpot`"):
        final_word("adopt")  # type: ignore[arg-type]
