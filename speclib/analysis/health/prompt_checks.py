"""Workload checks on the prompt set itself: near duplicates among the prompts sent, and
how many prompts the set had (each a non-gating
:class:`~speclib.analysis.health.trust.TrustCheck`).

:func:`sent_prompt_texts` reads the texts of the prompts a run sent (from the params'
prompt set, as the manifest's provenance names it); :func:`near_duplicate_check` flags
pairs at or above :data:`DUPLICATE_JACCARD` word 5-gram Jaccard similarity
(:mod:`speclib.analysis.health.near_duplicates`); :func:`prompt_count_check` warns when the
set was smaller than asked. The helpers shared by all workload checks (percent and list
wording) are here too; :mod:`speclib.analysis.health.workload_checks` runs all five.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pandas as pd

from speclib.analysis.health.near_duplicates import near_duplicate_pairs
from speclib.analysis.health.trust import FAIL, NOT_ASSESSED, PASS, TrustCheck
from speclib.core.datasets import workload_prompts
from speclib.core.prompts import PromptSetError
from speclib.params.experiment import ExperimentParams

__all__ = [
    "DUPLICATE_JACCARD",
    "DUPLICATE_SAMPLE",
    "SHINGLE_WORDS",
    "SHOWN",
    "duplicates_check",
    "more_words",
    "near_duplicate_check",
    "pct_words",
    "prompt_count_check",
    "sent_prompt_texts",
]


DUPLICATE_JACCARD = 0.8
"""Word 5-gram Jaccard similarity from which two prompts count as near duplicates."""


SHINGLE_WORDS = 5
"""Words per shingle of the near-duplicate check."""


DUPLICATE_SAMPLE = 5000
"""Most prompts the near-duplicate check compares; a larger set is checked on a seeded
random sample of this many."""


SHOWN = 6  # pairs, categories or levels named in a detail sentence


def pct_words(x: float) -> str:
    return f"{100 * x:.0f} %"


def more_words(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def sent_prompt_texts(
    params: ExperimentParams,
    *,
    provenance: Mapping[str, Any] | None = None,
    ids: set[str] | None = None,
) -> dict[str, str]:
    """The text of every prompt the run sent, by id (its messages' contents, one per line),
    read again with :func:`speclib.core.datasets.workload_prompts`.

    ``provenance`` is the manifest's ``prompts`` entry: when its ``sha256`` differs from the
    file's now, the file has changed since the run and :class:`PromptSetError` is raised.
    ``ids`` (the prompt ids of the records) keeps only the prompts that were sent (all of
    them when none matches). Raises
    :class:`PromptSetError` (or :class:`OSError`) when the set cannot be read.
    """
    loaded = workload_prompts(params)
    recorded = (provenance or {}).get("sha256")
    if recorded and recorded != loaded.provenance.get("sha256"):
        raise PromptSetError(
            f"{loaded.provenance.get('path')}: changed since the run (its sha256 differs "
            "from the manifest's)"
        )
    texts = {p.id: "\n".join(m["content"] for m in p.messages) for p in loaded.prompts}
    if ids:
        texts = {k: v for k, v in texts.items() if k in ids} or texts
    return texts


def _check_sample(limit: object, seed: object) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 2:
        raise ValueError(f"`limit` must be an integer of at least 2 (got {limit!r})")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an integer (got {seed!r})")


def near_duplicate_check(
    texts: Mapping[str, str] | None,
    *,
    missing: str = "the prompt set could not be read",
    threshold: float = DUPLICATE_JACCARD,
    n: int = SHINGLE_WORDS,
    limit: int = DUPLICATE_SAMPLE,
    seed: int = 0,
) -> TrustCheck:
    """Pairs of prompts (``texts``: id → text) whose word ``n``-gram Jaccard similarity is
    at least ``threshold``; a warning naming them when there is any. More than ``limit``
    prompts: a random sample of ``limit`` drawn with ``seed`` is checked, and the detail says
    so. ``texts`` None: "not assessed", ``missing`` saying why."""
    _check_sample(limit, seed)
    name = "near-duplicate prompts"
    if texts is None:
        return TrustCheck(name, NOT_ASSESSED, "prompts not read", missing, gating=False)
    ids = list(texts)
    sampled = len(ids) > limit
    if sampled:
        ids = [ids[i] for i in sorted(random.Random(seed).sample(range(len(ids)), limit))]
    pairs = near_duplicate_pairs([texts[i] for i in ids], threshold=threshold, n=n)
    scope = (
        f"a random sample of {limit} of the {len(texts)} prompts (seed {seed})"
        if sampled
        else f"the {len(ids)} prompts sent"
    )
    rule = f"word {n}-gram Jaccard similarity ≥ {threshold:g}"
    if not pairs:
        detail = f"no two of {scope} have {rule}"
        return TrustCheck(name, PASS, "none", detail, gating=False)
    named = [f"{ids[i]} ~ {ids[j]} ({s:.2f})" for i, j, s in pairs]
    detail = (
        f"{len(pairs)} pair(s) of {scope} have {rule}: {more_words(named)}; each counts one case "
        "twice and inflates the acceptance of drafters that match text seen before (n-gram, "
        "suffix): drop or rewrite one prompt of each pair"
    )
    return TrustCheck(name, FAIL, f"{len(pairs)} pair(s)", detail, gating=False)


def prompt_count_check(provenance: Mapping[str, Any] | None) -> TrustCheck:
    """The prompt set against ``workload.num_prompts``, from the manifest's ``prompts``
    entry (:func:`speclib.core.datasets.workload_prompts`' provenance); a warning when the
    set is short."""
    name = "prompt set size"
    prov = provenance or {}
    if prov.get("short_by") is None or prov.get("returned") is None:
        return TrustCheck(name, NOT_ASSESSED, "not recorded", "the manifest does not record "
                          "how many prompts were asked for (a run of an older kit)",
                          gating=False)  # fmt: skip
    asked, has, short = prov.get("requested"), int(prov["returned"]), int(prov["short_by"])
    if short > 0:
        detail = (
            f"workload.num_prompts asks for {asked}, the set has {has} "
            f"({prov.get('records_read')} record(s) read, {prov.get('skipped', 0)} skipped): "
            f"the run sent all {has}; set num_prompts to {has} or use a larger set, so the "
            "params say what was sent"
        )
        return TrustCheck(name, FAIL, f"{has} of {asked} asked", detail, gating=False)
    figure = f"{has} prompts" if asked is None else f"{has} of {asked} asked"
    detail = f"the set gave every prompt asked for ({prov.get('sample', 'first')} {has})"
    return TrustCheck(name, PASS, figure, detail, gating=False)


def duplicates_check(
    params: ExperimentParams, records: pd.DataFrame, provenance: Any
) -> TrustCheck:
    ids = set(records["prompt_id"].astype(str)) if "prompt_id" in records else None
    try:
        texts = sent_prompt_texts(params, provenance=provenance, ids=ids)
    except (PromptSetError, OSError) as exc:
        return near_duplicate_check(None, missing=f"the prompt set could not be read: {exc}")
    return near_duplicate_check(texts)
