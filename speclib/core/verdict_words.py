"""The verdict's words: the one enumeration of what a verdict can say, and where an interval lies.

A verdict word is data from the rule to the renderer: :class:`Word` is every word the kit
says of an arm at a load, and its value is the string ``summary.json`` holds
(``Word.ADOPT == "adopt"``), so summaries written before the enumeration read unchanged.
The rule on an interval (:func:`speclib.analysis.stats.margin_rule.classify`) says one of
:data:`RULE_WORDS`; the final word
(:func:`speclib.analysis.verdict.final_word.final_word`) may also say one of
:data:`GATED` or :attr:`Word.MIXED`, in the order that function documents. :class:`Side`
is where an interval lies against 1 (the "measurably slower / faster" of an
"equivalent"). The words in sentences are written by :mod:`speclib.core.reason_text`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DECISIVE", "FALSE_EFFECT", "GATED", "RULE_WORDS", "Side", "Word"]


class Word(StrEnum):
    """A verdict word (the value is its string in ``summary.json``)."""

    ADOPT = "adopt"
    """The interval's upper bound is below ``1 − δ``: time per token cut by more than δ."""
    EQUIVALENT = "equivalent"
    """The interval lies inside ``(1 − δ, 1 + δ)``."""
    WORSE = "worse"
    """The interval's lower bound is above 1: slower than the control."""
    INCONCLUSIVE = "inconclusive"
    """No rule applies (or an "adopt" whose outputs' correctness is unknown)."""
    REJECT = "reject"
    """A gate failed (errors, outputs, memory, TTFT, E2E, the mode)."""
    UNTRUSTWORTHY = "untrustworthy"
    """The bench cannot be trusted (the A/A arm showed an effect, a bench check failed)."""
    FAILED = "failed"
    """Every launch of the arm failed: nothing was measured."""
    MIXED = "mixed"
    """One segment of the traffic gains while another loses or gains nothing."""


RULE_WORDS = (Word.ADOPT, Word.EQUIVALENT, Word.WORSE, Word.INCONCLUSIVE)
"""What the rule says of an interval against δ."""
DECISIVE = (Word.ADOPT, Word.EQUIVALENT, Word.WORSE)
"""The rule's words that settle a comparison (a Holm step, a look)."""
GATED = (Word.REJECT, Word.UNTRUSTWORTHY, Word.FAILED)
"""Words a gate, the bench or a failure gives: no segment overrides them."""
FALSE_EFFECT = (Word.ADOPT, Word.WORSE)
"""The rule's words that, on the A/A arm (no effect by construction), show a false effect."""


class Side(StrEnum):
    """Where an interval of a ratio lies against 1."""

    BELOW_ONE = "below_one"
    """Its upper bound is below 1: measurably faster."""
    COVERS_ONE = "covers_one"
    """It holds 1."""
    ABOVE_ONE = "above_one"
    """Its lower bound is above 1: measurably slower."""
