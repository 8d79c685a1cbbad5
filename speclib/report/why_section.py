"""The report's "Why this speed-up?" section, shown right after the first screen.

:func:`why_html` gives, per comparison, the measured decomposition of its speed-up over every
decode step (tokens per step and a step's cost from the streamed chunks, the share of steps
that had no draft, acceptance on the drafted ones: :mod:`speclib.analysis.speculation.why`,
:mod:`speclib.analysis.speculation.drafting`), flags an arm whose streams disagree with what its
server counted, then the lines of vLLM's own log that bear on speed, per series, and the
acceptance against a synthetic pair's known truth (both from
:mod:`speclib.analysis.health.stack`).
"""

from __future__ import annotations

import html
from typing import Any

from speclib.analysis.run_analysis import RunAnalysis
from speclib.analysis.speculation.acceptance_truth import TOLERANCE
from speclib.report.html_format import wrap

__all__ = ["why_html"]


_METHOD = (
    "<p>Measured, not fitted, over every decode step: a request's decode steps are its "
    "streamed chunks after the first (one chunk per engine step at c=1), the tokens they "
    "carried give tokens per step, the gaps between them a step's cost. vLLM's acceptance "
    "counters (and its mean acceptance length) cover only the steps that had a draft; a "
    "step whose proposer found nothing (an n-gram lookup without a match) yields one token "
    "and is invisible to them. So the share of decode steps that had a draft is counted "
    "apart: from each request's own spec metrics where the server gives them, else "
    "<code>vllm:spec_decode_num_drafts</code> over the streams' decode steps of each "
    "launch; the streams' accepted drafts are checked against both. The standard model of "
    "speculative decoding (Leviathan et al. 2023), weighted by that share, is shown only "
    "where the draft cost c is known independently of these timings (n-gram: c = 0; a draft "
    "model: served alone with <code>analysis.measure_draft_cost: true</code>).</p>"
    "<p>EAGLE-3 is read the same way, with two differences. Its head drafts from the "
    "target's own hidden states (taps on a low, a middle and a high layer, fused into one "
    "input), so it proposes on every decode step and its drafted share should read about "
    "1. Its c is the head's cost per step: one decoder layer and its own "
    "LM head against the target's full stack, far below a separate draft model's, but it "
    "cannot be served alone to measure it, so an EAGLE-3 arm gets the measured "
    "decomposition and no model prediction.</p>"
    "<p>MTP has no draft model at all: its layers ship inside the target's checkpoint, and "
    "each guess runs one of them on the target's own last hidden state (already computed "
    "by the verify pass) and the embedding of the token before, then the target's LM head; "
    "vLLM reuses one layer for every guess when k exceeds the layers the checkpoint has. It "
    "cannot be served alone either, so its c is <i>modelled</i>, not timed: the weights one "
    "guess reads (one MTP layer and the LM head) over those a target step reads, as a "
    "decode step at small batches streams every weight it uses once. The prediction says "
    "so, and its gap to the measured step cost is what that model leaves out.</p>"
)


def why_html(an: RunAnalysis) -> str:
    """ "Why this speed-up?": the measured decomposition per comparison (shown right after
    the first screen, before the evidence), with any disagreement between an arm's streams
    and its server's counters."""
    items = [
        f"<li><b>{html.escape(c.experiment)}</b> ({html.escape(c.load)}): "
        f"{html.escape(c.explanation.summary)}{_stream_flag(c.acceptance)}</li>"
        for c in an.comparisons
        if c.explanation and c.explanation.summary
    ]
    stack = _stack_html(an)
    kinds = _kinds_html(an)
    if not items and not stack:
        return ""
    return wrap(
        "<h2>Why this speed-up?</h2>" + _METHOD + "<ul>" + "".join(items) + "</ul>" + kinds + stack
    )


def _kinds_html(an: RunAnalysis) -> str:
    """Per kind of prompt, at the first load level (c=1 there: one chunk per engine step):
    the tokens a decode step yielded, a step's cost over a plain one, the speed-up they make
    and the kind's TPOT ratio; with a replay (``speclib replay-acceptance``), the mean
    acceptance length the draft gets along the control's answers of that kind."""
    replay = (an.stack.get("acceptance_replay") or {}).get("control_answers") or {}
    blocks = []
    for c in an.comparisons:
        if c.level != 0 or len(c.why_by_category) < 2:
            continue
        mine = replay.get(c.experiment) or {}
        rows = []
        for cat, w in c.why_by_category.items():
            ratio = c.by_category.get(cat)
            length = (mine.get(cat) or {}).get("mean_acceptance_length")
            rows.append(
                f"<tr><td>{html.escape(cat)}</td><td>{w['n_pairs']}</td>"
                f"<td>{w['tokens_per_step']:.2f}</td><td>{w['step_cost']:.2f}</td>"
                f"<td>×{w['speedup']:.2f}</td>"
                f"<td>{'×' + format(ratio.estimate, '.3f') if ratio else '–'}</td>"
                f"<td>{format(length, '.2f') if length else '–'}</td></tr>"
            )
        blocks.append(
            f"<p><b>{html.escape(c.experiment)}</b> ({html.escape(c.load)}) per kind of prompt:"
            "</p><table class='speclib-table'><tr><th>Kind</th><th>Pairs</th>"
            "<th>Tokens per step</th><th>Step cost</th><th>Speed-up (streams)</th>"
            "<th>TPOT ratio</th><th>Replay: mean acceptance length</th></tr>"
            + "".join(rows)
            + "</table>"
        )
    if not blocks:
        return ""
    return (
        "<h3>Why, per kind of prompt</h3><p>A kind whose answers the draft can predict (code "
        "copied from the prompt, a fixed idiom) yields more tokens per step at the same step "
        "cost. Tokens per step and step cost are geometric means over the kind's paired "
        "prompts, from the streams; the TPOT ratio is the kind's block-level estimate (below 1: "
        "faster); the replay column (after <code>speclib replay-acceptance</code>) is what the "
        "draft accepts along the control's answers of that kind, counted outside vLLM.</p>"
        + "".join(blocks)
    )


def _stream_flag(acceptance: dict[str, Any]) -> str:
    """A warning after an arm whose streams disagree with its server's counts ("" if none)."""
    stream = acceptance.get("stream") or {}
    if stream.get("matches") is not False:
        return ""
    notes = "; ".join(stream.get("notes") or [])
    return (
        " <b>Stream against counters: MISMATCH</b> "
        f"({html.escape(notes)}): the drafted share and acceptance read from the stream are "
        "not one engine step per chunk here."
    )


def _replay_html(replay: dict[str, Any], line: str) -> str:
    """vLLM's acceptance per position beside the replay outside vLLM, per series."""

    def rates(values: list[float] | None) -> str:
        return " / ".join(f"{v:.3f}" for v in values) if values else "–"

    rows = "".join(
        f"<tr><td>{html.escape(str(r['series']))}</td><td>{r['k']}</td><td>{r['launches']}</td>"
        f"<td>{rates(r['measured_per_position'])}</td><td>{rates(r['replayed_per_position'])}</td>"
        f"<td>{r['measured_mean_length']:.3f} / {r['replayed_mean_length']:.3f}</td>"
        f"<td>{r['worst_relative_error']:.1%}</td></tr>"
        for r in replay.get("series") or []
        if r.get("measured_mean_length") is not None and r.get("replayed_mean_length")
    )
    check = replay.get("target_check") or {}
    same = check.get("same_share")
    note = (
        f" The target's greedy token in transformers ({html.escape(str(replay.get('dtype')))}"
        f" on {html.escape(str(replay.get('device')))}) was the served one at "
        f"{same:.2%} of {check.get('positions')} answer positions."
        if same is not None
        else ""
    )
    return (
        f"<p><b>Acceptance against a second instrument</b>: the measured acceptance "
        f"{html.escape(line)}. The replay runs the target and the draft in transformers over "
        f"the answers each launch served and counts greedy speculation's steps from their "
        f"greedy tokens.{note}</p><table class='speclib-table'><tr><th>Series</th><th>k</th>"
        "<th>Launches</th><th>vLLM per position</th><th>Replay per position</th>"
        f"<th>Mean length (vLLM / replay)</th><th>Largest difference</th></tr>{rows}</table>"
    )


def _stack_html(an: RunAnalysis) -> str:
    """What vLLM's own log says bears on speed, per series (lines the control logged too
    left out), and the acceptance against a synthetic pair's truth."""
    out = []
    truth = an.stack.get("acceptance_truth_line")
    if truth:
        out.append(
            f"<p><b>Acceptance against a known truth</b>: the measured acceptance "
            f"{html.escape(truth)}.</p>" + _truth_table(an.stack.get("acceptance_truth") or [])
        )
    replay = an.stack.get("acceptance_replay_line")
    if replay:
        out.append(_replay_html(an.stack.get("acceptance_replay") or {}, replay))
    lines = an.stack.get("speed_log") or {}
    rows = [
        f"<tr><td>{html.escape(series)}</td><td>{html.escape(x['kind'])}</td>"
        f"<td>{html.escape(x['meaning'])}</td><td><code>{html.escape(x['line'])}</code></td>"
        f"<td>{x['launches']}</td></tr>"
        for series, items in lines.items()
        for x in items
    ]
    if rows:
        out.append(
            "<h3>What vLLM's log says about speed</h3><p>Lines of each server's own log that "
            "bear on speed (vLLM's words; for an experiment, lines the control logged too are "
            "left out).</p><table class='speclib-table'><tr><th>Series</th><th>Kind</th>"
            "<th>What it means</th><th>vLLM's line</th><th>Launches</th></tr>"
            + "".join(rows)
            + "</table>"
        )
    return "".join(out)


def _rates(values: Any) -> str:
    return " / ".join("–" if v is None else f"{v:.3f}" for v in values or [])


def _truth_table(rows: list[dict[str, Any]]) -> str:
    """Per launch: acceptance per draft position as vLLM counted it, the exact expectation
    on the launch's outputs and the declared ``agreement ** i``."""
    if not rows:
        return ""
    body = "".join(
        f"<tr><td>{html.escape(str(r.get('series')))}</td>"
        f"<td>{html.escape(str(r.get('launch_id')))}</td><td>{r.get('k')}</td>"
        f"<td>{_rates(r.get('measured_per_position'))}</td>"
        f"<td>{_rates(r.get('expected_per_position'))}</td>"
        f"<td>{_rates(r.get('declared_per_position'))}</td>"
        f"<td>{r.get('measured_drafts')} / {r.get('expected_drafts')}</td>"
        f"<td>{'yes' if r.get('within_per_position') else 'NO'}</td></tr>"
        for r in rows
    )
    return (
        "<table class='speclib-table'><tr><th>Series</th><th>Launch</th><th>k</th>"
        "<th>Accepted per position (vLLM)</th><th>Exact on its outputs</th>"
        "<th>Declared (a<sup>i</sup>)</th><th>Drafts (vLLM / exact)</th>"
        f"<th>Every position within ±{TOLERANCE:.0%}</th></tr>" + body + "</table>"
    )
