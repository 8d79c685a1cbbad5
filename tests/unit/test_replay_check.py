"""The second acceptance instrument's arithmetic and the near-tie classes of greedy divergences.

:func:`greedy_steps` must count what greedy ``draft_model`` speculation counts: checked on
hand-made answers, and against the synthetic pair's own exact replay
(:func:`speclib.demo.synthetic.expected_acceptance`, which the GPU evidence matched within
1 %) on random chains. The comparison with a launch's ``/metrics`` must say within or not,
per position. A divergence is a near tie only when the target ranks both tokens within
``near_tie_nats``; only the others count against the outputs gate.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from speclib.analysis.speculation.agreement import (
    classify_divergences,
    greedy_agreement,
    summarize_agreement,
)
from speclib.analysis.speculation.replay_check import (
    TOLERANCE,
    greedy_steps,
    pooled_rows,
    replay_line,
    replay_lines,
    replay_rows,
)
from speclib.core.scores import DivergenceRank

pytestmark = pytest.mark.unit


def test_steps_of_a_hand_made_answer() -> None:
    # 7 tokens; the draft is right at positions 1, 2, 4, 5, 6 (position 0 is the prefill's)
    matches = [False, True, True, False, True, True, True]
    # k=2: from 0, 1 and 2 accepted (then the target's 3); from 3, 4 and 5 (then 6): done
    assert greedy_steps(matches, 7, 2) == (2, [2, 2])
    # k=1: from 0, 1 (then 2); from 2, 3 wrong (the target's 3); from 3, 4 (then 5);
    # from 5, 6 (then 7, past the end)
    assert greedy_steps(matches, 7, 1) == (4, [3])
    assert greedy_steps([True], 1, 3) == (0, [0, 0, 0])  # one token: the prefill made it
    assert greedy_steps([], 0, 3) == (0, [0, 0, 0])
    with pytest.raises(ValueError, match="`k`"):
        greedy_steps(matches, 7, 0)


def test_a_last_step_counts_drafts_past_the_answer() -> None:
    """vLLM counts a last step's accepted drafts before it cuts the answer: matches past the
    answer's end (the target's own continuation) count, and only in the last step."""
    inside = [False, False, False, True]
    # the last step (from 2) drafts 3, 4, 5: 3 is the answer's last token, 4 and 5 past it
    assert greedy_steps([*inside, True, True], 4, 3) == (3, [1, 1, 1])
    assert greedy_steps([*inside, True, False], 4, 3) == (3, [1, 1, 0])
    assert greedy_steps(inside, 4, 3) == (3, [1, 0, 0])


def test_steps_match_the_synthetic_pairs_exact_replay() -> None:
    from speclib.demo.synthetic import expected_acceptance

    rng = np.random.default_rng(7)
    vocab = 50
    draft_next = rng.integers(0, vocab, size=vocab)
    target_next = np.where(rng.random(vocab) < 0.6, draft_next, rng.integers(0, vocab, vocab))
    outputs = []
    for _ in range(20):
        ids = [int(rng.integers(0, vocab))]
        for _ in range(int(rng.integers(1, 60))):
            ids.append(int(target_next[ids[-1]]))
        outputs.append(ids)
    for k in (1, 2, 4):
        want = expected_acceptance(draft_next, outputs, k)
        steps, accepted = 0, [0] * k
        for ids in outputs:
            matches = [False] + [int(draft_next[a]) == b for a, b in itertools.pairwise(ids)]
            s, per = greedy_steps(matches, len(ids), k)
            steps, accepted = steps + s, [x + y for x, y in zip(accepted, per, strict=True)]
        assert steps == want["num_drafts"] and accepted == want["accepted_per_pos"]


def _launch(lid: str, drafts: int, accepted: list[int]) -> dict:
    return {"launch_id": lid, "spec": {"present": True, "num_drafts": drafts,
            "accepted_per_pos": accepted}}  # fmt: skip


def test_rows_say_within_or_by_how_much() -> None:
    replay = {
        "launches": [
            {"launch_id": "d-r0", "series": "d", "k": 2, "requests": 8, "skipped": 0,
             "num_drafts": 100, "accepted_per_pos": [80, 60]},
            {"launch_id": "d-r1", "series": "d", "k": 2, "requests": 8, "skipped": 0,
             "num_drafts": 100, "accepted_per_pos": [80, 60]},
            {"launch_id": "x-r0", "series": "x", "k": 2, "requests": 8,
             "num_drafts": 10, "accepted_per_pos": [5, 2]},
        ]
    }  # fmt: skip
    metrics = [_launch("d-r0", 100, [81, 61]), _launch("d-r1", 100, [80, 50]),
               {"launch_id": "x-r0", "spec": {"present": False}}]  # fmt: skip
    rows = replay_rows(replay, metrics)
    assert [r["launch_id"] for r in rows] == ["d-r0", "d-r1"]  # no counters: no row
    ok, off = rows
    assert ok["within"] and ok["worst_relative_error"] == pytest.approx(1 / 60)
    assert not off["within"] and off["relative_error_per_position"][1] == pytest.approx(-1 / 6)
    assert off["measured_mean_length"] == pytest.approx(2.30)
    (pooled,) = pooled_rows(rows)
    assert pooled["measured_accepted_per_pos"] == [161, 111] and pooled["launches"] == 2
    assert pooled["replayed_drafts"] == 200 and not pooled["within"]
    line = replay_line(rows)
    assert line.startswith("does NOT agree") and "1/2 launches" in line and "16.7%" in line
    text = "\n".join(replay_lines(rows, {"d": {"fix": {"mean_acceptance_length": 2.5}}}))
    assert "NOT within 3%" in text and "fix 2.50" in text
    assert TOLERANCE == 0.03


def _agreements() -> dict:
    same = greedy_agreement("a b", "a b", control_tokens=[1, 2], experiment_tokens=[1, 2])
    tie = greedy_agreement("a b c", "a x c", control_tokens=[1, 2, 3],
                           experiment_tokens=[1, 9, 3])  # fmt: skip
    real = greedy_agreement("a b", "z b", control_tokens=[1, 2], experiment_tokens=[7, 2])
    unranked = greedy_agreement("q", "r", control_tokens=[4], experiment_tokens=[5])
    return {"same": same, "tie": tie, "real": real, "unranked": unranked}


def _rank(pid: str, position: int, c: float, e: float) -> DivergenceRank:
    return DivergenceRank("d", 0, pid, position, 1, 2, c, e, 1, 2)


def test_only_real_disagreements_count_against_the_outputs_gate() -> None:
    agreements = _agreements()
    ranks = {"tie": _rank("tie", 1, -0.70, -0.72), "real": _rank("real", 0, -0.1, -4.0),
             "unranked": DivergenceRank("d", 0, "unranked", 0, 4, 5, error="HTTP 500")}  # fmt: skip
    classes = classify_divergences(agreements, ranks, near_tie_nats=0.25)
    assert {pid: c.kind for pid, c in classes.items()} == {
        "tie": "near_tie", "real": "real", "unranked": "unranked"}  # fmt: skip
    assert classes["tie"].gap == pytest.approx(0.02) and classes["real"].position == 0
    summary = summarize_agreement(agreements, classes)
    assert (summary.n_exact, summary.n_near_tie, summary.n_real, summary.n_unranked) == (1, 1, 1, 1)
    # the outputs gate holds gate_rate (identical or a near tie) against its minimum
    assert summary.exact_match_rate == 0.25 and summary.gate_rate == 0.5
    # a tighter threshold makes the tie real; unranked ones stay against the arm
    tight = classify_divergences(agreements, ranks, near_tie_nats=0.01)
    assert tight["tie"].kind == "real"
    assert summarize_agreement(agreements).gate_rate == 0.25  # nothing ranked: as before
    with pytest.raises(ValueError, match="near_tie_nats"):
        classify_divergences(agreements, ranks, near_tie_nats=-1)
