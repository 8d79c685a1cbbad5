"""The arms of one block: each arm's server, held by its own thread, and sending to one arm.

:class:`Arm` is the mutable state of one arm while its block runs. :func:`start_all` starts
every arm's server in parallel, each in a :class:`ServerKeeper` thread that holds it for the
whole block (the kernel's parent-death signal follows the thread that forked a child, so a
server must be started and stopped by a thread that outlives its use); a start failure stays
on its arm. :func:`send` sends prepared requests to one arm and appends every record to
``requests.jsonl`` as it finishes, stamped with its block, level and slot; the requests go
out from the process's client worker (:mod:`speclib.measure.worker`: the load generator in
a small process of its own, away from the kernel's threads), or from this process when no
worker can start (the outcome's ``client_process`` says which). :func:`warm_up` sends an
arm's unmeasured warm-up requests.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from speclib.core.prompts import Prompt
from speclib.core.records import RequestRecord, append_record
from speclib.core.rundir import LaunchDir, RunDir
from speclib.params.experiment import ExperimentParams
from speclib.params.protocol import LoadLevel
from speclib.params.server import SeriesParams
from speclib.run.launch_record import external_model
from speclib.run.launching import api_key, is_external, server_for, starts_together
from speclib.run.requests import make_request_specs, warmup_prompts
from speclib.serve import process as srv

__all__ = [
    "Arm",
    "ServerKeeper",
    "cache_salt",
    "level_warmup_count",
    "release_all",
    "send",
    "stamp",
    "start_all",
    "warm_up",
    "warm_up_level",
]


@dataclass
class Arm:
    """The mutable state of one arm while its block runs (not a record: see SeriesResult)."""

    series: SeriesParams
    lid: str
    files: LaunchDir
    started: float = field(default_factory=time.time)
    base_url: str | None = None
    handle: srv.ServerHandle | None = None
    spec: srv.LaunchSpec | None = None
    model: str = ""
    external: bool = False
    start_error: str | None = None
    records: list[RequestRecord] = field(default_factory=list)
    levels: list[dict[str, Any]] = field(default_factory=list)
    before: str = ""
    after: str = ""
    aborted: str | None = None
    crosscheck: dict[str, Any] | None = None
    sampler: Any = None
    died_during: bool = False
    client_placement: dict[str, Any] = field(default_factory=dict)
    command: list[str] | None = None  # a failed launch's command (a started one: spec.argv)
    start_after: tuple[str, ...] = ()  # the arms whose servers were ready before this one's start

    @property
    def name(self) -> str:
        return self.series.name

    def alive(self) -> bool:
        return self.handle.alive() if self.handle else self.start_error is None


class ServerKeeper(threading.Thread):
    """Holds one arm's server for the whole block.

    A server is bound to the thread that started it (the kernel's parent-death signal
    follows the forking *thread*), so each arm's server is started, held and stopped by
    its own thread, which lives until the block releases it.
    """

    def __init__(
        self,
        params: ExperimentParams,
        rd: RunDir,
        arm: Arm,
        after: Sequence[ServerKeeper] = (),
    ) -> None:
        super().__init__(name=f"speclib-server-{arm.lid}", daemon=True)
        self.params, self.rd, self.arm, self.after = params, rd, arm, tuple(after)
        self.ready = threading.Event()
        self.release = threading.Event()
        self.value: tuple[str, Any, Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for before in self.after:  # share a GPU with it: start once they are ready
                while not before.ready.wait(0.2):
                    if self.release.is_set():
                        return
            if self.release.is_set():
                return
            self.arm.started = time.time()
            with server_for(self.params, self.arm.series, self.rd, self.arm.lid) as value:
                self.value = value
                self.ready.set()
                self.release.wait()
        except BaseException as exc:
            self.error = exc
        finally:
            self.ready.set()


def start_all(params: ExperimentParams, rd: RunDir, arms: list[Arm], stack) -> None:
    """Start every arm's server: in parallel, except that servers sharing a GPU start one
    after another unless they may start together
    (:func:`speclib.run.placement.start_after`, :func:`speclib.run.launching.starts_together`);
    a failure is kept on its arm, not raised."""
    from speclib.run.placement import gpu_count, placements, start_after

    key = api_key(params)
    together = [a.name for a in arms if starts_together(params, a.series)]
    order = start_after(
        [a.name for a in arms], placements(params, n_gpus=gpu_count()), together=together
    )
    by_name = {a.name: ServerKeeper(params, rd, a) for a in arms}
    for name, keeper in by_name.items():
        keeper.after = tuple(by_name[b] for b in order.get(name, ()))
        keeper.arm.start_after = order.get(name, ())
    keepers = list(by_name.values())
    stack.callback(release_all, keepers)
    for keeper in keepers:
        keeper.start()
    for keeper in keepers:
        while not keeper.ready.wait(0.2):
            pass
        arm = keeper.arm
        if keeper.value is None:
            err = keeper.error
            arm.start_error = f"{type(err).__name__}: {err}" if err else "server did not start"
            arm.command = _written_command(arm)
            continue
        arm.base_url, arm.handle, arm.spec = keeper.value
        arm.external = is_external(params, arm.series)
        arm.model = arm.spec.served_model if arm.spec else external_model(arm.base_url, key)


def _written_command(arm: Arm) -> list[str] | None:
    """The command a failed launch was given, as written before it started (None: it never
    got that far)."""
    try:
        return list(json.loads(arm.files.command.read_text(encoding="utf-8"))["argv"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def release_all(keepers: list[ServerKeeper]) -> None:
    """Stop every server of the block (each by its own thread) and wait for them.

    A server still starting (an interrupt during the parallel start) is not waited for:
    every live server of this process is stopped at once, which ends its start.
    """
    for keeper in keepers:
        keeper.release.set()
    if not all(k.ready.is_set() for k in keepers):
        srv.stop_all()
    for keeper in keepers:
        keeper.join(timeout=60)
    if any(k.is_alive() for k in keepers):
        srv.stop_all()


def send(
    params: ExperimentParams,
    rd: RunDir,
    arm: Arm,
    specs: list[Any],
    stamp: dict[str, Any],
    *,
    phase: str,
    concurrency: int,
    offsets: list[float] | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[RequestRecord], Any]:
    """Send ``specs`` to one arm; append each record, stamped with the level/slot fields,
    as it finishes. The client runs in this process's shared client worker."""
    from speclib.measure.worker import run_requests_isolated

    got: list[RequestRecord] = []
    with rd.requests.open("a", encoding="utf-8") as fh:

        def sink(rec: RequestRecord) -> None:
            rec = replace(rec, **stamp)
            append_record(fh, rec)
            got.append(rec)

        outcome = run_requests_isolated(
            base_url=arm.base_url,
            specs=specs,
            concurrency=concurrency,
            sink=sink,
            series=arm.name,
            replicate=stamp["replicate"],
            launch_id=arm.lid,
            phase=phase,
            timeout_s=params.workload.request_timeout_s,
            api_key=api_key(params),
            max_error_rate=params.workload.max_error_rate if phase == "measure" else None,
            arrival_offsets_s=offsets,
            progress=progress,
        )
    return got, outcome


def warm_up(params: ExperimentParams, rd: RunDir, arm: Arm, prompts: list[Prompt], stamp):
    """Send an arm's unmeasured warm-up requests (no prefix shared with measured ones)."""
    warm_up_level(params, rd, arm, prompts, stamp, params.workload.warmup_requests, concurrency=1)


def level_warmup_count(params: ExperimentParams, i: int, level: LoadLevel) -> int:
    """Unmeasured requests an arm gets at load level ``i``'s own concurrency before it is
    measured (``workload.level_warmup``): max(concurrency, warmup_requests); 0 when off,
    and at a first level of concurrency 1, which the series' warm-up already is."""
    wl = params.workload
    if not wl.level_warmup:
        return 0
    if i == 0 and level.concurrency == 1 and level.request_rate is None and wl.warmup_requests:
        return 0
    return max(level.concurrency, wl.warmup_requests)


def warm_up_level(
    params: ExperimentParams,
    rd: RunDir,
    arm: Arm,
    prompts: list[Prompt],
    stamp,
    n: int,
    *,
    concurrency: int | None = None,
) -> None:
    """Send ``n`` unmeasured requests to ``arm`` at ``concurrency`` (default the level's,
    ``stamp``'s), with the level's max_tokens and prompts like its own (no prefix shared
    with them)."""
    if n < 1:
        return
    salted = params.protocol.cache_policy != "off" or arm.external
    warm = make_request_specs(
        warmup_prompts(prompts, n),
        params,
        model=arm.model,
        repeats=1,
        cache_salt=f"warmup-{secrets.token_hex(4)}" if salted else None,
    )
    conc = concurrency if concurrency is not None else stamp["concurrency"]
    send(params, rd, arm, warm, stamp, phase="warmup", concurrency=conc)


def cache_salt(params: ExperimentParams, arm: Arm, level: int, nonce: str) -> str | None:
    """The ``cache_salt`` of an arm's requests at one level, per ``protocol.cache_policy``."""
    if params.protocol.cache_salt:
        return params.protocol.cache_salt
    if params.protocol.cache_policy == "salt" or arm.external:
        return f"{arm.lid}-l{level}-{nonce}"
    return None


def stamp(arm: Arm, replicate: int, block: str, i: int, level: LoadLevel) -> dict[str, Any]:
    """The block and level fields stamped on every record of an arm at one level."""
    return {
        "replicate": replicate,
        "block": block,
        "level": i,
        "request_rate": level.request_rate,
        "concurrency": level.concurrency,
    }
