"""One measured series launch: start the server, warm up, send the prompts, snapshot, stop.

This is what the ``10_series`` notebook calls. For one series × replicate it obtains a
server (see :mod:`speclib.run.launching`), takes ``/metrics`` snapshots before warm-up and
around the measured requests, samples the server's memory, sends the warm-up requests and
then every prompt at each load level (closed-loop concurrency or seeded Poisson arrivals,
the same arrival times for every series), appends every request's record to
``requests.jsonl``, verifies that the server ran in the mode the params ask for
(speculation on or off), and writes ``status.json`` for the launch. The server is stopped
on every exit path; a server that dies mid-series leaves its finished records intact and
the rest marked not attempted.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from speclib.core.httpapi import fetch_metrics, reset_prefix_cache, served_model
from speclib.core.params import ExperimentParams, LoadLevel, SeriesParams
from speclib.core.prompts import Prompt, load_prompts
from speclib.core.records import RequestRecord, append_record
from speclib.core.rundir import RunDir, launch_id, write_json_atomic
from speclib.run.launching import api_key, build_launch_spec, is_external, resolve_model, server_for
from speclib.serve import process as srv

__all__ = [
    "SeriesResult",
    "arrival_offsets",
    "build_launch_spec",
    "make_request_specs",
    "resolve_model",
    "run_series",
    "verify_mode",
    "warmup_prompts",
]


@dataclass(frozen=True)
class SeriesResult:
    """What happened in one launch (also written to ``launches/<id>/status.json``)."""

    series: str
    replicate: int
    launch_id: str
    ok: bool
    error: str | None
    started_at: float
    ended_at: float
    server_ready_s: float | None
    n_ok: int
    n_failed: int
    n_not_attempted: int
    aborted_reason: str | None
    mode_check: dict[str, Any]
    memory: dict[str, Any] | None
    client: dict[str, Any]
    base_url: str | None
    command: list[str] | None
    concurrency: int
    levels: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_request_specs(
    prompts: list[Prompt],
    params: ExperimentParams,
    *,
    model: str,
    repeats: int,
    cache_salt: str | None = None,
) -> list[Any]:
    """The prepared requests (bodies encoded before any clock starts), repeats interleaved."""
    from speclib.measure.client import RequestSpec, build_request_body

    wl = params.workload
    specs = []
    for rep in range(repeats):
        for p in prompts:
            body = build_request_body(
                model=model,
                messages=p.as_messages(),
                max_tokens=wl.max_tokens,
                temperature=wl.temperature,
                top_p=wl.top_p,
                top_k=wl.top_k,
                seed=wl.seed,
                ignore_eos=wl.ignore_eos,
                min_tokens=wl.min_tokens,
                cache_salt=cache_salt,
            )
            specs.append(RequestSpec(prompt_id=p.id, repeat=rep, category=p.category, body=body))
    return specs


def arrival_offsets(n: int, *, rate: float, seed: int, replicate: int, level: int) -> list[float]:
    """Seeded Poisson arrival times (s from the start): identical for every series."""
    rng = random.Random(f"{seed}-{replicate}-{level}")
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def warmup_prompts(prompts: list[Prompt], n: int) -> list[Prompt]:
    """Warm-up prompts whose first tokens differ from every measured prompt (no shared
    prefix blocks), so warming up does not warm the measured prompts' cache."""
    out = []
    for i in range(n):
        src = prompts[i % len(prompts)]
        msgs = ({"role": "user", "content": f"Warm-up {i}. " + src.messages[-1]["content"]},)
        out.append(Prompt(id=f"warmup-{i}", messages=msgs, category="warmup"))
    return out


def verify_mode(
    series: SeriesParams,
    *,
    spec_delta: Any,
    records: list[RequestRecord],
    log_text: str,
    external: bool = False,
) -> dict[str, Any]:
    """Check the server ran in the mode the params ask for; ``ok`` False says why not.

    Evidence: the ``/metrics`` spec-decode counters over the measured window, the
    per-request spec metrics in the responses, tokens per chunk, and the server log.
    """
    ok_recs = [r for r in records if r.ok]
    with_spec = sum(1 for r in ok_recs if r.spec)
    multi = sum(1 for r in ok_recs if r.chunk_tokens and max(r.chunk_tokens) > 1)
    drafts = getattr(spec_delta, "num_drafts", None) or 0
    log_spec = "speculative_config=SpeculativeConfig" in log_text or (
        "speculative" in log_text.lower() and "speculative_config=None" not in log_text
    )
    info: dict[str, Any] = {
        "expected": "off" if series.is_control else "on",
        "spec_counter_drafts": drafts,
        "requests_with_spec_metrics": with_spec,
        "requests_with_multi_token_chunks": multi,
        "requests_ok": len(ok_recs),
        "log_mentions_speculation": log_spec if log_text else None,
    }
    problems = []
    if series.is_control:
        if drafts > 0:
            problems.append(f"control series but /metrics counted {drafts} drafts")
        if with_spec:
            problems.append(f"control series but {with_spec} responses carried spec metrics")
    elif ok_recs:
        method = (series.speculative_config or {}).get("method")
        if drafts == 0 and with_spec == 0 and method != "ngram":
            problems.append(
                "speculative series but neither /metrics nor any response shows drafting"
            )
        if series.wants_per_request_metrics and with_spec == 0 and not external:
            problems.append("speculative series but no response carried spec metrics")
    info["ok"] = not problems
    info["problems"] = problems
    return info


def _snapshot(base_url: str, path: Path, api_key_: str | None) -> str:
    try:
        text = fetch_metrics(base_url, api_key=api_key_)
    except Exception as exc:  # a missing /metrics is data, not a crash
        text = f"# speclib: could not fetch /metrics: {type(exc).__name__}: {exc}\n"
    path.write_text(text, encoding="utf-8")
    return text


def _settled_snapshot(base_url: str, path: Path, api_key_: str | None) -> str:
    """Snapshot after the counters stopped moving (the engine updates them a bit late)."""
    prev = _snapshot(base_url, path, api_key_)
    for _ in range(10):
        time.sleep(0.3)
        cur = _snapshot(base_url, path, api_key_)
        if _spec_lines(cur) == _spec_lines(prev):
            return cur
        prev = cur
    return prev


def _spec_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith(("vllm:spec_decode", "vllm:prefix"))]


def _not_attempted(
    specs: list[Any], done: set[tuple[str, int]], base: dict[str, Any], reason: str
) -> list[RequestRecord]:
    return [
        RequestRecord(
            **base,
            prompt_id=s.prompt_id,
            repeat=s.repeat,
            category=s.category,
            ok=False,
            error=f"not attempted: {reason}",
            extra={"attempted": False},
        )
        for s in specs
        if (s.prompt_id, s.repeat) not in done
    ]


def _send(
    *,
    base_url: str,
    specs: list[Any],
    params: ExperimentParams,
    rd: RunDir,
    base: dict[str, Any],
    phase: str,
    concurrency: int,
    offsets: list[float] | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[RequestRecord], Any]:
    """Send ``specs``; append each record (stamped with ``base``'s level fields)."""
    from speclib.measure.client import run_requests_sync

    wl = params.workload
    got: list[RequestRecord] = []
    stamp = {k: base[k] for k in ("level", "request_rate", "concurrency")}
    with rd.requests.open("a", encoding="utf-8") as fh:

        def sink(rec: RequestRecord) -> None:
            rec = replace(rec, **stamp)
            append_record(fh, rec)
            got.append(rec)

        outcome = run_requests_sync(
            base_url=base_url,
            specs=specs,
            concurrency=concurrency,
            sink=sink,
            series=base["series"],
            replicate=base["replicate"],
            launch_id=base["launch_id"],
            phase=phase,
            timeout_s=wl.request_timeout_s,
            api_key=api_key(params),
            max_error_rate=wl.max_error_rate if phase == "measure" else None,
            arrival_offsets_s=offsets,
            progress=progress,
        )
        done = {(r.prompt_id, r.repeat) for r in got}
        if phase == "measure" and len(done) < len(specs):
            reason = getattr(outcome, "aborted_reason", None) or "series stopped early"
            for rec in _not_attempted(specs, done, base, reason):
                append_record(fh, rec)
    return got, outcome


def _progress(
    total: int, desc: str, show: bool
) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    if not show:
        return None, lambda: None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None, lambda: None
    bar = tqdm(total=total, desc=desc, unit="req", leave=True)
    return bar.update, bar.close


def _salt(params: ExperimentParams, lid: str, level: int, nonce: str, external: bool) -> str | None:
    policy = params.protocol.cache_policy
    if params.protocol.cache_salt:
        return params.protocol.cache_salt
    if policy == "salt" or external:
        return f"{lid}-l{level}-{nonce}"
    return None


def run_series(
    params: ExperimentParams,
    run_dir: str | Path,
    series_name: str,
    replicate: int = 0,
    *,
    show_progress: bool = True,
) -> SeriesResult:
    """Run one series × replicate; request failures are records, never exceptions.

    Raises :class:`speclib.serve.process.ServerStartError` when the server fails to start (after
    writing a failed ``status.json``), and re-raises interrupts after stopping the server.
    """
    rd = RunDir.at(run_dir)
    series = params.series_by_name(series_name)
    lid = launch_id(series_name, replicate)
    rd.launch(lid).mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(
        params.resolve_path(params.workload.prompts), limit=params.workload.num_prompts
    )
    state: dict[str, Any] = {
        "ready_s": None,
        "command": None,
        "base_url": None,
        "started": time.time(),
    }
    try:
        return _run_launch(params, series, rd, lid, replicate, prompts, state, show_progress)
    except BaseException as exc:
        _write_failed_status(
            rd, lid, series_name, replicate, state, f"{type(exc).__name__}: {exc}", params
        )
        raise


def _write_failed_status(
    rd: RunDir,
    lid: str,
    series: str,
    replicate: int,
    state: dict[str, Any],
    error: str,
    params: ExperimentParams,
) -> None:
    status = SeriesResult(
        series=series,
        replicate=replicate,
        launch_id=lid,
        ok=False,
        error=error[-4000:],
        started_at=state["started"],
        ended_at=time.time(),
        server_ready_s=state["ready_s"],
        n_ok=0,
        n_failed=0,
        n_not_attempted=0,
        aborted_reason=None,
        mode_check={},
        memory=None,
        client={},
        base_url=state["base_url"],
        command=state["command"],
        concurrency=params.workload.levels[0].concurrency,
        extra={"traceback": traceback.format_exc()[-4000:]},
    )
    write_json_atomic(rd.status_path(lid), status.to_dict())


def _run_levels(
    params: ExperimentParams,
    rd: RunDir,
    name: str,
    lid: str,
    replicate: int,
    prompts: list[Prompt],
    base_url: str,
    model: str,
    external: bool,
    alive: Callable[[], bool],
    show: bool,
) -> tuple[list[RequestRecord], list[dict[str, Any]]]:
    key = api_key(params)
    nonce = secrets.token_hex(4)
    ldir = rd.launch(lid)
    records: list[RequestRecord] = []
    levels: list[dict[str, Any]] = []
    for i, level in enumerate(params.workload.levels):
        base = _base(name, replicate, lid, i, level)
        specs = make_request_specs(
            prompts,
            params,
            model=model,
            repeats=params.workload.repeats,
            cache_salt=_salt(params, lid, i, nonce, external),
        )
        if not alive():
            _append(rd, _not_attempted(specs, set(), base, "server died before this level"))
            levels.append({**_level_info(i, level), "skipped": "server died"})
            continue
        reset = (
            reset_prefix_cache(base_url, api_key=key)
            if params.protocol.cache_policy == "reset"
            else None
        )
        offsets = (
            arrival_offsets(
                len(specs),
                rate=level.request_rate,
                seed=params.workload.arrival_seed,
                replicate=replicate,
                level=i,
            )
            if level.request_rate
            else None
        )
        conc = len(specs) if level.request_rate else level.concurrency
        _snapshot(base_url, ldir / f"metrics_l{i}_before.prom", key)
        update, close = _progress(len(specs), f"{lid} {level.label}", show)
        try:
            recs, outcome = _send(
                base_url=base_url,
                specs=specs,
                params=params,
                rd=rd,
                base=base,
                phase="measure",
                concurrency=conc,
                offsets=offsets,
                progress=update,
            )
        finally:
            close()
        _settled_snapshot(base_url, ldir / f"metrics_l{i}_after.prom", key)
        records += recs
        levels.append(
            {
                **_level_info(i, level),
                "n_ok": sum(r.ok for r in recs),
                "n_failed": sum(not r.ok for r in recs),
                "n_not_attempted": len(specs) - len(recs),
                "cache_reset": reset,
                "client": _outcome_dict(outcome),
            }
        )
    return records, levels


def _base(series: str, replicate: int, lid: str, i: int, level: LoadLevel) -> dict[str, Any]:
    return {
        "series": series,
        "replicate": replicate,
        "launch_id": lid,
        "level": i,
        "request_rate": level.request_rate,
        "concurrency": level.concurrency,
    }


def _level_info(i: int, level: LoadLevel) -> dict[str, Any]:
    return {
        "level": i,
        "concurrency": level.concurrency,
        "request_rate": level.request_rate,
        "label": level.label,
    }


def _append(rd: RunDir, recs: list[RequestRecord]) -> None:
    with rd.requests.open("a", encoding="utf-8") as fh:
        for rec in recs:
            append_record(fh, rec)


def _run_launch(
    params: ExperimentParams,
    series: SeriesParams,
    rd: RunDir,
    lid: str,
    replicate: int,
    prompts: list[Prompt],
    state: dict[str, Any],
    show: bool,
) -> SeriesResult:
    from speclib.core.prometheus import CounterResetError, parse_prometheus, spec_counters_delta
    from speclib.serve.memory import MemorySampler

    ldir = rd.launch(lid)
    key = api_key(params)
    external = is_external(params, series)
    with server_for(params, series, rd, lid) as (base_url, handle, spec):
        state.update(
            base_url=base_url,
            command=srv.redact_argv(spec.argv) if spec else None,
            ready_s=(handle.ready_at - handle.started_at) if handle else None,
        )
        model = spec.served_model if spec else served_model(base_url, api_key=key)
        sampler: Any = (
            MemorySampler(
                handle.pid, ldir / "memory.jsonl", label={"launch_id": lid, "series": series.name}
            )
            if handle
            else contextlib.nullcontext()
        )
        alive = handle.alive if handle else (lambda: True)
        with sampler:
            _snapshot(base_url, ldir / "metrics_before_warmup.prom", key)
            warm = make_request_specs(
                warmup_prompts(prompts, params.workload.warmup_requests),
                params,
                model=model,
                repeats=1,
                cache_salt=f"warmup-{secrets.token_hex(4)}"
                if params.protocol.cache_policy != "off" or external
                else None,
            )
            if warm:
                _send(
                    base_url=base_url,
                    specs=warm,
                    params=params,
                    rd=rd,
                    base=_base(series.name, replicate, lid, 0, params.workload.levels[0]),
                    phase="warmup",
                    concurrency=1,
                )
            before = _settled_snapshot(base_url, ldir / "metrics_before.prom", key)
            recs, levels = _run_levels(
                params,
                rd,
                series.name,
                lid,
                replicate,
                prompts,
                base_url,
                model,
                external,
                alive,
                show,
            )
            after = _settled_snapshot(base_url, ldir / "metrics_after.prom", key)
            crosscheck = _crosscheck(
                params, ldir, lid, (base_url, model, external), prompts, recs, alive
            )
        died = handle is not None and not handle.alive()
        exit_code = handle.process.poll() if handle else None
    log_text = srv.tail(ldir / "server.log", lines=2000) if handle else ""
    try:
        delta = spec_counters_delta(parse_prometheus(before), parse_prometheus(after))
    except (CounterResetError, ValueError):
        delta = None
    mode = verify_mode(series, spec_delta=delta, records=recs, log_text=log_text, external=external)
    n_ok = sum(r.ok for r in recs)
    n_total = sum(len(prompts) * params.workload.repeats for _ in params.workload.levels)
    error = None
    if died:
        error = (
            f"server died during the series (exit code {exit_code}); last lines of its "
            f"log:\n{srv.tail(ldir / 'server.log', lines=30)}"
        )
    elif not mode["ok"]:
        error = "mode check failed: " + "; ".join(mode["problems"])
    elif n_ok == 0:
        error = "no request succeeded"
    aborted = [lv["client"].get("aborted_reason") for lv in levels if lv.get("client")]
    result = SeriesResult(
        series=series.name,
        replicate=replicate,
        launch_id=lid,
        ok=error is None,
        error=error,
        started_at=state["started"],
        ended_at=time.time(),
        server_ready_s=state["ready_s"],
        n_ok=n_ok,
        n_failed=len(recs) - n_ok,
        n_not_attempted=n_total - len(recs),
        aborted_reason=next((a for a in aborted if a), None),
        mode_check=mode,
        memory=sampler.summary().to_dict() if handle else None,
        client=_merge_clients([lv.get("client") or {} for lv in levels]),
        base_url=base_url if external else None,
        command=state["command"],
        concurrency=params.workload.levels[0].concurrency,
        levels=levels,
        cache={
            "policy": params.protocol.cache_policy,
            "external": external,
            "fixed_salt": bool(params.protocol.cache_salt),
        },
        extra={"crosscheck": _crosscheck_brief(crosscheck)} if crosscheck is not None else {},
    )
    write_json_atomic(rd.status_path(lid), result.to_dict())
    return result


def _crosscheck(
    params: ExperimentParams,
    ldir: Path,
    lid: str,
    server: tuple[str, str, bool],
    prompts: list[Prompt],
    records: list[RequestRecord],
    alive: Callable[[], bool],
) -> dict[str, Any] | None:
    """``vllm bench serve`` on the same server after the kit's last snapshot (if asked).

    ``server`` is (base URL, served model name, external?). Never raises: a bench that
    cannot run is recorded as ``{"error": ...}`` in ``crosscheck.json``.
    """
    if not params.protocol.crosscheck_vllm_bench:
        return None
    if not alive():
        died = {"error": "the server died before the vllm bench cross-check"}
        write_json_atomic(ldir / "crosscheck.json", died)
        return died
    from speclib.run.benchcheck import crosscheck_launch

    base_url, model, external = server
    salted = params.protocol.cache_policy != "off" or external
    return crosscheck_launch(
        params,
        launch_dir=ldir,
        base_url=base_url,
        model=model,
        prompts=prompts,
        records=records,
        api_key=api_key(params),
        cache_salt=f"{lid}-vllm-bench-{secrets.token_hex(4)}" if salted else None,
    )


def _crosscheck_brief(check: dict[str, Any]) -> dict[str, Any]:
    """What ``status.json`` keeps of a cross-check (the full one is ``crosscheck.json``)."""
    if check.get("error"):
        return {"error": str(check["error"])[:500]}
    row = next((r for r in check.get("rows", ()) if r["metric"] == "median TPOT"), {})
    return {
        "verdict": check.get("verdict"),
        "median_tpot_kit_ms": row.get("kit"),
        "median_tpot_vllm_bench_ms": row.get("vllm_bench"),
        "diff": row.get("diff"),
    }


def _merge_clients(items: list[dict[str, Any]]) -> dict[str, Any]:
    if not items:
        return {}
    wall = sum(i.get("wall_s") or 0 for i in items)
    cpu = sum(i.get("loop_cpu_s") or i.get("cpu_s") or 0 for i in items)
    return {
        "wall_s": wall,
        "cpu_s": sum(i.get("cpu_s") or 0 for i in items),
        "loop_cpu_s": cpu,
        "saturated": any(i.get("saturated") for i in items),
        "event_loop": items[0].get("event_loop"),
        "stamp_source": items[0].get("stamp_source"),
    }


def _outcome_dict(outcome: Any) -> dict[str, Any]:
    if outcome is None:
        return {}
    data = dict(outcome.to_dict()) if hasattr(outcome, "to_dict") else asdict(outcome)
    data.pop("not_attempted", None)
    data.pop("not_attempted_index", None)
    return data
