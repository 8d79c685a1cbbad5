"""Output checks of a comparison: greedy agreement, and the failure class of each output.

* **Greedy output agreement** (:func:`greedy_agreement`, :func:`compare_outputs`,
  :func:`summarize_agreement`): speculation must not change greedy output; where it does,
  the first divergence and a short excerpt go into the report.
* **Near ties** (:func:`classify_divergences`): where the target, served without
  speculation, gives the control's token and the arm's token at the first divergence
  log-probabilities within ``near_tie_nats`` of each other (``RUN_DIR/divergences.jsonl``,
  :mod:`speclib.run.scoring`), the two answers parted on a floating-point near tie, which
  vLLM's lossless guarantee leaves open; otherwise the arm disagrees with its target for
  real. Only real disagreements, and divergences nobody ranked, count against the outputs
  gate.
* **The control's own variation** (:func:`varying_prompts`): greedy decoding is not batch
  invariant (bf16 kernels whose reductions depend on the batch): at high concurrency the
  control's own answers to one prompt can differ between its requests. An unranked
  divergence on such a prompt is the bench's floor, not the arm's doing
  (``control_varies``), and does not count against the outputs gate.
* **Output classes** (:func:`classify_output`, :func:`count_bad_outputs`) beside HTTP
  errors: empty outputs and streams cut by an error are failures even when the client saw
  status 200.

Records may be :class:`~speclib.core.records.RequestRecord` objects or dict-likes (rows of
a records DataFrame); pure functions, nothing talks to a server.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "OUTPUT_CLASSES",
    "Agreement",
    "AgreementSummary",
    "DivergenceClass",
    "classify_divergences",
    "classify_output",
    "compare_outputs",
    "count_bad_outputs",
    "greedy_agreement",
    "summarize_agreement",
    "varying_prompts",
]

OUTPUT_CLASSES = ("ok", "http_error", "empty_output", "truncated_by_error", "implausible")
"""Every value :func:`classify_output` can return (``implausible`` is set by a later check)."""


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Field of a record-like: attribute (RequestRecord, namedtuple) or key (dict, Series).

    Missing values (``None``, NaN, ``pd.NA``) come back as ``default``.
    """
    if isinstance(obj, Mapping) or callable(getattr(obj, "get", None)):
        value = obj.get(name, default)
    else:
        value = getattr(obj, name, default)
    return default if _missing(value) else value


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str | bytes | list | tuple | dict):
        return False
    try:
        return bool(value != value)  # NaN
    except (TypeError, ValueError):  # pd.NA, arrays
        return value.__class__.__name__ == "NAType"


# --------------------------------------------------------------------------- agreement


@dataclass(frozen=True)
class Agreement:
    """Whether one prompt's greedy output is the same with and without speculation.

    ``unit`` says what ``first_divergence`` and the lengths count: ``"tokens"`` when both
    sides had token ids, else ``"chars"``. When one output is a prefix of the other the
    divergence is at the shorter length. ``char_divergence`` locates the difference in the
    text (for the excerpts): ``context_before`` is the shared text just before it,
    ``control_after``/``experiment_after`` what each side says from there.
    """

    exact_match: bool
    unit: Literal["tokens", "chars"]
    first_divergence: int | None
    control_length: int
    experiment_length: int
    char_divergence: int | None = None
    context_before: str = ""
    control_after: str = ""
    experiment_after: str = ""


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def greedy_agreement(
    control_text: str,
    experiment_text: str,
    *,
    control_tokens: Sequence[int] | None = None,
    experiment_tokens: Sequence[int] | None = None,
    excerpt_chars: int = 40,
) -> Agreement:
    """Compare one prompt's control and experiment outputs (greedy sampling).

    Token ids are compared when both are given, else characters. Excerpts hold up to
    ``excerpt_chars`` characters each side of the first differing character.
    """
    if excerpt_chars < 0:
        raise ValueError(f"`excerpt_chars` must be >= 0 (got {excerpt_chars!r})")
    ctext, etext = control_text or "", experiment_text or ""
    if control_tokens is not None and experiment_tokens is not None:
        unit: Literal["tokens", "chars"] = "tokens"
        a, b = list(control_tokens), list(experiment_tokens)
    else:
        unit = "chars"
        a, b = ctext, etext  # type: ignore[assignment]
    same = a == b
    pos = None if same else _common_prefix(a, b)
    cpos = None if ctext == etext else _common_prefix(ctext, etext)

    def after(s: str, start: int) -> str:
        stop = start + excerpt_chars
        return s[start:stop] + ("…" if stop < len(s) else "")

    before = ctrl_after = exp_after = ""
    if cpos is not None:
        start = cpos - excerpt_chars
        before = ("…" if start > 0 else "") + ctext[max(start, 0) : cpos]
        ctrl_after, exp_after = after(ctext, cpos), after(etext, cpos)
    return Agreement(
        exact_match=same,
        unit=unit,
        first_divergence=pos,
        control_length=len(a),
        experiment_length=len(b),
        char_divergence=cpos,
        context_before=before,
        control_after=ctrl_after,
        experiment_after=exp_after,
    )


def compare_outputs(
    control_records: Iterable[Any],
    experiment_records: Iterable[Any],
    *,
    excerpt_chars: int = 40,
) -> dict[str, Agreement]:
    """Agreement per ``prompt_id`` present in both series.

    For each side the first successful (``ok`` and ``classify_output == "ok"``) record of
    phase ``"measure"`` per prompt is used; greedy output must be the same for every repeat
    anyway. Records may be :class:`~speclib.core.records.RequestRecord` or dict-likes.
    """

    def first_ok(records: Iterable[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for pid, rec in _measured_answers(records):
            out.setdefault(pid, rec)
        return out

    ctrl, exp = first_ok(control_records), first_ok(experiment_records)
    result: dict[str, Agreement] = {}
    for pid in ctrl:
        if pid not in exp:
            continue
        c, e = ctrl[pid], exp[pid]
        result[pid] = greedy_agreement(
            _text(c),
            _text(e),
            control_tokens=_get(c, "token_ids"),
            experiment_tokens=_get(e, "token_ids"),
            excerpt_chars=excerpt_chars,
        )
    return result


def _measured_answers(records: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """``(prompt id, record)`` of each successful record of phase ``"measure"`` (``ok`` and
    :func:`classify_output` ``"ok"``): the answers the output checks compare."""
    for rec in records:
        if _get(rec, "phase", "measure") == "measure" and classify_output(rec) == "ok":
            yield str(_get(rec, "prompt_id")), rec


def _text(rec: Any) -> str:
    text = _get(rec, "text", "")
    return text if isinstance(text, str) else ""


@dataclass(frozen=True)
class DivergenceClass:
    """What one divergent answer is: ``near_tie`` (the target ranks both tokens at the first
    divergence within ``near_tie_nats``), ``real`` (it does not), ``control_varies`` (not
    ranked, and the control's own answers to this prompt differ between its requests) or
    ``unranked`` (no ranking: not asked, or it failed). ``gap`` is the control token's
    log-probability minus the arm token's (nats), the ranks are the target's (1 = its
    greedy choice)."""

    kind: Literal["near_tie", "real", "control_varies", "unranked"]
    position: int | None = None
    gap: float | None = None
    control_rank: int | None = None
    experiment_rank: int | None = None


def varying_prompts(records: Iterable[Any]) -> frozenset[str]:
    """The prompts whose successful measured answers differ between one series' own requests
    (by token ids where recorded, else by text): for the control at one load, the prompts on
    which greedy decoding itself was not reproducible."""
    seen: dict[str, set[Any]] = {}
    for pid, rec in _measured_answers(records):
        tokens = _get(rec, "token_ids")
        seen.setdefault(pid, set()).add(tuple(tokens) if not _missing(tokens) else _text(rec))
    return frozenset(pid for pid, answers in seen.items() if len(answers) > 1)


def classify_divergences(
    agreements: Mapping[str, Agreement],
    ranks: Mapping[str, Any],
    *,
    near_tie_nats: float,
    control_varies: Collection[str] = (),
) -> dict[str, DivergenceClass]:
    """The class of every divergent prompt of ``agreements`` (``ranks``: prompt id to its
    :class:`~speclib.core.scores.DivergenceRank`, absent or failed for unranked ones;
    ``control_varies``: the prompts :func:`varying_prompts` found for the control, which
    class an unranked divergence ``control_varies``; a ranking, where there is one, wins)."""
    if not (isinstance(near_tie_nats, (int, float)) and near_tie_nats >= 0):
        raise ValueError(f"`near_tie_nats` must be a number >= 0 (got {near_tie_nats!r})")
    out: dict[str, DivergenceClass] = {}
    for pid, a in agreements.items():
        if a.exact_match:
            continue
        rank = ranks.get(pid)
        gap = getattr(rank, "gap", None)
        if gap is None:
            kind = "control_varies" if pid in control_varies else "unranked"
            out[pid] = DivergenceClass(kind, a.first_divergence)
            continue
        out[pid] = DivergenceClass(
            "near_tie" if abs(gap) <= near_tie_nats else "real",
            rank.position,
            gap,
            rank.control_rank,
            rank.experiment_rank,
        )
    return out


@dataclass(frozen=True)
class AgreementSummary:
    """Agreement over prompts. ``unit`` is ``"mixed"`` if some were compared by tokens.

    Of the ``n_diverged`` prompts, ``n_near_tie`` parted on a near tie, ``n_real`` disagree
    for real, ``n_control_varies`` were not ranked but the control's own answers to them
    vary, and ``n_unranked`` were not ranked; ``gate_rate`` is the share that equals the
    control's, parted on a near tie or where the control varies (what the outputs gate
    holds against its minimum)."""

    n_compared: int
    n_exact: int
    n_diverged: int
    exact_match_rate: float | None
    median_first_divergence: float | None
    unit: str
    n_near_tie: int = 0
    n_real: int = 0
    n_unranked: int = 0
    gate_rate: float | None = None
    n_control_varies: int = 0


def summarize_agreement(
    agreements: Iterable[Agreement] | Mapping[str, Agreement],
    classes: Mapping[str, DivergenceClass] | None = None,
) -> AgreementSummary:
    """Exact-match rate and median first-divergence position over prompts; with
    ``classes`` (:func:`classify_divergences`), the divergences by kind."""
    items = list(agreements.values() if isinstance(agreements, Mapping) else agreements)
    n = len(items)
    exact = sum(a.exact_match for a in items)
    positions = [a.first_divergence for a in items if a.first_divergence is not None]
    units = {a.unit for a in items}
    kinds = [c.kind for c in (classes or {}).values()]
    near, real = kinds.count("near_tie"), kinds.count("real")
    varies = kinds.count("control_varies")
    return AgreementSummary(
        n_compared=n,
        n_exact=exact,
        n_diverged=n - exact,
        exact_match_rate=exact / n if n else None,
        median_first_divergence=float(statistics.median(positions)) if positions else None,
        unit=units.pop() if len(units) == 1 else ("mixed" if units else "tokens"),
        n_near_tie=near,
        n_real=real,
        n_unranked=n - exact - near - real - varies,
        gate_rate=(exact + near + varies) / n if n else None,
        n_control_varies=varies,
    )


# --------------------------------------------------------------------------- output class


def _tokens_out(rec: Any) -> int | None:
    n = _get(rec, "output_tokens")
    if n is not None:
        return int(n)
    chunks = _get(rec, "chunk_tokens")
    if chunks is not None and len(chunks) > 0:
        return int(sum(chunks))
    return None


def classify_output(rec: Any, *, implausible: bool = False) -> str:
    """Failure class of one record-like (one of :data:`OUTPUT_CLASSES`).

    * ``"http_error"``: the request failed before any output: an error status, or no
      response at all (connection refused, timeout);
    * ``"truncated_by_error"``: the response started (status 200 or tokens arrived) and
      then failed, or it finished with ``finish_reason`` ``"error"``/``"abort"``;
    * ``"empty_output"``: succeeded but produced no token and no text;
    * ``"implausible"``: succeeded but a later check (e.g. log-probs) flagged the text,
      passed in as ``implausible=True``;
    * ``"ok"`` otherwise.
    """
    ok = bool(_get(rec, "ok", False))
    status = _get(rec, "status")
    n_tokens = _tokens_out(rec)
    text = _get(rec, "text", "")
    text = text if isinstance(text, str) else ""
    got_output = bool(text) or bool(n_tokens)
    if not ok:
        started = status is not None and 200 <= int(status) < 300
        return "truncated_by_error" if (started or got_output) else "http_error"
    if _get(rec, "finish_reason") in ("error", "abort"):
        return "truncated_by_error"
    if not got_output:
        return "empty_output"
    return "implausible" if implausible else "ok"


def count_bad_outputs(records: Iterable[Any]) -> int:
    """How many records are ``"empty_output"`` or ``"truncated_by_error"`` outputs."""
    return sum(classify_output(rec) in ("empty_output", "truncated_by_error") for rec in records)
