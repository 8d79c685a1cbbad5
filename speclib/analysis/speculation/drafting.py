"""Drafted and undrafted decode steps: which steps, and which requests, carried a proposal.

vLLM's acceptance counters see only the steps that had a draft. In the scheduler
(``vllm/v1/core/sched/scheduler.py``, ``update_from_output``) a request's step enters
``SpecDecodingStats.observe_draft`` only when it had scheduled draft tokens; that one call
moves ``vllm:spec_decode_num_drafts`` by 1, ``num_draft_tokens`` by the drafts and
``num_accepted_tokens`` (and ``num_accepted_tokens_per_pos[i]`` for ``i`` below it) by the
accepted ones, counted *before* a stop or ``max_tokens`` cuts the step's tokens; the
per-request ``metrics.speculative_decoding`` (``--per-request-spec-decode-metrics``) moves
with it. A step whose proposer found nothing (an n-gram lookup with no match) runs as a
plain decode step and moves none of them. So the counters' acceptance (and mean acceptance
length) is conditional on a draft, and a mix where half the prompts get no proposal reads
"acceptance 1.0" while half its steps yield one token.

This module counts every decode step from the stream, which every vLLM version gives:

* **a request** (:func:`request_drafting`): its decode steps are its token-bearing chunks
  after the first (vLLM streams one chunk per engine step and the first is the prefill's
  token), the tokens those steps yield, and the drafts they accepted (``tokens − chunks``:
  a step yields its accepted drafts plus one). Whether the request got drafts comes from its
  per-request spec metrics where the server gives them (exact), else from the stream: a
  chunk of more than one token proves an accepted draft; a request whose every step was a
  single token got no draft that was accepted (it cannot tell "no proposal" from "all
  rejected", which the launch check below bounds);
* **a launch** (:func:`launch_drafting`): the stream's decode steps and accepted drafts over
  the launch's window (its measured requests and level warm-ups:
  :func:`speclib.analysis.speculation.launches.window_records`) against its ``/metrics``
  deltas: ``num_drafts`` over the decode steps is the share of steps that had a draft, on
  any vLLM; the accepted drafts must agree (the counters may exceed the stream by at most
  ``k`` per request, the drafts of a last step cut by ``max_tokens`` or a stop);
* **an arm** (:func:`drafted_share`): the share of decode steps that had a draft, from the
  per-request metrics where every request has them, else from the launches' counters.

One chunk is one engine step while the API server and the client keep up: always at c=1
in practice. At c>1 vLLM's output collector merges a request's outputs of several steps
into one chunk when its API process falls behind (``RequestOutputCollector.put``), and a
client that reads late sees several chunks at once; then chunks undercount steps, the
stream's accepted drafts exceed the counters' and :func:`launch_drafting` says so.
Pure functions of recorded data; nothing talks to a server. Its one concept is one count at
three scales (a request, a launch, an arm) and that count checked against the server's
(:func:`stream_check`); the check cannot live apart from what it checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from speclib.core.prometheus import SpecCounters

__all__ = [
    "DraftedShare",
    "LaunchDrafting",
    "RequestDrafting",
    "StreamCheck",
    "drafted_share",
    "drafting_warnings",
    "launch_drafting",
    "request_drafting",
    "stream_check",
]


def _chunks(chunk_tokens: Iterable[Any] | None) -> tuple[int, ...]:
    out = tuple(int(n) for n in (chunk_tokens if chunk_tokens is not None else ()))
    if any(n < 0 for n in out):
        raise ValueError(f"`chunk_tokens` must hold non-negative counts (got {out!r})")
    return tuple(n for n in out if n > 0)


def _spec_count(spec: Mapping[str, Any], key: str) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"spec field `{key}` must be a non-negative integer (got {value!r})")
    return int(value)


@dataclass(frozen=True)
class RequestDrafting:
    """One request's decode steps, read from its stream (and its spec metrics if any).

    ``decode_steps`` are the token-bearing chunks after the first, ``tokens`` what the
    stream carried in all, ``stream_accepted`` the drafts it accepted (``tokens − chunks``)
    and ``accepted_steps`` the chunks of more than one token (steps with an accepted draft).
    ``drafted_steps`` and ``accepted`` are the per-request metrics' ``num_spec_steps`` and
    ``num_accepted_draft_tokens`` (None without them). ``drafted`` says whether the request
    got drafts: from the per-request metrics (``source`` "per-request metrics"), else from
    the stream (``source`` "stream": an accepted draft seen). ``agrees`` is None without
    per-request metrics, else whether ``accepted − stream_accepted`` lies in ``[0, k]``
    (a last step cut by ``max_tokens`` or a stop loses up to ``k`` accepted drafts).
    """

    decode_steps: int
    tokens: int
    stream_accepted: int
    accepted_steps: int
    drafted_steps: int | None
    accepted: int | None
    drafted: bool
    source: str
    agrees: bool | None

    @property
    def undrafted_steps(self) -> int | None:
        """Decode steps that had no draft (None without per-request metrics)."""
        if self.drafted_steps is None:
            return None
        return max(self.decode_steps - self.drafted_steps, 0)


def request_drafting(
    chunk_tokens: Iterable[Any] | None,
    spec: Mapping[str, Any] | None = None,
    *,
    k: int | None = None,
) -> RequestDrafting:
    """A request's decode steps and whether it got drafts, at any vLLM version.

    ``chunk_tokens`` is the record's tokens per token-bearing chunk, ``spec`` its
    ``metrics.speculative_decoding`` (None where the server gives none) and ``k`` the arm's
    ``num_speculative_tokens`` (the tolerance of the stream-against-metrics check; None:
    the spec's ``num_spec_tokens``, else exact).
    """
    chunks = _chunks(chunk_tokens)
    if spec is not None and not isinstance(spec, Mapping):
        raise TypeError(f"`spec` must be a dict or None (got {type(spec).__name__})")
    tokens = sum(chunks)
    stream_accepted = tokens - len(chunks)
    accepted_steps = sum(1 for n in chunks[1:] if n > 1)
    steps = accepted = None
    if spec is not None:
        steps = _spec_count(spec, "num_spec_steps")
        accepted = _spec_count(spec, "num_accepted_draft_tokens")
        hist = spec.get("acceptance_histogram") or ()
        if steps is None and hist:
            steps = sum(int(h) for h in hist)
        if accepted is None and hist:
            accepted = sum(j * int(h) for j, h in enumerate(hist))
    agrees = None
    if accepted is not None:
        slack = k if k is not None else _spec_count(spec or {}, "num_spec_tokens") or 0
        agrees = 0 <= accepted - stream_accepted <= slack
    if steps is not None:
        drafted, source = steps > 0, "per-request metrics"
    else:
        drafted, source = accepted_steps > 0, "stream"
    return RequestDrafting(
        decode_steps=max(len(chunks) - 1, 0),
        tokens=tokens,
        stream_accepted=stream_accepted,
        accepted_steps=accepted_steps,
        drafted_steps=steps,
        accepted=accepted,
        drafted=drafted,
        source=source,
        agrees=agrees,
    )


@dataclass(frozen=True)
class LaunchDrafting:
    """One launch's decode steps from the stream against its ``/metrics`` deltas.

    ``decode_steps``, ``stream_accepted`` and ``stream_accepted_steps`` are summed over the
    streams of the ``n_requests`` requests of the launch's window (measured ones and level
    warm-ups); ``drafted_steps`` (``num_drafts``), ``accepted``
    (``num_accepted_tokens``) and ``accepted_steps`` (``num_accepted_tokens_per_pos[0]``)
    are the counters' deltas over the same window (None without counters).
    ``drafted_share`` is ``drafted_steps / decode_steps``: the share of decode steps that
    had a draft. ``agrees`` is None without counters, else whether the counters' accepted
    drafts exceed the stream's by 0 to ``k`` per request; ``note`` says why not.
    """

    launch_id: str
    series: str
    n_requests: int
    decode_steps: int
    stream_accepted: int
    stream_accepted_steps: int
    drafted_steps: int | None
    accepted: int | None
    accepted_steps: int | None
    drafted_share: float | None
    agrees: bool | None
    note: str | None

    @property
    def undrafted_share(self) -> float | None:
        """Share of decode steps that had no draft (None without counters)."""
        return None if self.drafted_share is None else 1.0 - self.drafted_share

    def to_dict(self) -> dict[str, Any]:
        """The mapping written to ``summary.json`` (with ``undrafted_share``)."""
        return {**asdict(self), "undrafted_share": self.undrafted_share}


def _launch_note(diff: int, slack: int, drafted: int, steps: int) -> str | None:
    if diff < 0:
        return (
            f"the streams show {-diff} accepted draft(s) more than /metrics counted: chunks "
            "merged several engine steps (at c>1 vLLM's API process fell behind and merged a "
            "request's outputs, or the client read late), so chunks undercount steps here"
        )
    if diff > slack:
        return (
            f"/metrics counted {diff} accepted draft(s) more than the streams carried (at most "
            f"{slack} can be cut by max_tokens or a stop): outside traffic on the server, or "
            "requests missing from the records"
        )
    if drafted > steps:
        return (
            f"/metrics counted {drafted} drafted steps but the streams show {steps} decode "
            "steps: chunks merged several engine steps"
        )
    return None


def launch_drafting(
    launch_id: str,
    series: str,
    requests: Sequence[RequestDrafting],
    counters: SpecCounters | None,
    *,
    k: int | None,
) -> LaunchDrafting:
    """A launch's stream counts against its ``/metrics`` deltas of the same window.

    ``requests`` must hold every request sent between the two snapshots (failed ones
    included: the server counted their steps); ``k`` is the arm's
    ``num_speculative_tokens`` (None: the check must be exact).
    """
    steps = sum(r.decode_steps for r in requests)
    s_acc = sum(r.stream_accepted for r in requests)
    s_acc_steps = sum(r.accepted_steps for r in requests)
    streams = {  # what the launch's own streams say, with or without its counters
        "launch_id": launch_id,
        "series": series,
        "n_requests": len(requests),
        "decode_steps": steps,
        "stream_accepted": s_acc,
        "stream_accepted_steps": s_acc_steps,
    }
    if counters is None or not counters.present:
        return LaunchDrafting(
            **streams,
            drafted_steps=None,
            accepted=None,
            accepted_steps=None,
            drafted_share=None,
            agrees=None,
            note=None if counters is None else "the server exposes no spec-decode counters",
        )
    slack = (k or 0) * len(requests)
    diff = counters.num_accepted_tokens - s_acc
    note = _launch_note(diff, slack, counters.num_drafts, steps)
    return LaunchDrafting(
        **streams,
        drafted_steps=counters.num_drafts,
        accepted=counters.num_accepted_tokens,
        accepted_steps=counters.accepted_per_pos[0] if counters.accepted_per_pos else None,
        drafted_share=min(counters.num_drafts / steps, 1.0) if steps > 0 else None,
        agrees=note is None,
        note=note,
    )


@dataclass(frozen=True)
class DraftedShare:
    """The share of an arm's decode steps that had a draft, and what those steps yielded.

    ``decode_steps`` counts the requests' decode steps (their streams), ``drafted_steps``
    those that had a draft (exact from per-request metrics; from the launches' counters,
    the launches' share applied to these requests), ``drafted_share`` their quotient and
    ``tokens_per_drafted_step`` the mean acceptance length on drafted steps (1 + accepted /
    drafted, bonus token included). ``requests_drafted`` counts the requests that got
    drafts (per-request metrics, else an accepted draft seen in the stream).
    """

    decode_steps: int
    drafted_steps: float
    drafted_share: float
    tokens_per_drafted_step: float | None
    n_requests: int
    requests_drafted: int
    source: str

    @property
    def undrafted_share(self) -> float:
        """Share of decode steps that had no draft."""
        return 1.0 - self.drafted_share


def drafted_share(
    requests: Sequence[RequestDrafting], launches: Sequence[LaunchDrafting] = ()
) -> DraftedShare | None:
    """The arm's drafted share over ``requests``, or None where nothing says it.

    Every request with per-request metrics: exact, from them. Otherwise the ``launches``
    that ran these requests: their counters' drafted steps over their streams' decode
    steps (the launches' whole windows, every load level and level warm-up in them). None
    without decode steps, or with neither source.
    """
    steps = sum(r.decode_steps for r in requests)
    if steps <= 0:
        return None
    n_drafted = sum(r.drafted for r in requests)
    if all(r.drafted_steps is not None and r.accepted is not None for r in requests):
        drafted = sum(r.drafted_steps or 0 for r in requests)
        accepted = sum(r.accepted or 0 for r in requests)
        return DraftedShare(
            decode_steps=steps,
            drafted_steps=float(drafted),
            drafted_share=min(drafted / steps, 1.0),
            tokens_per_drafted_step=1.0 + accepted / drafted if drafted else None,
            n_requests=len(requests),
            requests_drafted=n_drafted,
            source="per-request metrics",
        )
    counted = [x for x in launches if x.drafted_steps is not None and x.decode_steps > 0]
    if not counted:
        return None
    l_steps = sum(x.decode_steps for x in counted)
    l_drafted = sum(x.drafted_steps or 0 for x in counted)
    l_accepted = sum(x.accepted or 0 for x in counted)
    share = min(l_drafted / l_steps, 1.0)
    return DraftedShare(
        decode_steps=steps,
        drafted_steps=share * steps,
        drafted_share=share,
        tokens_per_drafted_step=1.0 + l_accepted / l_drafted if l_drafted else None,
        n_requests=len(requests),
        requests_drafted=n_drafted,
        source=f"/metrics num_drafts over the streams' decode steps ({len(counted)} launch(es))",
    )


@dataclass(frozen=True)
class StreamCheck:
    """An arm's acceptance read from its streams, checked against what the server counted.

    ``stream_accepted`` and ``decode_steps`` are summed over the requests' streams;
    ``requests_drafted`` counts the requests that got drafts (:attr:`RequestDrafting.drafted`);
    ``tokens_per_step`` is what a decode step yielded on average (every step, drafted or
    not). ``requests_checked``/``requests_agreeing`` count the requests with per-request
    spec metrics and those whose stream agrees with them; ``launches_checked``/
    ``launches_agreeing`` the launches with ``/metrics`` counters and those that agree.
    ``matches`` is None when nothing could be checked; ``notes`` say what disagrees.
    """

    n_requests: int
    requests_drafted: int
    decode_steps: int
    stream_accepted: int
    tokens_per_step: float | None
    requests_checked: int
    requests_agreeing: int
    launches_checked: int
    launches_agreeing: int
    matches: bool | None
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The mapping written to ``summary.json``."""
        return {**asdict(self), "notes": list(self.notes)}


def stream_check(
    requests: Sequence[RequestDrafting], launches: Sequence[LaunchDrafting] = ()
) -> StreamCheck:
    """The stream's acceptance of ``requests`` against their per-request metrics and the
    ``launches``' counters (:func:`launch_drafting`)."""
    steps = sum(r.decode_steps for r in requests)
    accepted = sum(r.stream_accepted for r in requests)
    checked = [r for r in requests if r.agrees is not None]
    agreeing = sum(bool(r.agrees) for r in checked)
    counted = [x for x in launches if x.agrees is not None]
    notes = [f"launch {x.launch_id}: {x.note}" for x in counted if not x.agrees and x.note]
    if agreeing < len(checked):
        notes.append(
            f"{len(checked) - agreeing} of {len(checked)} request(s): the stream's accepted "
            "drafts disagree with the request's own spec metrics by more than a last step cut "
            "by max_tokens or a stop can explain (chunks merged several steps)"
        )
    return StreamCheck(
        n_requests=len(requests),
        requests_drafted=sum(r.drafted for r in requests),
        decode_steps=steps,
        stream_accepted=accepted,
        tokens_per_step=(steps + accepted) / steps if steps else None,
        requests_checked=len(checked),
        requests_agreeing=agreeing,
        launches_checked=len(counted),
        launches_agreeing=sum(bool(x.agrees) for x in counted),
        matches=None if not checked and not counted else not notes,
        notes=tuple(notes),
    )


def drafting_warnings(launches: Iterable[LaunchDrafting]) -> list[str]:
    """One run warning per launch whose streams disagree with its ``/metrics`` counters."""
    return [
        f"launch {x.launch_id}: the streams' decode steps disagree with /metrics, so the "
        f"drafted share and acceptance read from the stream are off there: {x.note}"
        for x in launches
        if x.agrees is False and x.note
    ]
