"""The run folder: where every file of a run lives, and small readers for them.

Layout (the contract documented in the README)::

    RUN_DIR/
      params.yaml             the params file as given (copied; holds no secret)
      params.resolved.json    the validated params with absolute paths
      manifest.json           provenance: versions, hardware, models, prompts, order, times
      requests.jsonl          one JSON line per request (all series, warm-up included)
      launches/<launch_id>/   server.log, command.json, metrics_*.prom, memory.jsonl,
                              status.json (one folder per server launch)
      notebooks/              the executed notebooks (the record of what ran)
      summary.json            the decision, per experiment against the control
      report.html             the self-contained report
      server.pid              present only while a kit-started server runs
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunDir", "launch_id", "write_json_atomic"]


def launch_id(series: str, replicate: int, level: int | None = None) -> str:
    """The id of one server launch: ``<series>-r<replicate>`` (``-c<level>`` for sweeps)."""
    base = f"{series}-r{replicate}"
    return base if level is None else f"{base}-l{level}"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename (no torn files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", "utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run folder."""

    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> RunDir:
        return cls(Path(path).expanduser().resolve())

    @property
    def requests(self) -> Path:
        return self.root / "requests.jsonl"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def params_copy(self) -> Path:
        return self.root / "params.yaml"

    @property
    def params_resolved(self) -> Path:
        return self.root / "params.resolved.json"

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def pidfile(self) -> Path:
        return self.root / "server.pid"

    def launch(self, lid: str) -> Path:
        return self.root / "launches" / lid

    def status_path(self, lid: str) -> Path:
        return self.launch(lid) / "status.json"

    def read_status(self, lid: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.status_path(lid).read_text("utf-8"))
        except (OSError, ValueError):
            return None

    def statuses(self) -> list[dict[str, Any]]:
        """Every launch's status.json, in launch-start order."""
        out = []
        for path in sorted((self.root / "launches").glob("*/status.json")):
            try:
                out.append(json.loads(path.read_text("utf-8")))
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda s: s.get("started_at") or 0)

    def read_manifest(self) -> dict[str, Any]:
        try:
            return json.loads(self.manifest.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
