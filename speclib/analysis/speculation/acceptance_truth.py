"""The acceptance vLLM reported, held against the truth of a synthetic draft.

For a launch whose draft was built by the kit (:mod:`speclib.run.synthetic_truth` wrote what that
draft must accept on the launch's outputs into its ``status.json``), :func:`truth_rows`
puts side by side, per draft position: the acceptance from the launch's ``/metrics``
deltas, the exact expectation on those outputs, and the pair's declared acceptance
(agreement ** i). A measured mean acceptance length within :data:`TOLERANCE` of the exact
one, and each position's acceptance within :data:`TOLERANCE` of its exact one (relative),
says the kit's acceptance instrument is right on this stack; a miss says it is not, or
that vLLM drafts differently from what the kit replays. The same holds for a draft model,
an EAGLE-3 head and an MTP layer (whose truth the target's folder declares).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TOLERANCE", "truth_rows", "truth_summary"]

TOLERANCE = 0.03  # relative, on the mean acceptance length


def _rate(accepted: Sequence[int], drafts: int) -> list[float] | None:
    return [a / drafts for a in accepted] if drafts else None


def truth_rows(
    statuses: Sequence[Mapping[str, Any]], metrics: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One row per launch that has a truth and a ``/metrics`` acceptance (``metrics``: the
    summary's ``launch_metrics`` entries)."""
    by_launch = {m.get("launch_id"): m for m in metrics}
    rows = []
    for status in statuses:
        truth = (status.get("extra") or {}).get("acceptance_truth")
        if not truth or "error" in truth:
            continue
        spec = (by_launch.get(status.get("launch_id")) or {}).get("spec") or {}
        if not spec.get("present") or not spec.get("num_drafts"):
            continue
        expected, declared = truth["expected"], truth["declared"]
        measured_len = 1 + sum(spec["accepted_per_pos"]) / spec["num_drafts"]
        want = expected["mean_acceptance_length"]
        error = (measured_len - want) / want if want else None
        measured_pos = _rate(spec["accepted_per_pos"], spec["num_drafts"])
        position_errors = _position_errors(measured_pos, expected["acceptance_per_position"])
        rows.append(
            {
                "launch_id": status.get("launch_id"),
                "series": status.get("series"),
                "k": truth["k"],
                "agreement": truth["agreement"],
                "measured_per_position": measured_pos,
                "expected_per_position": expected["acceptance_per_position"],
                "declared_per_position": declared["acceptance_per_position"],
                "measured_drafts": spec["num_drafts"],
                "expected_drafts": expected["num_drafts"],
                "measured_mean_length": measured_len,
                "expected_mean_length": want,
                "declared_mean_length": declared["mean_acceptance_length"],
                "relative_error": error,
                "within": error is not None and abs(error) <= TOLERANCE,
                "position_errors": position_errors,
                "within_per_position": bool(position_errors)
                and all(e is not None and abs(e) <= TOLERANCE for e in position_errors),
            }
        )
    return rows


def _position_errors(
    measured: Sequence[float] | None, expected: Sequence[float | None]
) -> list[float | None]:
    """Each position's measured acceptance relative to its exact one (None where the exact
    one is 0 or unknown, or the positions do not line up)."""
    if measured is None or len(measured) != len(expected):
        return []
    return [(m - e) / e if e else None for m, e in zip(measured, expected, strict=True)]


def truth_summary(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One line for the report and the terminal (None without a synthetic draft)."""
    if not rows:
        return None
    worst = max(rows, key=lambda r: abs(r["relative_error"] or 0.0))
    n_ok = sum(bool(r["within"]) for r in rows)
    verdict = "matches" if n_ok == len(rows) else "does NOT match"
    line = (
        f"{verdict} the synthetic pair's truth on {n_ok}/{len(rows)} launches (mean length "
        f"±{TOLERANCE:.0%}): worst {worst['series']} {worst['measured_mean_length']:.3f} vs "
        f"{worst['expected_mean_length']:.3f} ({worst['relative_error']:+.1%}), declared "
        f"{worst['declared_mean_length']:.3f}"
    )
    errors = [
        (abs(e), r["series"], i + 1)
        for r in rows
        for i, e in enumerate(r.get("position_errors") or [])
        if e is not None
    ]
    if errors:
        size, series, position = max(errors)
        n_pos = sum(bool(r.get("within_per_position")) for r in rows)
        line += (
            f"; per position within ±{TOLERANCE:.0%} on {n_pos}/{len(rows)} launches, "
            f"worst {series} position {position} ({size:.1%} off)"
        )
    return line
