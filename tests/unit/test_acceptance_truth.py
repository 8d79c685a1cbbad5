"""The acceptance vLLM counted, held against a synthetic checkpoint's truth, per position.

A launch's ``status.json`` carries the truth (what its draft, head or MTP layer must accept
on the outputs of its ``/metrics`` window); :func:`truth_rows` sets vLLM's counters beside
it, and each position must be within the tolerance, not only the mean length.
"""

from __future__ import annotations

import pytest

from speclib.analysis.speculation.acceptance_truth import TOLERANCE, truth_rows, truth_summary
from speclib.core.records import RequestRecord
from speclib.run.synthetic_truth import metrics_window


def _status(series: str, expected: list[float], drafts: int = 100) -> dict:
    per_pos = expected
    return {
        "launch_id": f"{series}-r0",
        "series": series,
        "extra": {
            "acceptance_truth": {
                "k": len(per_pos),
                "agreement": 0.7,
                "declared": {
                    "acceptance_per_position": [0.7**i for i in range(1, len(per_pos) + 1)],
                    "mean_acceptance_length": 1 + sum(0.7**i for i in range(1, len(per_pos) + 1)),
                },
                "expected": {
                    "num_drafts": drafts,
                    "acceptance_per_position": per_pos,
                    "mean_acceptance_length": 1 + sum(per_pos),
                },
            }
        },
    }


def _metrics(series: str, accepted: list[int], drafts: int = 100) -> dict:
    return {
        "launch_id": f"{series}-r0",
        "spec": {"present": True, "num_drafts": drafts, "accepted_per_pos": accepted},
    }


def test_every_position_is_held_to_its_exact_value() -> None:
    statuses = [_status("mtp-k3", [0.70, 0.49, 0.34]), _status("draft-k3", [0.70, 0.49, 0.34])]
    metrics = [_metrics("mtp-k3", [70, 49, 34]), _metrics("draft-k3", [72, 49, 30])]
    exact, off = truth_rows(statuses, metrics)
    assert exact["within"] and exact["within_per_position"]
    assert exact["position_errors"] == pytest.approx([0.0, 0.0, 0.0])
    # the mean length is within 3 % (2.51 vs 2.53), but position 3 is 12 % short
    assert off["within"] and not off["within_per_position"]
    assert off["position_errors"][2] == pytest.approx(30 / 34 - 1)
    line = truth_summary([exact, off])
    assert line is not None and line.startswith("matches")
    assert f"per position within ±{TOLERANCE:.0%} on 1/2 launches" in line
    assert "draft-k3 position 3" in line


def test_a_launch_without_drafts_or_truth_has_no_row() -> None:
    statuses = [_status("mtp-k3", [0.7]), {"launch_id": "control-r0", "series": "control"}]
    assert truth_rows(statuses, [_metrics("mtp-k3", [0], drafts=0)]) == []
    assert truth_summary([]) is None


def _rec(launch: str, phase: str, pid: str) -> RequestRecord:
    return RequestRecord(
        series="s", replicate=0, prompt_id=pid, ok=True, launch_id=launch, phase=phase
    )


def test_the_truth_replays_the_metrics_window_of_its_launch() -> None:
    records = [
        _rec("a", "warmup", "w0"),  # the series' warm-up: before metrics_before
        _rec("b", "warmup", "x0"),
        _rec("a", "warmup", "w1"),
        _rec("a", "warmup", "l0"),  # a level's warm-up: inside the window
        _rec("a", "measure", "m0"),
        _rec("a", "measure", "m1"),
    ]
    window = metrics_window(records, "a", warmup_requests=2)
    assert [r.prompt_id for r in window] == ["l0", "m0", "m1"]
