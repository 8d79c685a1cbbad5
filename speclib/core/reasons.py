"""Why a verdict says what it says, as data: a code and its numbers.

Every reason the kit gives for a verdict, a gate, an interval's note or a bench check is a
frozen :class:`Reason`: one :class:`Code` and the values its sentence needs (ratios,
bounds, levels, counts, names; a value may be another :class:`Reason`, as a failed gate's
reason holds the gate's own). The analysis makes them; nothing reads their words back:
whatever needs to know why a verdict is what it is reads the code and the values, and
:mod:`speclib.core.reason_text` is the one place that turns them into terminal, HTML or
Markdown text. ``summary.json`` holds both: the words (``reasons``, ``detail``, ``text``)
for people and older readers, and the data (``reason_codes``, ``reason``) for readers.

Example::

    r = Reason(Code.GATE_FAILED, {"gate": "ttft", "detail": ttft_reason})
    r.code is Code.GATE_FAILED and r["gate"] == "ttft"
    render(r)  # "gate 'ttft' failed: TTFT ratio 1.210 (95% CI …"
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from speclib.core.jsonutil import jsonable

__all__ = ["Code", "Reason", "codes_of"]


class Code(StrEnum):
    """What a reason says (the value is its name in ``summary.json``). Each member's
    sentence, and the values it reads, are in :mod:`speclib.core.reason_text`."""

    # the rule on the TPOT interval (speclib/analysis/verdict/decision.py)
    RULE_ADOPT = "rule_adopt"
    RULE_EQUIVALENT = "rule_equivalent"
    RULE_WORSE = "rule_worse"
    RULE_INCONCLUSIVE = "rule_inconclusive"
    NO_VALID_PAIRS = "no_valid_pairs"
    # a segment without its own decision (speclib/analysis/verdict/segments.py)
    SEGMENT_UNDECIDED = "segment_undecided"
    # an interval's note (speclib/analysis/stats/)
    NO_DF = "no_df"
    ZERO_WIDTH = "zero_width"
    MIX_BLOCKS = "mix_blocks"
    TOO_FEW = "too_few"
    ONE_PAIR = "one_pair"
    PERCENTILE_EXPANDED = "percentile_expanded"
    BCA_FEW_PAIRS = "bca_few_pairs"
    BCA_ALL_EQUAL = "bca_all_equal"
    BCA_HEAVY_TIES = "bca_heavy_ties"
    BCA_NOT_FINITE = "bca_not_finite"
    # a gate's evidence (speclib/analysis/verdict/gates.py)
    ERRORS_UNCOUNTED = "errors_uncounted"
    ERRORS_NONE_SENT = "errors_none_sent"
    ERRORS_BOUNDS = "errors_bounds"
    OUTPUTS = "outputs"
    MEMORY = "memory"
    LATENCY = "latency"
    TTFT_LAG = "ttft_lag"
    MODE_EXCLUDED = "mode_excluded"
    BENCH_CHECKS_FAILED = "bench_checks_failed"
    AA_FALSE_EFFECT = "aa_false_effect"
    UNSCORED = "unscored"
    # the final word (speclib/analysis/verdict/final_word.py)
    GATE_FAILED = "gate_failed"
    GATE_NOT_ASSESSED = "gate_not_assessed"
    CORRECTNESS_UNKNOWN = "correctness_unknown"
    ADOPT_RULED_OUT = "adopt_ruled_out"
    ARM_FAILED = "arm_failed"
    MIXED = "mixed"
    UNEVEN = "uneven"
    # what a comparison left out (speclib/analysis/verdict/comparisons.py)
    PAIRS_LEFT_OUT = "pairs_left_out"
    INSTRUMENT_SENSITIVITY = "instrument_sensitivity"
    # the A/A arm as a bench check, a calibration (speclib/analysis/verdict/resolution.py)
    BENCH_CHECK = "bench_check"
    BENCH_RESOLUTION = "bench_resolution"
    CALIBRATION = "calibration"
    # a sweep family's recommended value (speclib/analysis/load/recommend.py)
    SWEEP_RECOMMENDED = "sweep_recommended"
    SWEEP_NO_K_PAYS = "sweep_no_k_pays"
    SWEEP_UNDECIDED = "sweep_undecided"
    SWEEP_NO_DATA = "sweep_no_data"


@dataclass(frozen=True)
class Reason:
    """One reason: its :class:`Code` and the values its sentence reads (``r["ratio"]``)."""

    code: Code
    values: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __contains__(self, key: object) -> bool:
        return key in self.values

    def get(self, key: str, default: Any = None) -> Any:
        """The value ``key``, or ``default``."""
        return self.values.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        """``{"code", "values"}``, JSON-safe (a nested reason as its own mapping; a
        non-finite number as ``"inf"``, ``"-inf"`` or ``"nan"``, so that the words rendered
        from the data read back are the words rendered before)."""
        return {"code": str(self.code), "values": jsonable(_finite(dict(self.values)))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reason:
        """The inverse of :meth:`to_dict` (nested reasons included); a ValueError naming
        the code when it is not one of :class:`Code`."""
        try:
            code = Code(data["code"])
        except (KeyError, ValueError):
            raise ValueError(f"not a reason code: {data.get('code')!r}") from None
        return cls(code, {k: _value(v) for k, v in (data.get("values") or {}).items()})


_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float written as its name (see :meth:`Reason.to_dict`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _value(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) == {"code", "values"}:
        return Reason.from_dict(value)
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    return value


def codes_of(reasons: Any) -> list[Code]:
    """The codes of ``reasons`` (a sequence of :class:`Reason`), in order."""
    return [r.code for r in reasons]
