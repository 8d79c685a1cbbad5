"""The TPOT decisions of a run folder: its records as the verdicts read them, decided.

:func:`measure_run` is the first half of every analysis of a run folder: the records
(``requests.jsonl``) with the launches that ran in the wrong mode left out, TPOT taken from
the chosen instrument (:mod:`speclib.analysis.health.instrument`) and the requests a
compile touched marked (:mod:`speclib.analysis.health.compile_windows`); then every TPOT
comparison of the family decided at this look's confidence
(:func:`speclib.analysis.verdict.tpot_verdict.decide_family`). The whole analysis
(:mod:`speclib.analysis.run_analysis`) builds the rest on it.

:func:`speclib.analysis.run_look.look_at_run` reads the same decisions after each block of a
run until decided; the looks it replays are those the manifest records
(:func:`speclib.analysis.verdict.run_rules.looks_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from speclib.analysis.frames import load_records
from speclib.analysis.health.compile_windows import launch_compiles, mark_compiles
from speclib.analysis.health.instrument import InstrumentChoice, apply_instrument, choose_instrument
from speclib.analysis.verdict.pairs import level_pairs
from speclib.analysis.verdict.resolution import calibration
from speclib.analysis.verdict.run_answer import traffic_mix
from speclib.analysis.verdict.run_rules import decision_confidence, decision_looks
from speclib.analysis.verdict.tpot_verdict import LevelDecision, decide_family
from speclib.core.rundir import RunDir
from speclib.params.experiment import AA_ARM, ExperimentParams

__all__ = ["MeasuredRun", "measure_run"]


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
    manifest = rd.read_manifest()
    confidence, look = decision_confidence(params, n_blocks, manifest)
    aa_arm = AA_ARM if params.protocol.aa else None
    family = decide_family(
        {lvl: level_pairs(df, params, lvl) for lvl in levels},
        experiments=[n for n in params.experiments if n != aa_arm],
        aa_arm=aa_arm,
        confidence=confidence,
        margin=params.analysis.margin,
        looks=decision_looks(params, n_blocks, manifest),
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
