"""Workload checks: is the workload the user chose measuring what they think it measures?

Five checks, each a :class:`~speclib.analysis.health.trust.TrustCheck` with ``gating=False``: a
failure is a warning on the bench-trust panel's first screen, never a veto of a verdict (the
workload is the user's choice, not a fault of the bench), and none counts toward the bench
being "trusted" (:func:`speclib.analysis.health.trust.bench_trust` keeps them in their own list).

- **outputs cut by max_tokens** (:func:`cut_outputs_check`): most of an arm's answers
  stopped at ``workload.max_tokens``, so TPOT and acceptance describe only their start
  (with ``workload.ignore_eos`` every answer also runs past where the model would stop);
- **near-duplicate prompts** (:func:`near_duplicate_check`): pairs of the prompts sent whose
  word 5-gram Jaccard similarity is at least 0.8 (:mod:`speclib.analysis.health.near_duplicates`);
  they count one case several times and inflate the acceptance of drafters that match text
  seen before;
- **offered vs achieved rate** (:func:`arrival_rate_check`): at a Poisson level, the rate at
  which each arm's requests were actually sent, within 90 % of the rate its seeded arrival
  schedule offered;
- **prompt set size** (:func:`prompt_count_check`): the set has fewer prompts than
  ``workload.num_prompts`` asks for (the manifest's ``prompts.short_by``);
- **category sizes** (:func:`category_size_check`): categories with too few prompts, or too
  few pairs per arm and load level, for their own interval
  (:mod:`speclib.analysis.verdict.categories`).

:func:`workload_checks` runs all five on a run's params, records and manifest. Pure
functions over what the run wrote (the prompt file is read again, and left "not assessed"
when it is gone or has changed since the run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from speclib.analysis.frames import pair_frame
from speclib.analysis.health.prompt_checks import (
    duplicates_check,
    more_words,
    pct_words,
    prompt_count_check,
)
from speclib.analysis.health.trust import FAIL, NOT_ASSESSED, PASS, TrustCheck
from speclib.analysis.verdict.categories import MIN_CATEGORY_BLOCKS, MIN_CATEGORY_PAIRS
from speclib.params.experiment import ExperimentParams

__all__ = [
    "CUT_SHARE_LIMIT",
    "RATE_SHARE_LIMIT",
    "arrival_rate_check",
    "category_size_check",
    "cut_outputs_check",
    "workload_checks",
]

CUT_SHARE_LIMIT = 0.5
"""Largest share of an arm's successful answers that may stop at max_tokens unwarned."""
RATE_SHARE_LIMIT = 0.9
"""Smallest share of its schedule's rate at which a Poisson level's requests must be sent."""


def _measured(records: pd.DataFrame) -> pd.DataFrame:
    if records.empty or "series" not in records:
        return pd.DataFrame()
    if "attempted" in records:
        return records[records["attempted"].fillna(True).astype(bool)]
    return records


# --- outputs cut by max_tokens --------------------------------------------------------------


def _cut(ok: pd.DataFrame, max_tokens: int) -> pd.Series:
    """Per request: stopped by the length limit (finish reason "length", or, without a
    finish reason, as many output tokens as max_tokens)."""
    none = pd.Series(None, index=ok.index, dtype=object)
    reason = ok.get("finish_reason", none)
    tokens = pd.to_numeric(ok.get("output_tokens", none), errors="coerce")
    return (reason == "length").where(reason.notna(), tokens >= max_tokens).astype(bool)


def _ignore_eos_words(max_tokens: int) -> str:
    return (
        f"; workload.ignore_eos is on, so every answer runs on to {max_tokens} tokens past "
        "where the model would stop: the bench measures text the model would not write "
        "(the ignore_eos trap in reverse: equal lengths bought with unreal text, which "
        "drafters often accept more readily); set ignore_eos: false to measure the answers "
        "users get"
    )


def cut_outputs_check(
    records: pd.DataFrame, *, max_tokens: int, ignore_eos: bool = False, expected: bool = False
) -> TrustCheck:
    """Share of each arm's successful requests that stopped at ``max_tokens``; a warning
    when it is above :data:`CUT_SHARE_LIMIT` in any arm, unless the params declared the cap
    a deliberate window before the run (``expected``: ``workload.truncation_expected``, never
    with ``ignore_eos``), when the share is reported as information."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"`max_tokens` must be a positive integer (got {max_tokens!r})")
    name = "outputs cut by max_tokens"
    rows = _measured(records)
    ok = rows[rows["ok"].astype(bool)] if len(rows) else rows
    if not len(ok):
        return TrustCheck(name, NOT_ASSESSED, "no answers", "no successful measured request")
    cut = _cut(ok, max_tokens).groupby(ok["series"], sort=False).agg(["sum", "size"])
    per_arm = {str(s): f"{int(n)}/{int(t)} cut" for s, (n, t) in cut.iterrows()}
    share = cut["sum"] / cut["size"]
    worst = str(share.idxmax())
    figure = f"{pct_words(share.max())} cut" + (f" in {worst}" if len(share) > 1 else "")
    if share.max() <= CUT_SHARE_LIMIT:
        detail = (
            f"at most {pct_words(share.max())} of an arm's answers stopped at max_tokens "
            f"({max_tokens}); the rule warns above {pct_words(CUT_SHARE_LIMIT)}"
        )
        return TrustCheck(name, PASS, figure, detail, per_arm, gating=False)
    if expected and not ignore_eos:
        detail = (
            f"{pct_words(share.max())} of {worst}'s answers stopped at max_tokens ({max_tokens}), "
            "declared expected (workload.truncation_expected): the verdicts describe the first "
            f"{max_tokens} tokens of each answer, as the params intend"
        )
        return TrustCheck(name, PASS, figure + " (expected)", detail, per_arm, gating=False)
    detail = (
        f"most answers stopped at max_tokens ({max_tokens}; worst {worst} "
        f"{pct_words(share.max())}): TPOT and acceptance describe only the first {max_tokens} "
        "tokens of answers that go on; raise workload.max_tokens so answers can end, or "
        "keep it if only their start matters"
    )
    detail += _ignore_eos_words(max_tokens) if ignore_eos else ""
    return TrustCheck(name, FAIL, figure, detail, per_arm, gating=False)


# --- offered vs achieved request rate -------------------------------------------------------


def _spans(sent: pd.DataFrame) -> pd.DataFrame:
    """Per arm, load level and block: arrival gaps, and the time they took as sent
    (``t_start``) and as scheduled (``t_start - queue_wait_s``), summed over the slots of
    an interleaved block (each slot's requests are one schedule; other arms run between)."""
    block = "block" if "block" in sent and sent["block"].notna().any() else "replicate"
    wait = sent["queue_wait_s"].fillna(0.0) if "queue_wait_s" in sent else 0.0
    frame = sent.assign(
        block_id=sent[block].astype(str),
        _slot=sent["slot"].fillna(-1) if "slot" in sent else -1,
        _due=sent["t_start"] - wait,
        concurrency=sent.get("concurrency", 1),
    )
    keys = ["series", "level", "block_id"]
    per_slot = frame.groupby([*keys, "_slot"], sort=False).agg(
        n=("t_start", "size"),
        first=("t_start", "min"),
        last=("t_start", "max"),
        due_first=("_due", "min"),
        due_last=("_due", "max"),
        rate=("request_rate", "first"),
        concurrency=("concurrency", "first"),
    )
    per_slot = per_slot.assign(
        gaps=per_slot["n"] - 1,
        sent_s=per_slot["last"] - per_slot["first"],
        due_s=per_slot["due_last"] - per_slot["due_first"],
    )
    out = per_slot.groupby(level=keys, sort=False).agg(
        gaps=("gaps", "sum"),
        sent_s=("sent_s", "sum"),
        due_s=("due_s", "sum"),
        rate=("rate", "first"),
        concurrency=("concurrency", "first"),
    )
    out = out[(out["gaps"] > 0) & (out["sent_s"] > 0) & (out["due_s"] > 0)]
    return out.assign(
        achieved=out["gaps"] / out["sent_s"],
        offered=out["gaps"] / out["due_s"],
        share=out["due_s"] / out["sent_s"],
    ).reset_index()


def _rate_words(r: Mapping[str, Any]) -> str:
    return (
        f"{r['series']} at {r['rate']:g} req/s, block {r['block_id']}: sent at "
        f"{r['achieved']:.2f} req/s, {pct_words(r['share'])} of its schedule's "
        f"{r['offered']:.2f} req/s"
    )


def arrival_rate_check(records: pd.DataFrame) -> TrustCheck:
    """At each Poisson level (``request_rate`` set), the rate at which each arm's requests
    were sent in each block against the rate its seeded schedule offered; a warning when any
    is below :data:`RATE_SHARE_LIMIT` of it.

    Achieved: arrival gaps per second of ``t_start``. Offered: the same gaps per second of
    their due times (``t_start - queue_wait_s``), i.e. the seeded Poisson draws themselves,
    so the rule sees only the client's lateness, not the few-request noise of a Poisson
    schedule around its nominal rate (shown beside it). Interleaved slots are one schedule
    each; the time other arms ran between them is not counted."""
    name = "offered vs achieved rate"
    rows = _measured(records)
    poisson = rows[rows["request_rate"].notna()] if "request_rate" in rows else rows.iloc[0:0]
    if not len(poisson):
        return TrustCheck(name, NOT_ASSESSED, "no Poisson level", "the run has no "
                          "workload.request_rates level", gating=False)  # fmt: skip
    spans = _spans(poisson)
    if not len(spans):
        return TrustCheck(name, NOT_ASSESSED, "too few requests", "no Poisson level has two "
                          "requests of one arm in a block to time", gating=False)  # fmt: skip
    worst_per_arm = spans.loc[spans.groupby("series", sort=False)["share"].idxmin()]
    per_arm = {
        str(r.series): f"{r.achieved:.2f} of {r.offered:.2f} req/s at {r.rate:g} req/s"
        for r in worst_per_arm.itertuples()
    }
    worst = spans.loc[spans["share"].idxmin()]
    figure = f"{pct_words(worst['share'])} of offered at {worst['rate']:g} req/s"
    late = spans[spans["share"] < RATE_SHARE_LIMIT]
    if not len(late):
        detail = (
            f"every arm's requests went out at ≥ {pct_words(RATE_SHARE_LIMIT)} of its seeded "
            f"schedule's rate (worst {_rate_words(worst.to_dict())})"
        )
        return TrustCheck(name, PASS, figure, detail, per_arm, gating=False)
    cap = int(late["concurrency"].max())
    slow = more_words([_rate_words(r) for r in late.to_dict("records")])
    detail = (
        f"requests went out slower than offered ({slow}): they waited for one of the {cap} "
        "request slots (workload.concurrency caps the Poisson levels) or for a busy client, "
        "so the level's load is lower than its label; lower the rate, raise "
        "workload.concurrency, or give the client a free core"
    )
    return TrustCheck(name, FAIL, figure, detail, per_arm, gating=False)


# --- categories too small for their own interval --------------------------------------------


def _fewest_pairs(rows: pd.DataFrame, control: str) -> dict[str, int]:
    """Per category: the fewest pairs any arm has with the control at any load level (a
    category an arm lacks at a level counts 0 there)."""
    cats = set(rows["category"])
    fewest = {c: -1 for c in cats}
    for arm in (s for s in rows["series"].unique() if s != control):
        pairs = pair_frame(rows, control=control, experiment=arm).pairs
        for level in rows["level"].unique():
            at = pairs[pairs["level"] == level] if len(pairs) else pairs
            counts = at["category"].value_counts() if len(at) else pd.Series(dtype=int)
            for c in cats:
                n = int(counts.get(c, 0))
                fewest[c] = n if fewest[c] < 0 else min(fewest[c], n)
    return {c: n for c, n in fewest.items() if n >= 0}


def category_size_check(records: pd.DataFrame, *, control: str, min_prompts: int = 2) -> TrustCheck:
    """Prompt categories too small for their own interval: fewer than
    :data:`~speclib.analysis.verdict.categories.MIN_CATEGORY_PAIRS` pairs of some arm with
    ``control`` at some load level (the rule by which :mod:`speclib.analysis.verdict.categories`
    gives a category no interval), or fewer than ``min_prompts`` prompts (default 2: one
    prompt repeated over blocks speaks for that prompt, not for its category); a warning
    naming them. One category: "not assessed" (the report shows no per-category ratios)."""
    if isinstance(min_prompts, bool) or not isinstance(min_prompts, int) or min_prompts < 1:
        raise ValueError(f"`min_prompts` must be a positive integer (got {min_prompts!r})")
    name = "category sizes"
    rows = _measured(records)
    if not len(rows):
        return TrustCheck(name, NOT_ASSESSED, "no requests", "no measured request", gating=False)
    cat = rows["category"] if "category" in rows else pd.Series(None, index=rows.index)
    rows = rows.assign(category=cat.fillna("uncategorised").astype(str))
    prompts = rows.groupby("category")["prompt_id"].nunique()
    if len(prompts) < 2:
        return TrustCheck(name, NOT_ASSESSED, "one category", "the prompts are in one category:"
                          " the report shows no per-category ratios", gating=False)  # fmt: skip
    pairs = _fewest_pairs(rows, control) if control in set(rows["series"]) else {}
    small = [
        c for c in prompts.index
        if prompts[c] < min_prompts or pairs.get(c, MIN_CATEGORY_PAIRS) < MIN_CATEGORY_PAIRS
    ]  # fmt: skip
    block = "block" if "block" in rows and rows["block"].notna().any() else "replicate"
    blocks = rows[block].nunique()
    one_block = (
        f"; with {blocks} block no category gets an interval (need {MIN_CATEGORY_BLOCKS})"
        if blocks < MIN_CATEGORY_BLOCKS
        else ""
    )
    figure = f"{len(small)} of {len(prompts)} small"
    if not small:
        detail = (
            f"every category has ≥ {min_prompts} prompts and ≥ {MIN_CATEGORY_PAIRS} pairs "
            f"per arm and load level{one_block}"
        )
        return TrustCheck(name, PASS, figure, detail, gating=False)
    named = [
        f"{c} ({prompts[c]} prompts" + (f", {pairs[c]} pairs)" if c in pairs else ")")
        for c in small
    ]
    detail = (
        f"{more_words(named)}: fewer than {min_prompts} prompts or {MIN_CATEGORY_PAIRS} pairs per "
        "arm and load level, so the category gets no interval of its own, or one from too few "
        "prompts to speak for it; add prompts to it (workload.sample: stratified keeps each "
        f"category's share) or merge it with another{one_block}"
    )
    return TrustCheck(name, FAIL, figure, detail, gating=False)


# --- all of them ----------------------------------------------------------------------------


def workload_checks(
    params: ExperimentParams, records: pd.DataFrame, manifest: Mapping[str, Any]
) -> list[TrustCheck]:
    """The five workload checks of a run, in the order of the module docstring: ``params``
    the run's :class:`~speclib.params.experiment.ExperimentParams`, ``records`` its measured
    requests (:func:`speclib.analysis.frames.load_records`), ``manifest`` its manifest."""
    w = params.workload
    provenance = manifest.get("prompts")
    return [
        cut_outputs_check(
            records,
            max_tokens=w.max_tokens,
            ignore_eos=w.ignore_eos,
            expected=w.truncation_expected,
        ),
        duplicates_check(params, records, provenance),
        arrival_rate_check(records),
        prompt_count_check(provenance),
        category_size_check(records, control=params.control_name),
    ]
