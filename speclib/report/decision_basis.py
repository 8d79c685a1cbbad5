"""On what a run's verdicts were decided, from its summary.

Three facts change how far a verdict can be trusted, and every output that shows a verdict
from a summary (``compare``'s table, ``analyze --json``) says them: the records were not
whole and the run was decided on what was there (``--allow-incomplete``), the rule was
changed after the run (``analyze --params``), the verdict is for a traffic mix
(``workload.mix`` or ``analyze --mix``) rather than the prompts as sent.
:func:`decision_basis` reads them from the typed summary
(:class:`~speclib.core.run_summary.RunSummary`: its ``integrity``, ``redecision`` and
``answer.mix`` entries, never its English); the report renders the same facts from the
analysis itself (:mod:`speclib.report.record_notice`), the terminal's lines under the
table from the summary (:func:`speclib.app.verdicts.record_lines`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speclib.core.run_summary import RunSummary

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
    mix: Mapping[str, Any] | None = None

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
            "mix": dict(_share_map(self.mix)) if self.mix else None,
        }

    def short(self) -> str:
        """``compare``'s cell: ``incomplete records (2); re-decided: analysis.margin; mix``
        (empty for the run's own whole decision)."""
        parts = []
        if self.incomplete:
            parts.append(f"incomplete records ({len(self.incomplete)})")
        if self.redecided_with:
            fields = ", ".join(f for f, _, _ in self.changed) or "same rule"
            parts.append(f"re-decided: {fields}")
        if self.mix:
            parts.append(f"mix {_shares(self.mix)}")
        return "; ".join(parts)


def _share_map(mix: Mapping[str, Any]) -> Mapping[str, Any]:
    """A mix's shares by category; a mix recorded as a record (summary.json's ``mix``:
    ``shares``, ``run_shares``, ``left_out``, ``text``) is read through its ``shares``."""
    return mix["shares"] if isinstance(mix.get("shares"), Mapping) else mix


def _shares(mix: Mapping[str, Any]) -> str:
    """``fresh=0.8, echo=0.2`` for a mix of shares."""
    return ", ".join(
        f"{k}={v:g}" if isinstance(v, int | float) else str(k) for k, v in _share_map(mix).items()
    )


def decision_basis(summary: RunSummary) -> DecisionBasis:
    """The :class:`DecisionBasis` of a summary (one written before these entries existed
    reads as the run's own whole decision)."""
    found = summary.integrity
    change = summary.redecision
    mix = summary.answer.mix if summary.answer is not None else None
    return DecisionBasis(
        incomplete=tuple(found.missing) if not found.whole else (),
        records_only=found.records_only,
        redecided_with=change.params_file if change is not None else None,
        changed=tuple((c.field, c.run, c.now) for c in change.changed) if change else (),
        mix=dict(mix) if mix else None,
    )
