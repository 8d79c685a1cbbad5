"""On what a run's verdicts were decided, read back from its ``summary.json``.

Three facts change how far a verdict can be trusted, and every output that shows a verdict
from a summary (``compare``'s table, ``analyze --json``, the lines under the terminal's
table) says them: the records were not whole and the run was decided on what was there
(``--allow-incomplete``), the rule was changed after the run (``analyze --params``), the
verdict is for a traffic mix (``workload.mix`` or ``analyze --mix``) rather than the
prompts as sent. :func:`decision_basis` is the one place they are read from a summary's
``integrity``, ``redecision`` and ``answer.mix`` entries (never from its English); the
report renders the same facts from the analysis itself
(:mod:`speclib.report.record_notice`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DecisionBasis", "decision_basis"]


@dataclass(frozen=True)
class DecisionBasis:
    """How a summary's verdicts were decided: ``incomplete`` the problems of records
    decided with ``--allow-incomplete`` (empty: whole); ``records_only`` no launch evidence;
    ``redecided_with`` the params file of a re-decision (None: the run's own rule) and
    ``changed`` its fields (``field``, the run's value, the value applied); ``mix`` the
    traffic mix the verdicts are for (None: the prompts as sent)."""

    incomplete: tuple[str, ...] = ()
    records_only: bool = False
    redecided_with: str | None = None
    changed: tuple[tuple[str, Any, Any], ...] = ()
    mix: Mapping[str, float] | None = None

    @property
    def own(self) -> bool:
        """The run's own whole records, its own rule, the prompts as sent."""
        return not (self.incomplete or self.redecided_with or self.mix)

    def to_dict(self) -> dict[str, Any]:
        """The ``decided_on`` entry of ``analyze --json``."""
        return {
            "incomplete_records": list(self.incomplete),
            "records_only": self.records_only,
            "redecided_with": self.redecided_with,
            "changed": [{"field": f, "run": old, "now": new} for f, old, new in self.changed],
            "mix": dict(self.mix) if self.mix else None,
        }

    def short(self) -> str:
        """``compare``'s cell: ``incomplete records (2); re-decided: analysis.margin;
        mix fresh=0.8, echo=0.2`` (empty for the run's own whole decision)."""
        parts = []
        if self.incomplete:
            parts.append(f"incomplete records ({len(self.incomplete)})")
        if self.redecided_with:
            fields = ", ".join(f for f, _, _ in self.changed) or "same rule"
            parts.append(f"re-decided: {fields}")
        if self.mix:
            parts.append("mix " + ", ".join(f"{k}={v:g}" for k, v in self.mix.items()))
        return "; ".join(parts)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def decision_basis(summary: Mapping[str, Any]) -> DecisionBasis:
    """The :class:`DecisionBasis` of a ``summary.json`` (a summary written before these
    entries existed reads as the run's own whole decision)."""
    summary = _mapping(summary)
    found = _mapping(summary.get("integrity"))
    incomplete = (
        tuple(str(p) for p in found.get("missing") or ()) if not found.get("whole", True) else ()
    )
    change = _mapping(summary.get("redecision"))
    changed = tuple(
        (str(c.get("field")), c.get("run"), c.get("now"))
        for c in change.get("changed") or ()
        if isinstance(c, Mapping)
    )
    mix = _mapping(summary.get("answer")).get("mix")
    return DecisionBasis(
        incomplete=incomplete,
        records_only=bool(found.get("records_only")),
        redecided_with=str(change["params_file"]) if change.get("params_file") else None,
        changed=changed,
        mix=dict(mix) if isinstance(mix, Mapping) and mix else None,
    )
