"""The report's "Where speculation stops paying" section: load, k schedule, goodput.

:func:`load_html` renders :class:`speclib.analysis.load.load_analysis.LoadAnalysis` (empty for a
run with one load level and no SLO): what the verdict uses, each experiment's break-even
load with its interval, one table per load level and arm (TPOT ratio with its interval and
verdict, the measured requests in flight, output tokens/s, TTFT and TPOT percentiles, and
with an SLO the share meeting it, goodput and the goodput verdict), the highest load each
arm sustains within the SLO, and each k schedule with its batch-size mapping, the installed
vLLM's validation, the ``--speculative-config`` to deploy and the command of its
confirmation run.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from speclib.analysis.run_analysis import RunAnalysis
from speclib.report.html_format import pct, word_badge, wrap

__all__ = ["load_html"]


def _num(x: Any, fmt: str = ".1f") -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "–"
    return "–" if not math.isfinite(v) else format(v, fmt)


def _ratio(est: Any, lo: Any, hi: Any, level: float | None = None) -> str:
    if not math.isfinite(float(est if est is not None else math.nan)):
        return "–"
    span = f" [{_num(lo, '.2f')}, {_num(hi, '.2f')}]"
    return f"×{_num(est, '.2f')}{span if _num(lo) != '–' else ''}" + (
        f" <span class='speclib-small'>({round(level * 100, 1):g} %)</span>" if level else ""
    )


def _tpot_cells(an: RunAnalysis) -> dict[tuple[str, int], str]:
    out = {}
    for c in an.comparisons:
        ci = c.cis.get("tpot_s")
        if ci is not None:
            out[(c.experiment, c.level)] = (
                f"{_ratio(ci.estimate, ci.ci_low, ci.ci_high, ci.confidence_level)} "
                f"{word_badge(c.word)}"
            )
    return out


def _goodput_cells(an: RunAnalysis) -> dict[tuple[str, int], str]:
    g = an.load.goodput
    out = {}
    for _, r in g.iterrows() if len(g) else ():
        why = (
            f" <span class='speclib-small'>{html.escape(r['reason'])}</span>" if r["reason"] else ""
        )
        out[(r["series"], int(r["level"]))] = (
            f"{_ratio(r['ratio'], r['ci_low'], r['ci_high'])} {html.escape(r['word'])}{why}"
        )
    return out


def _level_table(an: RunAnalysis) -> str:
    t = an.load.levels
    slo = an.load.slo
    pctl = f"p{slo['percentile']:g}" if slo else "p90"
    tpot, good = _tpot_cells(an), _goodput_cells(an)
    head = ["Load", "Arm", "In flight (mean)", "The traffic's TPOT ratio to control [CI], verdict",
            "Output tokens/s", f"TTFT p50 / {pctl} (ms)", f"TPOT p50 / {pctl} (ms)"]  # fmt: skip
    if slo:
        head += ["Meets the SLO", "Goodput (req/s)", "Goodput ratio [CI]"]
    rows = []
    order = {s.name: i for i, s in enumerate(an.params.arms)}
    t = t.assign(_o=t["series"].map(order)).sort_values(["level", "_o"])
    for _, r in t.iterrows():
        key = (r["series"], int(r["level"]))
        cells = [
            html.escape(str(r["load"])),
            html.escape(str(r["series"])),
            _num(r["in_flight"]),
            tpot.get(key, "control" if r["series"] == an.control else "–"),
            f"{_num(r['tokens_per_s'], '.0f')}",
            f"{_num(r['ttft_p50_ms'], '.0f')} / {_num(r[f'ttft_{pctl}_ms'], '.0f')}",
            f"{_num(r['tpot_p50_ms'])} / {_num(r[f'tpot_{pctl}_ms'])}",
        ]
        if slo:
            share = r["share_meeting"]
            cells += [
                pct(share) if share == share else "–",
                f"{_num(r['goodput_per_s'], '.2f')} [{_num(r['goodput_per_s_low'], '.2f')}, "
                f"{_num(r['goodput_per_s_high'], '.2f')}]",
                good.get(key, "–"),
            ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (
        "<table class='speclib-table'><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )


def _schedule_html(an: RunAnalysis) -> str:
    parts = []
    for s in an.load.schedules:
        body = f"<p>{html.escape(s.text)}</p>"
        if s.entries:
            config = json.dumps(s.speculative_config, separators=(",", ":"))
            choices = "; ".join(
                f"c={c.concurrency} (batch {c.batch_size}): k = {c.k} — {c.why}" for c in s.choices
            )
            body += (
                f"<p class='speclib-small'>Chosen on the interval bounds: {html.escape(choices)}."
                f" Load levels to batch sizes: {html.escape(s.mapping)}. vLLM's batch size is "
                "the number of requests scheduled in one engine step (running decodes plus "
                "prefills; <code>len(num_scheduled_tokens)</code> in its scheduler).</p>"
                f"<p class='speclib-small'>{html.escape(s.validated)}"
                + (f": <b>{html.escape('; '.join(s.problems))}</b>" if s.problems else "")
                + f".</p><p>Deploy: <code>--speculative-config '{html.escape(config)}'</code></p>"
                "<p class='speclib-small'>Confirm it before you deploy it: "
                f"<code>python -m speclib schedule {html.escape(str(an.run_dir))} --out "
                "confirm.yaml &amp;&amp; python -m speclib run confirm.yaml</code> runs the "
                "schedule as one more arm against the control and the best fixed k, at the "
                "same load levels, with its own verdict.</p>"
            )
        parts.append(body)
    return "<h3>A k schedule for these loads</h3>" + "".join(parts) if parts else ""


def _slo_html(an: RunAnalysis) -> str:
    slo = an.load.slo
    if not slo:
        return ""
    bounds = ", ".join(f"{m.upper()} ≤ {v:g} ms" for m, v in slo["bounds_ms"].items())
    sustained = "; ".join(
        f"{html.escape(arm)}: {html.escape(load) if load else 'not even the lowest load'}"
        for arm, load in an.load.sustained.items()
    )
    return (
        f"<p><b>SLO</b>: {html.escape(bounds)} (a request meets it when it succeeded and is "
        f"within every bound; goodput = requests meeting it per second of the arm's active "
        f"time, with a block-level interval; the goodput ratio is paired by block). "
        f"<b>Highest load sustained</b> (p{slo['percentile']:g} within every bound, counting "
        f"up from the lowest concurrency): {sustained}.</p>"
    )


def load_html(an: RunAnalysis) -> str:
    """The section (empty string when the run has one load level and no SLO)."""
    load = an.load
    if load.levels.empty or (load.levels["level"].nunique() < 2 and not load.slo):
        return ""
    bes = "".join(f"<li>{html.escape(b.text)}</li>" for b in load.break_evens)
    be_html = (
        "<p><b>Break-even load</b> (the traffic's TPOT ratio reaching 1, interpolated linearly "
        "between "
        f"levels; its interval inverts the per-level intervals):</p><ul>{bes}</ul>"
        if bes
        else ""
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in load.notes)
    return wrap(
        "<h2 id='speclib-load'>Where speculation stops paying</h2>"
        f"<p>{html.escape(load.uses)}.</p>"
        + be_html
        + _slo_html(an)
        + _level_table(an)
        + (f"<ul class='speclib-small'>{notes}</ul>" if notes else "")
        + _schedule_html(an)
    )
