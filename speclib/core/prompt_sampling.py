"""Which prompts of a set a run sends: the first N, a seeded random N, or a seeded sample
stratified by category.

Every series of an experiment receives the same prompts in the same order, so the sample is
a pure function of the set, N, the method and the seed: the same inputs give the same ids in
the same order on any machine (:class:`random.Random` seeded with a string hashes it with
SHA-512, not with Python's per-process ``hash``). Asking for more prompts than the set has
never shrinks silently: every prompt is kept and :attr:`PromptSample.short_by` says how many
were missing, for the manifest and the report.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from speclib.core.prompts import Prompt

__all__ = ["SAMPLE_METHODS", "PromptSample", "sample_prompts", "stratified_quotas"]

SAMPLE_METHODS = ("first", "random", "stratified")


@dataclass(frozen=True)
class PromptSample:
    """The prompts drawn, in send order, and how many were missing from the request."""

    prompts: tuple[Prompt, ...]
    method: str
    seed: int
    requested: int | None  # None: the whole set
    short_by: int  # requested - available when the set is smaller, else 0


def sample_prompts(
    prompts: Sequence[Prompt], n: int | None = None, *, method: str = "first", seed: int = 0
) -> PromptSample:
    """Draw ``n`` prompts (``None``: all of them) by ``method``, reproducibly from ``seed``.

    ``first``: the first ``n`` in set order. ``random``: ``n`` drawn without replacement,
    in drawn order. ``stratified``: ``n`` split across categories by
    :func:`stratified_quotas`, each category drawn with its own generator seeded from
    ``seed`` and the category's name, then interleaved round-robin in order of each
    category's first appearance, so consecutive requests see a mix of categories.
    """
    _check_args(prompts, n, method, seed)
    want = len(prompts) if n is None else min(n, len(prompts))
    short_by = 0 if n is None else max(0, n - len(prompts))
    if method == "first":
        chosen = list(prompts[:want])
    elif method == "random":
        chosen = random.Random(f"random:{seed}").sample(list(prompts), want)
    else:
        chosen = _stratified(prompts, want, seed)
    return PromptSample(tuple(chosen), method, seed, n, short_by)


def _check_args(prompts: Sequence[Prompt], n: int | None, method: str, seed: int) -> None:
    if method not in SAMPLE_METHODS:
        raise ValueError(f"`method` must be one of {', '.join(SAMPLE_METHODS)}, got {method!r}")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"`n` must be a positive integer or None, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an integer, got {seed!r}")
    if not prompts:
        raise ValueError("`prompts` is empty: there is nothing to sample")


def _by_category(prompts: Sequence[Prompt]) -> dict[str, list[Prompt]]:
    """Prompts grouped by category, categories in order of first appearance."""
    groups: dict[str, list[Prompt]] = {}
    for p in prompts:
        groups.setdefault(p.category, []).append(p)
    return groups


def stratified_quotas(sizes: dict[str, int], n: int) -> dict[str, int]:
    """Split ``n`` across categories in proportion to ``sizes`` (largest-remainder method).

    Each category gets the floor of its exact share; the seats left go to the largest
    remainders, ties to the larger category, then to the earlier one in ``sizes``. With
    ``n`` at most the total, no quota exceeds its category's size.
    """
    total = sum(sizes.values())
    if total < 1 or n < 0 or n > total:
        raise ValueError(f"`n` must be in 0..{total} (the total of `sizes`), got {n!r}")
    names = list(sizes)
    quotas = {c: n * sizes[c] // total for c in names}
    remainder = {c: n * sizes[c] % total for c in names}
    order = sorted(range(len(names)), key=lambda i: (-remainder[names[i]], -sizes[names[i]], i))
    for i in order[: n - sum(quotas.values())]:
        quotas[names[i]] += 1
    return quotas


def _stratified(prompts: Sequence[Prompt], n: int, seed: int) -> list[Prompt]:
    groups = _by_category(prompts)
    quotas = stratified_quotas({c: len(ps) for c, ps in groups.items()}, n)
    drawn = [
        random.Random(f"stratified:{seed}:{c}").sample(ps, quotas[c]) for c, ps in groups.items()
    ]
    out: list[Prompt] = []
    for i in range(max(quotas.values(), default=0)):
        out += [picks[i] for picks in drawn if i < len(picks)]
    return out
