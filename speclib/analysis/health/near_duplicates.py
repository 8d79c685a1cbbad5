"""Near-duplicate texts: word n-gram shingles, their Jaccard similarity, and every pair of a
collection at or above a threshold.

A text's shingles are the set of its lower-cased word n-grams (words are runs of
``\\w`` characters; a text shorter than ``n`` words is one shingle of all its words, so two
identical short texts still match). Two texts are near duplicates when the Jaccard
similarity of their shingle sets, ``|A ∩ B| / |A ∪ B|``, is at least the threshold.

:func:`near_duplicate_pairs` is exact: it finds the same pairs as comparing every pair, but
compares only candidates found by prefix filtering (Chaudhuri et al. 2006; Bayardo et al.
2007, "All-Pairs"). With the shingles of every text ranked rarest first, two sets whose
Jaccard similarity is at least ``t`` share at least ``ceil(t · max(|A|, |B|))`` shingles,
so their first ``|X| - ceil(t · |X|) + 1`` shingles in that order intersect; only texts that
share such a prefix shingle (and whose sizes are within the ratio ``t``) are compared, each
set held as the hashes of its shingles (64-bit: a collision is vanishingly unlikely, and
could only raise a similarity). A few thousand prompts take about a second; no MinHash is
needed at that size. Pure functions.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

__all__ = ["jaccard", "near_duplicate_pairs", "shingles"]

_WORD = re.compile(r"\w+")
Shingle = tuple[str, ...]


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be a positive integer (got {n!r})")
    return n


def _check_threshold(threshold: object) -> float:
    ok = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
    if not ok or not 0 < threshold <= 1:  # type: ignore[operator]
        raise ValueError(f"`threshold` must be in (0, 1] (got {threshold!r})")
    return float(threshold)  # type: ignore[arg-type]


def shingles(text: str, *, n: int = 5) -> frozenset[Shingle]:
    """The set of lower-cased word ``n``-grams of ``text`` (one shingle of all its words when
    it has fewer than ``n``; empty when it has no word)."""
    if not isinstance(text, str):
        raise ValueError(f"`text` must be a string (got {type(text).__name__})")
    n = _check_n(n)
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset[Hashable], b: frozenset[Hashable]) -> float:
    """``|a ∩ b| / |a ∪ b|``; 0.0 when both are empty (nothing in common to speak of)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _prefix_length(size: int, threshold: float) -> int:
    """How many of a set's rarest shingles must be indexed so that every partner at or above
    ``threshold`` shares one of them (a hair below the bound is kept: a longer prefix only
    adds candidates, never loses a pair)."""
    overlap = math.ceil(threshold * size - 1e-9)
    return min(size, max(1, size - overlap + 1))


def near_duplicate_pairs(
    texts: Sequence[str], *, threshold: float = 0.8, n: int = 5
) -> list[tuple[int, int, float]]:
    """Every pair of ``texts`` whose word ``n``-gram Jaccard similarity is at least
    ``threshold``, as ``(i, j, similarity)`` with ``i < j`` (indices into ``texts``), sorted.

    Exact (the pairs an all-pairs comparison finds), by prefix filtering: see the module
    docstring. Texts without a word match nothing.
    """
    threshold = _check_threshold(threshold)
    sets = [frozenset(map(hash, shingles(t, n=n))) for t in texts]  # ints: less memory
    freq = Counter(s for sh in sets for s in sh)
    rank = {s: r for r, s in enumerate(sorted(freq, key=freq.__getitem__))}  # rarest first
    index: dict[int, list[int]] = defaultdict(list)
    found: list[tuple[int, int, float]] = []
    for j, sh in enumerate(sets):
        if not sh:
            continue
        prefix = sorted(rank[s] for s in sh)[: _prefix_length(len(sh), threshold)]
        candidates = {i for r in prefix for i in index[r]}
        for i in sorted(candidates):
            small, large = sorted((len(sets[i]), len(sh)))
            if small < threshold * large - 1e-9:
                continue  # sizes too far apart to reach the threshold
            similarity = jaccard(sets[i], sh)
            if similarity >= threshold:
                found.append((i, j, similarity))
        for r in prefix:
            index[r].append(j)
    return sorted(found)
