"""The estimands: which TPOT ratio a figure is, named as data.

A TPOT ratio "arm / control" over many requests can mean three different numbers, and
when speculation helps some requests a lot and hurts others (it does: that is what
segments show) they differ by far more than any interval:

* :attr:`Estimand.TRAFFIC` — **the traffic's ratio**: the arm's mean TPOT over the
  control's mean TPOT, over the same paired prompts, each request counting once (under a
  user's mix, each category's mean TPOT weighted by its share). It is what the traffic
  experiences per request, and every verdict word about the traffic as a whole uses it.
* :attr:`Estimand.PER_TOKEN` — **the token-weighted ratio**: the arm's total decode time
  over its total decode tokens (decode: after the first token), over the control's, on
  the same prompts. Where answers differ in length, a long answer counts for more; where
  every answer has the same length it equals the traffic's ratio.
* :attr:`Estimand.TYPICAL` — **the typical request**: the geometric mean of the
  per-request ratios, ``exp(mean(log(arm / control)))``. With heterogeneous effects it is
  not what the traffic gets (a ×0.3 request counts −1.2 on the log scale, a ×1.7 one
  +0.5); it stays as a description of a typical request, never as the traffic's.

:data:`LABELS` is each one's name in a figure's caption or a table heading, and
:data:`DEFINITIONS` its definition in one sentence (the report's method, ``summary.json``).
The renderers take the words from here; the analysis carries the member.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DEFINITIONS", "LABELS", "Estimand"]


class Estimand(StrEnum):
    """Which ratio of TPOT a figure estimates (the value is its name in ``summary.json``)."""

    TRAFFIC = "traffic"
    PER_TOKEN = "per_token"
    TYPICAL = "typical_request"


LABELS = {
    Estimand.TRAFFIC: "the traffic's (mean TPOT)",
    Estimand.PER_TOKEN: "per token (total decode time / tokens)",
    Estimand.TYPICAL: "typical request (geometric mean)",
}
"""A figure's estimand in a caption or a heading."""

DEFINITIONS = {
    Estimand.TRAFFIC: (
        "the traffic's ratio: the arm's mean TPOT over the control's mean TPOT on the same "
        "paired prompts, each request counting once (under a mix: each category's mean TPOT "
        "weighted by its share); per replicate block, then a t-interval across blocks"
    ),
    Estimand.PER_TOKEN: (
        "the token-weighted ratio: the arm's total decode time over its total decode tokens "
        "(after the first token), over the control's, on the same paired prompts"
    ),
    Estimand.TYPICAL: (
        "the typical request: the geometric mean of the per-request ratios "
        "exp(mean(log(arm / control))); not what the traffic gets when effects differ "
        "between requests"
    ),
}
"""Each estimand's definition in one sentence."""
