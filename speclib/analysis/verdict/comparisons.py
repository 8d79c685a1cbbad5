"""One experiment series against the control: pairs, ratio CIs, decision, gates, acceptance.

:func:`compare_level` builds the :class:`Comparison` of every experiment at one load level:
it pairs requests by replicate, prompt and repeat; decides TPOT with Holm's step-down across
the experiments; computes TTFT and E2E ratio CIs for the gates with the same block model as
TPOT (:func:`gate_cis`: per-arm paired t over replicate blocks, same reference); weighs the
gates (errors, outputs, memory, TTFT/E2E; each "pass", "fail" or "not assessed"); sums
acceptance per request and from the launches' ``/metrics`` deltas; compares greedy outputs;
gives each prompt category (and each turn of a multi-turn run) its TPOT ratio with a
descriptive block-level interval (:mod:`speclib.analysis.verdict.categories`); and explains the
speed-up with the standard model of speculative decoding. A launch-blind prompt-level
bootstrap of TPOT is kept as labelled information (``tpot_prompt_level``), never a gate or
the verdict.

Which TPOT ratio each figure is (:mod:`speclib.core.estimand`): the verdict's,
``cis["tpot_s"]``, is the traffic's (mean TPOT over the same prompts); ``ratios`` holds it
beside the token-weighted ratio and the typical request's (a geometric mean), both
descriptive, at the run's confidence; the per-category and per-turn ratios are each
group's traffic ratio; the gates' TTFT and E2E and the prompt-level bootstrap are the
typical request's.

The pairs of a level and their intervals are in :mod:`speclib.analysis.verdict.pairs`, the
acceptance, the why and the sampling check's gate inputs in
:mod:`speclib.analysis.verdict.explain`. A comparison's record (:class:`Comparison`, with
its ``summary.json`` entry) and its assembly from pairs, intervals and gates
(:func:`compare_level`) are one concept and change together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from speclib.analysis.frames import PairedFrame, finite_median, pair_frame
from speclib.analysis.speculation.agreement import (
    Agreement,
    AgreementSummary,
    DivergenceClass,
    classify_divergences,
    compare_outputs,
    count_bad_outputs,
    summarize_agreement,
    varying_prompts,
)
from speclib.analysis.speculation.launches import LaunchMetrics
from speclib.analysis.speculation.why import WhySpeedup
from speclib.analysis.stats.ratio_interval import RatioInterval
from speclib.analysis.verdict.absolute import absolute_summary
from speclib.analysis.verdict.categories import (
    CATEGORY_NOTE,
    TURN_NOTE,
    CategoryRatio,
    category_ratios,
    turn_ratios,
)
from speclib.analysis.verdict.decision import Decision
from speclib.analysis.verdict.explain import (
    acceptance_summary,
    explain_speedup,
    implausible_count,
    plausibility_dict,
    unscored_reason,
    why_by_category,
)
from speclib.analysis.verdict.final_word import Verdict, final_word
from speclib.analysis.verdict.gates import GateEvidence, GateResult, assess_gates, rule_gates
from speclib.analysis.verdict.pairs import (
    GATE_METRICS,
    estimand_cis,
    finite_pairs,
    gate_cis,
    has_usable_pairs,
    pair_exclusions,
    pair_ratio_ci,
)
from speclib.analysis.verdict.resolution import bench_check
from speclib.analysis.verdict.tpot_verdict import (
    LevelDecision,
    decide_level,
)
from speclib.core.estimand import Estimand
from speclib.core.jsonutil import jsonable
from speclib.core.reason_text import render_all
from speclib.core.reasons import Code, Reason
from speclib.core.verdict_words import Word
from speclib.params.experiment import AA_ARM, ExperimentParams

__all__ = [
    "Comparison",
    "compare_level",
]


@dataclass(frozen=True)
class Comparison:
    """One experiment series against the control.

    Its word is not stored but made, always by
    :func:`~speclib.analysis.verdict.final_word.final_word`, from its inputs: ``decision``
    (the TPOT rule's), ``gates`` (assessed), ``correctness_unknown`` (a sampled run whose
    outputs were not scored), ``failure`` (every launch of the arm failed: its cause) and
    ``segments`` (the answer's "mixed" or "uneven" reason). :attr:`verdict` is the final
    word with all of them; :attr:`pooled_verdict` the same without the segments, which is
    what the segments, the sweep recommendation and the load analysis read.
    """

    experiment: str
    control: str
    level: int
    load: str
    method: str | None
    k: int | None
    pairing: dict[str, Any]
    n_launches: int
    cis: dict[str, RatioInterval | None]
    decision: Decision | None
    gates: tuple[GateResult, ...]
    error_rate_control: float
    error_rate_experiment: float | None  # None: the arm sent no request
    bad_outputs_control: int
    bad_outputs_experiment: int
    median_tpot_control_s: float | None
    median_tpot_experiment_s: float | None
    agreement: AgreementSummary | None
    agreements: dict[str, Agreement]
    acceptance: dict[str, Any]
    explanation: WhySpeedup | None
    peak_rss_bytes: int | None
    pairs: pd.DataFrame = field(repr=False)
    plausibility: Any = (
        None  # speclib.analysis.speculation.sampling.PlausibilityResult (sampled runs)
    )
    by_category: dict[str, CategoryRatio] = field(default_factory=dict)
    by_turn: dict[int, CategoryRatio] = field(default_factory=dict)  # multi-turn runs
    # the TPOT ratio as each estimand (speclib.core.estimand): the traffic's is cis["tpot_s"],
    # the verdict's; the token-weighted and the typical request's are descriptive
    ratios: dict[Estimand, RatioInterval | None] = field(default_factory=dict)
    mix: dict[str, float] | None = None  # the user's mix the verdict is for (None: as sent)

    @property
    def mean_tpot_s(self) -> tuple[float | None, float | None]:
        """The control's and the arm's mean TPOT over the pairs the verdict uses (the two
        sides of the traffic's ratio; under the user's mix, each category's mean at its
        share)."""
        p = finite_pairs(self.pairs) if has_usable_pairs(self.pairs) else None
        if p is None or not len(p):
            return None, None
        if not self.mix or "category" not in p:
            return float(p["tpot_s_c"].mean()), float(p["tpot_s_e"].mean())
        means = p.groupby(p["category"].fillna("uncategorised").astype(str))[
            ["tpot_s_c", "tpot_s_e"]].mean()  # fmt: skip
        shares = {c: w for c, w in self.mix.items() if w > 0}
        if not set(shares) <= set(means.index):
            return None, None
        return tuple(float(sum(w * means.loc[c, side] for c, w in shares.items()))
                     for side in ("tpot_s_c", "tpot_s_e"))  # type: ignore[return-value]  # fmt: skip

    @property
    def lengths_differ(self) -> bool:
        """Whether the answers of the pairs the verdict uses differ in length (then the
        token-weighted ratio is not the traffic's and is shown beside it)."""
        p = finite_pairs(self.pairs) if has_usable_pairs(self.pairs) else None
        if p is None or "output_tokens_c" not in p or "output_tokens_e" not in p:
            return False
        tokens = pd.concat([p["output_tokens_c"], p["output_tokens_e"]])
        return bool(pd.to_numeric(tokens, errors="coerce").nunique() > 1)

    divergences: dict[str, DivergenceClass] = field(default_factory=dict)  # greedy runs
    why_by_category: dict[str, dict[str, Any]] = field(default_factory=dict)
    correctness_unknown: Reason | None = None
    failure: Reason | None = None  # every launch of the arm failed: its cause
    segments: Reason | None = None  # the answer's "mixed" or "uneven" reason

    @property
    def pooled_verdict(self) -> Verdict | None:
        """The final word over all the arm's requests: the TPOT decision, the gates, a
        failure, the unknown correctness; None without a decision."""
        if self.decision is None:
            return None
        return final_word(self.decision, gates=self.gates, failure=self.failure,
                          correctness_unknown=self.correctness_unknown)  # fmt: skip

    @property
    def verdict(self) -> Verdict | None:
        """The final word (:func:`~speclib.analysis.verdict.final_word.final_word`, the
        segments included); None without a decision."""
        if self.decision is None:
            return None
        return final_word(self.decision, gates=self.gates, failure=self.failure,
                          correctness_unknown=self.correctness_unknown,
                          segments=self.segments)  # fmt: skip

    @property
    def pooled_word(self) -> Word:
        """The pooled verdict's word (``"inconclusive"`` without valid pairs)."""
        pooled = self.pooled_verdict
        return pooled.word if pooled else Word.INCONCLUSIVE

    @property
    def role_aa(self) -> bool:
        """True for the A/A arm's comparison (the bench's noise floor)."""
        return self.experiment == AA_ARM

    @property
    def word(self) -> Word:
        """The verdict word (``"inconclusive"`` without valid pairs)."""
        return self.verdict.word if self.verdict else Word.INCONCLUSIVE

    @property
    def absolute(self) -> dict[str, dict[str, Any]]:
        """TPOT/TTFT p50 and p90 (ms) and per-stream tokens/s of each side, from the pairs
        the verdict uses (:func:`speclib.analysis.verdict.absolute.absolute_summary`)."""
        return absolute_summary(self.pairs)

    @property
    def tpot_ratio_by_category(self) -> dict[str, CategoryRatio]:
        """TPOT ratio per prompt category with its descriptive block-level interval (None
        where the category has too few pairs or blocks; see
        :mod:`speclib.analysis.verdict.categories`)."""
        return self.by_category

    @property
    def tpot_ratio_by_turn(self) -> dict[int, CategoryRatio]:
        """TPOT ratio per turn of a multi-turn run with its descriptive block-level
        interval, by turn (empty outside a multi-turn run)."""
        return self.by_turn

    def dropped_pairs(self) -> dict[str, int]:
        """Pairs the TPOT comparison could not use, counted by side and reason (failed,
        unmatched, or excluded by the instrument); only non-zero counts."""
        p = self.pairing or {}
        dropped = {
            f"{self.control} failed": p.get("dropped_control_failed", 0),
            f"{self.experiment} failed": p.get("dropped_experiment_failed", 0),
            "both failed": p.get("dropped_both_failed", 0),
            "unmatched": p.get("unmatched", 0),
            **(p.get("excluded") or {}),
        }
        return {k: v for k, v in dropped.items() if v}

    def exclusion_notes(self) -> list[Reason]:
        """What the TPOT comparison left out, and a sensitivity note where the choice of
        instrument could change the verdict (the two instruments' point ratios fall on
        different sides of 1 − δ or 1 + δ, or differ by more than 2 %)."""
        out = []
        p = self.pairing or {}
        dropped = self.dropped_pairs()
        if dropped:
            used = p.get("n_pairs_used", p.get("n_pairs", 0))
            out.append(Reason(Code.PAIRS_LEFT_OUT, {"dropped": dropped, "used": used}))
        ratios = p.get("ratio_by_instrument") or {}
        client, server = ratios.get("client"), ratios.get("server")
        margin = self.decision.margin if self.decision else 0.05
        if client and server:
            bounds = (1 - margin, 1 + margin)
            sides = [sum(r > b for b in bounds) for r in (client, server)]
            if sides[0] != sides[1] or abs(client / server - 1) > 0.02:
                values = {"client": client, "server": server}
                out.append(Reason(Code.INSTRUMENT_SENSITIVITY, values))
        return out

    @property
    def reasons(self) -> tuple[Reason, ...]:
        """Why the verdict is what it is, then what the comparison left out."""
        said = self.verdict.reasons if self.verdict else (Reason(Code.NO_VALID_PAIRS),)
        return (*said, *self.exclusion_notes())

    def to_dict(self) -> dict[str, Any]:
        """The comparison's entry in ``summary.json`` (JSON-safe)."""
        tpot = self.cis.get("tpot_s")
        dec = self.decision
        return jsonable(
            {
                "experiment": self.experiment,
                "role": "aa" if self.experiment == AA_ARM else "experiment",
                "control": self.control,
                "level": self.level,
                "load": self.load,
                "method": self.method,
                "num_speculative_tokens": self.k,
                "absolute": self.absolute,
                "n_pairs": self.pairing.get("n_pairs", 0),
                "n_launches": self.n_launches,
                "median_tpot_control_s": self.median_tpot_control_s,
                "median_tpot_experiment_s": self.median_tpot_experiment_s,
                "mean_tpot_control_s": self.mean_tpot_s[0],
                "mean_tpot_experiment_s": self.mean_tpot_s[1],
                "tpot_ratio": tpot.estimate if tpot else None,
                "tpot_ratio_ci": [tpot.ci_low, tpot.ci_high] if tpot else None,
                "tpot_estimand": tpot.estimand if tpot else Estimand.TRAFFIC,
                "tpot_ratios": {
                    str(est): (ci.to_dict() if ci else None) for est, ci in self.ratios.items()
                },
                "answer_lengths_differ": self.lengths_differ,
                "tpot_ratio_by_category": {cat: r.to_dict() for cat, r in self.by_category.items()},
                "tpot_ratio_by_category_note": CATEGORY_NOTE if self.by_category else None,
                "tpot_ratio_by_turn": {str(t): r.to_dict() for t, r in self.by_turn.items()},
                "tpot_ratio_by_turn_note": TURN_NOTE if self.by_turn else None,
                "confidence_level": tpot.confidence_level if tpot else None,
                "ci_method": tpot.label if tpot else None,
                "tpot_decision": dec.word if dec else Word.INCONCLUSIVE,
                "decision": self.word,
                "reasons": render_all(self.reasons),
                "reason_codes": [r.to_dict() for r in self.reasons],
                "extra_pairs_needed": dec.extra_pairs_needed if dec else None,
                "extra_launches_needed": dec.extra_launches_needed if dec else None,
                "bench_check": (
                    bench_check(tpot, margin=dec.margin).to_dict()
                    if self.experiment == AA_ARM and tpot is not None and dec is not None
                    else None
                ),
                "metrics": {
                    m.removesuffix("_s"): (ci.to_dict() if ci else None)
                    for m, ci in self.cis.items()
                },
                "gates": [g.to_dict() for g in self.verdict.gates] if self.verdict else [],
                "pairing": self.pairing,
                "error_rate_control": self.error_rate_control,
                "error_rate_experiment": self.error_rate_experiment,
                "bad_outputs_control": self.bad_outputs_control,
                "bad_outputs_experiment": self.bad_outputs_experiment,
                "agreement": vars(self.agreement) if self.agreement else None,
                "divergences": {pid: asdict(c) for pid, c in self.divergences.items()},
                "why_by_category": self.why_by_category,
                "acceptance": self.acceptance,
                "explanation": _explanation_dict(self.explanation),
                "peak_rss_bytes": self.peak_rss_bytes,
                "plausibility": plausibility_dict(self.plausibility),
            }
        )


def _explanation_dict(e: WhySpeedup | None) -> dict[str, Any] | None:
    return jsonable(asdict(e)) if e is not None else None


def _error_rate(records: pd.DataFrame) -> float:
    """Share of the records that failed (0 for none)."""
    return float(1 - records["ok"].astype(bool).mean()) if len(records) else 0.0


def _bad_outputs(records: pd.DataFrame) -> int:
    return count_bad_outputs(records.to_dict(orient="records"))


def _peak_rss(series_rows: pd.DataFrame, name: str) -> int | None:
    peak = series_rows.set_index("series").loc[name].get("peak_rss_bytes")
    return None if peak is None or (isinstance(peak, float) and math.isnan(peak)) else int(peak)


def _compare(
    name: str,
    df: pd.DataFrame,
    params: ExperimentParams,
    ci_tpot: RatioInterval | None,
    decision: Decision | None,
    lms: list[LaunchMetrics],
    series_rows: pd.DataFrame,
    salt: int,
    level: int = 0,
    plaus: Any = None,
    bench_problem: Reason | None = None,
    mode_problem: Reason | None = None,
    by_category: dict[str, CategoryRatio] | None = None,
    by_turn: dict[int, CategoryRatio] | None = None,
    latency_cis: dict[str, RatioInterval | None] | None = None,
    ttft_problem: Reason | None = None,
    ratios: dict[Estimand, RatioInterval | None] | None = None,
    mix: dict[str, float] | None = None,
    ranks: Mapping[tuple[str, int, str], Any] | None = None,
) -> Comparison:
    a = params.analysis
    control = params.control_name
    paired: PairedFrame = pair_frame(df, control=control, experiment=name)
    pairs = paired.pairs
    cis: dict[str, RatioInterval | None] = {"tpot_s": ci_tpot}
    for m in GATE_METRICS:
        cis[m] = (latency_cis or {}).get(m)
    # what a launch-blind prompt-level bootstrap would say (information, never the verdict)
    cis["tpot_prompt_level"] = (
        pair_ratio_ci(pairs, "tpot_s", a.confidence, a, salt * 10 + 3, clustered=False)
        if len(pairs)
        else None
    )
    d_c, d_e = df[df["series"] == control], df[df["series"] == name]
    err_c = _error_rate(d_c)
    err_e = _error_rate(d_e)
    bad_c = _bad_outputs(d_c[d_c["ok"].astype(bool)])
    bad_e = _bad_outputs(d_e[d_e["ok"].astype(bool)])
    agreements: dict[str, Agreement] = {}
    classes: dict[str, DivergenceClass] = {}
    if params.workload.temperature == 0.0:  # greedy: the answers must equal the control's
        control_rows = d_c.to_dict(orient="records")
        agreements = compare_outputs(control_rows, d_e.to_dict(orient="records"))
        if agreements:
            classes = classify_divergences(
                agreements,
                {pid: (ranks or {}).get((name, level, pid)) for pid in agreements},
                near_tie_nats=a.near_tie_nats,
                control_varies=varying_prompts(control_rows),
            )
    agreement = summarize_agreement(agreements, classes) if agreements else None
    peak = _peak_rss(series_rows, name)
    if decision is None and len(d_e):
        # requests were sent but none paired (every one failed, say): still weigh the
        # gates, so an arm whose every request failed is rejected by its errors, not left
        # "inconclusive" with no gate
        decision = Decision(Word.INCONCLUSIVE, Reason(Code.NO_VALID_PAIRS), a.margin,
                            a.confidence)  # fmt: skip
    gates: tuple[GateResult, ...] = ()
    correctness = unscored_reason(params, plaus)
    if decision is not None:
        evidence = GateEvidence(
            control_error_rate=err_c,
            experiment_error_rate=err_e,
            control_requests=len(d_c),
            experiment_requests=len(d_e),
            wrong_outputs=max(0, bad_e - bad_c) + implausible_count(plaus),
            agreement_rate=agreement.gate_rate if agreement else None,
            peak_memory_gib=peak / 1024**3 if peak else None,
            ttft=cis.get("ttft_s"),
            e2e=cis.get("e2e_s"),
            ttft_control_median_s=finite_median(pairs["ttft_s_c"], positive=True)
            if len(pairs)
            else None,
            ttft_problem=ttft_problem,
            bench_problem=bench_problem,
            mode_problem=mode_problem,
            correctness_unknown=correctness,
        )
        gates = assess_gates(evidence, rule_gates(a))
    spec_cfg = params.series_by_name(name).speculative_config or {}
    k = spec_cfg.get("num_speculative_tokens")
    acc = acceptance_summary(d_e, [m for m in lms if m.series == name])
    med_c = finite_median(pairs["tpot_s_c"], positive=True) if len(pairs) else None
    med_e = finite_median(pairs["tpot_s_e"], positive=True) if len(pairs) else None
    levels = params.workload.levels
    load = levels[level].label if level < len(levels) else f"level {level}"
    return Comparison(
        experiment=name,
        control=control,
        level=level,
        load=load,
        method=spec_cfg.get("method"),
        k=k,
        pairing={**paired.to_dict(), **pair_exclusions(pairs, control, name)},
        n_launches=int(pairs["replicate"].nunique()) if len(pairs) else 0,
        cis=cis,
        decision=decision,
        gates=gates,
        error_rate_control=err_c,
        error_rate_experiment=err_e,
        bad_outputs_control=bad_c,
        bad_outputs_experiment=bad_e,
        median_tpot_control_s=med_c,
        median_tpot_experiment_s=med_e,
        agreement=agreement,
        agreements=agreements,
        acceptance=acc,
        explanation=explain_speedup(
            df,
            params,
            name,
            pairs,
            acc,
            ci_tpot,
            salt * 10 + 5,
            [m for m in lms if m.series == name],
        ),
        peak_rss_bytes=peak,
        pairs=pairs,
        plausibility=plaus,
        by_category=by_category or {},
        by_turn=by_turn or {},
        ratios={Estimand.TRAFFIC: ci_tpot, **(ratios or {})},
        mix=mix,
        divergences=classes,
        why_by_category=why_by_category(pairs) if spec_cfg else {},
        correctness_unknown=correctness if decision is not None else None,
    )


def compare_level(
    df: pd.DataFrame,
    params: ExperimentParams,
    lms: list[LaunchMetrics],
    rows: pd.DataFrame,
    level: int,
    plaus: dict[str, Any],
    *,
    bench_problem: Reason | None = None,
    confidence: float | None = None,
    mode_problems: dict[str, Reason] | None = None,
    decided: LevelDecision | None = None,
    ttft_problem: Reason | None = None,
    mix: dict[str, float] | None = None,
    ranks: Mapping[tuple[str, int, str], Any] | None = None,
) -> tuple[list[Comparison], LevelDecision | None]:
    """Every arm against the control at one load level: the experiments decided with
    block-level intervals and Holm's step-down, the A/A arm (when present) decided on its
    own as the bench's noise floor.

    ``df`` holds the measured records, ``lms`` every launch's counters, ``rows`` the series
    table (for peak memory), ``plaus`` the sampling check per experiment (sampled runs),
    ``bench_problem`` a reason the bench cannot be trusted (e.g. unequal idle load),
    ``confidence`` the family confidence of this look (default ``analysis.confidence``;
    lower at an early look of a run-until-decided plan), ``mode_problems`` per arm the
    launches whose mode check failed (their records must already be left out of ``df``;
    the arm's verdict is then "reject", gate ``mode``), ``decided`` the level's TPOT
    decisions when they were made over a larger family (every load level, looks; see
    :func:`speclib.analysis.verdict.tpot_verdict.decide_family`), else they are decided here with
    this level's experiments as the family; ``ranks`` the target's ranking of each greedy
    divergence by ``(arm, level, prompt id)`` (``RUN_DIR/divergences.jsonl``: a near tie is
    not held against the arm); ``ttft_problem`` why the TTFT gate cannot be
    assessed at this level (the client's TTFT lag differed between arms); ``mix`` the
    user's traffic mix the verdicts were decided for (the token-weighted ratio beside them
    follows it; it must be the one ``decided`` used). When
    the A/A arm shows an effect, or ``bench_problem`` is set, every experiment's verdict is
    "untrustworthy". Returns the comparisons (experiments first, the A/A arm last) and the
    level's block analysis.
    """
    a = params.analysis
    d = df[df["level"] == level]
    arms = params.experiments
    aa = AA_ARM if params.protocol.aa else None
    experiments = [n for n in arms if n != aa]
    pairs = {n: pair_frame(d, control=params.control_name, experiment=n).pairs for n in arms}
    salts = {n: (level + 1) * 1000 + i + 1 for i, n in enumerate(arms)}
    usable = {n: finite_pairs(pairs[n]) for n in arms if has_usable_pairs(pairs[n])}
    latency = gate_cis(pairs, aa_arm=aa, confidence_level=a.confidence)
    views = estimand_cis(usable, aa_arm=aa if aa in usable else None,
                         confidence_level=a.confidence, mix=mix)  # fmt: skip
    if decided is None and usable:
        decided = decide_level(
            usable,
            experiments=[n for n in experiments if n in usable],
            aa_arm=aa if aa in usable else None,
            confidence=confidence or a.confidence,
            margin=a.margin,
        )
    problem = (decided.bench_effect if decided else None) or bench_problem
    out = []
    for n in arms:
        if decided is None:
            ci, dec = None, None
        elif n == aa:
            ci, dec = decided.aa or (None, None)
        else:
            ci, dec = decided.experiments.get(n, (None, None))
        why = None if n == aa else problem
        mode = (mode_problems or {}).get(n) or (mode_problems or {}).get(params.control_name)
        groups = {"arm": n, "confidence_level": a.confidence, "aa_arm": aa,
                  "aa_pairs": pairs.get(aa) if aa else None}  # fmt: skip
        cats = category_ratios(pairs[n], **groups)
        turns = turn_ratios(pairs[n], **groups)  # empty unless the records have turns
        if dec is None and mode:
            dec = Decision(Word.INCONCLUSIVE, Reason(Code.NO_VALID_PAIRS), a.margin, a.confidence)
        out.append(
            _compare(
                n,
                d,
                params,
                ci,
                dec,
                lms,
                rows,
                salts[n],
                level,
                plaus.get(n),
                bench_problem=why,
                mode_problem=mode,
                latency_cis=latency[n],
                by_category=cats,
                by_turn=turns,
                ttft_problem=ttft_problem,
                ratios=views.get(n),
                mix=mix,
                ranks=ranks,
            )
        )
    return out, decided
