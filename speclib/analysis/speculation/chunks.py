"""Stream shape: how many output tokens each streamed chunk carried.

Without speculation every content chunk carries one token; under speculation a chunk carries
the accepted drafts plus one. :func:`tokens_per_chunk_distribution` tallies that over many
requests (the report's tokens-per-chunk figure and the series table's mean).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["ChunkDistribution", "tokens_per_chunk_distribution"]


@dataclass(frozen=True)
class ChunkDistribution:
    """How many output tokens each streamed chunk carried, over many requests.

    ``sizes[i]`` tokens per chunk were seen ``counts[i]`` times. Without speculation every
    content chunk carries one token; under speculation up to ``k + 1``.
    """

    sizes: tuple[int, ...]
    counts: tuple[int, ...]
    n_chunks: int
    mean: float | None
    share_multi_token: float | None


def tokens_per_chunk_distribution(
    chunk_tokens: Iterable[Sequence[int] | None],
) -> ChunkDistribution:
    """Distribution of tokens per chunk over the ``chunk_tokens`` of many requests."""
    tally: dict[int, int] = {}
    for chunks in chunk_tokens:
        for n in chunks or ():
            tally[int(n)] = tally.get(int(n), 0) + 1
    sizes = tuple(sorted(tally))
    counts = tuple(tally[s] for s in sizes)
    total = sum(counts)
    return ChunkDistribution(
        sizes=sizes,
        counts=counts,
        n_chunks=total,
        mean=sum(s * c for s, c in zip(sizes, counts, strict=True)) / total if total else None,
        share_multi_token=sum(c for s, c in zip(sizes, counts, strict=True) if s > 1) / total
        if total
        else None,
    )
