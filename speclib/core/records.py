"""Per-request records: the raw facts on disk, and the pure functions that derive metrics.

Every number in a report traces back to one JSON line per request in ``requests.jsonl``.
A :class:`RequestRecord` holds what the client saw (send time, arrival offset and token
count of every token-bearing chunk, text, usage, spec-decode metrics, error). TTFT, TPOT
and end-to-end latency are pure functions of a record; they are also written into each
line for convenience, computed by the same functions. :func:`append_record` appends and
flushes one line as each request finishes, so a crash loses nothing already finished.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

from speclib.core.jsonutil import json_lines

__all__ = [
    "LAG_PERIOD_S",
    "LATE_CHUNKS_FLAG",
    "RECORD_VERSION",
    "RequestRecord",
    "append_record",
    "e2e_s",
    "late_chunks",
    "read_late",
    "read_records",
    "record_to_json",
    "server_tpot_s",
    "server_ttft_s",
    "tpot_s",
    "ttft_s",
]

RECORD_VERSION = 1


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request. Times are seconds; offsets are from ``t_send_mono``.

    ``chunk_offsets_s[i]`` is when the i-th chunk that carried output tokens arrived and
    ``chunk_tokens[i]`` how many tokens it carried (under speculation one chunk can carry
    several). ``t_start`` is wall-clock (epoch) time at send, for timelines across series.
    ``server_timing`` is what the server itself stamped for this request, as it sent it
    (vLLM's ``--enable-per-request-metrics``: ``queue_time_ms``,
    ``time_to_first_token_ms``, ``generation_time_ms``, ``mean_itl_ms``, all from the
    engine's clock): the second instrument, which no client delay can distort.
    ``turn`` is set in a multi-turn run only (``prompt_id`` is then ``<question>#t<turn>``);
    a record written before the field existed loads with ``turn`` None.
    """

    series: str
    replicate: int
    prompt_id: str
    ok: bool
    error: str | None = None
    launch_id: str = ""
    repeat: int = 0
    phase: str = "measure"  # "measure" or "warmup"
    category: str | None = None
    turn: int | None = None  # multi-turn runs: which turn of its question (1-based)
    concurrency: int = 1
    level: int = 0  # index of the load level (params.workload.levels)
    request_rate: float | None = None  # Poisson rate of the level; None = closed loop
    block: str | None = None  # the replicate block whose servers were up together
    slot: int | None = None  # interleaved design: index of the alternation slot in the level
    slot_pos: int | None = None  # this arm's position in the slot's random arm order
    status: int | None = None
    t_start: float = 0.0
    t_send_mono: float = 0.0
    queue_wait_s: float = 0.0
    headers_offset_s: float | None = None
    done_offset_s: float | None = None
    chunk_offsets_s: tuple[float, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    token_ids: tuple[int, ...] | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    spec: dict[str, Any] | None = None
    server_timing: dict[str, float] | None = None  # the server's own stamps (vLLM metrics)
    host: str | None = None  # where it was sent from (executor ray: the worker's host); None = here
    version: int = RECORD_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        """Build a record from a parsed JSON line (derived fields are ignored)."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in ("chunk_offsets_s", "chunk_tokens"):
            kwargs[key] = tuple(kwargs.get(key) or ())
        if kwargs.get("token_ids") is not None:
            kwargs["token_ids"] = tuple(kwargs["token_ids"])
        return cls(**kwargs)


def _tokens(rec: RequestRecord) -> int | None:
    """Output tokens as counted by the server (usage), else the sum over chunks."""
    if rec.output_tokens is not None:
        return rec.output_tokens
    return sum(rec.chunk_tokens) if rec.chunk_tokens else None


def ttft_s(rec: RequestRecord) -> float | None:
    """Time to first token: send → arrival of the first chunk that carried a token."""
    if not rec.ok or not rec.chunk_offsets_s:
        return None
    return rec.chunk_offsets_s[0]


def e2e_s(rec: RequestRecord) -> float | None:
    """End-to-end latency: send → end of the stream (``[DONE]``), else the last chunk."""
    if not rec.ok:
        return None
    if rec.done_offset_s is not None:
        return rec.done_offset_s
    return rec.chunk_offsets_s[-1] if rec.chunk_offsets_s else None


def tpot_s(rec: RequestRecord) -> float | None:
    """Time per output token after the first: (E2E − TTFT) / (output tokens − 1).

    Uses the server's token count. Undefined (None) for failed requests and for outputs of
    fewer than two tokens.
    """
    first, total, n = ttft_s(rec), e2e_s(rec), _tokens(rec)
    if first is None or total is None or n is None or n < 2:
        return None
    return (total - first) / (n - 1)


def _server_ms(rec: RequestRecord, key: str) -> float | None:
    value = (rec.server_timing or {}).get(key) if rec.ok else None
    return float(value) / 1e3 if isinstance(value, int | float) and math.isfinite(value) else None


def server_tpot_s(rec: RequestRecord) -> float | None:
    """Time per output token after the first, as the server stamped it: vLLM's
    ``mean_itl_ms`` = (last token − first token) / (output tokens − 1) on the engine's
    clock, the same definition as :func:`tpot_s`. None without server stamps."""
    return _server_ms(rec, "mean_itl_ms")


def server_ttft_s(rec: RequestRecord) -> float | None:
    """Time to first token as the engine stamped it: queue time + scheduling to first token
    (``queue_time_ms + time_to_first_token_ms``). It starts when the engine received the
    request, so it leaves out the API server's own work and the network: the client's
    :func:`ttft_s` is a few milliseconds longer on a client that keeps up."""
    ttft, queue = _server_ms(rec, "time_to_first_token_ms"), _server_ms(rec, "queue_time_ms")
    return None if ttft is None else ttft + (queue or 0.0)


LAG_PERIOD_S = 0.01
"""How often the client's loop-lag probe ticks: a stall of the client's event loop (or of its
process) longer than this delays a tick, so a window's worst tick plus this period bounds how
late the client can have read anything in it."""

LATE_CHUNKS_FLAG = 3
"""A stream with this many :func:`late_chunks` was read late (its stamps are not the server's)."""


def late_chunks(rec: RequestRecord) -> int:
    """Streamed chunks that reached the client in the same network read as the one before.

    The server sends one chunk per engine step, milliseconds apart, and a client that keeps
    up reads each on its own; chunks read together (same stamp) waited for the client, whose
    process was not scheduled in time. Their stamps are late: a late first chunk overstates
    TTFT and understates TPOT. 0 for a client that kept up.
    """
    offs = rec.chunk_offsets_s
    return sum(1 for a, b in itertools.pairwise(offs) if b == a)


def read_late(rec: RequestRecord) -> bool:
    """The stream was read late: :data:`LATE_CHUNKS_FLAG` or more :func:`late_chunks`."""
    return late_chunks(rec) >= LATE_CHUNKS_FLAG


def record_to_json(rec: RequestRecord) -> str:
    """One JSON line: the raw record plus the derived ``ttft_s``, ``tpot_s``, ``e2e_s``,
    ``server_ttft_s`` and ``server_tpot_s``."""
    data = asdict(rec)
    data["ttft_s"] = ttft_s(rec)
    data["tpot_s"] = tpot_s(rec)
    data["e2e_s"] = e2e_s(rec)
    data["server_ttft_s"] = server_ttft_s(rec)
    data["server_tpot_s"] = server_tpot_s(rec)
    return json.dumps(data, separators=(",", ":"), allow_nan=False, default=_json_default)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, tuple | set):
        return list(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def append_record(fh: TextIO, rec: RequestRecord) -> None:
    """Append one record as a JSON line and push it to disk before returning."""
    fh.write(record_to_json(rec) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def read_records(
    path: str | os.PathLike[str], *, skip_damaged: bool = False
) -> Iterator[RequestRecord]:
    """Yield records from a JSONL file; a torn last line (crash mid-write) is skipped, and
    with ``skip_damaged`` every damaged line (:func:`~speclib.core.jsonutil.json_lines`)."""
    if skip_damaged:
        lines: list[str] | list[bytes] = Path(path).read_bytes().splitlines()
    else:
        with Path(path).open(encoding="utf-8") as fh:
            lines = fh.readlines()
    for data in json_lines(lines, skip_damaged=skip_damaged):
        yield RequestRecord.from_json(data)
