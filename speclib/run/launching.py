"""From params to a running server for one series: models, command line, environment.

Resolves model references (building the embedded demo pair on first use), builds the
:class:`~speclib.serve.process.LaunchSpec` of a series (``--speculative-config`` only on
experiments, ``--per-request-spec-decode-metrics summary`` only where vLLM accepts it,
prefix caching per the protocol's cache policy), the server's environment (CPU KV-cache
size, offline hub, a private temp and cache folder per launch, the API key passed through
the environment only), and :func:`server_for`, which yields a ready server — or the
external ``base_url`` — and always stops what it started. An arm's placement (GPUs, share,
KV cache) needs the weights of the models it serves, so they are resolved here, beside the
command they go into.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from speclib.core.rundir import RunDir, write_json_atomic
from speclib.params.experiment import ExperimentParams
from speclib.params.server import SECRET_NAME, SeriesParams, resolve_model_ref
from speclib.run import compile_cache as warm
from speclib.run.placement import (
    Placement,
    checkpoint_gib,
    gpu_count,
    gpu_inventory,
    is_cpu_build,
    placements,
)
from speclib.serve import process as srv

__all__ = [
    "api_key",
    "arm_weights_gib",
    "build_launch_spec",
    "command_args",
    "is_cpu_build",
    "is_external",
    "keep_modelinfos",
    "kv_cache_bytes",
    "resolve_model",
    "safe_env",
    "seed_modelinfos",
    "served_model_ref",
    "server_for",
    "shared_cache_root",
    "starts_together",
    "uses_shared_cache",
]


def resolve_model(ref: str, params: ExperimentParams) -> str:
    """A model reference as vLLM should see it (demo models are built on first use)."""
    kind, where = resolve_model_ref(ref, params.base_dir)
    if kind == "demo":
        from speclib.demo.models import demo_model_dir

        return str(demo_model_dir(where))  # type: ignore[arg-type]
    return where


def _resolved_spec_config(series: SeriesParams, params: ExperimentParams) -> dict[str, Any] | None:
    if series.speculative_config is None:
        return None
    spec = dict(series.speculative_config)
    if isinstance(spec.get("model"), str):
        spec["model"] = resolve_model(spec["model"], params)
    return spec


def served_model_ref(params: ExperimentParams, series: SeriesParams) -> str:
    """The model this arm serves: the target, or a draft alone (measure_draft_cost)."""
    if series.draft_alone_of is None:
        return params.server.model
    spec = params.series_by_name(series.draft_alone_of).speculative_config or {}
    return str(spec["model"])


def api_key(params: ExperimentParams) -> str | None:
    """The API key, read from the environment variable the params name (never the file)."""
    name = params.server.api_key_env
    return os.environ.get(name) if name else None


def is_external(params: ExperimentParams, series: SeriesParams) -> bool:
    """True when the series measures a server the kit did not start."""
    return bool(series.base_url or params.server.base_url)


@functools.lru_cache(maxsize=1)
def _gpu_totals() -> tuple[tuple[int, float], ...]:
    """Each GPU's total memory in GiB (asked once per process; it does not change)."""
    return tuple((g.index, g.total_mib / 1024) for g in gpu_inventory())


def placement_of(params: ExperimentParams, series: SeriesParams):
    """This arm's :class:`~speclib.run.placement.Placement` (GPUs, memory share, KV cache),
    the same in every process of a run (an automatic KV cache depends on the GPUs' total
    memory and the arms' weights, not on what is free at the moment)."""
    auto = params.server.kv_cache_memory_gib == "auto" and gpu_count() > 0
    placed = placements(
        params,
        n_gpus=gpu_count(),
        totals_gib=dict(_gpu_totals()) if auto else None,
        weights_gib=arm_weights_gib(params) if auto else None,
    )
    return placed.get(series.name) or Placement(
        series.name, None, params.server.gpu_memory_utilization
    )


def _model_folder(ref: str, params: ExperimentParams) -> Path | None:
    """The folder a model reference names on this machine, without building or
    downloading anything: a local folder, a demo model already built; None for a hub id."""
    from speclib.demo.models import built_demo_dir

    kind, where = resolve_model_ref(ref, params.base_dir)
    if kind == "demo":
        try:
            return built_demo_dir(where)
        except ValueError:
            return None
    return Path(where) if kind == "local" else None


def _weights_gib(ref: str, params: ExperimentParams) -> float | None:
    """A checkpoint's size in GiB: its folder's weight files, or for a synthetic demo model
    its declared shapes (the same before and after it is built, so ``validate`` and ``run``
    weigh it alike); None where neither is known (a hub id)."""
    from speclib.demo.models import declared_demo_gib

    kind, where = resolve_model_ref(ref, params.base_dir)
    if kind == "demo":
        try:
            declared = declared_demo_gib(where)
        except ValueError:
            declared = None
        if declared is not None:
            return declared
    return checkpoint_gib(_model_folder(ref, params))


def arm_weights_gib(params: ExperimentParams) -> dict[str, float]:
    """Per arm whose server the kit starts, the checkpoints that server loads (the model it
    serves and a speculative config's draft model), in GiB, where every one of them is a
    folder on this machine (:func:`speclib.run.placement.checkpoint_gib`); arms served
    from a hub id are left out (their weights are not known here)."""
    out: dict[str, float] = {}
    for arm in params.arms:
        if is_external(params, arm):
            continue
        refs = [served_model_ref(params, arm)]
        draft = (arm.speculative_config or {}).get("model")
        if arm.draft_alone_of is None and isinstance(draft, str):
            refs.append(draft)
        sizes = [_weights_gib(ref, params) for ref in refs]
        if all(size is not None for size in sizes):
            out[arm.name] = sum(size for size in sizes if size is not None)
    return out


def _server_env(
    params: ExperimentParams, placed: Placement, tmpdir: Path, cache_root: Path
) -> dict[str, str]:
    env = {"VLLM_CACHE_ROOT": str(cache_root), "TMPDIR": str(tmpdir)}
    kinds = {resolve_model_ref(params.server.model, params.base_dir)[0]}
    for s in params.series:
        model = (s.speculative_config or {}).get("model")
        if isinstance(model, str):
            kinds.add(resolve_model_ref(model, params.base_dir)[0])
    if "hub" not in kinds:
        env["HF_HUB_OFFLINE"] = "1"
    if is_cpu_build() and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    if params.protocol.cache_policy == "reset":
        env["VLLM_SERVER_DEV_MODE"] = "1"  # exposes POST /reset_prefix_cache (loopback only)
    env.update(params.server.env)
    if placed.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, placed.gpus))
    return env


def safe_env(env: dict[str, str]) -> dict[str, str]:
    """The environment as written to disk: values of secret-looking names replaced."""
    return {k: ("***" if SECRET_NAME.search(k) else v) for k, v in env.items()}


def _argv(
    params: ExperimentParams,
    series: SeriesParams,
    *,
    model: str,
    port: int,
    spec: dict[str, Any] | None,
    launcher: list[str] | None,
    placed: Placement,
) -> tuple[str, ...]:
    sp = params.server
    return srv.build_vllm_argv(
        model=model,
        host=sp.host,
        port=port,
        served_model_name=sp.served_model_name,
        speculative_config=spec,
        per_request_metrics=series.wants_per_request_metrics,
        timing_metrics=sp.per_request_timing,
        max_model_len=sp.max_model_len,
        seed=sp.seed,
        dtype=sp.dtype,
        enforce_eager=sp.enforce_eager,
        tensor_parallel_size=sp.tensor_parallel_size,
        gpu_memory_utilization=placed.utilization,
        kv_cache_memory_bytes=kv_cache_bytes(placed),
        prefix_caching=params.protocol.cache_policy != "off",
        extra_args=sp.extra_args,
        launcher=launcher,
    )


def kv_cache_bytes(placed: Placement) -> int | None:
    """An arm's fixed KV cache in bytes (``server.kv_cache_memory_gib``, or the size the kit
    chose for ``auto``: :func:`speclib.run.placement.auto_kv_gib`); None: vLLM sizes it."""
    gib = placed.kv_cache_gib
    return None if gib is None else int(gib * 2**30)


def command_args(params: ExperimentParams, series: SeriesParams, *, model: str, port: int):
    """The arguments of a series' server command after its launcher (``--model`` …), as
    the params imply them; model references are not resolved (nothing is built)."""
    argv = _argv(
        params,
        series,
        model=model,
        port=port,
        spec=series.speculative_config,
        launcher=["-"],
        placed=placement_of(params, series),
    )
    return list(argv[1:])


def build_launch_spec(
    params: ExperimentParams,
    series: SeriesParams,
    *,
    log_path: Path,
    pidfile: Path | None,
    tmpdir: Path,
    cache_root: Path,
) -> srv.LaunchSpec:
    """The launch of ``series``: argv without secrets, env, port, readiness probe model.

    Measurement flags the installed vLLM lacks are left out
    (:func:`speclib.vllm_facts.cli_flags.fit_argv`).
    """
    from speclib.vllm_facts.cli_flags import fit_argv, installed_cli_flags

    sp = params.server
    port = sp.port or srv.free_port(sp.host if sp.host != "0.0.0.0" else "127.0.0.1")
    model = resolve_model(served_model_ref(params, series), params)
    spec = _resolved_spec_config(series, params)
    placed = placement_of(params, series)  # GPUs and memory share: env and argv
    argv = _argv(
        params, series, model=model, port=port, spec=spec, launcher=sp.launcher, placed=placed
    )
    if not sp.launcher:
        argv, _ = fit_argv(argv, installed_cli_flags())
    key = api_key(params)
    return srv.LaunchSpec(
        argv=argv,
        host=sp.host,
        port=port,
        served_model=sp.served_model_name or model,
        log_path=log_path,
        env=_server_env(params, placed, tmpdir, cache_root),
        secret_env={"VLLM_API_KEY": key} if key else {},
        start_timeout_s=sp.start_timeout_s,
        pidfile=pidfile,
        api_key=key,
        nice=params.protocol.server_nice,
    )


def _shared_modelinfos() -> Path:
    from speclib.demo.models import default_cache_dir

    return default_cache_dir() / "vllm-modelinfos"


def seed_modelinfos(cache_root: Path) -> int:
    """Copy the kit's kept vLLM model-class facts into a launch's private cache folder.

    vLLM inspects a model class in a fresh Python subprocess (a full import of vLLM and
    torch) unless ``$VLLM_CACHE_ROOT/modelinfos`` holds its facts, keyed by the hash of the
    class's source file, so a stale entry is ignored by vLLM itself. Each launch gets its own
    cache folder, so without this every start paid for that subprocess. Returns the number
    of files copied.
    """
    src, dst = _shared_modelinfos(), cache_root / "modelinfos"
    files = sorted(src.glob("*.json")) if src.is_dir() else []
    if files:
        dst.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, dst / f.name)
    return len(files)


def keep_modelinfos(cache_root: Path) -> None:
    """Keep what vLLM learnt about model classes in this launch for the next launches."""
    src, dst = cache_root / "modelinfos", _shared_modelinfos()
    for f in sorted(src.glob("*.json")) if src.is_dir() else []:
        with contextlib.suppress(OSError):
            dst.mkdir(parents=True, exist_ok=True)
            tmp = dst / f".{f.name}.{os.getpid()}.tmp"
            shutil.copy2(f, tmp)
            os.replace(tmp, dst / f.name)


@contextlib.contextmanager
def server_for(
    params: ExperimentParams, series: SeriesParams, rd: RunDir, lid: str
) -> Iterator[tuple[str, srv.ServerHandle | None, srv.LaunchSpec | None]]:
    """Yield ``(base_url, handle, spec)``: a ready kit-started server, or the external one."""
    base_url = series.base_url or params.server.base_url
    if base_url:
        yield base_url.rstrip("/"), None, None
        return
    files = rd.launch_files(lid)
    srv.reap_pidfile(files.pidfile)
    shared = uses_shared_cache(params, series)
    cache_root = shared_cache_root() if shared else files.vllm_cache
    tmpdir = Path(tempfile.mkdtemp(prefix="speclib-"))  # short: vLLM puts IPC sockets here
    try:
        spec = build_launch_spec(
            params,
            series,
            log_path=files.server_log,
            pidfile=files.pidfile,
            tmpdir=tmpdir,
            cache_root=cache_root,
        )
        write_json_atomic(
            files.command,
            {
                "argv": srv.redact_argv(spec.argv),
                "env": safe_env(dict(spec.env)),
                "port": spec.port,
                "host": spec.host,
                "compile_cache": "shared" if shared else "private",
                "compile_cache_warm": shared and _has_compile_cache(cache_root),
            },
        )
        if not shared:
            seed_modelinfos(cache_root)
        with srv.running(spec) as handle:
            if shared:
                warm.mark_started(
                    cache_root, config_key(params, series), srv.redact_argv(spec.argv)
                )
            else:
                keep_modelinfos(cache_root)
            yield spec.base_url, handle, spec
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if not shared:
            shutil.rmtree(cache_root, ignore_errors=True)


def shared_cache_root() -> Path:
    """The vLLM cache folder every launch with a shared compile cache uses."""
    from speclib.demo.models import default_cache_dir

    return default_cache_dir() / "vllm-cache"


def uses_shared_cache(params: ExperimentParams, series: SeriesParams) -> bool:
    """Whether this arm's server uses the shared vLLM cache (protocol.compile_cache)."""
    policy = params.protocol.compile_cache
    if policy != "auto":
        return policy == "shared"
    return placement_of(params, series).gpus is not None and not is_cpu_build()


def config_key(params: ExperimentParams, series: SeriesParams) -> str:
    """This arm's server configuration as :mod:`speclib.run.compile_cache` keys it: its
    arguments as the params imply them (models unresolved) and the installed vLLM."""
    from speclib.vllm_facts.cli_flags import installed_cli_flags

    args = command_args(params, series, model=served_model_ref(params, series), port=1)
    return warm.config_key(args, installed_cli_flags().vllm_version)


def starts_together(params: ExperimentParams, series: SeriesParams) -> bool:
    """Whether this arm's server may start together with the servers that share its GPU:
    its KV cache has a fixed size (no memory profiling) and its configuration has started
    before on the shared compile cache (it only reads that cache)."""
    if is_external(params, series) or placement_of(params, series).kv_cache_gib is None:
        return False
    if not uses_shared_cache(params, series):
        return False
    return warm.started_before(shared_cache_root(), config_key(params, series))


def _has_compile_cache(root: Path) -> bool:
    folder = root / "torch_compile_cache"
    return folder.is_dir() and any(folder.iterdir())
