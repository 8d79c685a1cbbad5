"""The one entry point through which every part of the kit gets a run's prompts, and the
dispatch from ``workload.format`` to the reader of that format.

``workload.format`` picks the adapter (a dict dispatch table, :data:`ADAPTERS`):

- ``speclib``: the kit's own JSONL (:func:`speclib.core.prompts.load_prompts`, unchanged);
- ``sharegpt``, ``spec-bench`` and ``mt-bench``: the conversation formats
  (:mod:`speclib.core.datasets_conversations`);
- ``jsonl``, ``csv`` and ``hf-disk``: the tabular formats, one row a prompt
  (:mod:`speclib.core.datasets_tabular`).

Nothing is downloaded. A malformed record raises :class:`PromptSetError` naming the file and
the line (JSON list: the record index; CSV: the line; hf-disk: the row) and what is wrong
(the checks every format shares: :mod:`speclib.core.datasets_records`). Ids are the
record's own (stringified) or ``<format>-<index>`` (0-based record index), and must be
unique. :func:`workload_prompts` reads the set, draws the sample
(:mod:`speclib.core.prompt_sampling`) and returns the prompts with their provenance (file
hash, records read and skipped, sampling, how many short) for the manifest.

This module is the public face of prompt-set reading: :class:`ReadOptions` and
:class:`DatasetRead` (defined in :mod:`speclib.core.datasets_records`) are imported from
here too.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from speclib.core.datasets_conversations import read_questions, read_sharegpt
from speclib.core.datasets_records import DatasetRead, ReadOptions, WorkloadSection
from speclib.core.datasets_tabular import read_csv, read_hf_disk, read_jsonl
from speclib.core.prompt_sampling import PromptSample, sample_prompts
from speclib.core.prompts import Prompt, load_prompts

__all__ = [
    "ADAPTERS",
    "DatasetRead",
    "LoadedPrompts",
    "ReadOptions",
    "dataset_sha256",
    "load_workload_prompts",
    "read_dataset",
    "workload_prompts",
]


@dataclass(frozen=True)
class LoadedPrompts:
    """The prompts a run sends, in send order, and where they came from (for the manifest:
    path, format, sha256, records_read, skipped, sample, sample_seed, requested, returned,
    short_by)."""

    prompts: tuple[Prompt, ...]
    provenance: dict[str, Any]


class _HasWorkload(Protocol):
    """What :func:`workload_prompts` needs of an ``ExperimentParams``."""

    @property
    def workload(self) -> WorkloadSection: ...

    def resolve_path(self, value: str) -> Path: ...


def _read_speclib(path: Path, options: ReadOptions) -> DatasetRead:
    prompts = load_prompts(path)
    return DatasetRead(tuple(prompts), records=len(prompts))


ADAPTERS: dict[str, Callable[[Path, ReadOptions], DatasetRead]] = {
    "speclib": _read_speclib,
    "sharegpt": read_sharegpt,
    "spec-bench": functools.partial(read_questions, fmt="spec-bench"),
    "mt-bench": functools.partial(read_questions, fmt="mt-bench"),
    "jsonl": read_jsonl,
    "csv": read_csv,
    "hf-disk": read_hf_disk,
}
"""``workload.format`` → the function reading a whole set in that format."""


def read_dataset(
    path: str | Path, fmt: str = "speclib", *, options: ReadOptions | None = None
) -> DatasetRead:
    """Read the whole prompt set at ``path`` in format ``fmt``; raise :class:`PromptSetError`
    naming the file and line (or record, row) of a malformed record."""
    if fmt not in ADAPTERS:
        raise ValueError(f"`fmt` must be one of {', '.join(ADAPTERS)}, got {fmt!r}")
    return ADAPTERS[fmt](Path(path), options or ReadOptions())


def dataset_sha256(path: str | Path) -> str:
    """SHA-256 of a prompt file's bytes; for a folder, over its files' relative names and
    bytes in sorted order."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        if path.is_dir():
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _provenance(path: Path, fmt: str, read: DatasetRead, sample: PromptSample) -> dict[str, Any]:
    return {
        "path": str(path),
        "sha256": dataset_sha256(path),
        "format": fmt,
        "records_read": read.records,
        "skipped": read.skipped,
        "sample": sample.method,
        "sample_seed": sample.seed,
        "requested": sample.requested,
        "returned": len(sample.prompts),
        "short_by": sample.short_by,
    }


def load_workload_prompts(path: str | Path, workload: WorkloadSection) -> LoadedPrompts:
    """The prompts ``workload`` sends, read from ``path`` (already resolved), with provenance."""
    path = Path(path)
    read = read_dataset(path, workload.format, options=ReadOptions.of(workload))
    sample = sample_prompts(
        read.prompts, workload.num_prompts, method=workload.sample, seed=workload.sample_seed
    )
    return LoadedPrompts(sample.prompts, _provenance(path, workload.format, read, sample))


def workload_prompts(params: _HasWorkload) -> LoadedPrompts:
    """The prompts an experiment sends, in send order, with their provenance: the one entry
    point every caller uses, so every series receives the same prompts in the same order."""
    return load_workload_prompts(params.resolve_path(params.workload.prompts), params.workload)
