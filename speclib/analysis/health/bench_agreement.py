"""The kit's numbers next to ``vllm bench serve``'s for the same server: pure comparison.

The bench's result is imported by :mod:`speclib.analysis.health.bench_result`.
:func:`compare_with_kit` puts a bench result next to the kit's own records of
the same launch (mean and median TTFT and TPOT, acceptance, the server's own TPOT) as a
:class:`CrossCheck` with a verdict; :func:`crosscheck_frame` and
:func:`format_crosscheck` present checks for the report and the terminal. Nothing here
starts a process or calls a server: running the bench is :mod:`speclib.run.vllm_bench`'s
job, orchestrating a cross-check :mod:`speclib.run.bench_crosscheck`'s.

Both this comparison and the import apply vLLM's own summary formulas
(:func:`~speclib.analysis.health.bench_result.vllm_ms`) to the two clients' requests.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from speclib.analysis.health.bench_result import (
    BenchResult,
    vllm_ms,
)
from speclib.core.prometheus import histogram_mean
from speclib.core.records import read_late, tpot_s, ttft_s

__all__ = [
    "ADJUSTED_ROW",
    "DEFAULT_TOLERANCE",
    "CrossCheck",
    "CrossCheckRow",
    "compare_with_kit",
    "crosscheck_frame",
    "format_crosscheck",
    "server_tpot_ms",
]

DEFAULT_TOLERANCE = 0.02
"""Median TPOT of the kit and of vllm bench must agree within 2 %."""


# --------------------------------------------------------------------------- side by side


@dataclass(frozen=True)
class CrossCheckRow:
    """One metric as the kit and vllm bench measured it; ``diff`` is (kit − bench) / bench."""

    metric: str
    unit: str
    kit: float | None
    vllm_bench: float | None
    diff: float | None
    tolerance: float | None
    within: bool | None


@dataclass(frozen=True)
class CrossCheck:
    """The kit's numbers for one launch next to ``vllm bench serve``'s on the same server.

    Only the median TPOT is held to ``tolerance``: both tools measure the same server
    decoding the same prompts, while TTFT depends on each client's own overhead (what the
    fidelity benchmark measures) and is shown for information. ``round_medians`` holds
    ``(side, round, median TPOT ms)`` when each side ran more than once; their spread
    (``noise``) says how much the server itself moved between runs. ``server_tpot`` holds
    ``(side, round, mean TPOT ms, requests)`` as the *server* measured it during each run
    (``vllm:request_time_per_output_token_seconds`` from ``/metrics``, the same formula):
    a reference that no client can bias, so ``client_vs_server`` shows each client's mean
    TPOT against the server's own for the same requests.

    ``verdict``: ``agree`` (median TPOT within tolerance); ``server differed`` (outside, but
    each client is within tolerance of the server's own TPOT for its runs: the server
    itself ran at different speeds, e.g. under other load, and both clients saw it right);
    ``vllm bench off`` / ``kit off`` (only the other client matches the server's own TPOT;
    ``kit read late`` instead of ``kit off`` when ``kit_late_requests`` of the kit's streams
    were read late, :func:`speclib.core.records.read_late`: its client was not scheduled);
    ``too noisy`` (outside, but by less than one side differs from itself across rounds);
    else ``disagree``.
    """

    rows: tuple[CrossCheckRow, ...]
    tolerance: float
    kit_requests: int
    bench_requests: int
    bench: BenchResult | None = field(default=None, repr=False)
    round_medians: tuple[tuple[str, int, float], ...] = ()
    server_tpot: tuple[tuple[str, int, float, int], ...] = ()
    kit_late_requests: int = 0

    @property
    def tpot_agrees(self) -> bool | None:
        """Median TPOT within tolerance (None when either side has no value)."""
        row = next(r for r in self.rows if r.metric == "median TPOT")
        return row.within

    @property
    def noise(self) -> float | None:
        """Largest round-to-round spread of one side's median TPOT, (max − min) / median."""
        spreads = []
        for side in ("kit", "vllm bench"):
            values = [v for s, _, v in self.round_medians if s == side]
            if len(values) >= 2:
                spreads.append((max(values) - min(values)) / statistics.median(values))
        return max(spreads) if spreads else None

    @property
    def client_vs_server(self) -> dict[str, float]:
        """Per side: (client mean TPOT − server mean TPOT) / server, over that side's runs."""
        row = next((r for r in self.rows if r.metric == "server mean TPOT"), None)
        client = next(r for r in self.rows if r.metric == "mean TPOT")
        out: dict[str, float] = {}
        if row is None:
            return out
        for side, mine, server in (
            ("kit", client.kit, row.kit),
            ("vllm bench", client.vllm_bench, row.vllm_bench),
        ):
            if mine is not None and server:
                out[side] = (mine - server) / server
        return out

    @property
    def verdict(self) -> str | None:
        agrees = self.tpot_agrees
        if agrees is None:
            return None
        if agrees:
            return "agree"
        vs = self.client_vs_server
        if len(vs) == 2:
            kit_ok, bench_ok = (abs(vs[side]) <= self.tolerance for side in ("kit", "vllm bench"))
            if kit_ok and bench_ok:
                return "server differed"
            if kit_ok != bench_ok:
                if kit_ok:
                    return "vllm bench off"
                return "kit read late" if self.kit_late_requests else "kit off"
        diff = next(r for r in self.rows if r.metric == "median TPOT").diff
        noise = self.noise
        return "too noisy" if noise is not None and abs(diff or 0.0) <= noise else "disagree"

    def to_dict(self) -> dict[str, Any]:
        return {
            "tolerance": self.tolerance,
            "kit_requests": self.kit_requests,
            "bench_requests": self.bench_requests,
            "kit_late_requests": self.kit_late_requests,
            "tpot_agrees": self.tpot_agrees,
            "verdict": self.verdict,
            "noise": self.noise,
            "round_medians": [list(x) for x in self.round_medians],
            "server_tpot": [list(x) for x in self.server_tpot],
            "client_vs_server": self.client_vs_server,
            "rows": [asdict(r) for r in self.rows],
            "bench": self.bench.to_dict() if self.bench is not None else None,
        }

    def to_frame(self) -> Any:
        """The rows as a pandas DataFrame (metric, unit, kit, vllm_bench, diff, within)."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.rows]).drop(columns="tolerance")


def _kit_acceptance(records: Sequence[Any]) -> tuple[float | None, float | None]:
    """(acceptance rate, acceptance length) summed over the records' spec metrics."""
    drafted = accepted = steps = 0
    for rec in records:
        spec = getattr(rec, "spec", None) or {}
        drafted += int(spec.get("num_draft_tokens") or 0)
        accepted += int(spec.get("num_accepted_draft_tokens") or 0)
        steps += int(spec.get("num_spec_steps") or 0)
    rate = accepted / drafted if drafted else None
    length = 1 + accepted / steps if steps else None
    return rate, length


def _weighted(server_tpot: Sequence[tuple[str, int, float, int]], side: str) -> float | None:
    """Request-weighted mean of one side's server-side mean TPOTs."""
    pairs = [(v, n) for s, _, v, n in server_tpot if s == side and n > 0]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else None


def server_tpot_ms(before: str, after: str) -> tuple[float, int] | None:
    """The server's own mean TPOT (ms) and request count between two ``/metrics`` texts.

    From vLLM's ``vllm:request_time_per_output_token_seconds`` histogram (per finished
    request: decode time / (output tokens − 1), as the clients compute it); None when the
    server has no such histogram or no request finished in between.
    """
    found = histogram_mean(before, after, "vllm:request_time_per_output_token_seconds")
    return None if found is None else (1000 * found[0], found[1])


ADJUSTED_ROW = "median TPOT / server mean TPOT"
"""Cross-check row: each client's median TPOT relative to the server's own in its window."""


def _row(
    metric: str, unit: str, kit: float | None, bench: float | None, tol: float | None
) -> CrossCheckRow:
    diff = (kit - bench) / bench if kit is not None and bench else None
    within = abs(diff) <= tol if diff is not None and tol is not None else None
    return CrossCheckRow(metric, unit, kit, bench, diff, tol, within)


def compare_with_kit(
    bench: BenchResult,
    records: Iterable[Any],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    kit_acceptance_rate: float | None = None,
    kit_acceptance_length: float | None = None,
    round_medians: Sequence[tuple[str, int, float]] = (),
    server_tpot: Sequence[tuple[str, int, float, int]] = (),
) -> CrossCheck:
    """Put ``bench`` next to the kit's numbers from ``records`` (one launch's records).

    Only successful measure-phase records count; TTFT and TPOT are computed by
    :mod:`speclib.core.records`. The kit's acceptance comes from the records' per-request spec
    metrics unless given (e.g. the launch's ``/metrics`` delta, which is what vllm bench
    reports). ``tolerance`` is a fraction (0.02 = 2 %). ``round_medians`` (side, round,
    median TPOT ms) records each run's median when the sides ran in several rounds;
    ``server_tpot`` (side, round, server mean TPOT ms, requests) the server's own TPOT
    during each run (see :func:`server_tpot_ms`), shown as the row ``server mean TPOT``,
    and the row :data:`ADJUSTED_ROW`: each side's median TPOT divided by the server's own
    mean TPOT during that side's runs, so a change of the server's speed between the two
    windows (other load on a shared machine) cancels; it is shown beside the raw medians,
    never instead of them, and does not change the verdict.
    """
    if not tolerance > 0:
        raise ValueError(f"`tolerance` must be positive, got {tolerance!r}")
    recs = [r for r in records if r.ok and getattr(r, "phase", "measure") == "measure"]
    ttfts = [t for r in recs if (t := ttft_s(r)) is not None]
    tpots = [t for r in recs if (t := tpot_s(r)) is not None]
    rate, length = _kit_acceptance(recs)
    rate = kit_acceptance_rate if kit_acceptance_rate is not None else rate
    length = kit_acceptance_length if kit_acceptance_length is not None else length
    median_tpot = vllm_ms(tpots, "median")
    rows = (
        _row("mean TTFT", "ms", vllm_ms(ttfts, "mean"), bench.mean_ttft_ms, None),
        _row("median TTFT", "ms", vllm_ms(ttfts, "median"), bench.median_ttft_ms, None),
        _row("mean TPOT", "ms", vllm_ms(tpots, "mean"), bench.mean_tpot_ms, None),
        _row("median TPOT", "ms", median_tpot, bench.median_tpot_ms, tolerance),
        _row("acceptance rate", "", rate, bench.acceptance_rate, None),
        _row("acceptance length", "tokens", length, bench.acceptance_length, None),
    )
    if server_tpot:
        srv_kit, srv_bench = _weighted(server_tpot, "kit"), _weighted(server_tpot, "vllm bench")
        med_bench = bench.median_tpot_ms
        rows += (
            _row("server mean TPOT", "ms", srv_kit, srv_bench, None),
            _row(
                ADJUSTED_ROW,
                "×",
                median_tpot / srv_kit if median_tpot is not None and srv_kit else None,
                med_bench / srv_bench if med_bench is not None and srv_bench else None,
                tolerance,
            ),
        )
    return CrossCheck(
        rows=rows,
        tolerance=tolerance,
        kit_requests=len(recs),
        bench_requests=bench.completed,
        bench=bench,
        round_medians=tuple((str(a), int(b), float(c)) for a, b, c in round_medians),
        server_tpot=tuple((str(a), int(b), float(c), int(d)) for a, b, c, d in server_tpot),
        kit_late_requests=sum(read_late(r) for r in recs),
    )


def crosscheck_frame(
    checks: Iterable[tuple[Mapping[str, Any], CrossCheck | Mapping[str, Any]]],
) -> Any:
    """One row per (labels, cross-check): kit and vllm bench side by side, for a report.

    ``labels`` (e.g. ``{"series": "draft-k4", "replicate": 0}``) lead each row; a check
    may be a :class:`CrossCheck` or its ``to_dict()`` (as stored in a launch's
    ``crosscheck.json``), or ``{"error": ...}`` for a bench that failed. Columns:
    ``<metric> kit``, ``<metric> vllm bench`` for TTFT/TPOT (mean, median; ms) and
    acceptance; ``TPOT diff`` (median, fraction), ``TPOT agrees``, ``TPOT noise`` (the
    round-to-round spread) and ``verdict``.
    """
    import pandas as pd

    rows = []
    for labels, check in checks:
        data = check.to_dict() if isinstance(check, CrossCheck) else dict(check)
        row: dict[str, Any] = dict(labels)
        if data.get("error"):
            row["error"] = data["error"]
            rows.append(row)
            continue
        for r in data.get("rows", ()):
            row[f"{r['metric']} kit"] = r["kit"]
            row[f"{r['metric']} vllm bench"] = r["vllm_bench"]
            if r["metric"] == "median TPOT":
                row["TPOT diff"] = r["diff"]
                row["TPOT agrees"] = r["within"]
        row["TPOT noise"] = data.get("noise")
        row["verdict"] = data.get("verdict")
        rows.append(row)
    return pd.DataFrame(rows)


def format_crosscheck(check: CrossCheck) -> str:
    """A plain-text table of one cross-check (what ``speclib crosscheck`` prints)."""

    def cell(value: float | None, unit: str) -> str:
        if value is None:
            return "—"
        return f"{value:.3f}" if unit != "ms" else f"{value:.2f}"

    lines = [f"{'metric':<30} {'kit':>10} {'vllm bench':>11} {'diff':>8}  unit"]
    for r in check.rows:
        diff = "—" if r.diff is None else f"{100 * r.diff:+.2f}%"
        flag = "" if r.within is None else ("  ok" if r.within else "  DISAGREE")
        lines.append(
            f"{r.metric:<30} {cell(r.kit, r.unit):>10} {cell(r.vllm_bench, r.unit):>11} "
            f"{diff:>8}  {r.unit}{flag}"
        )
    lines.append(
        f"kit: {check.kit_requests} requests; vllm bench: {check.bench_requests} requests; "
        f"median TPOT tolerance ±{100 * check.tolerance:g} %"
    )
    if check.round_medians:
        per_round = ", ".join(f"{side} r{r} {v:.2f}" for side, r, v in sorted(check.round_medians))
        lines.append(f"median TPOT per round (ms): {per_round}")
    if check.client_vs_server:
        vs = ", ".join(f"{side} {100 * v:+.2f} %" for side, v in check.client_vs_server.items())
        lines.append(f"mean TPOT vs the server's own for the same requests: {vs}")
    noise = "" if check.noise is None else f" (round-to-round spread {100 * check.noise:.1f} %)"
    lines.append(f"verdict: {check.verdict}{noise}")
    return "\n".join(lines)
