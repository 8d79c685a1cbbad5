"""Bench trust: the checks a verdict needs before anyone may act on it, each with its figure.

An A/A arm alone cannot show a broken instrument: when the client reads the control's and
the A/A arm's streams late alike, their ratio stays near 1 while every absolute number is
wrong (measured on a fresh 2-core machine: "no false effect" beside a client 41 % off the
server). So the bench is trusted only when all of these pass:

- **instruments** — on every launch, the client's mean TPOT within
  :data:`~speclib.analysis.health.instrument.TPOT_TOLERANCE` of the server's own stamps, and its
  TTFT lag behind the server's first-token stamp within
  :data:`~speclib.analysis.health.instrument.TTFT_TOLERANCE_S` or, where a busy client lags more
  (many streams on few cores), equal across the arms of a block and level within it, or
  unequal by more than the client can have made (its loop-lag probe bounds that): then the
  server's API process made the difference, and the client's TTFT, which includes it, stands;
- **late reads** — at most :data:`~speclib.analysis.health.instrument.LATE_SHARE_LIMIT` of each
  arm's streams read late, arms within :data:`~speclib.analysis.health.instrument.LATE_GAP_LIMIT`;
- **exclusions** — the arms' shares of requests left out of the TPOT comparison within
  :data:`~speclib.analysis.health.instrument.EXCLUSION_GAP_LIMIT` of each other;
- **CPU starvation** — idle servers did not load the arms unequally
  (:func:`speclib.analysis.health.idle_load.idle_load_problem`);
- **A/A** — the A/A arm shows no effect the rule would act on (no false effect), with its
  resolution against δ and the blocks that would make it "equivalent"
  (:mod:`speclib.analysis.verdict.resolution`); an interval wider than :func:`coarse_limit` cannot
  show a false effect and is "not assessed".

A check is ``pass``, ``fail`` or ``not assessed`` (no data for it: not a pass); the bench is
"trusted" (the first screen's "No false effect") only when every check passes. A failed
check makes every verdict "untrustworthy" — except late reads when the verdict's TPOT comes
from the server's stamps (then shown, not gating). The first four are known before any
comparison: :func:`pre_checks` returns them and
:func:`problem_of` the reason that makes every verdict "untrustworthy" when one
fails. :func:`bench_trust` adds the A/A check and returns the panel for ``summary.json``.
The workload checks (:mod:`speclib.analysis.health.workload_checks`: outputs cut by max_tokens,
near-duplicate prompts, offered vs achieved rate, prompt set size, category sizes) ride along
in the panel's own ``workload`` list: they warn on the first screen but never gate, and do
not count toward "trusted" (the workload is the user's choice, not a fault of the bench).

**Whose a TTFT lag is** (the client's, or the server's front end), part of the
instruments' agreement check:
The client's TTFT runs from its send to its read of the first token; vLLM's histogram runs
from the API process's arrival stamp to the output processing of that token. Their gap per
launch window (:func:`speclib.analysis.health.instrument.launch_agreement`) grows under
load, and an equal gap in every arm of a block cancels in their comparison. A gap that
*differs* between arms was made either by a busy client or by the server's API process
(the work before its clock starts and the streaming after it stops, which under a burst of
requests takes tens of milliseconds and differs between configurations: measured on one
H200 at c = 32). The client's loop-lag probe tells them apart: a window's worst tick plus
one probe period (:data:`speclib.core.records.LAG_PERIOD_S`) bounds how late the client
can have read anything in it, so an arm-to-arm difference larger than that bound, in
windows where no stream was read late, is the server's. Then the client's TTFT, which
includes it as a user's does, stays comparable; otherwise the level's TTFT gate is not
assessed. Pure functions of the agreement frame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from speclib.analysis.health.instrument import (
    EXCLUSION_GAP_LIMIT,
    LATE_GAP_LIMIT,
    LATE_SHARE_LIMIT,
    TPOT_TOLERANCE,
    TTFT_TOLERANCE_S,
)
from speclib.analysis.verdict.resolution import bench_check
from speclib.core.reasons import Code, Reason
from speclib.core.records import LAG_PERIOD_S
from speclib.core.verdict_words import FALSE_EFFECT, Word

__all__ = [
    "FAIL",
    "NOT_ASSESSED",
    "PASS",
    "TrustCheck",
    "bench_trust",
    "client_delay_bound_ms",
    "coarse_limit",
    "pre_checks",
    "problem_of",
    "server_lag_note",
    "ttft_lag_causes",
    "ttft_lag_spreads",
    "ttft_problems",
]


PASS, FAIL, NOT_ASSESSED = "pass", "fail", "not assessed"


@dataclass(frozen=True)
class TrustCheck:
    """One bench-trust check: its status, a short figure, a sentence, and per-arm figures."""

    check: str
    status: str
    figure: str
    detail: str
    per_arm: dict[str, str] = field(default_factory=dict)
    gating: bool = True  # a failure makes every verdict "untrustworthy"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def instrument_check(agreement: pd.DataFrame) -> TrustCheck:
    """The client against the server's own stamps. TPOT, the verdict's metric: every
    launch's client mean within tolerance of the server's, else the check fails and gates
    every verdict. TTFT: the client's lag behind the server's first-token stamp grows when
    the client is busy (many streams on few cores); an equal lag in every arm of a block
    cancels in their comparison and passes (reported); a lag that differs between the arms
    by more than the client can have made (:func:`ttft_lag_causes`) is the server's and
    passes (reported: the client's TTFT, which includes it, is the one users see); any other
    lag that differs between the arms fails without gating the TPOT verdict: the TTFT gate
    of those levels is not assessed (:func:`ttft_problems`)."""
    name = "instruments agree"
    rows = agreement.dropna(subset=["agrees"]) if len(agreement) else agreement
    if not len(rows):
        return TrustCheck(
            name,
            NOT_ASSESSED,
            "no server stamps",
            "no launch had server-side "
            "timing (an external server without vLLM's per-request metrics)",
        )
    per_arm = {}
    for series, g in rows.groupby("series", sort=False):
        tp = g["tpot_gap"].dropna().abs()
        tt = g["ttft_gap_ms"].dropna().abs()
        per_arm[str(series)] = (
            f"TPOT ≤ {_pct(tp.max()) if len(tp) else 'n/a'}, "
            f"TTFT ≤ {f'{tt.max():.1f} ms' if len(tt) else 'n/a'}"
        )
    tpot = pd.to_numeric(rows["tpot_gap"], errors="coerce").abs()
    bad = rows[tpot > TPOT_TOLERANCE]
    spreads = ttft_lag_spreads(rows)
    spread = max(spreads.values(), default=0.0)
    ttft_tol = TTFT_TOLERANCE_S * 1e3
    lag = pd.to_numeric(rows["ttft_gap_ms"], errors="coerce").abs()
    tol = (
        f"TPOT within {TPOT_TOLERANCE:.0%}; TTFT lag within {ttft_tol:g} ms, or equal across "
        f"the arms of a block and level within {ttft_tol:g} ms"
    )
    if len(bad):
        worst = ", ".join(
            f"{r.launch_id} (TPOT {_signed(r.tpot_gap)}, TTFT {_signed_ms(r.ttft_gap_ms)})"
            for r in bad.itertuples()
        )
        return TrustCheck(
            name,
            FAIL,
            f"{len(bad)} of {len(rows)} launch windows off",
            f"the client disagrees with the server's own stamps ({tol}) on {worst}",
            per_arm,
        )
    causes = ttft_lag_causes(rows)
    busy = sorted(lv for lv, (_, bound) in causes.items() if bound is None)
    if busy:
        spread = max(causes[lv][0] for lv in busy)
        return TrustCheck(
            name,
            FAIL,
            f"TTFT lag unequal ({spread:.1f} ms)",
            f"TPOT agrees on every launch (within {_pct(float(tpot.max()))}); the client's TTFT "
            f"lag behind the server differs by up to {spread:.1f} ms between arms at level(s) "
            f"{busy} (0 = the first load level), where it read first tokens up to "
            f"{float(lag[rows['level'].isin(busy)].max()):.1f} ms late: the client did not "
            "keep up with first tokens at that load; the TTFT gate is not assessed there, the "
            "TPOT verdicts stand",
            per_arm,
            gating=False,
        )
    if causes:
        note = server_lag_note(rows, lag, causes)
        return TrustCheck(name, PASS, f"{len(rows)} of {len(rows)} within", tol + note, per_arm)
    lagging = int((lag > ttft_tol).sum())
    note = (
        f"; in {lagging} window(s) the client read first tokens up to {lag.max():.1f} ms after "
        f"the server stamped them (a busy client at high concurrency), equally in every arm "
        f"(spread ≤ {spread:.1f} ms), so the arms' TTFTs stay comparable"
        if lagging
        else ""
    )
    return TrustCheck(name, PASS, f"{len(rows)} of {len(rows)} within", tol + note, per_arm)


def _signed(x: Any) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{100 * x:+.1f} %"


def _signed_ms(x: Any) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{x:+.1f} ms"


def late_check(records: pd.DataFrame, *, gating: bool = True) -> TrustCheck:
    """Streams read late per arm: each arm at most the limit, arms within the gap.

    ``gating`` False when the verdict's TPOT comes from the server's stamps: a late read
    then distorts only the client's own figures, which the instrument check bounds."""
    name = "late reads"
    if records.empty or "read_late" not in records:
        return TrustCheck(name, NOT_ASSESSED, "no streams", "no measured stream")
    ok = records[records["ok"].astype(bool)]
    if not len(ok):
        return TrustCheck(name, NOT_ASSESSED, "no streams", "no successful measured stream")
    shares = ok.groupby("series", sort=False)["read_late"].agg(["sum", "size"])
    per_arm = {str(s): f"{int(n)}/{int(t)}" for s, (n, t) in shares.iterrows()}
    frac = shares["sum"] / shares["size"]
    total = int(shares["sum"].sum())
    figure = f"{total} of {int(shares['size'].sum())} streams"
    rule = (
        f"at most {LATE_SHARE_LIMIT:.0%} of an arm's streams read late, arms within "
        f"{100 * LATE_GAP_LIMIT:.0f} points"
    )
    if frac.max() > LATE_SHARE_LIMIT or frac.max() - frac.min() > LATE_GAP_LIMIT:
        detail = (
            f"the client was not scheduled in time: {rule} is broken "
            f"(worst {frac.idxmax()} {_pct(frac.max())})"
        )
        if not gating:
            detail += (
                "; the verdict's TPOT comes from the server's stamps, so only the client's "
                "own figures are affected (the instrument check bounds them)"
            )
        return TrustCheck(name, FAIL, figure, detail, per_arm, gating=gating)
    return TrustCheck(name, PASS, figure, rule, per_arm, gating=gating)


def exclusion_check(table: pd.DataFrame) -> TrustCheck:
    """Requests left out of the TPOT comparison, per arm, with every reason counted."""
    name = "exclusions"
    if table.empty:
        return TrustCheck(name, NOT_ASSESSED, "no requests", "no measured request")
    per_arm = {}
    shares = {}
    for series, g in table.groupby("series", sort=False):
        n, ex = int(g["n"].sum()), int(g["excluded"].sum())
        reasons: dict[str, int] = {}
        for r in g["reasons"]:
            for k, v in r.items():
                reasons[k] = reasons.get(k, 0) + v
        why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
        per_arm[str(series)] = f"{ex}/{n}" + (f" ({why})" if why else "")
        shares[str(series)] = ex / n if n else 0.0
    total = int(table["excluded"].sum())
    figure = f"{total} of {int(table['n'].sum())} requests"
    gap = max(shares.values()) - min(shares.values())
    rule = f"arms' excluded shares within {100 * EXCLUSION_GAP_LIMIT:.0f} points"
    if gap > EXCLUSION_GAP_LIMIT:
        return TrustCheck(
            name,
            FAIL,
            figure,
            f"the arms lost different shares of their requests ({rule} is broken: gap "
            f"{100 * gap:.1f} points), so the pairs left are not like for like",
            per_arm,
        )
    return TrustCheck(name, PASS, figure, rule, per_arm)


def starvation_check(idle_problem: str | None, idle: pd.DataFrame) -> TrustCheck:
    """Idle servers did not load the arms unequally (interleaved blocks only)."""
    name = "CPU starvation"
    if idle_problem:
        return TrustCheck(name, FAIL, "unequal", idle_problem)
    if idle.empty:
        return TrustCheck(
            name,
            NOT_ASSESSED,
            "no CPU samples",
            "one server per block: nothing shared the machine with it",
        )
    return TrustCheck(name, PASS, "equal", "idle servers loaded every arm alike")


def pre_checks(
    agreement: pd.DataFrame,
    records: pd.DataFrame,
    exclusions: pd.DataFrame,
    idle_problem: str | None,
    idle: pd.DataFrame,
    *,
    instrument: str = "client",
) -> list[TrustCheck]:
    """The checks known before any comparison (all but the A/A arm); ``instrument`` is the
    verdict's TPOT instrument (late reads gate the verdict only with the client's)."""
    return [
        instrument_check(agreement),
        late_check(records, gating=instrument == "client"),
        exclusion_check(exclusions),
        starvation_check(idle_problem, idle),
    ]


def problem_of(checks: list[TrustCheck]) -> Reason | None:
    """Why the bench cannot be trusted (every verdict then says so): the gating checks
    that failed, each with what it compared; None when none did."""
    failed = [c for c in checks if c.status == FAIL and c.gating]
    if not failed:
        return None
    return Reason(Code.BENCH_CHECKS_FAILED, {"failed": [[c.check, c.detail] for c in failed]})


def aa_check(aa: list[Any], margin: float) -> TrustCheck:
    """The A/A arm shows no effect the rule would act on (its word is neither adopt nor
    worse), and how fine the bench resolves: its bench check
    (:func:`speclib.analysis.verdict.resolution.bench_check`) at every load level."""
    name = "A/A"
    cis = [(c, c.cis.get("tpot_s")) for c in aa]
    cis = [(c, ci) for c, ci in cis if ci is not None]
    if not cis:
        return TrustCheck(
            name,
            NOT_ASSESSED,
            "no A/A arm",
            "protocol.aa is off, or the A/A arm has no usable pairs: the bench's noise floor "
            "is unknown (a calibration run measures it: protocol.aa on, or the control "
            "and its A/A copy alone as in params/cpu-demo-aa.yaml)",
        )
    checks = [(c, bench_check(ci, margin=margin)) for c, ci in cis]
    known = [b.resolution for _, b in checks if b.resolution is not None]
    worst = max(known) if len(known) == len(checks) else None
    coarsest = max(
        checks, key=lambda cb: math.inf if cb[1].resolution is None else cb[1].resolution
    )
    figure = coarsest[1].short()
    texts = "; ".join(
        b.text() if len(checks) == 1 else f"{getattr(c, 'load', '')}: {b.text()}" for c, b in checks
    )
    false = [c for c, _ in cis if getattr(c, "word", None) in (*FALSE_EFFECT, Word.REJECT)]
    if false:
        return TrustCheck(
            name,
            FAIL,
            figure,
            "the A/A arm (a second copy of the control) shows an effect the rule would act "
            f"on: the bench's noise is outside its intervals ({texts})",
        )
    limit = coarse_limit(margin)
    if worst is None or worst > limit:
        return TrustCheck(
            name,
            NOT_ASSESSED,
            figure,
            f"{texts}; too wide (coarser than ±{100 * limit:.0f} %) to show a false effect "
            "of the size that would matter",
        )
    return TrustCheck(name, PASS, figure, texts)


def coarse_limit(margin: float) -> float:
    """The widest A/A half-width that still vouches for the bench: 4 δ, at least ±20 %."""
    return max(4 * margin, 0.2)


def bench_trust(
    pre: list[TrustCheck],
    aa: list[Any],
    margin: float,
    *,
    workload: Sequence[TrustCheck] = (),
) -> dict[str, Any]:
    """The bench-trust panel: every check, and ``trusted`` only when all of them pass;
    ``workload`` (the workload checks, warnings only) is listed apart and bears on neither
    ``trusted`` nor ``untrustworthy``; ``workload_warnings`` names those that failed."""
    checks = [*pre, aa_check(aa, margin)]
    return {
        "trusted": all(c.status == PASS for c in checks),
        "untrustworthy": any(c.status == FAIL and c.gating for c in checks),
        "checks": [c.to_dict() for c in checks],
        "workload": [c.to_dict() for c in workload],
        "workload_warnings": [c.check for c in workload if c.status == FAIL],
    }


def ttft_lag_spreads(agreement: pd.DataFrame) -> dict[int, float]:
    """Per load level, the largest spread (ms) of the client's TTFT lag behind the server's
    first-token stamp between the arms of one block: an offset all arms share cancels in
    their comparison, a spread does not."""
    if not len(agreement) or "ttft_gap_ms" not in agreement:
        return {}
    rows = agreement.dropna(subset=["ttft_gap_ms"])
    if "level" not in rows:
        rows = rows.assign(level=0)
    keys = ["level", "block"] if "block" in rows and rows["block"].notna().any() else ["level"]
    out: dict[int, float] = {}
    for key, g in rows.groupby(keys, sort=False):
        level = int(key[0] if isinstance(key, tuple) else key)
        gaps = g["ttft_gap_ms"].astype(float)
        spread = float(gaps.max() - gaps.min()) if len(gaps) > 1 else 0.0
        out[level] = max(out.get(level, 0.0), spread)
    return out


def client_delay_bound_ms(windows: pd.DataFrame) -> float | None:
    """The longest the client can have delayed a read in these launch windows (ms): the worst
    tick of its loop-lag probe plus one probe period (a stall shorter than a period can fall
    between two ticks). None where a window lacks the probe's figure or read a stream late
    (then the client may have lagged by any amount)."""
    if "client_lag_max_ms" not in windows or not len(windows):
        return None
    lags = pd.to_numeric(windows["client_lag_max_ms"], errors="coerce")
    late = pd.to_numeric(windows.get("n_read_late", 0), errors="coerce").fillna(0)
    if lags.isna().any() or (late > 0).any():
        return None
    return float(lags.max()) + LAG_PERIOD_S * 1e3


def ttft_lag_causes(agreement: pd.DataFrame) -> dict[int, tuple[float, float | None]]:
    """Per load level whose client TTFT lag differs between the arms of a block by more than
    the tolerance: ``(spread, bound)``. ``bound`` is the client's own delay bound
    (:func:`client_delay_bound_ms`) where it is smaller than the spread: the client cannot
    have made that difference, so the server made it (vLLM's API process works on each
    request before its TTFT clock starts and streams after it stops, and under load that
    takes longer in some configurations than in others). None: a busy client may have."""
    tol = TTFT_TOLERANCE_S * 1e3
    out: dict[int, tuple[float, float | None]] = {}
    lvl = agreement["level"] if "level" in agreement else pd.Series(0, index=agreement.index)
    for level, spread in ttft_lag_spreads(agreement).items():
        if spread <= tol:
            continue
        bound = client_delay_bound_ms(agreement[lvl == level])
        out[level] = (spread, bound if bound is not None and bound < spread else None)
    return out


def ttft_problems(agreement: pd.DataFrame, names: dict[int, str]) -> dict[int, Reason]:
    """Per load level whose client TTFT lag differs between arms by more than the
    tolerance, and not by the server's doing (:func:`ttft_lag_causes`), why its TTFT gate is
    not assessed (``names``: level → its load in words)."""
    tol = TTFT_TOLERANCE_S * 1e3
    return {
        level: Reason(
            Code.TTFT_LAG,
            {"load": names.get(level, level), "spread_ms": spread, "tolerance_ms": tol},
        )
        for level, (spread, bound) in ttft_lag_causes(agreement).items()
        if bound is None
    }


def server_lag_note(rows: pd.DataFrame, lag: pd.Series, causes: dict) -> str:
    """The instruments check's note where the arms' TTFT lags differ by the server's doing
    (``lag``: each window's absolute lag in ms; ``causes``: :func:`ttft_lag_causes`)."""
    levels = sorted(causes)
    spread = max(s for s, _ in causes.values())
    bound = max(b for _, b in causes.values())
    worst = float(lag[rows["level"].isin(levels)].max())
    return (
        f"; at level(s) {levels} (0 = the first load level) the lag reached {worst:.1f} ms and "
        f"differs between arms by up to {spread:.1f} ms, more than the client can have made: "
        f"it read every stream on time, and its loop-lag probe bounds any delay of its own to "
        f"{bound:.1f} ms. The difference is the server's: vLLM's API process works on "
        "each request before its TTFT clock starts and streams after it stops, and under that "
        "load it took longer in some arms. The client's TTFT includes it, as a user's does: "
        "the TTFT gate uses it"
    )
