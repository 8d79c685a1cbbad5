"""Run until decided: the plan's bounds, the budget and the cap as the runner meets them, what
is still open and what it would take, and the stopping as data through summary.json, the
terminal and the report.

The runs are synthetic run folders (``tests/unit/test_aa_gate.py``'s: records of an
interleaved run written block by block by an executor) looked at by the real analysis; the
clock is a fake one, advanced by each block, so the budget is met at a known block.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from speclib.analysis.run_analysis import analyze_run
from speclib.analysis.stats.paired import RatioCI
from speclib.analysis.verdict.answer import Answer, ArmAnswer
from speclib.analysis.verdict.decision import Decision
from speclib.analysis.verdict.run_rules import decision_confidence, looks_plan
from speclib.analysis.verdict.segments import SegmentResult
from speclib.analysis.verdict.still_open import open_verdicts
from speclib.app.block_loop import BlockClock, until_decided
from speclib.app.run_folder import ReadyRun
from speclib.core.stopping import OpenVerdict, Stopping, affordable_blocks, stopping_lines
from speclib.params.experiment import ExperimentParams
from speclib.run.manifest import read_plan
from tests.unit.test_aa_gate import _experiment_run, _params

pytestmark = pytest.mark.unit

MARGIN = 0.05


class FakeClock:
    """Minutes as the blocks pass: the planned blocks took ``planned`` minutes each; each
    block executed advances the clock by ``per_block`` minutes."""

    def __init__(self, planned: list[float], per_block: float) -> None:
        self.t = 60.0 * sum(planned)
        self.per_block = per_block
        self.clock = BlockClock(0.0, now=lambda: self.t)
        for rep, minutes in enumerate(planned):
            self.clock.record(rep, 60.0 * minutes)

    def wrap(self, execute):
        def run(block):
            self.t += 60.0 * self.per_block
            return execute(block)

        return run


def _until_decided(params: ExperimentParams, rd, execute, clock=None) -> list[str]:
    logs: list[str] = []
    run = ReadyRun(params, rd, read_plan(rd), resume=False)
    until_decided(run, execute=execute, log=logs.append, clock=clock)
    return logs


# --------------------------------------------------------------------------- the plan


def test_the_blocks_at_least_and_at_most(tmp_path: Path) -> None:
    """auto: two blocks more than planned; one planned block, a null cap or an A/A arm alone
    without a target resolution: the planned blocks only."""
    assert _params(tmp_path, blocks=3, aa=False).block_bounds == (3, 5)
    assert _params(tmp_path, blocks=3, aa=False, max_replicates=8).block_bounds == (3, 8)
    assert _params(tmp_path, blocks=3, aa=False, max_replicates=None).block_bounds == (3, 3)
    assert _params(tmp_path, blocks=1, aa=False).block_bounds == (1, 1)
    aa_only = _params(tmp_path, blocks=3, aa=True).model_dump()
    aa_only["series"] = [{"name": "control"}]
    assert ExperimentParams.model_validate(aa_only).block_bounds == (3, 3)
    with pytest.raises(ValueError, match="max_replicates"):
        _params(tmp_path, blocks=3, aa=False, max_replicates=0)
    with pytest.raises(ValueError, match="budget_min"):
        _params(tmp_path, blocks=3, aa=False, budget_min=0)


def test_the_looks_are_those_the_manifest_recorded(tmp_path: Path) -> None:
    """A run's looks are its manifest's (fixed at setup); a folder without that record is
    judged by an explicit cap only, and "auto" alone is one decision (an older kit's run)."""
    params = _params(tmp_path, blocks=3, aa=False)  # max_replicates: auto
    recorded = {"until_decided": {"at_least": 3, "at_most": 5, "budget_min": 15}}
    plan = looks_plan(params, recorded)
    assert plan is not None and (plan.looks, plan.max_blocks) == ((3, 4, 5), 5)
    assert looks_plan(params, {}) is None
    assert decision_confidence(params, 3, {})[0] == 0.95
    assert decision_confidence(params, 3, recorded)[0] == pytest.approx(plan.level_at(3))
    explicit = _params(tmp_path, blocks=3, aa=False, max_replicates=6)
    assert looks_plan(explicit, {}).looks == (3, 4, 5, 6)
    fixed = {"until_decided": {"at_least": 3, "at_most": 3, "budget_min": 15}}
    assert looks_plan(explicit, fixed) is None


# ---------------------------------------------------------------- the budget, the cap


def test_the_budget_stops_the_run_when_one_more_block_would_end_after_it(tmp_path) -> None:
    """Planned blocks of 2 and 1 min (the first compiles), 3 min spent; a budget of 4.5 min:
    a third block (1 min, the longest after the first) fits, a fourth would end at 5."""
    params = _params(tmp_path, blocks=2, aa=False, max_replicates=6, budget_min=4.5)
    rd, execute, executed = _experiment_run(tmp_path, params, 0.96, block_sd=0.03)
    fake = FakeClock([2.0, 1.0], per_block=1.0)
    logs = _until_decided(params, rd, fake.wrap(execute), clock=fake.clock)
    assert executed == [2]
    s = rd.read_manifest()["stopping"]
    assert (s["code"], s["blocks"], s["at_least"], s["at_most"]) == ("budget", 3, 2, 6)
    assert s["elapsed_min"] == pytest.approx(4.0) and s["next_block_min"] == pytest.approx(1.0)
    assert s["block_min"] == pytest.approx([2.0, 1.0, 1.0])
    assert sum(line.startswith("look after") for line in logs) == 2
    assert any(line.startswith("blocks: 3 run") for line in logs)


def test_at_the_cap_the_summary_says_what_each_open_verdict_would_take(tmp_path) -> None:
    """×1.15, its interval too wide: the cap of 3 ends the run; the summary names the arm
    still open with its interval and the blocks that would likely decide it ("worse"), the
    terminal's table row says the same count, and the report shows it."""
    from speclib.app.verdicts import end_lines, table_rows
    from speclib.core.run_summary import read_summary
    from speclib.report.sections import answer_html

    params = _params(tmp_path, blocks=2, aa=False, max_replicates=3)
    rd, execute, executed = _experiment_run(tmp_path, params, 1.15, block_sd=0.05)
    _until_decided(params, rd, execute)
    assert executed == [2]
    an = analyze_run(rd.root)
    summary = json.loads(rd.summary.read_text())
    s = summary["stopping"]
    assert (s["code"], s["blocks"]) == ("cap", 3)
    (item,) = s["open"]
    comp = next(c for c in summary["comparisons"] if c["experiment"] == "spec")
    assert comp["decision"] == "inconclusive"
    assert (item["arm"], item["level"], item["segment"]) == ("spec", 0, None)
    assert item["ratio"] == pytest.approx(comp["tpot_ratio"])
    assert [item["ci_low"], item["ci_high"]] == pytest.approx(comp["tpot_ratio_ci"])
    assert item["blocks_needed"] > 3 and item["target"] == "worse"
    found = Stopping.from_dict(s)
    assert found == an.stopping
    typed = read_summary(rd.summary)
    row = next(r for r in table_rows(typed) if r["arm"] == "spec")
    assert f"~{item['blocks_needed'] - 3} more blocks may decide" in row["reason"]
    lines = end_lines(typed)
    assert any(line.startswith("blocks: 3 run (at least 2, at most 3") for line in lines)
    assert any(line.startswith("still inconclusive: spec at c=1") for line in lines)
    assert "id='speclib-stopping'" in answer_html(an)


def test_the_planned_blocks_only_when_the_cap_is_null(tmp_path) -> None:
    """No look, no block added, and still what the open verdict would take (as a fixed
    design of more blocks)."""
    params = _params(tmp_path, blocks=2, aa=False, max_replicates=None)
    rd, execute, executed = _experiment_run(tmp_path, params, 0.96, block_sd=0.03)
    logs = _until_decided(params, rd, execute)
    assert executed == [] and not any(line.startswith("look after") for line in logs)
    s = analyze_run(rd.root).summary()["stopping"]
    assert (s["code"], s["blocks"], s["at_most"]) == ("planned", 2, 2)
    assert [o["arm"] for o in s["open"]] == ["spec"]


# ------------------------------------------------------------------- what is open


def _ci(est: float, low: float, high: float, level: float, df: int = 3) -> RatioCI:
    return RatioCI(est, low, high, level, "blocks", 40, df + 1, 0.0, None, None, None, None,
                   None, 0, df=df)  # fmt: skip


def _segment(name: str, est: float, low: float, high: float, word: str) -> SegmentResult:
    ci = _ci(est, low, high, 0.99)
    return SegmentResult(0, "ngram", "category", name, 0.5, 20, 4, est, ci,
                         Decision(word, "", MARGIN, 0.99))  # fmt: skip


def test_a_named_segment_that_is_unclear_is_open_and_a_decided_one_is_not() -> None:
    """A "mixed" arm whose sentence names echo (adopt) and fresh (its interval straddles
    1 − δ: unclear) keeps fresh open; a segment shown to gain nothing is an answer."""
    echo = _segment("echo", 0.5, 0.45, 0.56, "adopt")
    fresh = _segment("fresh", 1.02, 0.90, 1.15, "inconclusive")
    no_gain = _segment("fresh", 1.10, 0.97, 1.25, "inconclusive")  # lower bound > 1 − δ
    named = (("category", "echo", "helps"), ("category", "fresh", "hurts"))

    def answer(second: SegmentResult) -> Answer:
        return Answer((ArmAnswer("ngram", 0, "c=1", "mixed", "adopt", 0.8, (0.7, 0.9), (),
                                 "mixed: …", named, (echo, second)),))  # fmt: skip

    found = open_verdicts([], answer(fresh), plan=None, confidence=0.95, margin=MARGIN)
    assert [(o.arm, o.cut, o.segment) for o in found] == [("ngram", "category", "fresh")]
    assert found[0].ratio == pytest.approx(1.02) and found[0].ci_high == pytest.approx(1.15)
    assert open_verdicts([], answer(no_gain), plan=None, confidence=0.95, margin=MARGIN) == ()


# ----------------------------------------------------------------------- the words


def test_the_stopping_record_round_trips_and_reads_as_numbers() -> None:
    item = OpenVerdict("draft", 1, "c=8", None, None, 1.76, 0.36, 8.5, 5, "worse")
    s = Stopping("budget", 3, 3, 5, 15.0, 14.2, (8.4, 2.9, 2.9), 2.9, (item,))
    back = Stopping.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s
    assert Stopping.from_dict({"blocks": 4, "reason": "stopped: reached ..."}) is None
    lines = stopping_lines(s)
    assert lines[0].startswith("blocks: 3 run (at least 3, at most 5; 14.2 min of 15)")
    assert "budget of 15 min is spent" in lines[0] and "17.1 min" in lines[0]
    assert lines[1].startswith("still inconclusive: draft at c=8 ×1.76 [0.36, 8.50]: 2 more")
    assert "~6 min" in lines[1] and "(worse)" in lines[1]
    assert len(stopping_lines(s.with_open((item,) * 9))) == 1 + 6 + 1
    with pytest.raises(ValueError, match="`code`"):
        Stopping("tired", 3, 3, 5)


def test_what_a_budget_affords() -> None:
    assert affordable_blocks(done=1, elapsed_min=9.0, block_min=3.0, budget_min=15.0,
                             at_most=5) == 3  # fmt: skip
    assert affordable_blocks(done=3, elapsed_min=16.0, block_min=3.0, budget_min=15.0,
                             at_most=5) == 3  # fmt: skip
    assert affordable_blocks(done=1, elapsed_min=1.0, block_min=1.0, budget_min=60.0,
                             at_most=5) == 5  # fmt: skip
    assert math.isclose(affordable_blocks(done=2, elapsed_min=0, block_min=0, budget_min=1,
                                          at_most=7), 7)  # fmt: skip


def test_the_progress_display_follows_the_blocks_run_until_decided_adds(tmp_path) -> None:
    """The watcher read the manifest's blocks once; a block added after the planned ones
    (every planned launch done) is shown as the block being run."""
    import time

    import yaml

    from speclib.app.progress import RunWatcher
    from tests.unit.test_terminal import _fake_params, _write

    params = _fake_params(tmp_path, n_prompts=4)
    data = yaml.safe_load(params.read_text())
    data["workload"]["prompts"] = str(tmp_path / "prompts.jsonl")
    run = tmp_path / "run"
    _write(run / "params.resolved.json", ExperimentParams.model_validate(data).model_dump())
    r0 = {"block": "r0", "arms": ["control", "spec"], "launch_ids": ["c-r0", "s-r0"]}
    _write(run / "manifest.json", {"blocks": [r0]})
    w = RunWatcher(run, on_event=lambda _e: None)
    (run / "launches" / "c-r0").mkdir(parents=True)
    (run / "launches" / "c-r0" / "server.log").write_text("INFO loading\n")
    assert w.poll().block == "r0"
    for lid in r0["launch_ids"]:
        _write(run / "launches" / lid / "status.json", {"ok": True, "started_at": time.time()})
    assert w.poll().block is None  # between blocks: the look
    r1 = {"block": "r1", "arms": ["control", "spec"], "launch_ids": ["c-r1", "s-r1"]}
    _write(run / "manifest.json", {"blocks": [r0, r1]})
    (run / "launches" / "c-r1").mkdir(parents=True)
    (run / "launches" / "c-r1" / "server.log").write_text("INFO loading\n")
    state = w.poll()
    assert (state.block, state.block_index, state.n_blocks) == ("r1", 2, 2)
