"""What vLLM's own log says about speed: the lines beside a verdict that explain it.

A speculative server can be slow for reasons vLLM states at start or while serving:
scheduling that stops overlapping the CPU with the GPU for this method, a fallback to an
older model runner, kernels compiled while requests wait, no CUDA graphs, a KV cache too
small for the load (requests wait or are preempted). :func:`speed_lines` finds those lines
in a launch's ``server.log`` (each rule says what the line means for the measurement);
:func:`series_speed_lines` gathers them per series over its launches, so the report can
list them next to the TPOT ratio they may explain. The rules read vLLM's words, which
change between versions: a line no rule knows is simply not listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speclib.core.logtext import message

__all__ = [
    "RULES",
    "SpeedLine",
    "by_kind",
    "kv_concurrency",
    "message_lines",
    "series_speed_lines",
    "speed_lines",
]


@dataclass(frozen=True)
class SpeedLine:
    """One log line bearing on speed: its kind, what it means, and vLLM's words."""

    kind: str
    meaning: str
    line: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "meaning": self.meaning, "line": self.line}


RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "async scheduling off",
        re.compile(r"async scheduling.*(disabled|not (yet )?supported)", re.I),
        "the CPU prepares each step while the GPU waits, instead of overlapping the two",
    ),
    (
        "model runner fallback",
        re.compile(r"Model Runner V2 .*(using|fall\w* back to) the V1 model runner", re.I),
        "this configuration runs on vLLM's older model runner",
    ),
    (
        "kernels compiled during requests",
        re.compile(r"JIT compilation during inference:|compiled during (inference|requests)", re.I),
        "kernels were compiled while requests waited: the first requests of the launch ran "
        "slower (warm-up requests absorb some of it)",
    ),
    (
        "no CUDA graphs",
        re.compile(r"enforce eager set|cuda ?graphs? (is |are )?(disabled|not supported)", re.I),
        "each step launches its kernels one by one (no CUDA graphs / torch.compile)",
    ),
    (
        "preemption",
        re.compile(r"preempt", re.I),
        "requests were preempted: the KV cache was full at this load",
    ),
    (
        "performance warning",
        re.compile(r"(significant|suboptimal) performance|performance loss", re.I),
        "vLLM warns that this setup loses performance",
    ),
    (
        "fallback",
        re.compile(r"\bfall(ing)? back to\b", re.I),
        "vLLM chose a fallback path",
    ),
)
_KV_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def speed_lines(
    log_text: str, *, max_concurrency: int | None = None, request_tokens: int | None = None
) -> list[SpeedLine]:
    """The lines of one server log that bear on speed, each once, in log order; with
    ``max_concurrency``, a KV cache that holds fewer requests than that (requests of
    ``request_tokens``, the longest prompt plus max_tokens; unset: of max_model_len)."""
    out: list[SpeedLine] = []
    seen: set[tuple[str, str]] = set()
    for raw in log_text.splitlines():
        text = message(raw)
        for kind, pattern, meaning in RULES:
            if pattern.search(text) and (kind, text) not in seen:
                seen.add((kind, text))
                out.append(SpeedLine(kind, meaning, text[:300]))
                break
    kv = kv_concurrency(log_text)
    if kv is None or max_concurrency is None:
        return out
    tokens, times = kv
    size = request_tokens or tokens
    fits = tokens * times / size
    if fits < max_concurrency:
        out.append(
            SpeedLine(
                "KV cache below the load",
                f"the KV cache holds {fits:.1f} requests of {size:,} tokens, fewer than the "
                f"{max_concurrency} in flight at the highest load: requests wait or are "
                "preempted there",
                f"Maximum concurrency for {tokens:,} tokens per request: {times:.2f}x",
            )
        )
    return out


def kv_concurrency(log_text: str) -> tuple[int, float] | None:
    """vLLM's "Maximum concurrency for N tokens per request: Xx" (the last one), or None."""
    found = _KV_CONCURRENCY.findall(message_lines(log_text))
    if not found:
        return None
    tokens, times = found[-1]
    return int(tokens.replace(",", "")), float(times)


def message_lines(log_text: str) -> str:
    """The log with every line reduced to vLLM's message."""
    return "\n".join(message(x) for x in log_text.splitlines())


def series_speed_lines(
    logs: Iterable[tuple[str, str]],
    *,
    max_concurrency: int | None = None,
    request_tokens: int | None = None,
    control: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per series, its speed lines over its launches (``logs``: ``(series, log text)``),
    each with the number of launches that logged it. Lines the control logged too are
    left out of the other series (they do not tell the arms apart)."""
    counts: dict[str, dict[tuple[str, str], list[Any]]] = {}
    for series, text in logs:
        mine = counts.setdefault(series, {})
        for item in speed_lines(
            text, max_concurrency=max_concurrency, request_tokens=request_tokens
        ):
            key = (item.kind, _shape(item.line))
            entry = mine.setdefault(key, [item, 0])
            entry[1] += 1
    shared = set(counts.get(control, {})) if control else set()
    out: dict[str, list[dict[str, Any]]] = {}
    for series, items in counts.items():
        keep = [v for k, v in items.items() if series == control or k not in shared]
        out[series] = [{**item.to_dict(), "launches": n} for item, n in keep]
    return out


def _shape(line: str) -> str:
    """A line with its numbers blanked, so that the same message in two launches counts
    once (``pid=123`` and ``took 71.2 s`` differ between launches)."""
    return re.sub(r"\d[\d.,]*", "#", line)


def by_kind(lines: Sequence[Mapping[str, Any]]) -> list[str]:
    """The kinds of ``lines``, each once, in order (for one-line summaries)."""
    return list(dict.fromkeys(str(x["kind"]) for x in lines))
