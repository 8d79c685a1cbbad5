"""The words of every reason: the one renderer of :class:`~speclib.core.reasons.Reason`.

The analysis says why as data (:mod:`speclib.core.reasons`); this module is the only
place those codes and numbers become sentences, for the terminal (``"plain"``), the
report (``"html"``, escaped) and the notebook's Markdown (``"markdown"``); and the
terminal's short forms: :func:`phrase` (the verdict table's one phrase),
:func:`bench_line` (the A/A arm's line), :func:`short_text` (a "mixed" arm's segments). One template
per :class:`~speclib.core.reasons.Code` (:data:`TEMPLATES`), a dict dispatch:
:func:`render` writes one reason, :func:`render_all` several. ``lead=False`` leaves out
what a row already shows beside the sentence: the TPOT interval before the rule's
outcome, "mixed: " before a segment sentence, "calibration: " before a calibration. To
reword a reason, change its template here; nothing else holds its words.
:func:`interval_label` names an interval (its method, reference and degrees of freedom)
as every reason and table shows it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from speclib.core.reasons import Code, Reason
from speclib.core.wording import span_text

__all__ = [
    "STYLES",
    "TEMPLATES",
    "bench_line",
    "bench_phrase",
    "interval_label",
    "phrase",
    "render",
    "render_all",
    "short_text",
    "word_meaning",
]

Style = Literal["plain", "html", "markdown"]
STYLES: tuple[Style, ...] = ("plain", "html", "markdown")


def interval_label(method: str, reference: str | None, df: int | None, mixed: bool) -> str:
    """An interval's name, e.g. ``"blocks (own-arm paired t vs control, df=2)"``; a
    bootstrap's is its method (``"BCa"``, ``"two-stage"``, …)."""
    if method == "no_blocks":
        return "blocks (none)"
    if method != "blocks":
        return str(method)
    against = "vs mean of control and aa" if reference == "controls" else "vs control"
    weighted = "mix-weighted " if mixed else ""
    return f"blocks ({weighted}own-arm paired t {against}, df={df})"


def _label(v: Mapping[str, Any]) -> str:
    return interval_label(v["method"], v.get("reference"), v.get("df"), bool(v.get("mixed")))


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


# ----------------------------------------------------------------- the TPOT rule


def _tpot_head(v: Mapping[str, Any]) -> str:
    return (
        f"TPOT ratio {v['ratio']:.3f} ({100 * v['level']:.3g}% CI {v['low']:.3f}–"
        f"{v['high']:.3f}, {_label(v)}, {v['n_pairs']} pairs, {v['n_blocks']} launch(es) "
        "per arm)"
    )


def _with_head(v: Mapping[str, Any], outcome: str, lead: bool) -> str:
    return f"{_tpot_head(v)}: {outcome}" if lead else outcome


def _rule_adopt(v: Mapping[str, Any], lead: bool) -> str:
    m = v["margin"]
    return _with_head(
        v, f"upper bound below 1 − δ = {1 - m:.3f}, time per token cut by more than δ", lead
    )


def _rule_equivalent(v: Mapping[str, Any], lead: bool) -> str:
    m = v["margin"]
    inside = f"inside (1 − δ, 1 + δ) = ({1 - m:.3f}, {1 + m:.3f})"
    if v.get("side") == "above_one":
        inside = (
            f"equivalent within ±δ = ±{m:.3g}, but measurably slower: the whole "
            f"interval is above 1 ({inside})"
        )
    elif v.get("side") == "below_one":
        inside = (
            f"measurably faster, but by less than δ = {m:.3g}: the whole "
            f"interval is below 1 ({inside})"
        )
    return _with_head(v, inside, lead)


def _rule_worse(v: Mapping[str, Any], lead: bool) -> str:
    return _with_head(v, "lower bound above 1, slower than control", lead)


def _plan(v: Mapping[str, Any]) -> str:
    if v.get("obstacle") == "one_pair":
        return "one pair gives no variance estimate"
    if v.get("obstacle") == "boundary":
        return "the estimate sits on a boundary"
    parts = []
    if v.get("extra_pairs") is not None:
        parts.append(f"about {v['extra_pairs']} more pairs")
    if v.get("extra_blocks") is not None:
        parts.append(f"about {v['extra_blocks']} more {v.get('unit', 'launches')}")
    target = repr(str(v.get("target")))
    if not parts:
        return f"no practical amount of data would likely reach {target}"
    return " or ".join(parts) + f" would likely reach {target} if the estimate holds"


def _rule_inconclusive(v: Mapping[str, Any], lead: bool) -> str:
    return _with_head(v, f"no rule applies at δ = {v['margin']:.3f}; {_plan(v)}", lead)


# ------------------------------------------------------------------ interval notes


def _too_few(v: Mapping[str, Any], lead: bool) -> str:
    return f"too few {v['what']} for an interval, need {v['need']}"


def _segment_undecided(v: Mapping[str, Any], lead: bool) -> str:
    return f"{v['cut']} {v['segment']}: {render(v['why'])}"


def _percentile(v: Mapping[str, Any], lead: bool) -> str:
    text = f"percentile interval expanded by {v['factor']:.3f} (Hesterberg 2015)"
    return f"BCa not used: {render(v['obstacle'])}; {text}" if v.get("obstacle") else text


# ------------------------------------------------------------------- gate evidence


def _errors_uncounted(v: Mapping[str, Any], lead: bool) -> str:
    ctl, exp = v["control_rate"], v["experiment_rate"]
    return (
        f"error rate {exp:.2%} vs control {ctl:.2%} (increase {exp - ctl:+.2%}, allowed "
        f"{v['allowed']:.2%}); request counts not given, so no bound on the increase"
    )


def _counted(v: Mapping[str, Any]) -> str:
    return (
        f"{v['failed_experiment']}/{v['n_experiment']} requests failed vs control "
        f"{v['failed_control']}/{v['n_control']}"
    )


def _errors_none_sent(v: Mapping[str, Any], lead: bool) -> str:
    return f"{_counted(v)}: no requests to count"


_ERROR_OUTCOMES = {
    "within": "the upper bound is within it",
    "exceeds": "the lower bound exceeds it",
    "unclear": "too few requests to tell either way",
}


def _errors_bounds(v: Mapping[str, Any], lead: bool) -> str:
    rise = v["failed_experiment"] / v["n_experiment"] - v["failed_control"] / v["n_control"]
    return (
        f"{_counted(v)} (increase {rise:+.2%}, one-sided {100 * v['level']:.3g}% bounds "
        f"{v['low']:+.2%} to {v['high']:+.2%}, Newcombe–Wilson), allowed increase "
        f"{v['allowed']:.2%}: {_ERROR_OUTCOMES[v['outcome']]}"
    )


def _outputs(v: Mapping[str, Any], lead: bool) -> str:
    text = f"{v['wrong']} output(s) flagged wrong"
    if v.get("minimum") is not None:
        text += f"; agreement {v['agreement']:.2%} (minimum {v['minimum']:.2%})"
    elif v.get("agreement") is not None:
        text += f"; agreement {v['agreement']:.2%} (no minimum set)"
    return text


def _memory(v: Mapping[str, Any], lead: bool) -> str:
    return f"peak {v['peak_gib']:.2f} GiB (limit {v['limit_gib']:.2f} GiB)"


def _latency(v: Mapping[str, Any], lead: bool) -> str:
    lo, hi, limit = v["low"], v["high"], v["limit"]
    rise = v.get("min_rise_s") or 0.0
    rise_words = f" and the median rises by more than {1e3 * rise:.0f} ms" if rise else ""
    delta = v.get("median_delta_s")
    delta = float("nan") if delta is None else delta
    head = (
        f"{v['metric']} ratio {v['ratio']:.3f} ({100 * v['level']:.3g}% CI "
        f"{lo:.3f}–{hi:.3f}, {_label(v)}), median change {1e3 * delta:+.1f} ms; "
        f"clearly worse when the lower bound exceeds {limit:.3f}{rise_words}"
    )
    outcome = v["outcome"]
    if outcome == "worse":
        return head
    if outcome == "ruled_out":
        return f"{head}: the upper bound rules that out"
    if outcome == "ruled_out_at_median":
        return (
            f"{head}: the upper bound at the control's median ({1e3 * v['control_median_s']:.0f} "
            f"ms) is a rise of {1e3 * v['rise_at_median_s']:+.0f} ms at most, which rules that "
            "out"
        )
    why = {
        "no_df": "no degrees of freedom (one block): the interval cannot tell",
        "undefined": "the interval is undefined (no usable pairs)",
        "rise_not_shown": "the ratio is above the limit but the median rise is not shown to "
        "exceed the minimum",
    }.get(outcome)
    if why is None:  # too wide
        why = (
            f"interval too wide to tell: its upper bound {hi:.3f} does not rule out "
            f"{limit:.3f} and its lower bound {lo:.3f} does not show it"
            + (f" (df = {v['df']})" if v.get("df") is not None else "")
        )
    return f"{head}: {why}"


def _ttft_lag(v: Mapping[str, Any], lead: bool) -> str:
    return (
        f"at {v['load']} the client read first tokens up to {v['spread_ms']:.1f} ms later in "
        f"one arm than in another (tolerance {v['tolerance_ms']:g} ms): a busy client, not "
        "the server; TTFT cannot be compared there (TPOT comes from the server's stamps)"
    )


def _mode_excluded(v: Mapping[str, Any], lead: bool) -> str:
    why = "; ".join(v.get("problems") or ["mode check failed"])
    return f"launch {v['launch']} excluded: {why}"


def _bench_checks_failed(v: Mapping[str, Any], lead: bool) -> str:
    return "; ".join(f"{check}: {detail}" for check, detail in v["failed"])


def _aa_false_effect(v: Mapping[str, Any], lead: bool) -> str:
    return (
        f"the A/A arm (a second copy of the control) measured ratio {v['ratio']:.3f} "
        f"[{v['low']:.3f}, {v['high']:.3f}] and was decided '{v['word']}' although no effect "
        "exists: this bench's noise is larger than its intervals admit"
    )


# ------------------------------------------------------------------ the final word


def _gate(v: Mapping[str, Any], status: str) -> str:
    return f"gate {str(v['gate'])!r} {status}: {render(v['detail'])}"


def _correctness(v: Mapping[str, Any], lead: bool) -> str:
    return f"correctness unknown ({render(v['why'])}): cannot be adopted"


def _arm_failed(v: Mapping[str, Any], lead: bool) -> str:
    return f"every launch of {v['arm']} failed: {v['cause']}"


def _seg_words(s: Mapping[str, Any], first: bool, mixed: bool) -> str:
    """A segment's ratio, interval and share; a category's share under the user's mix is
    the mix's ("of your mix"), never read as the run's requests."""
    known = s.get("low") is not None and s.get("high") is not None
    span = f" [{span_text(s['low'], s['high'])}]" if known else ""
    whose = "of your mix" if mixed and s["cut"] == "category" else "of requests"
    share = f"{100 * s['share']:.0f} % {whose}" if first else f"{100 * s['share']:.0f} %"
    return f"×{s['ratio']:.2f}{span} on {s['segment']} ({share})"


def _apart(v: Mapping[str, Any]) -> str:
    r, lo, hi = v["apart"]
    return (
        f"; {v['slow']} takes ×{r:.2f} [{span_text(lo, hi)}] the time per token of "
        f"{v['fast']}, beyond δ"
    )


def _mixed(v: Mapping[str, Any], lead: bool) -> str:
    segs, mixed = v["segments"], bool(v.get("for_mix"))
    parts = [_seg_words(s, i == 0, mixed) for i, s in enumerate(segs)]
    text = f"{v['arm']} at {v['load']} is " + " and ".join(parts)
    if v.get("apart") is not None:
        text += _apart(v)
        undecided = v.get("undecided") or []
        if undecided and len(undecided) == len(segs):
            text += ", though neither alone is decided"
        elif undecided:
            text += f", though {undecided[0]} alone is not decided"
    ratio = "–" if v.get("pooled_ratio") is None else f"×{v['pooled_ratio']:.2f}"
    text += f" (the traffic's ratio {ratio}, {v['pooled_word']}; segments by {v['cut']})"
    return (f"mixed: {text}" if lead else text) + _also(v, "mixed")


def _also(v: Mapping[str, Any], kind: str) -> str:
    """A headline's other loads where the arm is mixed (or uneven) too."""
    also = v.get("also") or []
    return f"; {kind} too at {', '.join(also)}" if also else ""


def _uneven(v: Mapping[str, Any], lead: bool) -> str:
    fast, slow = v["segments"]
    text = (
        f"{v['arm']} at {v['load']} is {_seg_words(fast, True, bool(v.get('for_mix')))} "
        f"and {_seg_words(slow, False, False)}{_apart(v)} (still {v['pooled_word']}; "
        f"segments by {v['cut']})"
    )
    return (f"uneven: {text}" if lead else text) + _also(v, "uneven")


# ------------------------------------------------------ what a comparison left out


def _pairs_left_out(v: Mapping[str, Any], lead: bool) -> str:
    dropped = v["dropped"]
    why = "; ".join(f"{k}: {n}" for k, n in dropped.items())
    return (
        f"{sum(dropped.values())} pair(s) left out of the TPOT comparison ({why}); {v['used']} used"
    )


def _sensitivity(v: Mapping[str, Any], lead: bool) -> str:
    return (
        f"sensitivity: the TPOT ratio is {v['client']:.3f} by the client's stamps and "
        f"{v['server']:.3f} by the server's over the same pairs: the choice of instrument "
        "could change this verdict"
    )


# ----------------------------------------------------- the A/A arm, a calibration


def _outlook(v: Mapping[str, Any]) -> str:
    """Where the bench check stands against δ: equivalent, N more blocks, or not reachable."""
    if v["word"] == "equivalent":
        return "equivalent"
    if v.get("resolution") is None or v["df"] < 1:
        return "not reachable yet: one block has no degrees of freedom, run at least 2"
    if v.get("blocks_needed") is None:
        return (
            f"not reachable: no number of blocks up to {v['max_blocks']} would likely make "
            "it equivalent"
        )
    more = v.get("more_blocks")
    if more is None:
        return (
            "resolution within δ, but the interval reaches outside "
            f"({1 - v['margin']:.3f}, {1 + v['margin']:.3f}): not equivalent"
        )
    return (
        f"{more} more block{'s' * (more != 1)} would likely make it equivalent "
        f"({v['blocks_needed']} in all, t at df = blocks − 1, block SD "
        f"{v['block_sd_log']:.3f} held)"
    )


def _effect(v: Mapping[str, Any]) -> str:
    """Whether the A/A interval excludes 1, and what that means for the bench."""
    span = f"the interval {v['low']:.3f}–{v['high']:.3f}"
    if v["false_effect"]:
        return (
            f"{span} excludes 1 and the rule would call it '{v['word']}': a false effect, "
            "this bench is untrustworthy (its noise is larger than its intervals admit)"
        )
    if v["excludes_one"] and v["word"] == "equivalent":
        return (
            f"{span} excludes 1: an instance effect smaller than δ, which the rule does not act on"
        )
    if v["excludes_one"]:
        return f"{span} excludes 1: an instance effect the rule does not act on"
    return f"{span} covers 1: the A/A arm shows no effect"


def _bench_check(v: Mapping[str, Any], lead: bool) -> str:
    res = "unknown" if v.get("resolution") is None else f"±{_pct(v['resolution'])}"
    n = v["n_blocks"]
    return (
        f"bench check: resolution {res} (δ = ±{100 * v['margin']:.3g} %) at "
        f"{100 * v['level']:.4g} % over {n} block{'s' * (n != 1)}; {_outlook(v)}; "
        f"{_effect(v)}"
    )


def _bench_resolution(v: Mapping[str, Any], lead: bool) -> str:
    if v.get("resolution") is None:
        return "resolution unknown (one block has no degrees of freedom)"
    if v["word"] == "equivalent":
        outlook = "equivalent"
    elif v.get("more_blocks") is not None:
        outlook = f"{v['more_blocks']} more block(s) would likely make it equivalent"
    elif v.get("blocks_needed") is None:
        outlook = "equivalent not reachable"
    else:
        outlook = "not equivalent (off-centre)"
    return f"resolution ±{_pct(v['resolution'])} (δ = ±{100 * v['margin']:.3g} %): {outlook}"


def _calibration(v: Mapping[str, Any], lead: bool) -> str:
    goal = f"target ±{_pct(v['target'])}"
    if v.get("resolution") is None:
        text = f"no A/A resolution after {v['blocks']} block(s) ({goal})"
    else:
        head = (
            f"A/A resolution ±{_pct(v['resolution'])} at "
            f"{100 * (v.get('level') or 0):.4g} % after {v['blocks']} block(s)"
        )
        if v["reached"]:
            text = f"{head}, {goal} reached"
        elif v.get("blocks_needed") is None:
            text = f"{head}, {goal} not reached and not reachable within {v['max_blocks']} blocks"
        else:
            text = (
                f"{head}, {goal} not reached: would need {v['blocks_needed']} blocks "
                "(t at df = blocks − 1, the observed block SD held)"
            )
    return f"calibration: {text}" if lead else text


# --------------------------------------------------------- a sweep's recommended value


def _sweep_recommended(v: Mapping[str, Any], lead: bool) -> str:
    value = ", ".join(f"{k} = {x}" for k, x in (v.get("value") or {}).items())
    if v.get("to_best") is None:
        how = "it is the best arm"
    else:
        r, lo, hi = v["to_best"]
        how = (
            f"its TPOT is {r:.3f}× the best arm {v['best']}'s "
            f"({100 * v['level']:.3g}% CI {lo:.3f}–{hi:.3f}, Holm), within δ = {v['margin']:g}"
        )
    smaller = v.get("smaller") or []
    note = f"; smaller {', '.join(smaller)} pay(s) but not within δ of the best" if smaller else ""
    return f"{v['arm']} ({value}): ADOPT and {how}{note}"


def _sweep_no_k_pays(v: Mapping[str, Any], lead: bool) -> str:
    arms = ", ".join(f"{arm} {word}" for arm, word in v["arms"])
    return f"no k pays: no arm of {v.get('family') or 'the family'} is ADOPT ({arms})"


def _sweep_undecided(v: Mapping[str, Any], lead: bool) -> str:
    return (
        f"no recommendation: {', '.join(v['paying'])} pay(s) but is not shown within "
        f"δ = {v['margin']:g} of the best arm {v['best']} (more blocks would tell)"
    )


def _fixed(text: str) -> Callable[[Mapping[str, Any], bool], str]:
    return lambda v, lead: text


TEMPLATES: dict[Code, Callable[[Mapping[str, Any], bool], str]] = {
    Code.RULE_ADOPT: _rule_adopt,
    Code.RULE_EQUIVALENT: _rule_equivalent,
    Code.RULE_WORSE: _rule_worse,
    Code.RULE_INCONCLUSIVE: _rule_inconclusive,
    Code.NO_VALID_PAIRS: _fixed("no valid pairs"),
    Code.SEGMENT_UNDECIDED: _segment_undecided,
    Code.NO_DF: _fixed(
        "no degrees of freedom for the instance variance: one launch per arm cannot separate "
        "the effect from launch-to-launch noise; the interval is (0, inf) and cannot decide – "
        "run more replicate blocks"
    ),
    Code.ZERO_WIDTH: _fixed("all block contrasts agree exactly: zero-width interval"),
    Code.MIX_BLOCKS: _fixed("fewer than two blocks hold every category of the mix: no interval"),
    Code.TOO_FEW: _too_few,
    Code.ONE_PAIR: _fixed("one pair: no variance estimate"),
    Code.PERCENTILE_EXPANDED: _percentile,
    Code.BCA_FEW_PAIRS: lambda v, lead: (
        f"fewer than {v['minimum']} {v.get('unit', 'pairs')} ({v['n']})"
    ),
    Code.BCA_ALL_EQUAL: _fixed("all log-ratios are equal"),
    Code.BCA_HEAVY_TIES: lambda v, lead: (
        f"heavy ties ({v['count']} of {v['n']} log-ratios share one value)"
    ),
    Code.BCA_NOT_FINITE: lambda v, lead: f"BCa bounds were not finite ({v['messages']})",
    Code.ERRORS_UNCOUNTED: _errors_uncounted,
    Code.ERRORS_NONE_SENT: _errors_none_sent,
    Code.ERRORS_BOUNDS: _errors_bounds,
    Code.OUTPUTS: _outputs,
    Code.MEMORY: _memory,
    Code.LATENCY: _latency,
    Code.TTFT_LAG: _ttft_lag,
    Code.MODE_EXCLUDED: _mode_excluded,
    Code.BENCH_CHECKS_FAILED: _bench_checks_failed,
    Code.AA_FALSE_EFFECT: _aa_false_effect,
    Code.UNSCORED: _fixed("the sampling check did not score this series' outputs"),
    Code.GATE_FAILED: lambda v, lead: _gate(v, "failed"),
    Code.GATE_NOT_ASSESSED: lambda v, lead: _gate(v, "not assessed"),
    Code.CORRECTNESS_UNKNOWN: _correctness,
    Code.ADOPT_RULED_OUT: _fixed("faster on TPOT, but a failed gate rules adoption out"),
    Code.ARM_FAILED: _arm_failed,
    Code.MIXED: _mixed,
    Code.UNEVEN: _uneven,
    Code.PAIRS_LEFT_OUT: _pairs_left_out,
    Code.INSTRUMENT_SENSITIVITY: _sensitivity,
    Code.BENCH_CHECK: _bench_check,
    Code.BENCH_RESOLUTION: _bench_resolution,
    Code.CALIBRATION: _calibration,
    Code.SWEEP_RECOMMENDED: _sweep_recommended,
    Code.SWEEP_NO_K_PAYS: _sweep_no_k_pays,
    Code.SWEEP_UNDECIDED: _sweep_undecided,
    Code.SWEEP_NO_DATA: _fixed("no arm of the family has valid pairs"),
}
"""Each code's template: ``(values, lead) -> plain text``."""


def render(reason: Reason, style: Style = "plain", *, lead: bool = True) -> str:
    """``reason`` in words: plain text for the terminal and ``summary.json``, ``"html"``
    escaped for the report, ``"markdown"`` for the notebook's Markdown; ``lead=False``
    leaves out what the row shows beside it (see the module docstring)."""
    if style not in STYLES:
        raise ValueError(f"`style` must be one of {STYLES} (got {style!r})")
    text = TEMPLATES[reason.code](reason.values, lead)
    if style == "html":
        return html.escape(text)
    if style == "markdown":
        return text.replace("*", "\\*")
    return text


def render_all(reasons: Iterable[Reason], style: Style = "plain") -> list[str]:
    """Every reason of ``reasons`` in words, in order."""
    return [render(r, style) for r in reasons]


# ------------------------------------------------------------- the terminal's phrases


_RULE_CODES = (Code.RULE_ADOPT, Code.RULE_EQUIVALENT, Code.RULE_WORSE, Code.RULE_INCONCLUSIVE)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def phrase(
    reasons: Sequence[Reason], word: str, *, more_blocks: int | None = None,
    projected: bool = False,
) -> str:  # fmt: skip
    """The terminal's one phrase for a verdict ``word`` with its ``reasons`` (a comparison's,
    in order: the rule's first): the failure's cause, the bench, a failed gate, or where the
    TPOT interval lies. With ``projected``, ``more_blocks`` is the blocks more that would
    likely decide an inconclusive interval at the run's later looks (None: no practical
    number); else the rule's own plan is used. The caller cuts it to its width."""
    by_code = {r.code: r for r in reversed(reasons)}  # the first of each code
    if word == "failed":
        failure = by_code.get(Code.ARM_FAILED)
        return render(failure) if failure is not None else "every launch failed"
    failed = [r for r in reasons if r.code is Code.GATE_FAILED]
    if word == "untrustworthy":
        bench = next((r["detail"] for r in failed if r["gate"] == "bench"), None)
        return bench_phrase(bench)
    if failed:
        return f"gate{'s' * (len(failed) > 1)} {', '.join(r['gate'] for r in failed)} failed"
    rule = next((r for r in reasons if r.code in _RULE_CODES), None)
    if rule is None or not _finite(rule.get("ratio")):
        return "no valid pairs" if rule is not None or Code.NO_VALID_PAIRS in by_code else word
    if rule.code is Code.RULE_ADOPT:
        correct = word != "inconclusive"
        return "time per token cut by > δ" if correct else "faster by > δ, but correctness unknown"
    if rule.code is Code.RULE_WORSE:
        return "slower than the control (lower bound > 1)"
    if rule.code is Code.RULE_EQUIVALENT:
        return {
            "above_one": "within ±δ, but measurably slower",
            "below_one": "faster, but by less than δ",
        }.get(rule.get("side"), "within ±δ of the control")
    df = rule.get("df")
    if df == 0 or not _finite(rule.get("high")):
        return "one block: no interval (run ≥ 2 blocks)"
    text = "interval too wide" + ("" if df is None else f" (df {df})")
    more = more_blocks if projected else rule.get("extra_blocks")
    pairs = None if projected else rule.get("extra_pairs")
    if more:
        text += f"; ~{more} more block{'s' * (more != 1)} may decide"
    elif pairs:
        text += f"; ~{pairs} more pairs may decide"
    return text


def _cell(ratio: Any, low: Any, high: Any) -> str:
    """``×0.955 [0.873, 1.044]`` (an unbounded end: ``∞``)."""
    if not (_finite(ratio) and ratio > 0):
        return "–"
    if not _finite(low):
        return f"×{ratio:.3f}"
    return f"×{ratio:.3f} [{low:.3f}, {f'{high:.3f}' if _finite(high) else '∞'}]"


def bench_line(check: Reason, load: str) -> str:
    """The A/A arm's bench check (code ``BENCH_CHECK``) as the terminal's line: "bench
    check: resolution ±9.3 % (δ = ±5 %) at 95 % over 6 blocks at c=1: ~9 more blocks to
    reach ±δ; A/A ×0.955 [0.873, 1.044] covers 1: no false effect"."""
    v = check.values
    res, m, n = v.get("resolution"), v.get("margin"), v.get("n_blocks") or 0
    if v.get("word") == "equivalent":
        outlook = "equivalent"
    elif res is None:
        outlook = "run ≥ 2 blocks for a resolution"
    elif v.get("more_blocks"):
        outlook = f"~{v['more_blocks']} more blocks to reach ±δ"
    elif v.get("blocks_needed") is None:
        outlook = "±δ not reachable"
    else:
        outlook = "within ±δ, but off-centre"
    if v.get("false_effect"):
        effect = f"excludes 1 ('{v['word']}'): a FALSE EFFECT, the bench is untrustworthy"
    elif v.get("excludes_one"):
        effect = "excludes 1: an instance effect the rule does not act on"
    else:
        effect = "covers 1: no false effect"
    return (
        f"bench check: resolution {'unknown' if res is None else f'±{100 * res:.1f} %'}"
        + ("" if m is None else f" (δ = ±{100 * m:.3g} %)")
        + f" at {100 * (v.get('level') or 0):.4g} % over {n} block{'s' * (n != 1)}"
        + f" at {load}: {outlook}; A/A {_cell(v.get('ratio'), v.get('low'), v.get('high'))} "
        + effect
    )


def bench_phrase(reason: Reason | None) -> str:
    """The terminal's phrase for an untrustworthy bench, from the bench gate's reason:
    which check failed first, or the A/A arm's false effect (None: a summary without it)."""
    if reason is not None and reason.code is Code.AA_FALSE_EFFECT:
        return "bench untrustworthy: the A/A arm shows a false effect"
    if reason is not None and reason.code is Code.BENCH_CHECKS_FAILED and reason["failed"]:
        return f"bench untrustworthy: {reason['failed'][0][0]} failed"
    return "bench untrustworthy"


def short_text(reason: Reason) -> str:
    """A segment reason as the terminal's one phrase: ``"mixed: echo ×0.50, fresh ×1.41"``."""
    if reason.code not in (Code.MIXED, Code.UNEVEN):
        raise ValueError(f"no short phrase for {reason.code}")
    parts = [f"{s['segment']} ×{s['ratio']:.2f}" for s in reason["segments"]]
    return f"{reason.code}: " + ", ".join(parts)


# ------------------------------------------------------------- what a final word means


def word_meaning(
    word: str, *, load: str = "", margin: float = 0.0, failed_gates: Sequence[str] = (),
    failure: Iterable[Reason] = (), segments: Reason | None = None,
) -> str:  # fmt: skip
    """What a final verdict ``word`` means, as the report's conclusion says it after the word:
    ``load`` the load in words (for "adopt"), ``margin`` δ (for "equivalent"),
    ``failed_gates`` the names of the failed gates (for "reject"), ``failure`` a failed
    arm's reasons, ``segments`` the answer's reason behind "mixed"."""
    tails: dict[str, Callable[[], str]] = {
        "adopt": lambda: f"worth turning on for this workload at {load}",
        "equivalent": lambda: f"no difference that matters (within ±{margin:.0%})",
        "worse": lambda: "slower: keep it off",
        "reject": lambda: "rejected by a gate: " + "; ".join(failed_gates),
        "inconclusive": lambda: "not enough data to decide",
        "untrustworthy": lambda: (
            "not decided: the bench cannot be trusted (see the bench-trust panel above)"
        ),
        "failed": lambda: "failed: " + "; ".join(render_all(failure)),
        "mixed": lambda: render(segments, lead=False) if segments is not None else "mixed",
    }
    if str(word) not in tails:
        raise ValueError(f"`word` must be a verdict word (got {word!r})")
    return tails[str(word)]()
