"""Layer 3 — the measuring instrument: the streaming timing client that turns prepared
requests into raw per-request records. Imports only :mod:`speclib.core`.

:func:`build_request_body` encodes a streaming ``/v1/chat/completions`` request once,
before any clock starts, and a :class:`RequestSpec` carries it. :func:`run_requests` sends
specs at a fixed concurrency (or at scheduled arrival times, capped by that concurrency)
and turns every request into a :class:`~speclib.core.records.RequestRecord` handed to
``sink`` as soon as it is complete. It only stamps ``time.perf_counter()`` values and
copies what the server said; TTFT, TPOT and E2E are derived later by
:mod:`speclib.core.records`.

A failed request (HTTP status other than 200, connection error, timeout, an error event in
the stream, a stream that ends without ``[DONE]``) becomes a record with ``ok=False``, a
short ``error`` and whatever arrived before the failure (``record.extra["error_kind"]``
classifies it); it never raises. The run stops sending if the failure share passes
``max_error_rate``; the specs never sent are listed in the :class:`RunOutcome`, which also
reports the client's CPU and flags ``saturated`` when the loop thread was busy more than
90 % of the run (latencies then include client queueing and are upper bounds). Reasoning
text is kept apart from the answer in ``record.extra["reasoning_text"]``; its tokens are
counted in ``chunk_tokens`` like any output token.

How it keeps its own overhead out of the numbers (measured by
``tests/benchmarks/bench_fidelity.py``), module by module:

- :mod:`~speclib.measure.request` — request bodies, encoded before the run.
- :mod:`~speclib.measure.transport` / :mod:`~speclib.measure.http1` — a minimal HTTP/1.1
  client on asyncio protocols (uvloop when installed), one keep-alive connection per
  concurrency slot, opened before the clock starts; sending is one ``transport.write``,
  stamped just before it; every network read is stamped first thing in the protocol's
  ``data_received``, then only de-framed and appended (no coroutine wakes per chunk).
- :mod:`~speclib.measure.parse` / :mod:`~speclib.measure.sse` — SSE splitting and JSON
  decoding after the response is complete, in one parser task that yields to the loop
  every quarter millisecond; an event is dated by the read that completed its ``data:``
  line.
- :mod:`~speclib.measure.request_loop` — the concurrency cap, arrival schedule and abort rule;
  a slot is freed only once its record is handed on, so after a send the client sleeps.
- :mod:`~speclib.measure.run_bookkeeping` — the run's tally and :class:`RunOutcome`; records go to
  ``sink`` from one background thread, so a slow disk (``fsync``) never delays the loop.

Import-light on purpose: no vLLM, no torch, no HTTP library.
"""

from speclib.measure.request import RequestSpec, build_request_body, chat_url
from speclib.measure.request_loop import run_requests, run_requests_sync
from speclib.measure.run_bookkeeping import RunOutcome

__all__ = [
    "RequestSpec",
    "RunOutcome",
    "build_request_body",
    "chat_url",
    "run_requests",
    "run_requests_sync",
]
