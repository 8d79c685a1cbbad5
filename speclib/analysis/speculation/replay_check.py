"""The acceptance vLLM reported, held against a second instrument: a replay outside vLLM.

A ``draft_model`` arm's acceptance per draft position comes from the server's own
``/metrics`` counters. A second instrument counts it outside vLLM
(:mod:`speclib.run.draft_replay`): transformers forward passes of the target and the draft
over the answers the launch served give, at every position, the draft's greedy token and
the target's; greedy speculation then follows from them alone. Each verify step drafts
``k`` tokens after the last accepted one, the draft's i-th token is accepted while it and
every one before it equal the target's, and the step ends with the target's own token
(:func:`greedy_steps`). The counters of a launch and the replay of the same requests must
agree, per position, within :data:`TOLERANCE`; where they do not, the rows say by how much.

This module is the stepping rule and the comparison, both pure: :func:`greedy_steps` counts
one answer's drafts, :func:`replay_rows` puts each launch's counters beside its replay,
:func:`replay_line` says it in one line and :func:`replay_lines` per series for a terminal.
It reads no file and runs no model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "TOLERANCE",
    "greedy_steps",
    "pooled_rows",
    "replay_line",
    "replay_lines",
    "replay_rows",
]

TOLERANCE = 0.03
"""Relative, per draft position and on the mean acceptance length."""


def greedy_steps(matches: Sequence[bool], n_tokens: int, k: int) -> tuple[int, list[int]]:
    """The verify steps and accepted tokens per draft position of one greedy answer.

    ``matches[j]``: whether the draft's greedy token at answer position ``j`` (given the
    prompt and the answer before ``j``) is the target's; it may run past the answer's
    ``n_tokens`` tokens (the target's own continuation), since a last step's drafts are
    verified, and counted, before the server cuts the answer at its stop or ``max_tokens``.
    The first token comes from the prefill; each later step drafts ``k`` tokens. Returns
    (steps, accepted per position).
    """
    if k < 1:
        raise ValueError(f"`k` must be a positive integer (got {k!r})")
    if n_tokens < 0 or n_tokens > len(matches) + 1:
        raise ValueError(f"`n_tokens` must be in 0..{len(matches) + 1} (got {n_tokens!r})")
    steps, per_position = 0, [0] * k
    pos = 0
    while pos < n_tokens - 1:
        run = 0
        while run < k and pos + run + 1 < len(matches) and matches[pos + run + 1]:
            run += 1
        steps += 1
        for i in range(run):
            per_position[i] += 1
        pos += run + 1
    return steps, per_position


def _rates(accepted: Sequence[int], drafts: int) -> list[float] | None:
    return [a / drafts for a in accepted] if drafts else None


def _relative(measured: float | None, replayed: float | None) -> float | None:
    if measured is None or replayed is None or replayed == 0:
        return None
    return (measured - replayed) / replayed


def _row(
    label: Mapping[str, Any], measured: Mapping[str, Any], replayed: Mapping[str, Any]
) -> dict[str, Any]:
    m_drafts, r_drafts = int(measured["num_drafts"]), int(replayed["num_drafts"])
    m_acc, r_acc = list(measured["accepted_per_pos"]), list(replayed["accepted_per_pos"])
    m_rate, r_rate = _rates(m_acc, m_drafts), _rates(r_acc, r_drafts)
    m_len = 1 + sum(m_acc) / m_drafts if m_drafts else None
    r_len = 1 + sum(r_acc) / r_drafts if r_drafts else None
    per_pos = (
        [_relative(a, b) for a, b in zip(m_rate, r_rate, strict=False)] if m_rate and r_rate else []
    )
    errors = [abs(e) for e in [_relative(m_len, r_len), *per_pos] if e is not None]
    worst = max(errors) if errors else None
    return {
        **label,
        "measured_drafts": m_drafts,
        "replayed_drafts": r_drafts,
        "measured_accepted_per_pos": m_acc,
        "replayed_accepted_per_pos": r_acc,
        "measured_per_position": m_rate,
        "replayed_per_position": r_rate,
        "relative_error_per_position": per_pos,
        "measured_mean_length": m_len,
        "replayed_mean_length": r_len,
        "relative_error_mean_length": _relative(m_len, r_len),
        "worst_relative_error": worst,
        "within": worst is not None and worst <= TOLERANCE,
    }


def replay_rows(
    replay: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One row per launch the replay counted and whose ``/metrics`` counted drafts
    (``replay``: the replay file's content; ``metrics``: the summary's ``launch_metrics``)."""
    by_launch = {m.get("launch_id"): m for m in metrics}
    rows = []
    for launch in replay.get("launches") or []:
        spec = (by_launch.get(launch.get("launch_id")) or {}).get("spec") or {}
        if not spec.get("present") or not spec.get("num_drafts"):
            continue
        label = {
            "launch_id": launch["launch_id"],
            "series": launch["series"],
            "k": launch["k"],
            "requests": launch.get("requests"),
            "skipped": launch.get("skipped", 0),
        }
        rows.append(_row(label, spec, launch))
    return rows


def pooled_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The launches of each series summed (counts, not rates), one row per series."""
    out = []
    for series in dict.fromkeys(r["series"] for r in rows):
        mine = [r for r in rows if r["series"] == series]
        k = mine[0]["k"]
        sums: dict[str, dict[str, Any]] = {}
        for side in ("measured", "replayed"):
            drafts = sum(r[f"{side}_drafts"] for r in mine)
            accepted = [sum(r[f"{side}_accepted_per_pos"][i] for r in mine) for i in range(k)]
            sums[side] = {"num_drafts": drafts, "accepted_per_pos": accepted}
        label = {"launch_id": None, "series": series, "k": k, "launches": len(mine),
                 "requests": sum(r.get("requests") or 0 for r in mine),
                 "skipped": sum(r.get("skipped") or 0 for r in mine)}  # fmt: skip
        out.append(_row(label, sums["measured"], sums["replayed"]))
    return out


def replay_line(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One line for the report and the terminal (None without a replay)."""
    if not rows:
        return None
    worst = max(rows, key=lambda r: r["worst_relative_error"] or 0.0)
    n_ok = sum(bool(r["within"]) for r in rows)
    verdict = "agrees with" if n_ok == len(rows) else "does NOT agree with"
    err = worst["worst_relative_error"]
    return (
        f"{verdict} a replay outside vLLM on {n_ok}/{len(rows)} launches (per position and "
        f"mean length, ±{TOLERANCE:.0%}): worst {worst['series']} "
        f"{worst['measured_mean_length']:.3f} vs {worst['replayed_mean_length']:.3f} "
        f"(largest difference {err:.1%})"
        if err is not None
        else f"{verdict} a replay outside vLLM on {n_ok}/{len(rows)} launches"
    )


def _per_position(rates: Sequence[float] | None) -> str:
    return " / ".join(f"{r:.3f}" for r in rates) if rates else "–"


def replay_lines(
    rows: Sequence[Mapping[str, Any]],
    by_kind: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> list[str]:
    """The comparison as plain lines for a terminal: per series (launches pooled) vLLM's
    rate per position and mean length beside the replay's, each launch's worst
    difference, and the replay's mean length per prompt category along the control's
    answers (``by_kind``: the replay file's ``control_answers``)."""
    out = []
    for row in pooled_rows(rows):
        mine = [r for r in rows if r["series"] == row["series"]]
        worst = max((r["worst_relative_error"] or 0.0) for r in mine)
        word = "within" if row["within"] and all(r["within"] for r in mine) else "NOT within"
        out.append(
            f"{row['series']} (k={row['k']}, {row['launches']} launch(es), "
            f"{row['requests']} answers): vLLM {_per_position(row['measured_per_position'])}"
            f" (mean length {row['measured_mean_length']:.3f}); replay "
            f"{_per_position(row['replayed_per_position'])} "
            f"({row['replayed_mean_length']:.3f}): {word} {TOLERANCE:.0%} "
            f"(pooled {row['worst_relative_error']:.1%}, worst launch {worst:.1%})"
        )
    for series, kinds in (by_kind or {}).items():
        cells = ", ".join(
            f"{cat} {cell['mean_acceptance_length']:.2f}"
            for cat, cell in sorted(kinds.items())
            if cell.get("mean_acceptance_length") is not None
        )
        if cells:
            out.append(f"{series} along the control's answers, mean length per kind: {cells}")
    return out
