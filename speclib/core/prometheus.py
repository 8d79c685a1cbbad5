"""Server counters: read vLLM's Prometheus ``/metrics`` and turn two snapshots into deltas.

A report compares what the client saw with what the server counted. This module parses the
Prometheus text exposition (fetched by :func:`speclib.serve.httpapi.fetch_metrics`) into a flat
mapping ``(name, frozenset(labels)) -> value`` (:func:`parse_prometheus`), and subtracts a
snapshot taken before a measured window from one taken after it (:func:`metrics_delta`).

Two typed views sit on top:

* :func:`spec_counters_delta` → :class:`SpecCounters`, from
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``;
* :func:`prefix_cache_delta` → :class:`PrefixCacheDelta`, from
  ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (both in tokens).

vLLM labels every series with ``model_name`` and ``engine`` (one label set per engine core);
the typed views sum over label sets. A metric the server does not expose is reported
explicitly (``present=False``, counts 0, derived rates ``None``), never as a silent 0 %.
A counter that goes backwards between snapshots means the server restarted inside the
window; that raises :class:`CounterResetError` because the window's numbers are lost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ACCEPTED_PER_POS",
    "NUM_ACCEPTED_TOKENS",
    "NUM_DRAFTS",
    "NUM_DRAFT_TOKENS",
    "PREFIX_CACHE_HITS",
    "PREFIX_CACHE_QUERIES",
    "CounterResetError",
    "MetricKey",
    "PrefixCacheDelta",
    "Samples",
    "SpecCounters",
    "histogram_mean",
    "metric_sum",
    "metrics_delta",
    "parse_prometheus",
    "prefix_cache_delta",
    "spec_counters_delta",
]

NUM_DRAFTS = "vllm:spec_decode_num_drafts_total"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"

MetricKey = tuple[str, frozenset[tuple[str, str]]]
"""One sample's identity: metric name and its label pairs."""

Samples = Mapping[MetricKey, float]
"""A parsed exposition (or a delta of two)."""


class CounterResetError(ValueError):
    """A counter decreased between two snapshots: the server restarted inside the window."""


# --------------------------------------------------------------------------- parsing

_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_labels(line: str, start: int, lineno: int) -> tuple[frozenset[tuple[str, str]], int]:
    """Parse ``{a="x",...}`` from the ``{``; return the labels and the index after ``}``."""
    labels: dict[str, str] = {}
    i = start + 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t,":
            i += 1
        if i >= n:
            raise ValueError(f"line {lineno}: unterminated label set: {line!r}")
        if line[i] == "}":
            return frozenset(labels.items()), i + 1
        eq = line.find("=", i)
        if eq < 0:
            raise ValueError(f"line {lineno}: label without '=': {line!r}")
        name = line[i:eq].strip()
        i = eq + 1
        while i < n and line[i] in " \t":
            i += 1
        if not name or i >= n or line[i] != '"':
            raise ValueError(f"line {lineno}: label value must be quoted: {line!r}")
        i += 1
        value: list[str] = []
        while True:
            if i >= n:
                raise ValueError(f"line {lineno}: unterminated label value: {line!r}")
            ch = line[i]
            if ch == "\\" and i + 1 < n:
                value.append(_ESCAPES.get(line[i + 1], "\\" + line[i + 1]))
                i += 2
            elif ch == '"':
                i += 1
                break
            else:
                value.append(ch)
                i += 1
        if name in labels:
            raise ValueError(f"line {lineno}: duplicate label {name!r}: {line!r}")
        labels[name] = "".join(value)


def _parse_sample(line: str, lineno: int) -> tuple[MetricKey, float]:
    brace = line.find("{")
    space = min((p for p in (line.find(" "), line.find("\t")) if p >= 0), default=-1)
    if brace >= 0 and (space < 0 or brace < space):
        name = line[:brace]
        labels, end = _parse_labels(line, brace, lineno)
        rest = line[end:]
    else:
        if space < 0:
            raise ValueError(f"line {lineno}: sample without a value: {line!r}")
        name, labels, rest = line[:space], frozenset(), line[space:]
    parts = rest.split()
    if not name or not parts:
        raise ValueError(f"line {lineno}: sample without a name or value: {line!r}")
    try:
        value = float(parts[0])  # also "+Inf", "-Inf", "NaN"; a timestamp may follow
    except ValueError:
        raise ValueError(f"line {lineno}: bad sample value {parts[0]!r}: {line!r}") from None
    return (name.strip(), labels), value


def parse_prometheus(text: str) -> dict[MetricKey, float]:
    """Parse Prometheus text exposition (0.0.4 or OpenMetrics) into ``{(name, labels): value}``.

    ``# HELP``/``# TYPE``/``# EOF`` comments are skipped; every sample line is kept as
    written, including ``_created``, ``_bucket``, ``_sum`` and ``_count`` series. Label
    values are unescaped (``\\\\``, ``\\"``, ``\\n``). A trailing timestamp or exemplar is
    ignored. A malformed line or a repeated sample raises ``ValueError`` naming the line.
    """
    out: dict[MetricKey, float] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, value = _parse_sample(line, lineno)
        if key in out:
            raise ValueError(f"line {lineno}: sample repeated in one exposition: {line!r}")
        out[key] = value
    return out


# --------------------------------------------------------------------------- deltas


def _as_samples(snapshot: Samples | str) -> Samples:
    return parse_prometheus(snapshot) if isinstance(snapshot, str) else snapshot


def metrics_delta(before: Samples | str, after: Samples | str) -> dict[MetricKey, float]:
    """``after − before`` for every sample in ``after`` (absent from ``before`` counts as 0).

    Works on any metric type; for gauges the delta may be negative. Samples only in
    ``before`` are dropped (a label set that vanished carries no window information).
    """
    b, a = _as_samples(before), _as_samples(after)
    return {key: value - b.get(key, 0.0) for key, value in a.items()}


def metric_sum(
    samples: Samples | str, name: str, *, where: Mapping[str, str] | None = None
) -> float | None:
    """Sum of ``name`` over all label sets (matching ``where``); ``None`` if none exists."""
    s = _as_samples(samples)
    total: float | None = None
    for (n, labels), value in s.items():
        if n != name:
            continue
        if where and not all((k, v) in labels for k, v in where.items()):
            continue
        total = (total or 0.0) + value
    return total


def histogram_mean(
    before: Samples | str, after: Samples | str, name: str
) -> tuple[float, int] | None:
    """Mean and count of the observations a histogram ``name`` gained between two
    snapshots (from its ``_sum`` and ``_count``, over every label set); None when either
    snapshot lacks it, nothing was observed in between, or it went backwards."""
    try:
        s0, s1 = metric_sum(before, name + "_sum"), metric_sum(after, name + "_sum")
        n0, n1 = metric_sum(before, name + "_count"), metric_sum(after, name + "_count")
    except ValueError:
        return None
    if None in (s0, s1, n0, n1):  # a snapshot without it: no window to measure
        return None
    n = n1 - n0  # type: ignore[operator]
    if n <= 0:
        return None
    return (s1 - s0) / n, round(n)  # type: ignore[operator]


def _counter_delta(
    before: Samples, after: Samples, name: str, where: Mapping[str, str] | None
) -> float | None:
    a = metric_sum(after, name, where=where)
    if a is None:
        return None
    d = a - (metric_sum(before, name, where=where) or 0.0)
    if d < 0:
        raise CounterResetError(
            f"{name} went backwards by {-d:g} between snapshots: the server restarted "
            "inside the window, so its counters for this window are lost"
        )
    return d


def _count(value: float | None) -> int:
    if value is None or not math.isfinite(value):
        return 0
    return round(value)


@dataclass(frozen=True)
class SpecCounters:
    """Speculative-decoding counters over a window (a delta), summed over engines.

    ``num_drafts`` counts verify steps that had at least one draft token; ``accepted_per_pos[i]``
    counts steps whose draft token at position ``i`` was accepted (so it is non-increasing in
    ``i``). ``present`` is False when the server exposes no spec-decode counters at all
    (a control server, or speculation off); then every count is 0 and rates are ``None``.
    """

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...] = ()
    present: bool = True

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed draft tokens; ``None`` when nothing was proposed (no data)."""
        if self.num_draft_tokens <= 0:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per verify step including the bonus token: ``1 + accepted / drafts``."""
        if self.num_drafts <= 0:
            return None
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def per_position_rate(self) -> tuple[float, ...] | None:
        """Share of steps whose draft at position ``i`` was accepted; ``None`` without drafts."""
        if self.num_drafts <= 0 or not self.accepted_per_pos:
            return None
        return tuple(c / self.num_drafts for c in self.accepted_per_pos)

    @property
    def histogram(self) -> tuple[int, ...] | None:
        """Steps that accepted exactly ``j`` drafts, ``j = 0..k``, from the per-position counts.

        ``hist[0] = drafts − pos[0]``, ``hist[j] = pos[j−1] − pos[j]``, ``hist[k] = pos[k−1]``.
        ``None`` without drafts or per-position counters.
        """
        if self.num_drafts <= 0 or not self.accepted_per_pos:
            return None
        chain = (self.num_drafts, *self.accepted_per_pos, 0)
        return tuple(chain[j] - chain[j + 1] for j in range(len(self.accepted_per_pos) + 1))

    def to_dict(self) -> dict[str, object]:
        """Plain values (and the derived rates) for JSON."""
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_pos": list(self.accepted_per_pos),
            "present": self.present,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
        }


def _per_position(
    before: Samples, after: Samples, where: Mapping[str, str] | None
) -> tuple[int, ...]:
    positions: set[int] = set()
    for name, labels in after:
        if name != ACCEPTED_PER_POS:
            continue
        for k, v in labels:
            if k == "position":
                try:
                    positions.add(int(v))
                except ValueError:
                    raise ValueError(f"{ACCEPTED_PER_POS}: non-integer position {v!r}") from None
    if not positions:
        return ()
    out: list[int] = []
    for pos in range(max(positions) + 1):
        match = {**(where or {}), "position": str(pos)}
        out.append(_count(_counter_delta(before, after, ACCEPTED_PER_POS, match)))
    return tuple(out)


def spec_counters_delta(
    before: Samples | str, after: Samples | str, *, where: Mapping[str, str] | None = None
) -> SpecCounters:
    """Spec-decode counters accumulated between two snapshots (text or parsed).

    Sums over label sets (``model_name``, ``engine``) unless ``where`` restricts them.
    Raises :class:`CounterResetError` if a counter went backwards.
    """
    b, a = _as_samples(before), _as_samples(after)
    drafts = _counter_delta(b, a, NUM_DRAFTS, where)
    tokens = _counter_delta(b, a, NUM_DRAFT_TOKENS, where)
    accepted = _counter_delta(b, a, NUM_ACCEPTED_TOKENS, where)
    present = drafts is not None or tokens is not None or accepted is not None
    return SpecCounters(
        num_drafts=_count(drafts),
        num_draft_tokens=_count(tokens),
        num_accepted_tokens=_count(accepted),
        accepted_per_pos=_per_position(b, a, where),
        present=present,
    )


@dataclass(frozen=True)
class PrefixCacheDelta:
    """Prefix-cache activity over a window, in tokens (queried, and found cached)."""

    queries: int
    hits: int
    present: bool = True

    @property
    def hit_rate(self) -> float | None:
        """Hits / queries; ``None`` when nothing was queried."""
        return self.hits / self.queries if self.queries > 0 else None


def prefix_cache_delta(
    before: Samples | str, after: Samples | str, *, where: Mapping[str, str] | None = None
) -> PrefixCacheDelta:
    """Prefix-cache queries and hits between two snapshots, summed over label sets."""
    b, a = _as_samples(before), _as_samples(after)
    queries = _counter_delta(b, a, PREFIX_CACHE_QUERIES, where)
    hits = _counter_delta(b, a, PREFIX_CACHE_HITS, where)
    return PrefixCacheDelta(
        queries=_count(queries),
        hits=_count(hits),
        present=queries is not None or hits is not None,
    )
