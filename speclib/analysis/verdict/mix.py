"""The user's traffic mix: each prompt category's share of the real traffic, checked and said.

The prompts sent are rarely mixed as the user's real traffic is. ``workload.mix`` (or
``speclib analyze RUN --mix fresh=0.8,echo=0.2``) gives each category's share of the real
traffic; :func:`parse_mix` reads the command-line form and :func:`check_mix` checks a mix
against the run's categories (known categories, non-negative shares that sum to 1).
:func:`describe_mix` gives the :class:`TrafficMix` every output says ("for your mix: echo
80 %, fresh 20 % (the run's prompts: 50 / 50)"), naming a category of the run that the mix
leaves out.

The traffic's ratio for a mix is computed by the verdict's block model
(:func:`speclib.analysis.verdict.tpot_verdict.pair_summary` with ``mix``): per replicate
block, each side's mean TPOT is the share-weighted combination of its categories' mean
TPOTs, the block's log-ratio is the log of their ratio, and the t-interval runs across the
blocks that hold every category of positive share. The decision rule and Holm's family are
the pooled verdict's (:func:`speclib.analysis.verdict.tpot_verdict.decide_family` takes
``mix``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speclib.core.jsonutil import jsonable

__all__ = ["TrafficMix", "check_mix", "describe_mix", "parse_mix"]

_TOLERANCE = 1e-6


def parse_mix(text: str) -> dict[str, float]:
    """``"fresh=0.8,echo=0.2"`` → ``{"fresh": 0.8, "echo": 0.2}``; a :class:`ValueError`
    naming the bad part (its category) otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("`mix` must be CATEGORY=SHARE,... (got an empty string)")
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"`mix`: {part.strip()!r} is not CATEGORY=SHARE")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(f"`mix`: the share of category {name!r} is not a number "
                             f"(got {value.strip()!r})") from None  # fmt: skip
        if name in out:
            raise ValueError(f"`mix`: category {name!r} is given twice")
        out[name] = share
    return out


def check_mix(mix: Mapping[str, float], categories: set[str] | None = None) -> dict[str, float]:
    """The mix, checked: every share finite and in [0, 1], the shares summing to 1, and,
    with ``categories``, every category one the run holds (the error names it)."""
    for name, share in mix.items():
        if not (isinstance(share, (int, float)) and math.isfinite(share) and 0 <= share <= 1):
            raise ValueError(f"`mix`: the share of category {name!r} must be in [0, 1] "
                             f"(got {share!r})")  # fmt: skip
        if categories is not None and name not in categories:
            raise ValueError(f"`mix`: category {name!r} is not in the run's prompts "
                             f"(its categories: {', '.join(sorted(categories))})")  # fmt: skip
    total = sum(mix.values())
    if abs(total - 1) > _TOLERANCE:
        raise ValueError(f"`mix`: the shares must sum to 1 (got {total:g})")
    return {k: float(v) for k, v in mix.items()}


@dataclass(frozen=True)
class TrafficMix:
    """The user's traffic mix as every output says it.

    ``shares``: the user's share per category, in the order given (a category of the run
    the mix does not name is added with share 0); ``run_shares``: each category's share of
    the run's measured requests (the prompts as sent); ``left_out``: the run's categories
    whose share in the mix is 0, named rather than silently weighted 0."""

    shares: dict[str, float]
    run_shares: dict[str, float]
    left_out: tuple[str, ...]

    def words(self) -> str:
        """E.g. "for your mix: echo 80 %, fresh 20 % (the run's prompts: 50 / 50)"; a left
        out category reads "known 0 % (left out)"."""
        given = ", ".join(
            f"{c} {_pct(w)}" + (" (left out)" if c in self.left_out else "")
            for c, w in self.shares.items()
        )
        run = " / ".join(f"{100 * self.run_shares.get(c, 0.0):.0f}" for c in self.shares)
        return f"for your mix: {given} (the run's prompts: {run})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping, with the sentence (``text``)."""
        return jsonable({"shares": self.shares, "run_shares": self.run_shares,
                         "left_out": list(self.left_out), "text": self.words()})  # fmt: skip


def _pct(share: float) -> str:
    value = 100 * share
    return f"{value:.0f} %" if abs(value - round(value)) < 0.05 else f"{value:.1f} %"


def describe_mix(mix: Mapping[str, float], categories: Mapping[str, int]) -> TrafficMix:
    """The :class:`TrafficMix` of ``mix`` (checked, see :func:`check_mix`) against the run's
    measured requests per category (``categories``: category → count)."""
    total = sum(categories.values())
    run = {str(c): n / total for c, n in categories.items()} if total else {}
    shares = {str(c): float(w) for c, w in mix.items()}
    shares |= {c: 0.0 for c in sorted(run) if c not in shares}
    left = tuple(c for c, w in shares.items() if w == 0 and c in run)
    return TrafficMix(shares, run, left)
