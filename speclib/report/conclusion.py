"""The report's conclusion in words: one sentence per experiment, from the numbers.

:func:`conclusion` says in Markdown what the verdict table shows (each arm's effect at each
load, its interval and verdict, the per-category and per-turn ratios, a pointer to the
warnings); :func:`conclusion_html` renders it, with or without the headline. Nothing is
recomputed: every figure comes from the :class:`~speclib.analysis.run_analysis.RunAnalysis`.
"""

from __future__ import annotations

import html
import re
from typing import Any

from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.verdict.categories import CATEGORY_NOTE, SEGMENT_CATEGORY_NOTE, TURN_NOTE
from speclib.analysis.verdict.comparisons import Comparison
from speclib.core.estimand import Estimand
from speclib.core.reason_text import render, render_all, word_meaning
from speclib.core.reasons import Code, Reason
from speclib.core.verdict_words import Word
from speclib.core.wording import ratio_words, span_text, speed_words
from speclib.report.html_format import wrap

__all__ = [
    "at_load",
    "conclusion",
    "conclusion_html",
    "conclusion_parts",
    "conf_words",
    "instrument_words",
    "md_inline",
    "mix_words",
]


def conf_words(level: float) -> str:
    """Confidence level as written everywhere in the report: ``95 %``, ``97.5 %``; a level
    that one decimal would round to 100 % (Holm over many segments, α spent over several
    looks) keeps the decimals that show it is not certainty: ``99.996 %``, at most
    ``> 99.99 %``."""
    for digits in (1, 2, 3, 4):
        shown = round(level * 100, digits)
        if shown < 100 or level >= 1:
            return f"{shown:g} %"
    return "> 99.99 %"


def instrument_words(an: RunAnalysis) -> str:
    inst = getattr(an, "instrument", None)
    return "server stamps" if inst is not None and inst.tpot == "server" else "client stamps"


def _effect(ci: Any) -> str:
    """The TPOT change in words, with its interval on the same scale; the traffic's ratio
    (the verdict's) reads as the traffic's mean time per output token."""
    conf = conf_words(ci.confidence_level)
    traffic = getattr(ci, "estimand", None) == Estimand.TRAFFIC
    what = "the traffic's mean time per output token" if traffic else "time per output token"
    if ci.ci_high < 1:
        return (
            f"cut {what} by {(1 - ci.estimate) * 100:.0f} % "
            f"({conf} CI {(1 - ci.ci_high) * 100:.0f} to {(1 - ci.ci_low) * 100:.0f} %; "
            f"{speed_words(ci.estimate)})"
        )
    if ci.ci_low > 1:
        more = f"{(ci.estimate - 1) * 100:.0f} %"
        return (
            (f"raised {what} by {more}" if traffic else f"took {more} more {what}")
            + f" ({conf} CI {_pct_more(ci.ci_low)} to {_pct_more(ci.ci_high)} % "
            f"more; {speed_words(ci.estimate)})"
        )
    return (
        f"changed {what} by {(ci.estimate - 1) * 100:+.0f} % ({conf} CI "
        f"{(ci.ci_low - 1) * 100:+.0f} to {_pct_more(ci.ci_high, sign='+')} %, which includes "
        "no change)"
    )


def _pct_more(ratio: float, sign: str = "") -> str:
    """A ratio's bound as a change in %; beyond ×100 said as such, as ``bound_text`` does."""
    return f">{sign}9900" if ratio > 100 else f"{(ratio - 1) * 100:{sign}.0f}"


def _other_ratios(c: Comparison) -> str:
    """The same comparison as the other estimands, named (:mod:`speclib.core.estimand`):
    the typical request's always, the token-weighted ratio where answer lengths differ."""
    ratios = getattr(c, "ratios", None) or {}
    parts = []
    typical = ratios.get(Estimand.TYPICAL)
    if typical is not None and typical.estimate > 0:
        parts.append(f"the typical request ×{typical.estimate:.2f} (geometric mean of the "
                     "per-request ratios, not what the traffic gets)")  # fmt: skip
    per_token = ratios.get(Estimand.PER_TOKEN)
    if per_token is not None and per_token.estimate > 0 and getattr(c, "lengths_differ", False):
        parts.append(f"per token ×{per_token.estimate:.2f} (total decode time over tokens)")
    return f" Beside it: {'; '.join(parts)}." if parts else ""


def _level_words(level: Any) -> str:
    if level.request_rate is not None:
        return f"{level.request_rate:g} requests/s (open loop)"
    if level.concurrency == 1:
        return "concurrency 1 (one request at a time)"
    return f"concurrency {level.concurrency}"


def _load_words(c: Comparison, an: RunAnalysis) -> str:
    """The load a comparison was measured at, in words (always named: a speed-up at one
    request at a time says nothing about a busy server)."""
    levels = an.params.workload.levels
    return _level_words(levels[c.level]) if c.level < len(levels) else f"load {c.load}"


def _all_loads(an: RunAnalysis) -> str:
    return ", ".join(_level_words(lv) for lv in an.params.workload.levels)


def at_load(c: Comparison, an: RunAnalysis) -> str:
    return f" at load {c.load}" if len(an.params.workload.levels) > 1 else ""


def _failed_words(c: Comparison) -> str:
    """``draft-k4 could not be measured: <root cause>; fix it and run again``."""
    reasons = c.verdict.reasons if c.verdict else ()
    failed = next((r for r in reasons if r.code is Code.ARM_FAILED), None)
    cause = failed["cause"] if failed is not None else "every launch failed"
    return f"**{c.experiment}** could not be measured: {cause}; fix it and run again"


def _sentence(c: Comparison, an: RunAnalysis) -> str:
    ci = c.cis.get("tpot_s")
    if c.word == Word.FAILED:
        return _failed_words(c) + "."
    if ci is None:
        return f"**{c.experiment}**{at_load(c, an)}: no successful request pairs, so no comparison."
    effect = _effect(ci)
    word = c.word
    gates = c.verdict.gates if c.verdict else ()
    tail = word_meaning(
        word, load=_load_words(c, an), margin=an.params.analysis.margin,
        failed_gates=[g.name for g in gates if g.failed],
        failure=c.verdict.reasons if c.verdict else (), segments=_segment_reason(c, an),
    )  # fmt: skip
    extra = ""
    if word == Word.INCONCLUSIVE and ci.note is not None and ci.note.code is Code.NO_DF:
        extra = (
            " — one launch per arm cannot separate the effect from launch-to-launch noise: "
            "run at least two replicate blocks (or add protocol.aa)"
        )
    elif word == Word.INCONCLUSIVE and c.decision and c.decision.extra_launches_needed:
        extra = f" — about {c.decision.extra_launches_needed} more replicate blocks may decide it"
    elif word == Word.INCONCLUSIVE and c.decision and c.decision.extra_pairs_needed:
        extra = f" — about {c.decision.extra_pairs_needed} more prompt pairs would decide it"
    unknown = [g.name for g in (c.verdict.gates if c.verdict else ()) if g.status == "not assessed"]
    if unknown:
        extra += f" (gate(s) not assessed, the data cannot tell: {', '.join(unknown)})"
    return (
        f"**{c.experiment}** ({c.method}, k={c.k}){at_load(c, an)} {effect} over "
        f"{ci.n_pairs} paired prompts: **{word}** — {tail}{extra}.{_other_ratios(c)}"
        f"{_by_category(c, an)}"
    )


def _segment_reason(c: Comparison, an: RunAnalysis) -> Reason | None:
    """The answer's reason behind a "mixed" arm (:mod:`speclib.analysis.verdict.answer`)."""
    answer = getattr(an, "answer", None)
    mine = answer.of(c.experiment, c.level) if answer is not None else None
    return mine.segment_reason if mine is not None else None


def _counts(n_pairs: int, n_blocks: int) -> str:
    return f"{n_pairs} pairs in {n_blocks} block{'s' * (n_blocks != 1)}"


def _group_words(groups: dict[Any, Any], *, label: str = "") -> str:
    """Each group's ratio (a :class:`CategoryRatio`) in words, with its descriptive
    interval (``label`` before its level: "unadjusted ") or why it has none, separated by
    semicolons."""
    parts = []
    for r in groups.values():
        counts = _counts(r.n_pairs, r.n_blocks)
        if r.has_interval:
            ci = f"×{span_text(r.ci_low, r.ci_high, sep='–×')}"
            where = f"{label}{conf_words(r.confidence_level)} CI {ci}, df {r.df}, {counts}"
        else:
            where = f"{counts}: {render(r.note) if r.note is not None else 'no interval'}"
        parts.append(f"{r.category} {ratio_words(r.estimate)} ({where})")
    return "; ".join(parts)


def _segment_words(segments: dict[str, Any]) -> str:
    """Each category's segment (:class:`~speclib.analysis.verdict.segments.SegmentResult`)
    in words: its ratio with the Holm-adjusted interval the answer gives, or why it has
    none, separated by semicolons."""
    parts = []
    for s in segments.values():
        counts, ci = _counts(s.n_pairs, s.n_blocks), s.ci
        if ci is not None and ci.decidable:
            span = f"×{span_text(ci.ci_low, ci.ci_high, sep='–×')}"
            where = f"{conf_words(ci.confidence_level)} CI {span}, df {ci.df}, {counts}"
        else:
            why = s.note if s.note is not None else (ci.note if ci is not None else None)
            where = f"{counts}: {render(why) if why is not None else 'no interval'}"
        parts.append(f"{s.segment} {ratio_words(s.estimate)} ({where})")
    return "; ".join(parts)


def _by_category(c: Comparison, an: RunAnalysis | None = None) -> str:
    """Where the effect comes from, when the prompts come in several categories: each
    category's ratio in words with one interval, the answer's segment's (Holm over every
    segment, as the headline gives it), or, for an arm the answer does not cut, the
    descriptive one labelled unadjusted; then, in a multi-turn run, the same per turn
    (:func:`_by_turn`)."""
    answer = getattr(an, "answer", None)
    segments = answer.categories_of(c.experiment, c.level) if answer is not None else {}
    cats = getattr(c, "tpot_ratio_by_category", None) or {}
    text = ""
    if len(segments) >= 2:
        words = _segment_words(segments)
        text = f" TPOT ratio by prompt category: {words}. The {SEGMENT_CATEGORY_NOTE}."
    elif len(cats) >= 2:
        words = _group_words(cats, label="unadjusted ")
        text = f" TPOT ratio by prompt category: {words}. The {CATEGORY_NOTE}."
    return text + _by_turn(c)


def _by_turn(c: Comparison) -> str:
    """A multi-turn run's TPOT ratio per turn (turn 2 carries the turn-1 answer in its
    prompt), in words with descriptive intervals; "" with fewer than two turns."""
    turns = getattr(c, "tpot_ratio_by_turn", None) or {}
    if len(turns) < 2:
        return ""
    return f" TPOT ratio per turn: {_group_words(turns)}. The {TURN_NOTE}."


def conclusion_parts(an: RunAnalysis) -> tuple[str, list[str], str, str | None]:
    """Headline, one sentence per comparison, the measurement note, the warning pointer."""
    if not an.experiments:
        return (
            "No experiment was compared (an A/A calibration run, or no experiment series has "
            "successful requests): see the noise floor above.",
            [],
            "",
            _warning_pointer(an),
        )
    wins = [c for c in an.experiments if c.word == Word.ADOPT]
    failed = list({c.experiment: c for c in an.experiments if c.word == Word.FAILED}.values())
    measured = [c for c in an.experiments if c.word != Word.FAILED]
    if failed and not measured:
        headline = (
            "No verdict: "
            + "; ".join(_failed_words(c).replace("; fix it and run again", "") for c in failed)
            + ". Fix it and run again: nothing was measured."
        )
    elif wins:
        best = min(wins, key=lambda c: c.cis["tpot_s"].estimate)  # type: ignore[union-attr]
        headline = (
            f"Best configuration here: **{best.experiment}** at {_load_words(best, an)} — it "
            f"{_effect(best.cis['tpot_s'])}. This holds for this load and workload only."
        )
    else:
        headline = (
            f"No configuration is a clear win here at {_all_loads(an)}: keep speculative "
            "decoding off, or test other settings."
        )
        whole = _best_for_the_whole(an)
        if whole is not None:
            headline = (
                f"Best for this traffic as a whole: **{whole.experiment}** at "
                f"{_load_words(whole, an)} — over all its requests it "
                f"{_effect(whole.cis['tpot_s'])}, but not on every request (above). "
                "This holds for this load and workload only."
            )
        elif pays := _where_it_pays(an):
            headline = pays
        if failed:
            headline = (
                f"No measured configuration is a clear win here at {_all_loads(an)}; "
                + "; ".join(_failed_words(c) for c in failed)
                + "."
            )
    wl = an.params.workload
    note = (
        f"Measured over streaming chat completions, TPOT from {instrument_words(an)} "
        f"({wl.max_tokens} max tokens, "
        f"temperature {wl.temperature:g}, load {', '.join(lv.label for lv in wl.levels)}); "
        "TPOT excludes the first token; every TPOT ratio is the traffic's (the arm's mean TPOT "
        "over the control's on the same prompts, each request once) unless named the typical "
        "request's (a geometric mean of per-request ratios) or per token; intervals are "
        "block-level paired t-intervals over replicate blocks, each on its own arm's "
        "block-to-block variance (Holm-adjusted over every experiment arm and load level); "
        "the method is at the end of this page."
    )
    said = render_all(getattr(getattr(an, "answer", None), "headline", ()))
    if said:
        mixed = " ".join(s[0].upper() + s[1:] + "." for s in said)
        headline = f"{mixed} {headline}"
    if any(c.word == Word.UNTRUSTWORTHY for c in an.experiments):
        headline = (
            f"No verdict at {_all_loads(an)}: this bench is not trustworthy for this run (see "
            "the bench-trust panel); re-run on a quieter machine or with more replicate blocks."
        )
    if mix := mix_words(an):
        headline = f"{mix[:1].upper()}{mix[1:]}: {headline}"
    sentences = [_sentence(c, an) for c in an.experiments]
    deploy = getattr(getattr(an, "answer", None), "deploy", None)
    sentences += [f"What to deploy {t}." if t.startswith("at ") else f"What to deploy: {t}."
                  for _, t in (deploy.advice if deploy else ())]  # fmt: skip
    return headline, sentences, note, _warning_pointer(an)


def mix_words(an: RunAnalysis) -> str | None:
    """The user's traffic mix the answer is for ("for your mix: echo 80 %, fresh 20 % (the
    run's prompts: 50 / 50)"); None for the prompts as sent."""
    mix = getattr(getattr(an, "answer", None), "mix", None)
    return mix.words() if mix is not None else None


def _best_for_the_whole(an: RunAnalysis) -> Comparison | None:
    """The fastest "mixed" arm whose pooled verdict over all its requests is "adopt": the
    one deployment that pays for the traffic as a whole, though not on every segment."""
    arms = getattr(getattr(an, "answer", None), "arms", ())
    pooled = {(a.arm, a.level) for a in arms
              if a.word == Word.MIXED and a.pooled_word == Word.ADOPT}  # fmt: skip
    found = [c for c in an.experiments
             if (c.experiment, c.level) in pooled and c.cis.get("tpot_s") is not None]  # fmt: skip
    return min(found, key=lambda c: c.cis["tpot_s"].estimate, default=None)  # type: ignore[union-attr]


def _where_it_pays(an: RunAnalysis) -> str | None:
    """The headline when no arm wins for all the traffic but some kind of prompt has an arm
    decided to pay on it (the answer's deployment choices): which kinds, with which arm,
    and that the others are not shown to gain; None when no kind has one."""
    deploy = getattr(getattr(an, "answer", None), "deploy", None)
    choices = deploy.choices if deploy is not None else ()
    on: dict[str, list[str]] = {}
    for c in choices:
        if c.choice == "on" and c.arm:
            at = f" at {c.load}" if len(an.params.workload.levels) > 1 else ""
            on.setdefault(c.category, []).append(f"{c.arm} ×{c.ratio:.2f}{at}")
    if not on:
        return None
    rest = sorted({c.category for c in choices} - set(on))
    pays = "; ".join(f"**{cat}** ({', '.join(arms)})" for cat, arms in on.items())
    return (
        f"No configuration is a clear win for all of this traffic at {_all_loads(an)}. "
        f"Speculation pays on some kinds of prompt: {pays}"
        + (f"; on {', '.join(rest)} no arm is shown to pay" if rest else "")
        + ". A server runs one speculative config: route the kinds where it pays to a "
        "deployment with it, and keep it off for the rest."
    )


def _warning_pointer(an: RunAnalysis) -> str | None:
    if not an.warnings:
        return None
    return f"⚠ {len(an.warnings)} warning(s): see Warnings in the method section below."


def conclusion(an: RunAnalysis) -> str:
    """The plain-words conclusion generated from the numbers (Markdown)."""
    headline, sentences, note, warning = conclusion_parts(an)
    blocks = [headline, "\n".join(f"- {s}" for s in sentences), note, warning or ""]
    return "\n\n".join(b for b in blocks if b)


_BOLD = re.compile(r"\*\*(.+?)\*\*")


def md_inline(text: str) -> str:
    """Escape ``text`` for HTML, then turn ``**bold**`` into ``<b>`` (the only markup used)."""
    return _BOLD.sub(r"<b>\1</b>", html.escape(text))


def conclusion_html(an: RunAnalysis, *, headline: bool = True) -> str:
    """The conclusion as an HTML block (``#speclib-conclusion``): the headline (left out
    with ``headline=False`` where :func:`speclib.report.sections.answer_html` already leads
    the page), one sentence per comparison, the warning pointer and the measurement note."""
    head, sentences, note, warning = conclusion_parts(an)
    body = f"<p class='speclib-headline'>{md_inline(head)}</p>" if headline else ""
    if sentences:
        body += "<ul>" + "".join(f"<li>{md_inline(s)}</li>" for s in sentences) + "</ul>"
    if warning:
        body += f"<p><a href='#speclib-warnings'>{html.escape(warning)}</a></p>"
    if note:
        body += f"<p class='speclib-small'>{html.escape(note)}</p>"
    return wrap(f"<div class='speclib-conclusion' id='speclib-conclusion'>{body}</div>")
