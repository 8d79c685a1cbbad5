"""Running the replicate blocks of a run as Ray tasks (``protocol.executor: ray``).

Each block is one Ray task in its own placement group: one bundle, packed on one host,
holding the CPUs and GPUs the block's servers need (:func:`block_resources`). Blocks run in
parallel wherever the cluster has room. On the worker the task runs the very code a local
run runs for a block (:func:`speclib.app.block_loop.execute_block`: the ``10_series`` notebook,
then reaping) into a temporary run folder that holds the run's params record (handed to the
task: the worker needs no params file), and returns the block's records and files
(:func:`block_task`). The driver writes them into the one run folder (:func:`merge_block`):
records appended to ``requests.jsonl`` in one place, each stamped with the worker's host;
``launches/<id>/`` and the executed notebook copied. A block runs on one host, so every
pair of the analysis (control vs arm, within a block) is measured on one host.

Interruption: Ctrl-C or SIGTERM of the driver cancels every pending task with
``ray.cancel(force=True)``. The worker process is killed; its notebook kernel sees its
parent change and exits; that closes the pipe of each server's supervisor
(:mod:`speclib.serve.supervisor`), which kills the server's tree. A cancelled block's
records die with the worker's temporary folder: each of its launches gets a failed
``status.json`` saying so, and the manifest's ``executor`` section says which blocks were
kept (resume), done, failed or cancelled. ``--resume`` runs the unfinished ones again whole.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from speclib.app.block_loop import LocalBlocks, execute_block, prepare_block, report_block
from speclib.app.run_folder import ReadyRun
from speclib.core.jsonutil import json_lines
from speclib.core.records import RequestRecord, record_to_json
from speclib.core.rundir import RunDir
from speclib.params.experiment import ExperimentParams
from speclib.run.launch_record import mark_unfinished, stamp_status
from speclib.run.launching import is_external
from speclib.run.manifest import update_manifest

__all__ = ["RayExecutor", "block_resources", "block_task", "merge_block"]

_COPIED = ("launches", "notebooks")  # the folders a block writes, copied back to the driver
_POLL_S = 0.5


def block_resources(
    params: ExperimentParams, block: dict[str, Any], *, cluster_gpus: float
) -> dict[str, float]:
    """The bundle one block reserves: ``ray_cpus_per_server`` per kit-started server (at
    least one share, for the client), and ``ray_gpus_per_block`` GPUs (unset: the target's
    ``tensor_parallel_size`` when the cluster has GPUs). The servers of a block share its
    GPUs, each with its ``gpu_memory_utilization`` share, as they do on one host."""
    proto = params.protocol
    servers = sum(not is_external(params, params.series_by_name(n)) for n in block["arms"])
    bundle = {"CPU": proto.ray_cpus_per_server * max(servers, 1)}
    gpus = proto.ray_gpus_per_block
    if gpus is None:
        gpus = float(params.server.tensor_parallel_size) if cluster_gpus and servers else 0.0
    if gpus:
        bundle["GPU"] = float(gpus)
    return bundle


def block_task(record: str, block: dict[str, Any], design: str) -> dict[str, Any]:
    """On a Ray worker: run one block into a temporary run folder and return what it wrote.

    ``record``: the run's ``params.resolved.json`` (its text), written into that folder.

    Returns ``host``, ``node_id``, ``errors`` (``launch_id: error`` of failed launches),
    ``requests`` (the block's ``requests.jsonl`` text) and ``files`` (relative path → bytes
    of everything under ``launches/`` and ``notebooks/``). The folder is removed after.
    """
    import ray

    tmp = Path(tempfile.mkdtemp(prefix="speclib-ray-"))
    try:
        rd = RunDir.at(tmp)
        rd.params_resolved.write_text(record, encoding="utf-8")
        errors = execute_block(rd, block, design)
        files = {}
        for path in sorted(tmp.rglob("*")):
            rel = path.relative_to(tmp)
            if path.is_file() and rel.parts[0] in _COPIED and path.suffix not in (".tmp", ".pid"):
                files[rel.as_posix()] = path.read_bytes()
        return {
            "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "worker_pid": os.getpid(),
            "errors": errors,
            "requests": rd.requests.read_text("utf-8") if rd.requests.exists() else "",
            "files": files,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def merge_block(rd: RunDir, block: dict[str, Any], result: dict[str, Any]) -> int:
    """Write one finished block's records and files into the run folder; records written.

    Records are appended to ``requests.jsonl`` with ``host`` set to the worker's host; each
    launch's ``status.json`` gets ``extra.ray`` (host, node id).
    """
    lines = [
        record_to_json(replace(RequestRecord.from_json(data), host=result["host"]))
        for data in json_lines(result["requests"].splitlines())
    ]
    if lines:
        with rd.requests.open("a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
    for rel, data in result["files"].items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or parts[0] not in _COPIED:
            raise ValueError(f"a Ray task returned a file outside the run folder: {rel!r}")
        dest = rd.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
    where = {"host": result["host"], "node_id": result["node_id"]}
    for lid in block["launch_ids"]:
        stamp_status(rd, lid, ray=where)
    return len(lines)


class RayExecutor(LocalBlocks):
    """The blocks step of one run as Ray tasks: connection, one task per block, merge,
    cancel, shutdown.

    Use as a context manager, as :class:`~speclib.app.block_loop.LocalBlocks`, whose
    :meth:`~speclib.app.block_loop.LocalBlocks.run_all` it keeps: :meth:`planned_blocks`
    runs the planned blocks in parallel; :meth:`run_one` (one block, waited for) runs the
    blocks added by run-until-decided.
    """

    def __init__(self, run: ReadyRun, *, log: Callable[[str], None]) -> None:
        super().__init__(run, log=log)
        self.record = run.rd.params_resolved.read_text("utf-8")  # what every task is handed
        self.own_cluster = False
        self.cluster_gpus = 0.0
        self.states: dict[str, dict[str, Any]] = {}
        self.groups: list[Any] = []

    def __enter__(self) -> RayExecutor:
        import ray

        address = self.run.params.protocol.ray_address
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            self.own_cluster = True
        resources = ray.cluster_resources()
        self.cluster_gpus = float(resources.get("GPU", 0))
        where = address or "a local Ray instance"
        cpus, gpus = resources.get("CPU", 0), self.cluster_gpus
        self.log(f"executor ray: {where} ({cpus:g} CPU, {gpus:g} GPU in the cluster)")
        return self

    def __exit__(self, *exc: object) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        try:
            self._write_states()
        finally:
            for pg in self.groups:
                try:
                    remove_placement_group(pg)
                except Exception:  # the cluster went away already
                    continue
            if self.own_cluster:
                ray.shutdown()
            super().__exit__(*exc)

    def _submit(self, block: dict[str, Any]) -> Any:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = block_resources(self.run.params, block, cluster_gpus=self.cluster_gpus)
        pg = placement_group([bundle], strategy="STRICT_PACK", name=f"speclib-{block['block']}")
        self.groups.append(pg)
        task = ray.remote(block_task).options(
            num_cpus=bundle["CPU"],
            num_gpus=bundle.get("GPU", 0),
            max_retries=0,
            name=f"speclib-block-{block['block']}",
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
        )
        self.states[block["block"]] = {"state": "submitted", "resources": bundle}
        self.log(f"block {block['block']}: Ray task submitted, reserving {bundle}")
        return task.remote(self.record, block, self.run.plan.design)

    def _finish(self, ref: Any, block: dict[str, Any]) -> list[str]:
        """Merge a finished task's block into the run folder; ``launch_id: error`` failures."""
        import ray

        name, state = block["block"], self.states[block["block"]]
        try:
            result = ray.get(ref)
        except Exception as exc:  # the task or its worker died: the block failed whole
            why = f"Ray task of block {name} failed: {type(exc).__name__}: {exc}"[-4000:]
            self._mark_unfinished(block, why, "failed")
            return [f"{lid}: {why}" for lid in block["launch_ids"]]
        n = merge_block(self.run.rd, block, result)
        state.update(
            state="done" if not result["errors"] else "failed",
            host=result["host"],
            node_id=result["node_id"],
            records=n,
        )
        self._write_states()
        self.log(f"block {name}: {n} records from {result['host']} merged into the run folder")
        return list(result["errors"])

    def _mark_unfinished(self, block: dict[str, Any], why: str, state: str) -> None:
        mark_unfinished(self.run.rd, self.run.params, block, self.run.plan.design, why)
        self.states[block["block"]].update(state=state, why=why)
        self._write_states()

    def _write_states(self) -> None:
        section = {"executor": "ray", "address": self.run.params.protocol.ray_address}
        update_manifest(self.run.rd, executor={**section, "blocks": self.states})

    def planned_blocks(self, *, interrupted: Callable[[], bool]) -> list[str]:
        """The blocks setup planned, as parallel Ray tasks; failed launch ids. Blocks a
        resumed run finished are kept. An interrupt cancels every unfinished task and is
        re-raised."""
        import ray

        pending: dict[Any, dict[str, Any]] = {}
        failed: list[str] = []
        try:
            for block in self.run.plan.blocks:
                if prepare_block(self.run.rd, block, resume=self.run.resume, log=self.log):
                    pending[self._submit(block)] = block
                else:
                    self.states[block["block"]] = {"state": "kept"}
            while pending:
                if interrupted():
                    raise KeyboardInterrupt("interrupted while Ray tasks ran")
                done, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
                for ref in done:
                    block = pending.pop(ref)
                    failed += report_block(block, self._finish(ref, block), log=self.log)
        except BaseException as exc:
            self._cancel(pending, exc)
            raise
        return failed

    def run_one(self, block: dict[str, Any]) -> list[str]:
        """Run one block as a Ray task and wait for it (a ``BlockExecutor``)."""
        import ray

        ref = self._submit(block)
        try:
            while not ray.wait([ref], timeout=_POLL_S)[0]:
                pass
        except BaseException as exc:
            self._cancel({ref: block}, exc)
            raise
        return self._finish(ref, block)

    def _cancel(self, pending: dict[Any, dict[str, Any]], exc: BaseException) -> None:
        """Force-cancel every unfinished task; its launches get a failed status saying why."""
        import ray

        for ref in pending:
            ray.cancel(ref, force=True)
        why = (
            f"cancelled: the run was interrupted ({type(exc).__name__}) while this block ran "
            "as a Ray task; its records were not kept (the worker's temporary run folder is "
            "gone): run it again with --resume"
        )
        for block in pending.values():
            self._mark_unfinished(block, why, "cancelled")
            self.log(f"block {block['block']}: Ray task cancelled, its records were not kept")
