"""The rule on an interval against δ (speclib/analysis/stats/margin_rule.py): its words, the
side of 1, validation, and the rule read backwards."""

from __future__ import annotations

import math

import pytest

from speclib.analysis.stats.margin_rule import classify, decision_distance, side_of
from speclib.core.verdict_words import Side, Word

pytestmark = pytest.mark.unit

MARGIN = 0.05


@pytest.mark.parametrize(
    ("low", "high", "word", "side"),
    [
        (0.70, 0.90, Word.ADOPT, Side.BELOW_ONE),
        (0.96, 1.04, Word.EQUIVALENT, Side.COVERS_ONE),
        (1.01, 1.04, Word.EQUIVALENT, Side.ABOVE_ONE),  # measurably slower, within δ
        (0.96, 0.99, Word.EQUIVALENT, Side.BELOW_ONE),  # measurably faster, by less than δ
        (1.01, 1.20, Word.WORSE, Side.ABOVE_ONE),
        (0.90, 1.10, Word.INCONCLUSIVE, Side.COVERS_ONE),
        (0.0, math.inf, Word.INCONCLUSIVE, Side.COVERS_ONE),
        (0.90, 0.96, Word.INCONCLUSIVE, Side.BELOW_ONE),  # reaches 1 − δ: neither rule
    ],
)
def test_each_word_and_side(low, high, word, side):
    found = classify(low, high, margin=MARGIN)
    assert (found.word, found.side) == (word, side)
    assert side_of(low, high) == side


def test_the_words_are_summary_strings():
    assert Word.ADOPT == "adopt" and f"{Word.MIXED}" == "mixed"
    assert {Word.WORSE: 1}["worse"] == 1


@pytest.mark.parametrize(
    ("low", "high", "margin", "name"),
    [(0.9, 1.1, 0, "`margin`"), (0.9, 1.1, 1.0, "`margin`"), (1.1, 0.9, MARGIN, "`low`"),
     (-0.1, 0.9, MARGIN, "`low`"), (math.nan, 1.0, MARGIN, "`low`"), ("a", 1.0, MARGIN, "`low`")],
)  # fmt: skip
def test_inputs_are_validated(low, high, margin, name):
    with pytest.raises(ValueError, match=name):
        classify(low, high, margin=margin)


def test_read_backwards():
    assert decision_distance(0.8, margin=MARGIN) == (
        pytest.approx(math.log(0.95 / 0.8)),
        Word.ADOPT,
    )
    assert decision_distance(1.0, margin=MARGIN)[1] == Word.EQUIVALENT
    assert decision_distance(1.2, margin=MARGIN) == (pytest.approx(math.log(1.2)), Word.WORSE)
    assert decision_distance(1 - MARGIN, margin=MARGIN) is None  # no width decides at 1 − δ
    with pytest.raises(ValueError, match="`estimate`"):
        decision_distance(-1.0, margin=MARGIN)
