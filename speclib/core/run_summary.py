"""The run's ``summary.json``: its typed model, the one writer and the one reader.

The analysis (:mod:`speclib.analysis.run_analysis`) writes a run's decision into
``RUN_DIR/summary.json`` through :func:`write_summary`; the terminal
(:mod:`speclib.app.verdicts`), the CLI and ``speclib compare``
(:mod:`speclib.report.multirun`) read it back through :func:`read_summary`, and nothing else
opens the file. A missing, unreadable or malformed file is one error,
:class:`SummaryError`, whose message names the file and, for a malformed one, the field; a
missing one is also a :class:`FileNotFoundError` and says to run ``speclib analyze``.

:class:`RunSummary` types the entries the readers use (each comparison, its gates, the
rule, the bench trust, the answer, integrity, re-decision, recommendations, load) and keeps
the large tables (per-request instruments, series, launches, drift, …) as lists of
mappings. Every model here accepts fields it does not declare and writes them back
unchanged, so a summary written by a newer kit, or a field another part of the analysis
adds, neither breaks a reader nor is lost on a round trip: declare a new field here (with
its ``description``, which ``docs/run-folder.md`` shows) to type it. Fields a summary of an
older kit lacks take their defaults and are not written back
(``model_dump(exclude_unset=True)``). ``docs/run-folder.md`` is generated from these models
by ``scripts/make_run_folder_doc.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from speclib.core.rundir import write_json_atomic

__all__ = [
    "AnalysisRule",
    "AnswerEntry",
    "BenchCheckEntry",
    "BenchTrust",
    "ComparisonEntry",
    "FieldChange",
    "GateEntry",
    "InstrumentEntry",
    "IntegrityEntry",
    "LoadEntry",
    "RecommendationEntry",
    "RedecisionEntry",
    "RunSummary",
    "SummaryError",
    "SummaryNotFound",
    "TrustCheckEntry",
    "read_summary",
    "write_summary",
]

Rows = list[dict[str, Any]]


class SummaryError(ValueError):
    """``summary.json`` is missing, unreadable, not JSON or not a summary; the message names
    the file (and the field)."""


class SummaryNotFound(SummaryError, FileNotFoundError):
    """There is no ``summary.json`` where one was asked for: the run was never analysed."""


class _Entry(BaseModel):
    """An entry of ``summary.json``: typed where declared, every other field kept."""

    model_config = ConfigDict(extra="allow", frozen=True)


class AnalysisRule(_Entry):
    """The rule the verdicts were decided under (the params' ``analysis`` section, as run
    or as re-decided, and the interval and metric in words)."""

    confidence_level: float | None = Field(None, description="Family confidence level.")
    margin: float | None = Field(None, description="The rule's margin δ (a fraction).")
    n_resamples: int | None = Field(None, description="Bootstrap resamples (information only).")
    seed: int | None = Field(None, description="Seed of every resampling.")
    multiple_comparisons: str | None = Field(
        None, description="The Holm family of the TPOT verdicts, in words."
    )
    interval: str | None = Field(None, description="The TPOT interval, in words.")
    tpot_estimand: str | None = Field(
        None, description="Which TPOT ratio the verdicts decide on (`speclib/core/estimand.py`)."
    )
    estimands: dict[str, str] = Field(
        default_factory=dict, description="Each TPOT ratio's name and its definition."
    )
    primary_metric: str | None = Field(
        None, description="TPOT's definition and whose stamps it comes from."
    )


class InstrumentEntry(_Entry):
    """Which instrument the TPOT verdicts use, and why."""

    tpot: str = Field("client", description='"server" (vLLM\'s own stamps) or "client".')
    reason: str = Field("", description="Why that instrument.")


class TrustCheckEntry(_Entry):
    """One bench-trust or workload check."""

    check: str = Field(description="What is checked.")
    status: str = Field(description='"pass", "fail" or "not assessed".')
    figure: str = Field("", description="The check's figure, in words.")
    detail: str = Field("", description="What was compared.")
    per_arm: dict[str, str] = Field(default_factory=dict, description="Per-arm figures.")
    gating: bool = Field(True, description="Whether a failure makes every verdict untrustworthy.")


class BenchTrust(_Entry):
    """The bench-trust panel: every check, and whether the bench can be trusted."""

    trusted: bool = Field(False, description="Every check passed.")
    untrustworthy: bool = Field(False, description="A gating check failed.")
    checks: list[TrustCheckEntry] = Field(default_factory=list, description="The checks.")
    workload: list[TrustCheckEntry] = Field(
        default_factory=list, description="The workload's checks (never a veto)."
    )
    workload_warnings: list[str] = Field(
        default_factory=list, description="The workload checks that failed, by name."
    )


class GateEntry(_Entry):
    """One gate of a verdict (``speclib/analysis/verdict/gates.py``)."""

    name: str = Field(description="errors, outputs, memory, ttft, e2e, mode or bench.")
    status: str | None = Field(None, description='"pass", "fail" or "not assessed" (never a pass).')
    detail: str = Field("", description="What was compared.")
    passed: bool = Field(False, description="True only for a gate that was assessed and passed.")

    @property
    def state(self) -> str:
        """The status; for a summary from before gates had one, pass or fail by ``passed``."""
        return self.status or ("pass" if self.passed else "fail")


class BenchCheckEntry(_Entry):
    """The A/A arm's interval as a check of the bench (its ``bench_check``)."""

    resolution: float | None = Field(
        None, description="The interval's half-width as a ratio: the smallest effect it tells."
    )
    margin: float | None = Field(None, description="δ.")
    confidence_level: float | None = Field(None, description="Level.")
    n_blocks: int = Field(0, description="Replicate blocks.")
    df: int | None = Field(None, description="Degrees of freedom.")
    block_sd_log: float | None = Field(None, description="Block-to-block SD of the log ratio.")
    word: str | None = Field(None, description="The rule's word on the A/A interval.")
    excludes_one: bool = Field(False, description="The interval excludes 1.")
    false_effect: bool = Field(False, description="The rule's word is an effect: untrustworthy.")
    blocks_needed: int | None = Field(None, description="Blocks for a resolution of ±δ.")
    estimate: float | None = Field(None, description="The A/A ratio.")
    ci_low: float | None = Field(None, description="Interval low.")
    ci_high: float | None = Field(None, description="Interval high.")
    more_blocks: int | None = Field(None, description="Blocks still to run for ±δ.")
    text: str = Field("", description="The check in words.")


class ComparisonEntry(_Entry):
    """One arm against the control at one load level (``comparisons[]``)."""

    experiment: str = Field(description="The arm.")
    role: str = Field("experiment", description='"experiment", or "aa" for the A/A arm.')
    control: str | None = Field(None, description="The control series.")
    level: int = Field(0, description="Index of the load level.")
    load: str | None = Field(None, description='The load level in words ("c=4").')
    method: str | None = Field(None, description="Speculative method (null: none).")
    num_speculative_tokens: int | None = Field(None, description="k.")
    absolute: dict[str, Any] = Field(
        default_factory=dict, description="TPOT/TTFT p50 and p90 (ms) and tokens/s per side."
    )
    n_pairs: int = Field(0, description="Paired requests.")
    n_launches: int = Field(0, description="Replicate blocks with pairs.")
    median_tpot_control_s: float | None = Field(None, description="Control's median TPOT (s).")
    median_tpot_experiment_s: float | None = Field(None, description="Arm's median TPOT (s).")
    mean_tpot_control_s: float | None = Field(
        None, description="Control's mean TPOT over the paired prompts (s; the mix's, with one)."
    )
    mean_tpot_experiment_s: float | None = Field(
        None, description="Arm's mean TPOT over the paired prompts (s; the mix's, with one)."
    )
    tpot_ratio: float | None = Field(None, description="TPOT ratio arm / control (< 1: faster).")
    tpot_ratio_ci: list[float | None] | None = Field(
        None, description="Its interval [low, high] at `confidence_level`."
    )
    tpot_estimand: str | None = Field(
        None,
        description="Which ratio `tpot_ratio` is: `traffic` (mean TPOT over the same prompts), "
        "`per_token` or `typical_request`; null in a summary written before the kit named it, "
        "whose ratio is the typical request's.",
    )
    tpot_ratios: dict[str, Any] = Field(
        default_factory=dict,
        description="Every TPOT ratio by estimand, each with its interval (the verdict's and "
        "the descriptive ones beside it).",
    )
    answer_lengths_differ: bool = Field(
        False, description="The arms' answer lengths differ: the per-token ratio is shown."
    )
    tpot_ratio_by_category: dict[str, Any] = Field(
        default_factory=dict,
        description="Per prompt category: the block-model ratio with its interval, `df`, "
        "pairs and blocks, or no interval and a `note` below 6 pairs or 2 blocks "
        "(descriptive, not adjusted for multiplicity).",
    )
    tpot_ratio_by_category_note: str | None = Field(
        None, description="What the per-category intervals are."
    )
    tpot_ratio_by_turn: dict[str, Any] = Field(
        default_factory=dict,
        description='Multi-turn runs: the same per turn, keyed "1", "2", … (else empty).',
    )
    tpot_ratio_by_turn_note: str | None = Field(None, description="What they are.")
    confidence_level: float | None = Field(None, description="Level of the TPOT interval.")
    ci_method: str | None = Field(None, description="The TPOT interval's method.")
    tpot_decision: str = Field("inconclusive", description="The TPOT rule's word.")
    decision: str = Field(
        "inconclusive", description='The final word (the answer\'s, "mixed" included).'
    )
    reasons: list[str] = Field(default_factory=list, description="Why, in words.")
    extra_pairs_needed: int | None = Field(
        None, description="About how many more pairs may decide an inconclusive word."
    )
    extra_launches_needed: int | None = Field(
        None, description="About how many more blocks may decide it."
    )
    bench_check: BenchCheckEntry | None = Field(
        None, description="The A/A arm: its resolution and whether it shows a false effect."
    )
    metrics: dict[str, Any] = Field(
        default_factory=dict,
        description="TPOT, TTFT and E2E intervals; `tpot_prompt_level`: what a launch-blind "
        "prompt-level bootstrap would say (information only).",
    )
    gates: list[GateEntry] = Field(default_factory=list, description="Every gate checked.")
    pairing: dict[str, Any] = Field(
        default_factory=dict, description="Pairs made, dropped (by reason) and used."
    )
    error_rate_control: float | None = Field(None, description="Control's failed share.")
    error_rate_experiment: float | None = Field(
        None, description="Arm's failed share (null: it sent no request)."
    )
    bad_outputs_control: int = Field(0, description="Control outputs flagged wrong.")
    bad_outputs_experiment: int = Field(0, description="Arm outputs flagged wrong.")
    agreement: dict[str, Any] | None = Field(None, description="Greedy output agreement.")
    divergences: dict[str, Any] = Field(
        default_factory=dict,
        description="Greedy runs: per prompt whose answer left the control's, the first "
        "differing token's class (a near tie within `analysis.near_tie_nats`, a real "
        "disagreement, or unranked) with the target's log-probabilities of both tokens.",
    )
    why_by_category: dict[str, Any] = Field(
        default_factory=dict,
        description="Per kind of prompt: tokens per decode step, step cost and TPOT ratio "
        "from the streams of its pairs.",
    )
    acceptance: dict[str, Any] = Field(
        default_factory=dict,
        description="Acceptance per request and from `/metrics`, reconciled; under `stream` "
        "the accepted drafts read from the streams, checked against both (`matches`, "
        "`notes`).",
    )
    explanation: dict[str, Any] | None = Field(
        None,
        description="Why this speed-up: its `decomposition` counts every decode step "
        "(`decode_steps`, `drafted_steps`, `drafted_share`, `undrafted_share`, "
        "`drafted_share_source`, `requests_drafted` of `n_requests`, `acceptance_rate` on "
        "drafted steps); the standard model's `prediction`, and a `summary` in words.",
    )
    peak_rss_bytes: int | None = Field(None, description="The arm's peak server RSS.")
    plausibility: dict[str, Any] | None = Field(
        None, description="Sampled runs: the outputs' log-prob check."
    )
    pooled_decision: str | None = Field(
        None, description='The gated pooled word ("decision" is the answer\'s).'
    )
    short_reason: str | None = Field(
        None, description='The terminal\'s phrase for a "mixed" arm, else null.'
    )
    segment_sentence: str | None = Field(
        None, description='The answer\'s sentence for a "mixed" arm, else null.'
    )


class RecommendationEntry(_Entry):
    """The recommended value of one sweep family at one load level."""

    family: str = Field(description="The sweep family.")
    level: int = Field(0, description="Index of the load level.")
    load: str | None = Field(None, description="The load level in words.")
    outcome: str = Field(description='"recommended", "no_k_pays", "undecided" or "no_data".')
    arm: str | None = Field(None, description="The recommended arm.")
    value: dict[str, Any] | None = Field(None, description="Its sweep values.")
    ratio: float | None = Field(None, description="Its TPOT ratio to the control.")
    ci_low: float | None = Field(None, description="Interval low.")
    ci_high: float | None = Field(None, description="Interval high.")
    best_arm: str | None = Field(None, description="The arm with the lowest ratio.")
    margin: float | None = Field(None, description="δ.")
    confidence_level: float | None = Field(None, description="Level.")
    reason: str | None = Field(None, description="The outcome in words.")
    tests: Rows = Field(default_factory=list, description="Every other arm against the best.")


class AnswerEntry(_Entry):
    """The run's answer (``speclib/analysis/verdict/answer.py``)."""

    arms: Rows = Field(
        default_factory=list,
        description="Per experiment and load level: the final word, the pooled word, "
        "reasons, every segment's ratio, interval, share and decision by cut, and each "
        "cut's heterogeneity check.",
    )
    segment_family: str = Field("", description="The segments' multiplicity family.")
    mix: dict[str, Any] | None = Field(
        None, description="The user's traffic mix the answer is for (null: the prompts as sent)."
    )
    headline: list[str] = Field(default_factory=list, description="The headline sentences.")
    deploy: dict[str, Any] = Field(
        default_factory=dict, description="On/off per category and load, and routing advice."
    )
    rule: str = Field("", description='When an arm is "mixed", in words.')


class LoadEntry(_Entry):
    """Load: per arm and level, throughput, latency percentiles and goodput; break-even."""

    uses: str = Field("", description="What the load figures are computed from.")
    levels: Rows = Field(
        default_factory=list,
        description="Per arm and load level: mean requests in flight, output tokens/s, "
        "TTFT/TPOT/E2E percentiles and, with `analysis.slo`, the share meeting it and "
        "goodput, each with its block interval.",
    )
    break_even: Rows = Field(
        default_factory=list, description="Per experiment: the load where it stops paying."
    )
    slo: dict[str, Any] | None = Field(None, description="`analysis.slo`, when set.")
    goodput: Rows = Field(default_factory=list, description="The goodput verdicts.")
    highest_load_within_slo: dict[str, Any] = Field(
        default_factory=dict, description="Per arm: the highest load level within the SLO."
    )
    k_schedules: Rows = Field(default_factory=list, description="The k schedules.")
    notes: list[str] = Field(
        default_factory=list, description="Levels that ran below their concurrency."
    )


class IntegrityEntry(_Entry):
    """Whether the records were whole when the run was decided."""

    whole: bool = Field(True, description="No record missing or damaged.")
    missing: list[str] = Field(default_factory=list, description="What is missing, one a line.")
    records_only: bool = Field(False, description="Records only: no launches, no design.")
    decided_incomplete: bool = Field(False, description="Decided anyway (--allow-incomplete).")


class FieldChange(_Entry):
    """One ``analysis`` field changed by a re-decision."""

    field: str = Field(description="The dotted field.")
    run: Any = Field(None, description="The run's value.")
    now: Any = Field(None, description="The value decided with.")


class RedecisionEntry(_Entry):
    """A re-decision under another params file's ``analysis`` section (``--params``)."""

    params_file: str = Field(description="The params file.")
    changed: list[FieldChange] = Field(default_factory=list, description="Each changed field.")


class RunSummary(_Entry):
    """The whole of ``summary.json``."""

    kit: str = Field("speclib", description='Always "speclib".')
    experiment: str | None = Field(None, description="The params' `name`.")
    run_dir: str | None = Field(None, description="The run folder analysed.")
    control: str | None = Field(None, description="The control series.")
    analysis: AnalysisRule = Field(default_factory=AnalysisRule, description="The rule.")
    instrument: InstrumentEntry = Field(
        default_factory=InstrumentEntry, description="The TPOT instrument."
    )
    bench_trust: BenchTrust = Field(default_factory=BenchTrust, description="Bench trust.")
    instrument_agreement: Rows = Field(
        default_factory=list, description="Per launch window: client against server stamps."
    )
    exclusions: Rows = Field(
        default_factory=list, description="Per series and level: requests left out, why."
    )
    compile_events: Rows = Field(
        default_factory=list, description="Compiles in vLLM's log and the requests they touched."
    )
    request_instruments: Rows = Field(
        default_factory=list, description="Both instruments of every measured request."
    )
    series: Rows = Field(default_factory=list, description="The per-series table.")
    comparisons: list[ComparisonEntry] = Field(
        default_factory=list, description="Every arm against the control at every load level."
    )
    mix: dict[str, Any] | None = Field(
        None,
        description="The user's traffic mix the verdicts are for (`text`, the shares, the "
        "run's shares, the categories left out); null for the prompts as sent.",
    )
    answer: AnswerEntry | None = Field(None, description="The run's answer.")
    recommendations: list[RecommendationEntry] = Field(
        default_factory=list, description="Per sweep family and load level."
    )
    launches: Rows = Field(
        default_factory=list, description="Every launch's `status.json` (no `extra`)."
    )
    launch_metrics: Rows = Field(
        default_factory=list,
        description="Per launch the `/metrics` deltas, each with `drafting`: the streams' "
        "decode steps and accepted drafts against `num_drafts` and `num_accepted_tokens`, "
        "the launch's `drafted_share`, `agrees`, `note`.",
    )
    crosschecks: Rows = Field(
        default_factory=list, description="The vllm bench cross-checks, when on."
    )
    design: dict[str, Any] = Field(
        default_factory=dict, description="Interleaved or sequential, and why."
    )
    noise: Rows = Field(
        default_factory=list,
        description="Per load level: the block analysis (degrees of freedom, pooled "
        "variance, instance share) and the A/A arm's interval and decision.",
    )
    bench_problem: str | None = Field(None, description="Why the bench cannot be trusted.")
    sequential_look: str | None = Field(None, description="Run until decided: which look.")
    stopping: dict[str, Any] | None = Field(
        None,
        description="Run until decided (`speclib/core/stopping.py`): `code` (decided, budget, "
        "cap, resolution, planned; null for a folder whose runner recorded none), `blocks`, "
        "`at_least`, `at_most`, `budget_min`, `elapsed_min`, `block_min`, `next_block_min`, "
        "and `open`: each verdict still inconclusive (`arm`, `level`, `load`, `cut` and "
        "`segment` for a segment, `ratio`, `ci_low`, `ci_high`, the `blocks_needed` in all "
        "and the `target` word it would likely reach).",
    )
    calibration: dict[str, Any] | None = Field(
        None, description="`protocol.target_resolution`: reached or not (`text`)."
    )
    load: LoadEntry = Field(default_factory=LoadEntry, description="Load and break-even.")
    idle_load: Rows = Field(
        default_factory=list, description="Per block and arm: CPU idle, serving, background."
    )
    drift: Rows = Field(default_factory=list, description="Change-point test per launch.")
    warnings: list[str] = Field(default_factory=list, description="The run's warnings.")
    integrity: IntegrityEntry = Field(
        default_factory=IntegrityEntry, description="Whether the records were whole."
    )
    redecision: RedecisionEntry | None = Field(
        None, description="The analysis fields changed after the run (`--params`)."
    )
    server_commands: dict[str, Any] | None = Field(
        None, description="The server commands checked against vLLM's parser; flags left out."
    )
    placement: dict[str, Any] = Field(
        default_factory=dict, description="Per series: GPUs, memory share, KV cache."
    )
    placement_line: str | None = Field(None, description="Where the arms ran, in one line.")
    memory_plan: dict[str, Any] | None = Field(None, description="The GPU memory plan.")
    speed_log: dict[str, Rows] = Field(
        default_factory=dict, description="Per series: vLLM's log lines that bear on speed."
    )
    acceptance_truth: Rows = Field(
        default_factory=list, description="Per launch: acceptance against a synthetic truth."
    )
    acceptance_truth_line: str | None = Field(None, description="That, in one line.")
    acceptance_replay: dict[str, Any] | None = Field(
        None,
        description="`speclib replay-acceptance`: each draft launch's acceptance per position "
        "counted outside vLLM (`launches`, pooled per `series`, along the `control_answers`, the "
        "`target_check`, `device`, `dtype`); null when it never ran.",
    )
    acceptance_replay_line: str | None = Field(None, description="That, in one line.")

    @property
    def experiments(self) -> list[ComparisonEntry]:
        """The comparisons of the experiment arms (the A/A arm left out)."""
        return [c for c in self.comparisons if c.role != "aa"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: every field that was set, undeclared ones included, in order."""
        return self.model_dump(mode="python", exclude_unset=True)


def _where(loc: tuple[int | str, ...]) -> str:
    """A validation error's location as a path: ``comparisons[2].gates[0].status``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _folder_of(path: Path) -> Path:
    return path.parent if path.name == "summary.json" else path


def read_summary(path: str | os.PathLike[str]) -> RunSummary:
    """The summary in ``path`` (a ``summary.json``), typed.

    Raises :class:`SummaryNotFound` when there is none (the message says to run
    ``speclib analyze``), else :class:`SummaryError` naming the file and, for a malformed
    summary, its first bad field. Fields the model does not declare are kept.
    """
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        folder = _folder_of(path)
        raise SummaryNotFound(
            f"{folder} holds no {path.name}: run `speclib analyze {folder}` first"
        ) from None
    except UnicodeDecodeError:
        raise SummaryError(f"summary {path} is not UTF-8 text") from None
    except OSError as exc:
        raise SummaryError(f"summary {path} cannot be read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SummaryError(f"summary {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SummaryError(f"summary {path} does not hold a JSON object")
    try:
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise SummaryError(
            f"summary {path} is not a speclib summary: {_where(first['loc'])}: {first['msg']}"
            + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else "")
        ) from None


def write_summary(path: str | os.PathLike[str], summary: RunSummary | dict[str, Any]) -> Path:
    """Write ``summary`` (a :class:`RunSummary`, or the mapping the analysis builds, checked
    against the model first) to ``path``, atomically (a temporary file, then a rename).
    Returns the path."""
    model = summary if isinstance(summary, RunSummary) else RunSummary.model_validate(summary)
    write_json_atomic(Path(path), model.to_dict())
    return Path(path)
