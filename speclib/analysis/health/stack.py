"""What the serving stack itself said about this run, gathered for summary.json and the report.

Four facts that are not measurements of the arms but bear on reading them: the server
flags the installed vLLM lacked and the kit left out (manifest ``cli``), where each arm ran
and with what memory share (manifest ``placement`` and ``memory_plan``), vLLM's own log
lines that bear on speed per series (:mod:`speclib.analysis.speculation.speed_log`), and, with a
synthetic draft, the acceptance vLLM reported against the pair's truth
(:mod:`speclib.analysis.speculation.acceptance_truth`), and, once ``speclib
replay-acceptance`` ran, against a replay outside vLLM
(:mod:`speclib.analysis.speculation.replay_check`). :func:`stack_facts` reads them from the run
folder; :func:`stack_warnings` turns the ones a reader must not miss into warnings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from speclib.analysis.health.placement_notes import placement_line, placement_warnings
from speclib.analysis.speculation.acceptance_truth import truth_rows, truth_summary
from speclib.analysis.speculation.replay_check import pooled_rows, replay_line, replay_rows
from speclib.analysis.speculation.speed_log import series_speed_lines
from speclib.core.rundir import RunDir

__all__ = ["stack_facts", "stack_warnings"]


def _logs(rd: RunDir, statuses: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for s in statuses:
        path = rd.launch_files(str(s.get("launch_id"))).server_log
        try:
            out.append((str(s.get("series")), path.read_text("utf-8", errors="replace")))
        except OSError:
            continue
    return out


def stack_facts(
    rd: RunDir,
    statuses: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    *,
    control: str,
    max_concurrency: int,
    request_tokens: int | None = None,
) -> dict[str, Any]:
    """The stack's facts of a run (``metrics``: the summary's ``launch_metrics``;
    ``request_tokens``: the longest prompt plus max_tokens, for the KV-cache note)."""
    manifest = rd.read_manifest()
    rows = truth_rows(statuses, metrics)
    replay = _replay(rd)
    replayed = replay_rows(replay, metrics) if replay else []
    placement = manifest.get("placement") or {}
    return {
        "server_commands": manifest.get("cli"),
        "placement": placement,
        "placement_line": placement_line(placement),
        "memory_plan": manifest.get("memory_plan"),
        "speed_log": series_speed_lines(
            _logs(rd, statuses),
            max_concurrency=max_concurrency,
            request_tokens=request_tokens,
            control=control,
        ),
        "acceptance_truth": rows,
        "acceptance_truth_line": truth_summary(rows),
        "acceptance_replay": {
            "launches": replayed,
            "series": pooled_rows(replayed),
            "control_answers": replay.get("control_answers"),
            "target_check": replay.get("target_check"),
            "device": replay.get("device"),
            "dtype": replay.get("dtype"),
        }
        if replay
        else None,
        "acceptance_replay_line": replay_line(replayed),
    }


def _replay(rd: RunDir) -> dict[str, Any] | None:
    """The replay file's content (None when ``speclib replay-acceptance`` never ran)."""
    try:
        return json.loads(rd.acceptance_replay.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def stack_warnings(facts: Mapping[str, Any], *, control: str, aa: str | None) -> list[str]:
    """Flags left out, arms on different GPUs, an acceptance that misses its truth."""
    out = list((facts.get("server_commands") or {}).get("notes") or [])
    out += placement_warnings(facts.get("placement") or {}, control=control, aa=aa)
    line = facts.get("acceptance_truth_line")
    if line and line.startswith("does NOT match"):
        out.append(f"the measured acceptance {line}")
    line = facts.get("acceptance_replay_line")
    if line and line.startswith("does NOT agree"):
        out.append(f"the measured acceptance {line}")
    return out
