"""vLLM server lifecycle: build the command line, launch, wait for readiness, stop the group.

The server runs under a supervisor (:mod:`speclib.serve.supervisor`), a small child of the
kit that starts it in its own process group (in the kit's session, see
:mod:`speclib.serve.priority`), writing to one log file per launch,
and kills its whole tree when the kit stops it *or dies*, even by SIGKILL: no engine
process outlives the kit. It counts as ready only when ``/health`` answers 200 *and* a
one-token chat completion succeeds. If the process dies first, :class:`ServerStartError` is
raised at once with the exit code and the tail of its log
(:mod:`speclib.serve.logtail`). Stopping kills the whole process
group (and any descendant that left it); a pidfile (:mod:`speclib.serve.pidfile`) lets the
next run reap a server left behind should the supervisor itself be SIGKILLed. The module
never runs the ``vllm`` console script (broken in the CPU wheel): it runs
``python -m vllm.entrypoints.openai.api_server``. API keys go to vLLM through its
environment (``VLLM_API_KEY``), never on the command line.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speclib.serve.httpapi import http_ok
from speclib.serve.logtail import root_cause, tail
from speclib.serve.pidfile import reap_pidfile, write_pidfile
from speclib.serve.priority import place
from speclib.serve.supervisor import (
    Supervised,
    SupervisorError,
    start_supervised,
    stop_supervised,
)

__all__ = [
    "LaunchSpec",
    "PortInUseError",
    "ServerHandle",
    "ServerStartError",
    "build_vllm_argv",
    "free_port",
    "launch",
    "port_is_free",
    "reap_pidfile",  # defined in speclib.serve.pidfile
    "redact_argv",
    "root_cause",  # defined in speclib.serve.logtail
    "running",
    "stop_all",
    "tail",  # defined in speclib.serve.logtail
]

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
_SECRET_FLAGS = ("--api-key",)
_LIVE: dict[int, ServerHandle] = {}
_LIVE_LOCK = threading.Lock()


class ServerStartError(RuntimeError):
    """The server exited, or never became ready, before serving a first completion."""

    def __init__(self, message: str, *, returncode: int | None, log_tail: str, log_path: Path):
        super().__init__(message)
        self.returncode = returncode
        self.log_tail = log_tail
        self.log_path = log_path


class PortInUseError(RuntimeError):
    """The requested port is already bound by another process."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server; ``argv`` holds no secret."""

    argv: tuple[str, ...]
    host: str
    port: int
    served_model: str
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    start_timeout_s: float = 600.0
    pidfile: Path | None = None
    api_key: str | None = field(default=None, repr=False)
    nice: int = 0

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


def build_vllm_argv(
    *,
    model: str,
    host: str,
    port: int,
    served_model_name: str | None = None,
    speculative_config: Mapping[str, Any] | None = None,
    per_request_metrics: bool = False,
    timing_metrics: bool = False,
    max_model_len: int | None = None,
    seed: int | None = None,
    dtype: str | None = None,
    enforce_eager: bool = False,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float | None = None,
    kv_cache_memory_bytes: int | None = None,
    prefix_caching: bool = False,
    extra_args: Sequence[str] = (),
    launcher: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """The command line of ``vllm serve`` as ``python -m vllm.entrypoints.openai.api_server``.

    ``launcher`` replaces the ``python -m ...`` prefix (another environment's Python, a
    ``numactl`` wrapper, or a stand-in server in tests); the arguments follow unchanged.
    """
    if per_request_metrics and speculative_config is None:
        raise ValueError("per_request_metrics needs speculative_config (vLLM refuses it)")
    prefix = list(launcher) if launcher else [sys.executable, "-m", VLLM_MODULE]
    argv = [*prefix, "--model", model]
    argv += ["--host", host, "--port", str(port)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if dtype:
        argv += ["--dtype", dtype]
    if enforce_eager:
        argv.append("--enforce-eager")
    if tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if kv_cache_memory_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(kv_cache_memory_bytes)]
    argv.append("--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching")
    if timing_metrics:
        argv.append("--enable-per-request-metrics")  # the server's own stamps per request
    if speculative_config is not None:
        argv += ["--speculative-config", json.dumps(dict(speculative_config), sort_keys=True)]
        if per_request_metrics:
            argv += ["--per-request-spec-decode-metrics", "summary"]
    argv += list(extra_args)
    return tuple(argv)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A copy of ``argv`` with the values of secret flags replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
        elif arg in _SECRET_FLAGS:
            out.append(arg)
            hide_next = True
        elif arg.split("=", 1)[0] in _SECRET_FLAGS:
            out.append(arg.split("=", 1)[0] + "=***")
        else:
            out.append(arg)
    return out


def port_is_free(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


_HANDED_OUT: set[int] = set()
_PORT_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral port that was free a moment ago on ``host``.

    Never the same port twice in one process: servers started in parallel each ask for a
    port before any of them binds, and the kernel may hand a just-released port out again.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with _PORT_LOCK:
        for _ in range(100):
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise OSError(f"no fresh ephemeral port on {host} after 100 tries")


@dataclass
class ServerHandle:
    """A running server; use as a context manager or call :meth:`stop`.

    ``pid`` is the server's own (the leader of its process group; memory sampling walks
    its tree). ``process`` is its supervisor, the kit's direct child, whose ``poll()`` and
    ``returncode`` give the server's exit code once the server is gone. ``scheduling``
    says how the server ranks against the kit's client for CPU
    (:func:`speclib.serve.priority.place`).
    """

    spec: LaunchSpec
    supervised: Supervised
    started_at: float
    ready_at: float | None = None
    scheduling: dict[str, Any] = field(default_factory=dict)
    _stopped: bool = False

    @property
    def pid(self) -> int:
        return self.supervised.pid

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.supervised.process

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, *, grace_s: float = 15.0) -> int | None:
        """Terminate the process group (SIGTERM, then SIGKILL); return the exit code."""
        if self._stopped:
            return self.process.returncode
        self._stopped = True
        stop_supervised(self.supervised, grace_s=grace_s)
        with _LIVE_LOCK:
            _LIVE.pop(self.pid, None)
        if self.spec.pidfile is not None:
            with contextlib.suppress(OSError):
                self.spec.pidfile.unlink()
        return self.process.returncode


def stop_all() -> None:
    """Stop every server this process started (atexit and signal handlers call this)."""
    with _LIVE_LOCK:
        handles = list(_LIVE.values())
    for handle in handles:
        with contextlib.suppress(Exception):
            handle.stop(grace_s=5.0)


atexit.register(stop_all)


def _probe_completion(spec: LaunchSpec) -> bool:
    body = {
        "model": spec.served_model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 1,
        "temperature": 0.0,
    }
    return http_ok(
        spec.base_url + "/v1/chat/completions", body=body, api_key=spec.api_key, timeout=60.0
    )


_QUICK_POLL_S = 5.0  # the first seconds of a start, polled every 0.05 s


def _wait_ready(handle: ServerHandle) -> None:
    spec = handle.spec
    started = time.monotonic()
    deadline = started + spec.start_timeout_s
    healthy = False
    while True:
        code = handle.process.poll()
        if code is not None:
            cause = root_cause(tail(spec.log_path, lines=400))
            raise ServerStartError(
                f"vLLM server exited with code {code} before it was ready"
                + (f": {cause}" if cause else "")
                + f" (log: {spec.log_path})\n--- last lines of the log ---\n{tail(spec.log_path)}",
                returncode=code,
                log_tail=tail(spec.log_path),
                log_path=spec.log_path,
            )
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"vLLM server not ready after start_timeout_s={spec.start_timeout_s:g} s "
                f"(health {'ok' if healthy else 'not ok'}; log: {spec.log_path})\n"
                f"--- last lines of the log ---\n{tail(spec.log_path)}",
                returncode=None,
                log_tail=tail(spec.log_path),
                log_path=spec.log_path,
            )
        if not healthy:
            healthy = http_ok(spec.base_url + "/health", api_key=spec.api_key, timeout=2.0)
        if healthy and _probe_completion(spec):
            return
        # polled often while a quick server may be up, then every 0.5 s (a vLLM start takes
        # tens of seconds; each poll is one refused or answered local connection)
        time.sleep(0.05 if time.monotonic() - started < _QUICK_POLL_S else 0.5)


def launch(spec: LaunchSpec) -> ServerHandle:
    """Start the server described by ``spec`` and return once it served a completion.

    Raises :class:`PortInUseError` before launching if the port is taken, and
    :class:`ServerStartError` (exit code + log tail) as soon as the process dies; an
    :class:`OSError` when the command cannot be executed at all.
    """
    if not port_is_free(spec.host if spec.host != "0.0.0.0" else "", spec.port):
        raise PortInUseError(
            f"port {spec.port} on {spec.host} is already in use: stop what holds it, "
            "or set server.port: 0 to pick a free port"
        )
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env, **spec.secret_env}
    with spec.log_path.open("ab") as log:
        log.write(f"# speclib launch {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
        log.write(("# argv: " + json.dumps(redact_argv(spec.argv)) + "\n").encode())
        log.flush()
        try:
            sup = start_supervised(spec.argv, env=env, log=log, nice=spec.nice)
        except SupervisorError as exc:
            raise ServerStartError(
                f"{exc} (log: {spec.log_path})\n--- last lines of the log ---\n"
                f"{tail(spec.log_path)}",
                returncode=exc.returncode,
                log_tail=tail(spec.log_path),
                log_path=spec.log_path,
            ) from exc
    handle = ServerHandle(
        spec=spec, supervised=sup, started_at=time.time(), scheduling=place(sup.pid, nice=spec.nice)
    )
    with _LIVE_LOCK:
        _LIVE[sup.pid] = handle
    if spec.pidfile is not None:
        write_pidfile(
            spec.pidfile,
            pid=sup.pid,
            supervisor_pid=sup.process.pid,
            log_path=spec.log_path,
            argv=redact_argv(spec.argv),
        )
    try:
        _wait_ready(handle)
    except BaseException:
        handle.stop(grace_s=5.0)
        raise
    handle.ready_at = time.time()
    return handle


@contextlib.contextmanager
def running(spec: LaunchSpec) -> Iterator[ServerHandle]:
    """Context manager: launch, yield the ready handle, always stop the group."""
    handle = launch(spec)
    try:
        yield handle
    finally:
        handle.stop()
