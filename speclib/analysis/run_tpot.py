"""The TPOT decisions of a run folder: its records as the verdicts read them, decided.

:func:`measure_run` is the first half of every analysis of a run folder: the records
(``requests.jsonl``) with the launches that ran in the wrong mode left out, TPOT taken from
the chosen instrument (:mod:`speclib.analysis.health.instrument`) and the requests a
compile touched marked (:mod:`speclib.analysis.health.compile_windows`); then every TPOT
comparison of the family decided at this look's confidence
(:func:`speclib.analysis.verdict.tpot_verdict.decide_family`). The whole analysis
(:mod:`speclib.analysis.run_analysis`) builds the rest on it.

:func:`look_at_run` is the look of a run until decided (``protocol.max_replicates``), after
each replicate block: whether every TPOT comparison is settled (a calibration run: whether
the A/A resolution reached ``protocol.target_resolution``), and why. It reads only what that
rule needs, never the gates, the report's facts or ``summary.json``. A comparison stays
open while its TPOT decision is inconclusive and its arm can still be measured; an arm
none of whose launches ended well, or one that ran in the wrong mode, is closed (more
blocks would not decide it); an A/A arm that shows an effect stops the run (the bench is
untrustworthy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from speclib.analysis.frames import load_records
from speclib.analysis.health.compile_windows import launch_compiles, mark_compiles
from speclib.analysis.health.instrument import InstrumentChoice, apply_instrument, choose_instrument
from speclib.analysis.health.integrity import require_whole
from speclib.analysis.verdict.pairs import level_pairs
from speclib.analysis.verdict.resolution import calibration
from speclib.analysis.verdict.run_answer import traffic_mix
from speclib.analysis.verdict.run_rules import (
    decision_confidence,
    decision_looks,
    failed_outright,
)
from speclib.analysis.verdict.tpot_verdict import LevelDecision, decide_family
from speclib.core.rundir import RunDir
from speclib.params.experiment import AA_ARM, ExperimentParams

__all__ = ["Look", "MeasuredRun", "look_at_run", "measure_run"]


@dataclass(frozen=True)
class MeasuredRun:
    """A run's measured records and its TPOT decisions (what every look and analysis reads).

    ``records``: the records the verdicts read; ``sent``: every record as
    ``requests.jsonl`` holds it, warm-ups included and in its order (what each server got,
    for its ``/metrics`` window); ``statuses``: every launch's ``status.json``;
    ``traffic``: the user's traffic mix (None: the prompts as sent);
    ``mode_problems``: per series, the launch left out for its wrong mode; ``levels``: the
    load levels measured; ``confidence`` and ``look``: this look's family confidence and
    its words; ``family``: each level's TPOT decisions."""

    params: ExperimentParams
    records: pd.DataFrame = field(repr=False)
    sent: pd.DataFrame = field(repr=False)
    statuses: tuple[dict[str, Any], ...]
    traffic: dict[str, float] | None
    mode_problems: dict[str, str]
    instrument: InstrumentChoice
    compiles: dict[str, Any]
    levels: tuple[int, ...]
    confidence: float
    look: str | None
    family: dict[int, LevelDecision]

    @property
    def aa_arm(self) -> str | None:
        """The A/A arm's name, when the run has one."""
        return AA_ARM if self.params.protocol.aa else None

    def calibration(self) -> dict[str, Any] | None:
        """Whether a calibration run reached ``protocol.target_resolution`` (None otherwise):
        the A/A arm's TPOT interval at every load level, at its widest."""
        target = self.params.protocol.target_resolution
        if target is None:
            return None
        cis = [d.aa[0] for lvl in self.levels if (d := self.family.get(lvl)) and d.aa]
        return calibration(cis, target=target).to_dict()


def _without_wrong_mode(
    df: pd.DataFrame, statuses: list[dict[str, Any]]
) -> tuple[pd.DataFrame, dict[str, str]]:
    """Leave out the records of launches that did not run in the mode their params ask for
    (speculation on for an experiment, off for the control); say so per series."""
    problems: dict[str, str] = {}
    bad = []
    for s in statuses:
        check = s.get("mode_check") or {}
        if check and not check.get("ok", True):
            bad.append(s["launch_id"])
            why = "; ".join(check.get("problems") or ["mode check failed"])
            problems[s["series"]] = f"launch {s['launch_id']} excluded: {why}"
    if bad and len(df):
        df = df[~df["launch_id"].isin(bad)]
    return df, problems


def measure_run(
    rd: RunDir,
    params: ExperimentParams,
    *,
    mix: str | dict[str, float] | None = None,
    skip_damaged: bool = False,
) -> MeasuredRun:
    """The records of ``rd`` as the verdicts read them, and every TPOT comparison decided
    (Holm over every arm and load level, replayed look by look in a run until decided).
    ``mix`` overrides ``workload.mix`` (:func:`speclib.analysis.verdict.run_answer.traffic_mix`);
    ``skip_damaged``: decided on incomplete records, the damaged lines are left out."""
    sent = load_records(rd.root, phase=None, skip_damaged=skip_damaged)
    df = sent[sent["phase"] == "measure"].reset_index(drop=True) if len(sent) else sent
    traffic = traffic_mix(params, df, mix)
    statuses = rd.statuses()
    df, mode_problems = _without_wrong_mode(df, statuses)
    instrument = choose_instrument(df, [params.control_name, *params.experiments])
    df = apply_instrument(df, instrument)
    compiles = launch_compiles(rd.root)
    df = mark_compiles(df, compiles)
    levels = sorted(int(x) for x in df["level"].unique()) if len(df) else []
    n_blocks = int(df["replicate"].nunique()) if len(df) else 0
    confidence, look = decision_confidence(params, n_blocks)
    aa_arm = AA_ARM if params.protocol.aa else None
    family = decide_family(
        {lvl: level_pairs(df, params, lvl) for lvl in levels},
        experiments=[n for n in params.experiments if n != aa_arm],
        aa_arm=aa_arm,
        confidence=confidence,
        margin=params.analysis.margin,
        looks=decision_looks(params, n_blocks),
        mix=traffic,
    )
    return MeasuredRun(
        params=params,
        records=df,
        sent=sent,
        statuses=tuple(statuses),
        traffic=traffic,
        mode_problems=mode_problems,
        instrument=instrument,
        compiles=compiles,
        levels=tuple(levels),
        confidence=confidence,
        look=look,
        family=family,
    )


@dataclass(frozen=True)
class Look:
    """One look of a run until decided: whether to stop adding blocks, and why."""

    decided: bool
    why: str


def _word(measured: MeasuredRun, arm: str, found: LevelDecision) -> str:
    """An experiment's word for the look at one level, in the order the verdict's words
    override each other: "failed" (none of its launches ended well: more blocks would not
    decide it), "untrustworthy" (the A/A arm showed an effect), "reject" (a launch of the
    arm or of the control ran in the wrong mode), else its TPOT decision."""
    if failed_outright([s for s in measured.statuses if s.get("series") == arm]):
        return "failed"
    if found.bench_effect:
        return "untrustworthy"
    problems = measured.mode_problems
    if problems.get(arm) or problems.get(measured.params.control_name):
        return "reject"
    dec = found.experiments.get(arm)
    return dec[1].word if dec else "inconclusive"


def _words(measured: MeasuredRun) -> dict[str, str]:
    """Each experiment's word for the look (the last load level's, as the verdict table
    lists them); without experiments, the A/A arm's own (the noise floor)."""
    aa = measured.aa_arm
    words: dict[str, str] = {}
    noise: dict[str, str] = {}
    for lvl in measured.levels:
        found = measured.family[lvl]
        for arm in measured.params.experiments:
            if arm == aa:
                noise[arm] = found.aa[1].word if found.aa else "inconclusive"
            else:
                words[arm] = _word(measured, arm, found)
    return words or noise


def look_at_run(rd: RunDir, params: ExperimentParams) -> Look:
    """The look after the blocks so far (at this look's spending level): decided, and why."""
    require_whole(rd.root, allow_incomplete=False)
    measured = measure_run(rd, params)
    found = measured.calibration()
    if found is not None:  # the width alone decides (never where the interval lies)
        return (
            Look(True, f"stopped: {found['text']}")
            if found.get("reached")
            else Look(False, found["text"])
        )
    words = _words(measured)
    if any(w == "untrustworthy" for w in words.values()):
        return Look(True, "stopped: the bench is untrustworthy (see the noise floor)")
    if words and all(w != "inconclusive" for w in words.values()):
        named = ", ".join(f"{n} {w}" for n, w in words.items())
        return Look(True, f"stopped: every experiment decided ({named}; {measured.look})")
    open_ = [n for n, w in words.items() if w == "inconclusive"]
    return Look(False, f"inconclusive: {', '.join(open_) or 'no experiment'}")
