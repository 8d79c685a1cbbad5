"""The largest counts and sizes a params file may ask for, each with its reason.

A typo in a count (``replicates: 1000000000000``, ``n_resamples: 1e13``) is not an
experiment: left unchecked it kills ``speclib validate`` for memory, or asks the analysis
for petabytes after hours of measuring. Each bound here is far above any experiment the kit
is for and low enough that what it sizes still fits one machine. :func:`bounded` is the one
way a field gets its bound, and it writes the bound and its reason into the field's
description (so into ``docs/params.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

__all__ = [
    "BLOCKS",
    "CONCURRENCY",
    "DRAFTS",
    "NAME_CHARS",
    "PROMPTS",
    "RATE",
    "REPEATS",
    "RESAMPLES",
    "TIMEOUT_S",
    "WARMUP",
    "Limit",
    "bounded",
]


@dataclass(frozen=True)
class Limit:
    """An upper bound and why it is there (one clause, shown in the field's description)."""

    value: float
    why: str

    def shown(self) -> str:
        """``1000``, ``100 000``: the bound as the docs write it."""
        if self.value < 10_000:
            return f"{self.value:g}"
        return f"{self.value:,.0f}".replace(",", " ")


BLOCKS = Limit(
    1000,
    "each block starts every arm's servers afresh, a minute or more each on a GPU, and an "
    "arm's interval, whose degrees of freedom are the blocks, stops narrowing long before",
)
CONCURRENCY = Limit(
    4096,
    "the client holds one open stream per request in flight, and a vLLM server runs at most "
    "max_num_seqs (256 to 1024 by default) at once: more only wait in its queue",
)
RATE = Limit(
    10_000,
    "one client process cannot start requests that fast on time, so it would not be the "
    "rate measured",
)
PROMPTS = Limit(
    1_000_000,
    "the set is read into memory, and every prompt is sent to every arm in every block",
)
REPEATS = Limit(1000, "a launch's requests, and the time it takes, grow with it")
WARMUP = Limit(10_000, "unmeasured requests only cost time")
RESAMPLES = Limit(
    100_000,
    "each resample draws every prompt, so memory and time grow with resamples x prompts; at "
    "100 000 the Monte Carlo error of a 95 % bound is far below the digits shown",
)
TIMEOUT_S = Limit(86_400, "a day: a request or a start that takes longer is a failure to report")
DRAFTS = Limit(
    256,
    "vLLM reserves k + 1 KV-cache slots past every sequence and verifies k drafts at every "
    "step, and a draft run that long is never accepted whole",
)
NAME_CHARS = Limit(
    100, "the default run folder is runs/<name>-<time>, and a file name has at most 255 bytes"
)


def bounded(default: Any, limit: Limit, *, description: str, text: bool = False, **kw: Any) -> Any:
    """A pydantic ``Field`` at most ``limit`` (characters, for a ``text`` field), its
    description ending with the bound and its reason; ``kw`` the field's other constraints
    (``ge=1``)."""
    bound = {"max_length": int(limit.value)} if text else {"le": limit.value}
    unit = " characters" if text else ""
    return Field(
        default,
        description=f"{description} At most {limit.shown()}{unit}: {limit.why}.",
        **bound,
        **kw,
    )


def describe_limit(limit: Limit, unit: str = "") -> str:
    """The sentence :func:`bounded` adds, for a field that checks its bound itself (a
    list's values)."""
    return f"At most {limit.shown()}{unit}: {limit.why}."
