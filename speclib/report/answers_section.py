"""The report's "What the model answered" section: real answers per kind of prompt.

A TPOT ratio says nothing about what was generated. :func:`answers_html` shows, per prompt
category, a few prompts with the control's answer and each experiment's answer to the same
prompt in the same replicate block (first load level, first repeat), beside that category's
TPOT ratio per experiment, then every prompt whose greedy answer differed from the control's
and where. :func:`answer_samples` picks the prompts (those whose answers differed first, then
in the prompt set's order) into :class:`AnswerSample` records that the HTML only renders.
Every answer is a record's ``text`` from ``requests.jsonl``; the prompt text comes from the
run's prompt set when it can still be read.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from speclib.analysis.run_analysis import RunAnalysis
from speclib.core.wording import span_text
from speclib.report.html_format import wrap
from speclib.report.measurement_tables import divergence_kinds

__all__ = ["AnswerSample", "answer_samples", "answers_html"]

_MAX_CHARS = 360


@dataclass(frozen=True)
class AnswerSample:
    """One prompt's answers: the control's and, per experiment, its own and whether it was
    the control's token for token (None: not compared, e.g. a sampled run)."""

    prompt_id: str
    category: str
    replicate: int
    prompt: str | None
    control: str
    control_finish: str | None
    experiments: tuple[tuple[str, str, str | None, bool | None], ...]  # name, text, finish, same


def _measured(an: RunAnalysis) -> pd.DataFrame:
    df = an.records
    if df.empty or "text" not in df.columns:
        return df.iloc[0:0]
    keep = df["ok"].astype(bool) if "ok" in df.columns else pd.Series(True, index=df.index)
    for col in ("level", "repeat"):
        if col in df.columns:
            keep &= df[col].fillna(0).astype(int) == 0
    if "phase" in df.columns:
        keep &= df["phase"].fillna("measure") == "measure"
    return df[keep]


def _prompt_texts(an: RunAnalysis) -> dict[str, str]:
    from speclib.core.datasets import workload_prompts

    try:
        loaded = workload_prompts(an.params)
    except (OSError, ValueError):
        return {}
    return {p.id: p.messages[-1].get("content", "") for p in loaded.prompts if p.messages}


def answer_samples(an: RunAnalysis, *, per_category: int = 2) -> tuple[AnswerSample, ...]:
    """Up to ``per_category`` prompts per category (diverged ones first), each with the
    control's and every experiment's answer from the earliest block that has them all, in the
    prompt set's order."""
    if per_category < 1:
        raise ValueError("`per_category` must be a positive integer")
    df = _measured(an)
    experiments = [c for c in an.experiments if c.level == 0]
    if df.empty or not experiments:
        return ()
    control = experiments[0].control
    names = [c.experiment for c in experiments]
    diverged = {pid for c in experiments for pid, a in c.agreements.items() if not a.exact_match}
    texts = _prompt_texts(an)
    rows = df[df["series"].isin([control, *names])]
    seen = list(dict.fromkeys(rows["prompt_id"]))
    order = [pid for pid in texts if pid in set(seen)] + [p for p in seen if p not in texts]
    category = rows.groupby("prompt_id")["category"].first() if "category" in rows else None
    by_cat: dict[str, list[str]] = {}
    for pid in order:
        cat = category.get(pid) if category is not None else None
        cat = str(cat) if isinstance(cat, str) else "all prompts"
        by_cat.setdefault(cat, []).append(pid)
    out = []
    for cat, pids in by_cat.items():
        chosen = sorted(pids, key=lambda p: (p not in diverged, order.index(p)))
        taken = 0
        for pid in chosen:
            sample = _sample(rows, pid, cat, control, experiments, texts.get(pid))
            if sample is not None:
                out.append(sample)
                taken += 1
            if taken == per_category:
                break
    return tuple(out)


def _sample(
    rows: pd.DataFrame,
    pid: str,
    cat: str,
    control: str,
    experiments: list[Any],
    prompt: str | None,
) -> AnswerSample | None:
    mine = rows[rows["prompt_id"] == pid]
    names = [c.experiment for c in experiments]
    for rep in sorted(mine["replicate"].unique()):
        block = mine[mine["replicate"] == rep].drop_duplicates("series").set_index("series")
        if control not in block.index or not all(n in block.index for n in names):
            continue
        finish = block["finish_reason"] if "finish_reason" in block.columns else None

        def fin(series: str, finish: Any = finish) -> str | None:
            value = finish.get(series) if finish is not None else None
            return value if isinstance(value, str) else None

        exps = []
        for c in experiments:
            agreement = c.agreements.get(pid)
            same = None if agreement is None else bool(agreement.exact_match)
            exps.append(
                (c.experiment, str(block.at[c.experiment, "text"]), fin(c.experiment), same)
            )
        return AnswerSample(
            prompt_id=pid,
            category=cat,
            replicate=int(rep),
            prompt=prompt,
            control=str(block.at[control, "text"]),
            control_finish=fin(control),
            experiments=tuple(exps),
        )
    return None


def _text(value: str) -> str:
    cut = value if len(value) <= _MAX_CHARS else value[:_MAX_CHARS] + " …"
    return html.escape(cut).replace("\n", "<br>")


def _finish(finish: str | None) -> str:
    words = {"stop": "ended (EOS)", "length": "cut at max_tokens"}
    return (
        f"<br><small>{html.escape(words.get(finish or '', finish or 'no finish reason'))}</small>"
    )


def _ratio_cell(an: RunAnalysis, experiment: str, category: str) -> str:
    """The category's TPOT ratio beside its prompts: the answer's segment, with the
    Holm-adjusted interval the headline gives; for an arm the answer does not cut, the
    descriptive one, labelled unadjusted."""
    answer = getattr(an, "answer", None)
    for c in an.experiments:
        if c.experiment == experiment and c.level == 0:
            segments = answer.categories_of(experiment, 0) if answer is not None else {}
            seg = segments.get(category)
            if seg is not None:
                ci = seg.ci
                if not math.isfinite(seg.estimate):
                    return ""
                if ci is not None and ci.decidable:
                    return f" ×{seg.estimate:.2f} [{span_text(ci.ci_low, ci.ci_high)}]"
                return f" ×{seg.estimate:.2f}"
            r = c.by_category.get(category)
            if r is None or not math.isfinite(r.estimate):
                return ""
            if r.ci_low is not None and r.ci_high is not None:
                return f" ×{r.estimate:.2f} [{span_text(r.ci_low, r.ci_high)}] (unadjusted)"
            return f" ×{r.estimate:.2f}"
    return ""


def _same_word(same: bool | None) -> str:
    if same is None:
        return ""
    return "<br><small>= control</small>" if same else "<br><small><b>differs</b></small>"


def answers_html(an: RunAnalysis, *, per_category: int = 2) -> str:
    """The section: per category, a few prompts with the control's and each experiment's
    answer and the category's TPOT ratio, then the greedy disagreements ("" without texts)."""
    samples = answer_samples(an, per_category=per_category)
    if not samples:
        return ""
    names = [name for name, *_ in samples[0].experiments]
    head = (
        "<tr><th>Prompt</th><th>control</th>"
        + "".join(f"<th>{html.escape(n)}</th>" for n in names)
        + "</tr>"
    )
    body = []
    for cat in dict.fromkeys(s.category for s in samples):
        ratios = "; ".join(
            f"{html.escape(n)}{_ratio_cell(an, n, cat)}" for n in names if _ratio_cell(an, n, cat)
        )
        body.append(
            f"<tr><th colspan='{2 + len(names)}' style='text-align:left'>{html.escape(cat)}"
            + (f" — TPOT ratio {ratios}" if ratios else "")
            + "</th></tr>"
        )
        for s in (x for x in samples if x.category == cat):
            prompt = _text(s.prompt) if s.prompt else ""
            cells = "".join(
                f"<td>{_text(text)}{_finish(finish)}{_same_word(same)}</td>"
                for _name, text, finish, same in s.experiments
            )
            body.append(
                f"<tr><td><code>{html.escape(s.prompt_id)}</code> (block {s.replicate})<br>"
                f"{prompt}</td><td>{_text(s.control)}{_finish(s.control_finish)}</td>{cells}</tr>"
            )
    return wrap(
        "<h2>What the model answered</h2><p>Per kind of prompt, the control's answer and each "
        "experiment's to the same prompt in the same block, as streamed (prompts whose answers "
        "differ from the control's are shown first). Greedy speculation must not change a "
        "token: '= control' is a token-for-token match.</p>"
        f"<table class='speclib-table speclib-answers'>{head}{''.join(body)}</table>"
        + _disagreements(an)
    )


def _disagreements(an: RunAnalysis) -> str:
    lines = []
    for c in an.experiments:
        if c.level != 0 or c.agreement is None:
            continue
        a = c.agreement
        diverged = sorted(pid for pid, x in c.agreements.items() if not x.exact_match)
        where = (
            ": "
            + ", ".join(
                f"{html.escape(pid)} (at {c.agreements[pid].first_divergence} "
                f"{c.agreements[pid].unit})"
                for pid in diverged[:12]
            )
            + (" …" if len(diverged) > 12 else "")
            if diverged
            else ""
        )
        kinds = f" ({divergence_kinds(a, long=False)})" if a.n_diverged else ""
        lines.append(
            f"<li><b>{html.escape(c.experiment)}</b>: {a.n_exact} of {a.n_compared} prompts "
            f"answered exactly as the control; {a.n_diverged} differ{kinds}{where}</li>"
        )
    return (
        f"<p>Agreement with the control's greedy answers:</p><ul>{''.join(lines)}</ul>"
        if lines
        else ""
    )
