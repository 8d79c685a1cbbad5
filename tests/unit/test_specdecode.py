"""Unit tests of speculative decoding's analysis: acceptance, reconciliation, agreement, model.

Covers speclib.analysis.speculation.acceptance, .agreement, .speedup and .chunks.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from speclib.analysis.speculation.acceptance import (
    accepted_per_pos_from_histogram,
    reconcile,
    request_acceptance,
    sum_counters,
)
from speclib.analysis.speculation.agreement import (
    OUTPUT_CLASSES,
    classify_output,
    compare_outputs,
    count_bad_outputs,
    greedy_agreement,
    summarize_agreement,
)
from speclib.analysis.speculation.chunks import tokens_per_chunk_distribution
from speclib.analysis.speculation.speedup import (
    alpha_from_mean_length,
    expected_tokens_per_step,
    leviathan_speedup,
)
from speclib.core.prometheus import SpecCounters
from speclib.core.records import RequestRecord

pytestmark = pytest.mark.unit


def vllm_spec(histogram: list[int], num_draft_tokens: int) -> dict:
    """What vLLM's RequestSpecDecodeMetrics.to_dict() returns (vllm/v1/metrics/stats.py)."""
    steps = sum(histogram)
    accepted = sum(j * c for j, c in enumerate(histogram))
    return {
        "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / num_draft_tokens if num_draft_tokens else 0.0,
        "acceptance_histogram": list(histogram),
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": num_draft_tokens,
        "num_spec_tokens": len(histogram) - 1,
    }


# --------------------------------------------------------------------------- acceptance


def test_request_acceptance_from_a_vllm_summary() -> None:
    acc = request_acceptance(vllm_spec([1, 0, 2, 0, 3], 24))
    assert acc.present and not acc.no_drafts
    assert (acc.num_spec_steps, acc.num_accepted, acc.num_draft_tokens) == (6, 16, 24)
    assert acc.rate == pytest.approx(16 / 24)
    assert acc.mean_length == pytest.approx(1 + 16 / 6)
    assert acc.num_spec_tokens == 4


def test_no_drafts_is_missing_data_not_zero_percent() -> None:
    spec = vllm_spec([0, 0, 0, 0, 0], 0)
    assert spec["draft_acceptance_rate"] == 0.0  # what vLLM says
    acc = request_acceptance(spec)
    assert acc.no_drafts
    assert acc.rate is None
    assert acc.mean_length is None


def test_request_acceptance_none_and_bad_input() -> None:
    none = request_acceptance(None)
    assert not none.present and none.rate is None and not none.no_drafts
    with pytest.raises(ValueError, match="num_draft_tokens"):
        request_acceptance({**vllm_spec([1, 1], 2), "num_draft_tokens": -1})
    with pytest.raises(ValueError, match="num_draft_tokens"):
        request_acceptance({"acceptance_histogram": [1, 1]})
    rebuilt = request_acceptance({"acceptance_histogram": [1, 2, 1], "num_draft_tokens": 8})
    assert (rebuilt.num_spec_steps, rebuilt.num_accepted) == (4, 4)


def test_accepted_per_pos_from_histogram() -> None:
    assert accepted_per_pos_from_histogram([1, 0, 2, 0, 3]) == (5, 5, 3, 3)
    assert accepted_per_pos_from_histogram([]) == ()


# --------------------------------------------------------------------------- reconcile

SPECS = [vllm_spec([1, 0, 2, 0, 3], 24), vllm_spec([2, 1, 0, 1, 0], 16), vllm_spec([0] * 5, 0)]


def _counters(specs: list[dict], **extra: int) -> SpecCounters:
    pos = [0, 0, 0, 0]
    for s in specs:
        for i, c in enumerate(accepted_per_pos_from_histogram(s["acceptance_histogram"])):
            pos[i] += c
    return SpecCounters(
        num_drafts=sum(s["num_spec_steps"] for s in specs) + extra.get("drafts", 0),
        num_draft_tokens=sum(s["num_draft_tokens"] for s in specs) + extra.get("tokens", 0),
        num_accepted_tokens=sum(s["num_accepted_draft_tokens"] for s in specs)
        + extra.get("accepted", 0),
        accepted_per_pos=tuple(pos),
    )


def test_reconcile_matches_when_every_request_is_counted() -> None:
    r = reconcile(SPECS, _counters(SPECS))
    assert r.matches and r.explanation is None
    assert (r.diff_drafts, r.diff_draft_tokens, r.diff_accepted_tokens) == (0, 0, 0)
    assert r.diff_per_pos == (0, 0, 0, 0)
    assert r.n_requests == 3 and r.n_with_metrics == 3
    assert r.requests.acceptance_rate == pytest.approx(r.server.acceptance_rate)


def test_reconcile_detects_outside_traffic() -> None:
    r = reconcile(SPECS, _counters(SPECS, drafts=3, tokens=12, accepted=5))
    assert not r.matches
    assert (r.diff_drafts, r.diff_draft_tokens, r.diff_accepted_tokens) == (3, 12, 5)
    assert "outside traffic" in r.explanation
    assert "warm-up" in r.explanation


def test_reconcile_forgotten_warmup_and_missing_metrics() -> None:
    warmup = vllm_spec([0, 0, 1, 0, 1], 8)
    counters = _counters([warmup, *SPECS])
    forgotten = reconcile(SPECS, counters)
    assert not forgotten.matches and forgotten.diff_draft_tokens == 8
    assert reconcile([warmup, *SPECS], counters).matches
    failed = reconcile([None, *SPECS], counters)
    assert not failed.matches
    assert "1 of 4 request(s) carried no per-request spec metrics" in failed.explanation


def test_reconcile_n_gt_1_request_absent_from_per_request_metrics() -> None:
    # vLLM attaches no per-request summary to an n>1 request, but counts its drafts: two
    # choices drafting on their own. The record has spec None; the counters moved.
    two_choices = [vllm_spec([0, 2, 1, 0, 1], 16), vllm_spec([1, 1, 0, 1, 1], 16)]
    counters = _counters([*SPECS, *two_choices])
    r = reconcile([*SPECS, None], counters)
    assert not r.matches and r.n_requests == 4 and r.n_with_metrics == 3
    assert r.diff_draft_tokens == 32 and r.diff_drafts == 8
    assert "n>1 requests" in r.explanation and "1 of 4 request(s)" in r.explanation
    assert r.requests.acceptance_rate is not None  # the three summaries still count


def test_reconcile_other_mismatches() -> None:
    fewer = reconcile([*SPECS, SPECS[0]], _counters(SPECS))
    assert not fewer.matches and fewer.diff_drafts < 0
    assert "outside the window" in fewer.explanation
    frozen = reconcile(SPECS, SpecCounters(0, 0, 0, (0, 0, 0, 0)))
    assert "--disable-log-stats" in frozen.explanation
    absent = reconcile(SPECS, SpecCounters(0, 0, 0, present=False))
    assert not absent.matches and "no vllm:spec_decode_*" in absent.explanation


def test_reconcile_rel_tol() -> None:
    c = _counters(SPECS, tokens=1)  # 41 vs 40 draft tokens, and per-pos still exact
    assert not reconcile(SPECS, c).matches
    assert reconcile(SPECS, c, rel_tol=0.05).matches
    with pytest.raises(ValueError, match="rel_tol"):
        reconcile(SPECS, c, rel_tol=-1)


# --------------------------------------------------------------------------- agreement


def test_agreement_by_tokens() -> None:
    a = greedy_agreement(
        "The cat sat on the mat.",
        "The cat sat on a mat.",
        control_tokens=[10, 11, 12, 13, 14, 15],
        experiment_tokens=[10, 11, 12, 13, 99, 15],
        excerpt_chars=8,
    )
    assert not a.exact_match
    assert a.unit == "tokens" and a.first_divergence == 4
    assert a.char_divergence == 15
    assert a.context_before == "… sat on "
    assert a.control_after == "the mat."
    assert a.experiment_after == "a mat."


def test_agreement_by_chars_prefix_and_exact() -> None:
    a = greedy_agreement("hello world", "hello there")
    assert a.unit == "chars" and a.first_divergence == 6 and not a.exact_match
    prefix = greedy_agreement("abc", "abcd", control_tokens=[1, 2], experiment_tokens=[1, 2, 3])
    assert prefix.first_divergence == 2 and prefix.unit == "tokens"
    same = greedy_agreement("x", "x", control_tokens=[1], experiment_tokens=None)
    assert same.exact_match and same.unit == "chars" and same.first_divergence is None


def test_compare_outputs_and_summary() -> None:
    def rec(series: str, pid: str, text: str, ids: tuple[int, ...], **kw: object) -> RequestRecord:
        return RequestRecord(
            series=series,
            replicate=0,
            prompt_id=pid,
            ok=True,
            text=text,
            token_ids=ids,
            output_tokens=len(ids),
            **kw,
        )

    control = [
        rec("control", "w", "junk", (9,), phase="warmup"),
        rec("control", "p1", "same", (1, 2)),
        rec("control", "p2", "abcd", (1, 2, 3, 4)),
        rec("control", "p3", "xyz", (7, 8, 9)),
        rec("control", "p4", "only control", (5,)),
    ]
    experiment = [
        RequestRecord(series="ngram", replicate=0, prompt_id="p1", ok=False, status=500),
        rec("ngram", "p1", "same", (1, 2)),
        rec("ngram", "p2", "abXd", (1, 2, 8, 4)),
        rec("ngram", "p3", "xyQ", (7, 8, 6)),
        rec("ngram", "w", "junk", (9,), phase="warmup"),
    ]
    result = compare_outputs(control, experiment)
    assert set(result) == {"p1", "p2", "p3"}
    assert result["p1"].exact_match
    assert result["p2"].first_divergence == 2
    s = summarize_agreement(result)
    assert (s.n_compared, s.n_exact, s.n_diverged) == (3, 1, 2)
    assert s.exact_match_rate == pytest.approx(1 / 3)
    assert s.median_first_divergence == 2.0
    assert s.unit == "tokens"
    empty = summarize_agreement([])
    assert empty.exact_match_rate is None and empty.median_first_divergence is None


# --------------------------------------------------------------------------- classification


def test_classify_output() -> None:
    base = {"series": "s", "replicate": 0, "prompt_id": "p"}
    cases = {
        "http_error": RequestRecord(**base, ok=False, status=500, error="HTTP 500"),
        "http_error ": RequestRecord(**base, ok=False, error="connection refused"),
        "truncated_by_error": RequestRecord(
            **base, ok=False, status=200, chunk_tokens=(1, 1), text="ab", error="stream cut"
        ),
        "empty_output": RequestRecord(**base, ok=True, status=200, output_tokens=0, text=""),
        "ok": RequestRecord(**base, ok=True, status=200, output_tokens=3, text="abc"),
    }
    for expected, rec in cases.items():
        assert classify_output(rec) == expected.strip()
    ok = cases["ok"]
    assert classify_output(ok, implausible=True) == "implausible"
    aborted = {"ok": True, "text": "ab", "output_tokens": 2, "finish_reason": "abort"}
    assert classify_output(aborted) == "truncated_by_error"
    row = pd.Series(
        {
            "ok": True,
            "text": float("nan"),
            "output_tokens": float("nan"),
            "chunk_tokens": [],
            "status": float("nan"),
            "repeat": 0,
        }
    )
    assert classify_output(row) == "empty_output"
    assert set(OUTPUT_CLASSES) >= {"ok", "http_error", "empty_output", "truncated_by_error"}
    assert count_bad_outputs([*cases.values(), row, aborted]) == 4  # 2 truncated, 2 empty


def test_sum_counters_adds_launches_position_by_position() -> None:
    a = SpecCounters(10, 40, 20, (8, 6, 4, 2))
    b = SpecCounters(5, 10, 4, (3, 1), present=False)
    total = sum_counters([a, b])
    assert (total.num_drafts, total.num_draft_tokens, total.num_accepted_tokens) == (15, 50, 24)
    assert total.accepted_per_pos == (11, 7, 4, 2) and total.present
    assert sum_counters([]) is None


# --------------------------------------------------------------------------- Leviathan


@pytest.mark.parametrize(
    ("alpha", "k", "c", "expected"),
    [
        (0.8, 4, 0.0, 3.3616),  # 1 + .8 + .64 + .512 + .4096
        (0.8, 4, 0.1, 3.3616 / 1.4),
        (0.5, 2, 0.5, 0.875),  # (1 − .125) / (.5 · 2)
        (1.0, 3, 0.0, 4.0),  # limit k + 1
        (1.0, 3, 1 / 3, 2.0),
        (0.0, 5, 0.2, 0.5),  # nothing accepted: pure overhead
    ],
)
def test_leviathan_hand_checked(alpha: float, k: int, c: float, expected: float) -> None:
    assert leviathan_speedup(alpha=alpha, k=k, c=c) == pytest.approx(expected)


def test_leviathan_matches_closed_form_and_is_continuous_at_one() -> None:
    for alpha in (0.1, 0.37, 0.9, 0.999):
        closed = (1 - alpha**6) / ((1 - alpha) * (5 * 0.2 + 1))
        assert leviathan_speedup(alpha=alpha, k=5, c=0.2) == pytest.approx(closed)
    assert expected_tokens_per_step(1 - 1e-12, 7) == pytest.approx(8.0)
    assert expected_tokens_per_step(0.0, 7) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"alpha": 1.1, "k": 2, "c": 0.1}, ValueError, "alpha"),
        ({"alpha": -0.1, "k": 2, "c": 0.1}, ValueError, "alpha"),
        ({"alpha": 0.5, "k": 0, "c": 0.1}, ValueError, "`k` must be a positive integer"),
        ({"alpha": 0.5, "k": 2.0, "c": 0.1}, TypeError, "`k` must be a positive integer"),
        ({"alpha": 0.5, "k": True, "c": 0.1}, TypeError, "`k`"),
        ({"alpha": 0.5, "k": 2, "c": -0.1}, ValueError, "`c`"),
        ({"alpha": 0.5, "k": 2, "c": math.inf}, ValueError, "`c`"),
    ],
)
def test_leviathan_validation(kwargs: dict, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        leviathan_speedup(**kwargs)


def test_alpha_from_mean_length_inverts_the_model() -> None:
    for alpha in (0.0, 0.3, 0.7, 0.95, 1.0):
        m = expected_tokens_per_step(alpha, 4)
        assert alpha_from_mean_length(m, 4) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError, match="mean_acceptance_length"):
        alpha_from_mean_length(6.0, 4)


# --------------------------------------------------------------------------- chunks


def test_tokens_per_chunk_distribution() -> None:
    d = tokens_per_chunk_distribution([[1, 1, 1], [3, 5, 1], None, []])
    assert d.sizes == (1, 3, 5) and d.counts == (4, 1, 1)
    assert d.n_chunks == 6 and d.mean == pytest.approx(12 / 6)
    assert d.share_multi_token == pytest.approx(2 / 6)
    empty = tokens_per_chunk_distribution([])
    assert empty.n_chunks == 0 and empty.mean is None
