"""The analysis of a run folder: records on disk → per-series tables → decisions → summary.

Pure computation over what the run wrote (``requests.jsonl``, each launch's
``status.json`` and ``/metrics`` snapshots, ``manifest.json``); no server is contacted, so
``speclib analyze RUN_DIR`` can re-decide a GPU run on a laptop with another margin or
confidence level. :func:`analyze_run` takes the records as the verdicts read them and the
TPOT family decided (:mod:`speclib.analysis.run_tpot`), reads each launch's files
(:mod:`speclib.analysis.speculation.launches`), builds the per-series table, compares every
experiment
series with the control at every load level (:mod:`speclib.analysis.verdict.comparisons`), builds
the bench-trust panel (:mod:`speclib.analysis.health.trust`, with the workload's warnings from
:mod:`speclib.analysis.health.workload_checks`) and collects the run's warnings
(:mod:`speclib.analysis.health.run_warnings`); a run with a
sweep also gets the recommended value of each sweep family at each load level
(:mod:`speclib.analysis.load.recommend`). The result is a frozen :class:`RunAnalysis` whose
:meth:`~RunAnalysis.summary` is written to ``summary.json`` through its typed model
(:func:`speclib.core.run_summary.write_summary`). Nothing is decided from a
folder whose records are not whole (:mod:`speclib.analysis.health.integrity`) unless the
caller allows it, and then the result says what is missing; a re-decision under another
params file's ``analysis`` section says which fields changed
(:mod:`speclib.params.override`). Its one concept is the whole analysis of a run folder
and its one result object; each step it calls lives in its own module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from speclib.analysis.health.compile_windows import compile_table
from speclib.analysis.health.drift import drift_table
from speclib.analysis.health.idle_load import idle_load_frame, idle_load_problem
from speclib.analysis.health.instrument import (
    InstrumentChoice,
    exclusion_table,
    launch_agreement,
)
from speclib.analysis.health.integrity import Integrity, require_whole
from speclib.analysis.health.run_warnings import run_warnings
from speclib.analysis.health.stack import stack_facts, stack_warnings
from speclib.analysis.health.trust import bench_trust, pre_checks, problem_of, ttft_problems
from speclib.analysis.health.workload_checks import workload_checks
from speclib.analysis.load.load_analysis import LoadAnalysis, analyze_load
from speclib.analysis.load.recommend import Recommendation, sweep_recommendations
from speclib.analysis.run_tpot import measure_run
from speclib.analysis.speculation.drafting import drafting_warnings
from speclib.analysis.speculation.kv_capacity import kv_capacity, server_memory
from speclib.analysis.speculation.launches import (
    LaunchMetrics,
    crosscheck_summary,
    crosscheck_warnings,
    launch_metrics,
    memory_frame,
    read_crosschecks,
    with_cache_hits,
)
from speclib.analysis.verdict.answer import Answer
from speclib.analysis.verdict.comparisons import Comparison, compare_level
from speclib.analysis.verdict.run_answer import run_answer
from speclib.analysis.verdict.run_rules import looks_plan, with_failed_arms
from speclib.analysis.verdict.segments import unsplit_edges
from speclib.analysis.verdict.series_table import series_table
from speclib.analysis.verdict.still_open import open_verdicts
from speclib.analysis.verdict.tpot_verdict import summary_of
from speclib.core.estimand import DEFINITIONS, Estimand
from speclib.core.jsonutil import jsonable
from speclib.core.run_summary import write_summary
from speclib.core.rundir import RunDir
from speclib.core.scores import read_ranks
from speclib.core.stopping import Stopping
from speclib.params.experiment import AA_ARM, ExperimentParams
from speclib.params.loader import load_params
from speclib.params.override import Redecision, redecision
from speclib.params.run_record import recorded_params

__all__ = [
    "RunAnalysis",
    "analyze_run",
]


@dataclass(frozen=True)
class RunAnalysis:
    """Everything the report shows, computed from the run folder."""

    run_dir: Path
    params: ExperimentParams
    records: pd.DataFrame = field(repr=False)
    series: pd.DataFrame = field(repr=False)
    comparisons: tuple[Comparison, ...]
    launches: tuple[dict[str, Any], ...]
    launch_metrics: tuple[LaunchMetrics, ...]
    manifest: dict[str, Any] = field(repr=False)
    memory: pd.DataFrame = field(repr=False)
    warnings: tuple[str, ...] = ()
    crosschecks: tuple[dict[str, Any], ...] = ()
    levels: tuple[dict[str, Any], ...] = ()  # per load level: block analysis, A/A arm
    idle_load: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    bench_problem: str | None = None
    sequential_look: str | None = None  # run-until-decided: which look, at which level
    look_confidence: float | None = None  # run-until-decided: this look's family confidence
    drift: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    recommendations: tuple[Recommendation, ...] = ()  # per sweep family and load level
    instrument: InstrumentChoice = field(default_factory=lambda: InstrumentChoice("client", "-"))
    agreement: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    exclusions: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    trust: dict[str, Any] = field(default_factory=dict)
    family: str = ""  # the Holm family of the TPOT verdicts, in words
    calibration: dict[str, Any] | None = None  # protocol.target_resolution: reached or not
    load: LoadAnalysis = field(default_factory=LoadAnalysis)  # break-even, schedule, goodput
    stack: dict[str, Any] = field(default_factory=dict)  # health.stack: flags, GPUs, log, truth
    integrity: Integrity = field(default_factory=Integrity)  # what the records miss, if any
    redecision: Redecision | None = None  # --params: the analysis fields changed after the run
    answer: Answer = field(default_factory=Answer)  # the final words, pooled and per segment
    compiles: tuple[dict[str, Any], ...] = ()  # health.compile_windows: compiles per launch
    stopping: Stopping | None = None  # blocks run, why they stopped, what is still open

    @property
    def design(self) -> dict[str, Any]:
        """The design the run used (interleaved or sequential, and why), from the manifest."""
        return self.manifest.get("design") or {"design": "sequential", "reason": "not recorded"}

    @property
    def experiments(self) -> tuple[Comparison, ...]:
        """The comparisons of the real experiments (the A/A arm left out)."""
        return tuple(c for c in self.comparisons if c.experiment != AA_ARM)

    @property
    def noise_floor(self) -> tuple[Comparison, ...]:
        """The A/A arm's comparisons, one per load level (empty without protocol.aa)."""
        return tuple(c for c in self.comparisons if c.experiment == AA_ARM)

    @property
    def control(self) -> str:
        """Name of the control series."""
        return self.params.control_name

    def load_frame(self) -> pd.DataFrame:
        """TPOT ratio with CI per experiment and load level (for the speed-up-vs-load plot)."""
        levels = self.params.workload.levels
        rows = []
        for c in self.comparisons:
            ci = c.cis.get("tpot_s")
            if ci is None or c.level >= len(levels):
                continue
            lv = levels[c.level]
            rows.append(
                {
                    "series": c.experiment,
                    "level": c.level,
                    "load": c.load,
                    "concurrency": lv.concurrency,
                    "request_rate": lv.request_rate,
                    "estimate": ci.estimate,
                    "ci_low": ci.ci_low,
                    "ci_high": ci.ci_high,
                    "decision": c.word,
                }
            )
        return pd.DataFrame(rows)

    def summary(self) -> dict[str, Any]:
        """The content of ``summary.json``."""
        a = self.params.analysis
        return jsonable(
            {
                "kit": "speclib",
                "experiment": self.params.name,
                "run_dir": str(self.run_dir),
                "control": self.control,
                "analysis": {
                    "confidence_level": a.confidence,
                    "margin": a.margin,
                    "n_resamples": a.n_resamples,
                    "seed": a.seed,
                    "multiple_comparisons": self.family or "no TPOT comparison",
                    "interval": (
                        "block-level paired t-interval per arm: per replicate block, the log "
                        "of the arm's mean TPOT over the control's on the block's paired "
                        "prompts (with an A/A arm: against the mean of the two control "
                        "servers), on the arm's own block-to-block variance with blocks - 1 "
                        "degrees of freedom"
                    ),
                    "tpot_estimand": Estimand.TRAFFIC,
                    "estimands": {str(e): DEFINITIONS[e] for e in Estimand},
                    "primary_metric": (
                        "TPOT = (last token - first token) / (output_tokens - 1), from "
                        + (
                            "the server's own stamps (vLLM per-request metrics, mean_itl_ms)"
                            if self.instrument.tpot == "server"
                            else "the client's stamps of each network read"
                        )
                    ),
                },
                "instrument": self.instrument.to_dict(),
                "bench_trust": self.trust,
                "instrument_agreement": self.agreement.to_dict(orient="records"),
                "exclusions": self.exclusions.to_dict(orient="records"),
                "compile_events": list(self.compiles),
                "request_instruments": _request_instruments(self.records),
                "series": self.series.to_dict(orient="records"),
                "comparisons": [
                    {**c.to_dict(), **self.answer.fields_of(c.experiment, c.level)}
                    for c in self.comparisons
                ],
                "mix": self.answer.mix.to_dict() if self.answer.mix else None,
                "answer": self.answer.to_dict(),
                "recommendations": [r.to_dict() for r in self.recommendations],
                "launches": [
                    {k: v for k, v in s.items() if k not in ("extra",)} for s in self.launches
                ],
                "launch_metrics": [m.to_dict() for m in self.launch_metrics],
                "crosschecks": [crosscheck_summary(c) for c in self.crosschecks],
                "design": self.design,
                "noise": list(self.levels),
                "bench_problem": self.bench_problem,
                "sequential_look": self.sequential_look,
                "stopping": self.stopping.to_dict() if self.stopping else None,
                "calibration": self.calibration,
                "load": self.load.to_dict(),
                "idle_load": self.idle_load.to_dict(orient="records"),
                "drift": self.drift.to_dict(orient="records"),
                "warnings": list(self.warnings),
                "integrity": self.integrity.to_dict(),
                "redecision": self.redecision.to_dict() if self.redecision else None,
                **self.stack,
            }
        )


def _plausibility(rd: RunDir, params: ExperimentParams) -> dict[str, Any]:
    if not rd.output_scores.exists():
        return {}
    from speclib.analysis.speculation.sampling import compare_run

    try:
        return dict(compare_run(rd.root, params))
    except (ValueError, OSError):
        return {}


def _load_params(rd: RunDir, params_file: str | None) -> tuple[ExperimentParams, Redecision | None]:
    """The run's own params, with ``params_file``'s ``analysis`` section when given (which
    must describe the same experiment: :func:`speclib.params.override.redecision`)."""
    params = recorded_params(rd.params_resolved)
    if not params_file:
        return params, None
    override = load_params(params_file, check_files=False)
    change = redecision(params, override, source=str(params_file))
    return params.model_copy(update={"analysis": override.analysis}), change


_INSTRUMENT_COLUMNS = (
    "launch_id",
    "level",
    "prompt_id",
    "repeat",
    "ok",
    "read_late",
    "tpot_client_s",
    "tpot_server_s",
    "ttft_client_s",
    "ttft_server_s",
    "tpot_excluded",
)


def _request_instruments(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Both instruments of every measured request (``summary.json``), from the records."""
    if df.empty:
        return []
    cols = [c for c in _INSTRUMENT_COLUMNS if c in df.columns]
    return df[cols].to_dict(orient="records")


def analyze_run(
    run_dir: str | os.PathLike[str],
    *,
    params_file: str | None = None,
    write: bool = True,
    allow_incomplete: bool = False,
    summary_file: str | os.PathLike[str] | None = None,
    mix: str | dict[str, float] | None = None,
) -> RunAnalysis:
    """Analyse a run folder; write ``summary.json`` when ``write`` (the default).

    Raises :class:`~speclib.analysis.health.integrity.RunNotWhole` before deciding anything
    when the records are not whole, unless ``allow_incomplete`` (then the result and
    ``summary.json`` say what is missing). ``summary_file``: where to write the summary
    (default ``RUN_DIR/summary.json``; ``speclib analyze`` writes a new one aside first).
    ``mix`` (``"a=0.8,b=0.2"``, a mapping, "" or None) overrides ``workload.mix`` (a bad
    category: :class:`ValueError` naming it).
    """
    rd = RunDir.at(run_dir)
    integrity = require_whole(rd.root, allow_incomplete=allow_incomplete)
    params, change = _load_params(rd, params_file)
    measured = measure_run(rd, params, mix=mix, skip_damaged=not integrity.whole)
    df, statuses, instrument = measured.records, list(measured.statuses), measured.instrument
    levels, level_conf, family = list(measured.levels), measured.confidence, measured.family
    agreement = launch_agreement(df, rd.root)
    exclusions = exclusion_table(df)
    warm = params.workload.warmup_requests
    lms = [launch_metrics(rd, s, measured.sent, warmup_requests=warm) for s in statuses]
    rows = with_cache_hits(series_table(df, params, statuses), lms)
    kv = kv_capacity(rd, statuses)
    rows["kv_cache_tokens"] = [kv.get(str(name)) for name in rows["series"]] if len(rows) else []
    mem = server_memory(rd, statuses)
    for col in ("peak_gpu_bytes", "weights_gib", "kv_cache_gib"):
        rows[col] = [(mem.get(str(n)) or {}).get(col) for n in rows["series"]] if len(rows) else []
    plaus = _plausibility(rd, params)
    ranks = read_ranks(rd.divergences)
    idle = idle_load_frame(rd.root, statuses)
    cores = int((rd.read_manifest().get("hardware") or {}).get("cpu_count") or os.cpu_count() or 1)
    idle_problem = idle_load_problem(idle, cores=cores, max_gap=params.analysis.max_contention_gap)
    checks = pre_checks(agreement, df, exclusions, idle_problem, idle, instrument=instrument.tpot)
    problem = problem_of(checks)
    comps: list[Comparison] = []
    noise: list[dict[str, Any]] = []
    aa_arm = measured.aa_arm
    lag = ttft_problems(agreement, {i: lv.label for i, lv in enumerate(params.workload.levels)})
    for lvl in levels:
        found, decided = compare_level(
            df,
            params,
            lms,
            rows,
            lvl,
            plaus,
            bench_problem=problem,
            confidence=level_conf,
            mode_problems=measured.mode_problems,
            decided=family.get(lvl),
            ttft_problem=lag.get(lvl),
            mix=measured.traffic,
            ranks=ranks,
        )
        comps += found
        if decided is not None:
            noise.append({"level": lvl, **summary_of(decided)})
    comps = with_failed_arms(
        comps, statuses, margin=params.analysis.margin, confidence=params.analysis.confidence
    )
    answer, worded = run_answer(df, params, comps, levels, level_conf, measured.traffic)
    crosschecks = read_crosschecks(rd, statuses)
    stack = stack_facts(
        rd,
        statuses,
        [m.to_dict() for m in lms],
        control=params.control_name,
        max_concurrency=max(lv.concurrency for lv in params.workload.levels),
        request_tokens=_request_tokens(df, params),
    )
    notes = run_warnings(rd, statuses, lms, df) + crosscheck_warnings(crosschecks)
    notes += drafting_warnings(m.drafting for m in lms if m.drafting is not None)
    notes += stack_warnings(stack, control=params.control_name, aa=aa_arm)
    notes += unsplit_edges(df, control=params.control_name, edges=params.analysis.segment_edges)
    aa = [c for c in comps if c.experiment == AA_ARM]
    recs = tuple(
        sweep_recommendations(params, comps, confidence_level=level_conf, mix=measured.traffic)
    )
    manifest = rd.read_manifest()
    still = open_verdicts(worded, answer, plan=looks_plan(params, manifest),
                          confidence=level_conf, margin=params.analysis.margin)  # fmt: skip
    workload = workload_checks(params, df, manifest)
    analysis = RunAnalysis(
        run_dir=rd.root,
        params=params,
        records=df,
        series=rows,
        comparisons=tuple(worded),  # the answer's words; sweeps and load read the pooled ones
        launches=tuple(statuses),
        launch_metrics=tuple(lms),
        manifest=manifest,
        memory=memory_frame(rd, statuses),
        warnings=tuple(notes),
        crosschecks=crosschecks,
        instrument=instrument,
        agreement=agreement,
        exclusions=exclusions,
        compiles=tuple(compile_table(df, measured.compiles)),
        trust=bench_trust(checks, aa, params.analysis.margin, workload=workload),
        levels=tuple(noise),
        idle_load=idle,
        bench_problem=problem,
        sequential_look=measured.look,
        look_confidence=level_conf if measured.look else None,
        family=next((d.family for d in family.values() if d.family), ""),
        drift=drift_table(df, control=params.control_name, arms=params.experiments)
        if len(df)
        else pd.DataFrame(),
        recommendations=recs,
        calibration=measured.calibration(),
        load=analyze_load(params, df, comps, recs),
        stack=stack,
        integrity=integrity,
        redecision=change,
        answer=answer,
        stopping=_stopping(manifest, df).with_open(still),
    )
    if write:
        write_summary(Path(summary_file) if summary_file else rd.summary, analysis.summary())
    return analysis


def _stopping(manifest: dict[str, Any], df: pd.DataFrame) -> Stopping:
    """The runner's record of why the blocks stopped, or (a folder without one: an older
    kit's run, a records-only folder, a run still going) the blocks its records hold."""
    found = Stopping.from_dict(manifest.get("stopping"))
    if found is not None:
        return found
    blocks = int(df["replicate"].nunique()) if len(df) and "replicate" in df else 0
    bounds = manifest.get("until_decided") or {}
    least = int(bounds.get("at_least", blocks))
    return Stopping(None, blocks, least, int(bounds.get("at_most", least)),
                    bounds.get("budget_min"))  # fmt: skip


def _request_tokens(df: pd.DataFrame, params: ExperimentParams) -> int | None:
    """The longest measured prompt plus max_tokens: the KV cache one request can need."""
    if not len(df) or "prompt_tokens" not in df:
        return None
    longest = pd.to_numeric(df["prompt_tokens"], errors="coerce").max()
    return None if pd.isna(longest) else int(longest) + params.workload.max_tokens
