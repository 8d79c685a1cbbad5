"""Greedy divergences ranked by the target (speclib.run.scoring: find_divergences,
ensure_ranked) and judged by the outputs gate, against the scripted scorer of
``tests/fake_scorer.py`` started as the control's server (a real process, no speculation).

A run folder whose arm diverged from the control on three prompts: at the first differing
token the stand-in target gives the control's and the arm's tokens log-probabilities
``logprob_of`` says, so one divergence is a near tie (0.05 nats apart), one a real
disagreement (about 5 nats) and one is never ranked (the stand-in fails on token 999).
The analysis must count only the real one and the unranked one against the arm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from speclib.analysis.speculation.agreement import (
    classify_divergences,
    compare_outputs,
    summarize_agreement,
)
from speclib.core.records import RequestRecord, append_record
from speclib.core.rundir import RunDir
from speclib.core.scores import read_ranks
from speclib.params.experiment import ExperimentParams
from speclib.params.run_record import write_record
from speclib.run.scoring import ensure_ranked, find_divergences
from tests.fake_scorer import logprob_of

pytestmark = pytest.mark.unit

FAKE_SCORER = Path(__file__).resolve().parents[1] / "fake_scorer.py"

# control and arm answers per prompt: same, near tie at 2, real at 1, unrankable at 0
ANSWERS = {
    "same": ((11, 12, 13), (11, 12, 13)),
    "tie": ((11, 12, 13, 14), (11, 12, 14, 14)),  # 13 vs 14: -0.25 vs -0.30 nats
    "real": ((21, 22, 23), (21, 600, 23)),  # 22 vs 600: -0.2 vs -5.0 nats
    "broken": ((999, 5), (7, 5)),
}


def _run(tmp_path: Path, *, temperature: float = 0.0) -> RunDir:
    tmp_path.mkdir(parents=True, exist_ok=True)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": pid, "messages": [{"role": "user", "content": f"task {pid}"}]}) + "\n"
            for pid in ANSWERS
        ),
        encoding="utf-8",
    )
    params = ExperimentParams.model_validate(
        {
            "name": "t",
            "server": {"model": str(tmp_path), "served_model_name": "fake",
                       "start_timeout_s": 30, "launcher": [sys.executable, str(FAKE_SCORER)]},
            "series": [{"name": "control"},
                       {"name": "spec", "speculative_config": {"method": "ngram",
                                                               "num_speculative_tokens": 2}}],
            "workload": {"prompts": str(prompts), "temperature": temperature},
        }
    )  # fmt: skip
    rd = RunDir.at(tmp_path / "run")
    write_record(params, rd)
    with rd.requests.open("w", encoding="utf-8") as fh:
        for pid, (control, arm) in ANSWERS.items():
            for series, ids in (("control", control), ("spec", arm)):
                append_record(
                    fh,
                    RequestRecord(series=series, replicate=0, prompt_id=pid, ok=True,
                                  token_ids=ids, text=" ".join(map(str, ids)),
                                  finish_reason="length", output_tokens=len(ids)),
                )  # fmt: skip
    return rd


def test_divergences_are_found_as_the_analysis_compares_them(tmp_path: Path) -> None:
    rd = _run(tmp_path)
    params = ExperimentParams.model_validate_json(rd.params_resolved.read_text())
    found = {d.prompt_id: d for d in find_divergences(params, rd.root)}
    assert set(found) == {"tie", "real", "broken"}
    assert found["tie"].prefix == (11, 12) and found["tie"].control_token == 13
    assert found["tie"].experiment_token == 14 and found["real"].prefix == (21,)
    sampled = _run(tmp_path / "s", temperature=0.7)
    assert (
        find_divergences(
            ExperimentParams.model_validate_json(sampled.params_resolved.read_text()), sampled.root
        )
        == []
    )


def test_the_target_ranks_each_divergence_and_only_real_ones_count(tmp_path: Path) -> None:
    rd = _run(tmp_path)
    said = ensure_ranked(rd.root)
    assert said.startswith("3 divergence(s) ranked") and "(1 failed)" in said
    ranks = {pid: r for (series, level, pid), r in read_ranks(rd.divergences).items()}
    assert set(ranks) == {"tie", "real", "broken"}
    tie, real = ranks["tie"], ranks["real"]
    assert tie.control_logprob == pytest.approx(logprob_of(13))
    assert tie.experiment_logprob == pytest.approx(logprob_of(14))
    assert tie.gap == pytest.approx(0.05) and tie.position == 2
    assert real.gap == pytest.approx(logprob_of(22) - logprob_of(600))
    assert ranks["broken"].error and ranks["broken"].gap is None
    argv = json.loads((rd.launch("ranking") / "command.json").read_text())["argv"]
    assert "--speculative-config" not in argv  # the target alone ranks
    # the gate's view: one near tie, one real, one unranked
    rows = [json.loads(line) for line in rd.requests.read_text().splitlines()]
    agreements = compare_outputs(
        [r for r in rows if r["series"] == "control"], [r for r in rows if r["series"] == "spec"]
    )
    classes = classify_divergences(
        agreements, {pid: ranks.get(pid) for pid in agreements}, near_tie_nats=0.25
    )
    summary = summarize_agreement(agreements, classes)
    assert (summary.n_near_tie, summary.n_real, summary.n_unranked) == (1, 1, 1)
    assert summary.gate_rate == 0.5 and summary.exact_match_rate == 0.25
    # a second call ranks only what failed: the ranked ones are kept, no error file
    (rd.launch("ranking") / "server.log").unlink()
    assert ensure_ranked(rd.root).startswith("1 divergence(s) ranked")
    assert read_ranks(rd.divergences)[("spec", 0, "tie")] == tie
    assert not rd.divergence_error.exists()
