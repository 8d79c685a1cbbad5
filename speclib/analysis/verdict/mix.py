"""The user's traffic mix: the pooled TPOT ratio for the share of each prompt category.

The prompts sent are rarely mixed as the user's real traffic is. ``workload.mix`` (or
``speclib analyze RUN --mix fresh=0.8,echo=0.2``) gives each category's share of the real
traffic; :func:`parse_mix` reads the command-line form and :func:`check_mix` checks a mix
against the run's categories (known categories, non-negative shares that sum to 1).

:func:`mix_ratio_ci` is the pooled interval for that mix, on the verdict's block model:
per replicate block ``b`` and category ``c`` the arm's contrast ``c[b, c]`` (mean paired
log-ratio, less half the A/A arm's with an A/A arm, as in
:mod:`speclib.analysis.stats.block_intervals`), then ``D[b] = Σ_c w_c c[b, c]`` over the blocks that
hold every category of positive share, and a paired t-interval on the ``D[b]`` with
``blocks - 1`` degrees of freedom. The decision rule and Holm's family are the pooled
verdict's (:func:`speclib.analysis.verdict.tpot_verdict.decide_family` takes ``mix``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import special

from speclib.analysis.stats.paired import RatioCI

__all__ = ["check_mix", "mix_ratio_ci", "parse_mix"]

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


def _cells(pairs: pd.DataFrame) -> pd.DataFrame:
    """Mean log-ratio per block (rows) and category (columns)."""
    p = pairs.copy()
    c = pd.to_numeric(p["tpot_s_c"], errors="coerce")
    e = pd.to_numeric(p["tpot_s_e"], errors="coerce")
    p = p[np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)]
    block = p["block"] if "block" in p else p["replicate"]
    lr = np.log(pd.to_numeric(p["tpot_s_e"]) / pd.to_numeric(p["tpot_s_c"]))
    cat = p["category"].fillna("uncategorised").astype(str)
    return lr.groupby([block, cat]).mean().unstack()


def mix_ratio_ci(
    pairs: pd.DataFrame,
    mix: Mapping[str, float],
    *,
    confidence_level: float,
    aa_pairs: pd.DataFrame | None = None,
) -> RatioCI:
    """The arm's TPOT ratio for the traffic ``mix`` with its block-level t-interval (see
    the module docstring). ``pairs`` need ``tpot_s_c``, ``tpot_s_e``, ``category`` and
    ``block`` (else ``replicate``); ``aa_pairs`` the A/A arm's, when the run has one."""
    weights = {k: v for k, v in mix.items() if v > 0}
    d = _cells(pairs)
    reference = "control"
    if aa_pairs is not None and len(aa_pairs):
        d_aa = _cells(aa_pairs).reindex(index=d.index, columns=d.columns)
        if d_aa.notna().to_numpy()[d.notna().to_numpy()].all():
            d, reference = d - d_aa / 2, "controls"
    cols = [c for c in weights if c in d.columns]
    full = d[cols].dropna() if len(cols) == len(weights) else d.iloc[:0]
    w = np.array([weights[c] for c in cols])
    values = full.to_numpy(float) @ w if len(full) else np.array([])
    m = int(values.size)
    n_pairs = len(pairs)
    against = "vs mean of control and aa" if reference == "controls" else "vs control"
    method = f"blocks (mix-weighted own-arm paired t {against}, df={max(m - 1, 0)})"
    if m < 2:
        est = math.exp(float(values.mean())) if m else math.nan
        why = "fewer than two blocks hold every category of the mix"
        return RatioCI(est, 0.0, math.inf, float(confidence_level), method, n_pairs, m,
                       math.nan, None, None, None, None, None, 0, why, max(m - 1, 0))  # fmt: skip
    mean = float(values.mean())
    se = float(values.std(ddof=1) / math.sqrt(m))
    half = float(special.stdtrit(m - 1, 0.5 + confidence_level / 2)) * se
    return RatioCI(math.exp(mean), math.exp(mean - half), math.exp(mean + half),
                   float(confidence_level), method, n_pairs, m, math.nan, None, None, None,
                   None, None, 0, None, m - 1)  # fmt: skip
