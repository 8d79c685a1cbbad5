"""The run folder: where every file of a run lives, and small readers for them.

Every file and folder a run writes is one member of :class:`RunDir` (the run folder) or
:class:`LaunchDir` (one server launch's folder, ``launches/<launch_id>/``) that returns its
path; the member's docstring says what it holds and who writes it. No other module joins
a run folder's names by hand. ``docs/run-folder.md`` is generated from these members (and
from ``summary.json``'s model, :mod:`speclib.core.run_summary`) by
``scripts/make_run_folder_doc.py``: add a file here, with its docstring, and regenerate.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.fspaths import resolved

__all__ = [
    "ACCEPTANCE_REPLAY_FILE",
    "DIVERGENCES_FILE",
    "OUTPUT_SCORES_FILE",
    "SCORING_LAUNCH",
    "TURN_HISTORY_FILE",
    "LaunchDir",
    "RunDir",
    "failure_headline",
    "launch_id",
    "place_problem",
    "write_json_atomic",
]

OUTPUT_SCORES_FILE = "output_scores.jsonl"
"""Sampled runs: the target's log-probability of every output (one JSON line each)."""
DIVERGENCES_FILE = "divergences.jsonl"
"""Greedy runs: the target's log-probabilities of both tokens where an answer diverged."""
ACCEPTANCE_REPLAY_FILE = "acceptance_replay.json"
"""A draft's acceptance per launch counted outside vLLM (``speclib replay-acceptance``)."""
TURN_HISTORY_FILE = "turn_history.jsonl"
"""Multi-turn runs: the earlier turns' answers every arm is fed (one JSON line each)."""
SCORING_LAUNCH = "scoring"
"""The launch id of a sampled run's scoring server (the target without speculation)."""


def failure_headline(status: dict[str, Any], fallback: str = "launch failed") -> str:
    """One line for a failed launch's ``status.json``: its error's first line, or, when the
    kit found the server's own exception line (``error_cause``), the part before the first
    colon followed by that line. The runner's log and the progress display both print it,
    and whichever prints first names vLLM's own error."""
    first = str(status.get("error") or fallback).splitlines()[0][:300]
    cause = status.get("error_cause")
    return f"{first.split(':', 1)[0]}: {cause}" if cause else first


def launch_id(series: str, replicate: int, level: int | None = None) -> str:
    """The id of one server launch: ``<series>-r<replicate>`` (``-c<level>`` for sweeps)."""
    base = f"{series}-r{replicate}"
    return base if level is None else f"{base}-l{level}"


_SYSTEM_TREES = tuple(
    Path(p)
    for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
              "/run", "/sbin", "/sys", "/usr")
)  # fmt: skip
"""The operating system's own folders: a run folder is never in one."""
_SHARED_TOPS = tuple(
    Path(p) for p in ("/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var")
)
"""Top-level folders that hold everyone's files: a run folder may be inside, not one of them."""
_NAME_MAX = 255


def place_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` may not be a run folder, else None: the file system's root, a system
    folder or one inside it, a shared top-level folder (``/tmp``, ``/home``), the home
    folder or one above it, a folder inside another run's folder, or a name longer than a
    file name may be. Whether the folder itself holds a run is the caller's question."""
    p, home = resolved(path), resolved(Path.home())
    if p == Path(p.anchor):
        return f"{p} is the file system's root: name a new folder for the run"
    if any(p == t or t in p.parents for t in _SYSTEM_TREES):
        return f"{p} is a system folder: name a new folder for the run elsewhere"
    if p in _SHARED_TOPS or p == home or p in home.parents:
        return f"{p} holds other files than a run's: name a new folder inside it"
    long = next((part for part in p.parts if len(os.fsencode(part)) > _NAME_MAX), None)
    if long is not None:
        return (
            f"a folder name of {len(os.fsencode(long))} bytes ({long[:24]}…), longer than a "
            f"file name may be ({_NAME_MAX})"
        )
    outer = next((q for q in p.parents if RunDir(q).holds_run()), None)
    if outer is not None:
        return f"{p} is inside the run folder {outer}: name a folder outside it"
    return None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename (no torn files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", "utf-8")
    os.replace(tmp, path)


@dataclass(frozen=True)
class LaunchDir:
    """Paths inside one launch's folder (``launches/<launch_id>/``)."""

    root: Path

    @property
    def server_log(self) -> Path:
        """The server's own output (vLLM's log), as it ran."""
        return self.root / "server.log"

    @property
    def command(self) -> Path:
        """The server's command line (argv, no secrets) and its environment's names."""
        return self.root / "command.json"

    @property
    def status(self) -> Path:
        """The launch's outcome: ok or the error (and vLLM's own exception line), start,
        ready and end times, request counts, its block and design, the mode check, the
        client's loop-lag probe per level, memory."""
        return self.root / "status.json"

    @property
    def memory(self) -> Path:
        """RSS of the server's process tree over time (and GPU memory where there is one)."""
        return self.root / "memory.jsonl"

    @property
    def pidfile(self) -> Path:
        """Present only while this launch's kit-started server runs."""
        return self.root / "server.pid"

    @property
    def cpu(self) -> Path:
        """CPU samples of the server tree, tagged with which arm was serving (interleaved)."""
        return self.root / "cpu.jsonl"

    @property
    def crosscheck(self) -> Path:
        """The vllm bench cross-check of this launch, when on: both tools' figures compared."""
        return self.root / "crosscheck.json"

    @property
    def vllm_bench(self) -> Path:
        """vllm bench's dataset, result and log for the cross-check, when on."""
        return self.root / "vllm_bench"

    @property
    def metrics_before_warmup(self) -> Path:
        """``/metrics`` right after the server was ready, before any warm-up."""
        return self.root / "metrics_before_warmup.prom"

    @property
    def metrics_before(self) -> Path:
        """``/metrics`` before the load levels (after the warm-up)."""
        return self.root / "metrics_before.prom"

    @property
    def metrics_after(self) -> Path:
        """``/metrics`` after the load levels."""
        return self.root / "metrics_after.prom"

    def metrics_level(self, level: int, when: str) -> Path:
        """``/metrics`` around one load level's measured requests; ``when`` is ``before``
        or ``after``."""
        if when not in ("before", "after"):
            raise ValueError(f"`when` must be 'before' or 'after' (got {when!r})")
        return self.root / f"metrics_l{level}_{when}.prom"

    @property
    def vllm_cache(self) -> Path:
        """vLLM's cache for this launch alone (its compiled graphs), when the run does not
        share the kit's cache between launches."""
        return self.root / "vllm-cache"


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run folder."""

    root: Path

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> RunDir:
        return cls(resolved(path))

    @property
    def requests(self) -> Path:
        """One JSON line per request (every series, warm-ups included), appended and flushed
        as each finishes."""
        return self.root / "requests.jsonl"

    @property
    def run_log(self) -> Path:
        """What a detached run (``speclib run --detach``) printed."""
        return self.root / "run.log"

    @property
    def run_lock(self) -> Path:
        """Held (``flock``) by the kit process that owns the folder now: a run, or an
        analysis; it names that process (:mod:`speclib.app.run_lock`)."""
        return self.root / "run.lock"

    def holds_run(self) -> bool:
        """Whether the folder holds a run already (its params record, manifest, records or
        launches), as opposed to nothing or only a detached run's log and the lock."""
        marks = (self.params_resolved, self.manifest, self.requests, self.launches)
        return any(p.exists() for p in marks)

    def is_empty(self) -> bool:
        """No file but a detached run's log and the lock: a run may start here."""
        if not self.root.is_dir():
            return True
        return all(p in (self.run_log, self.run_lock) for p in self.root.iterdir())

    @property
    def manifest(self) -> Path:
        """Provenance: versions (kit, vLLM, torch, Python), CPU/GPU, model hashes or hub
        snapshots, tokenizer and chat-template hashes, the prompt set's hash, sampling, the
        design (interleaved or sequential, and why), the replicate blocks and their
        launches, vocabulary checks, sensitive-prompt warnings, the blocks at least and at
        most and the time budget (``until_decided``, fixed before any block); after the run
        every launch's server command line (secrets redacted), start/ready/end times, and
        how many blocks ran and why the run stopped (``stopping``, a code and its
        numbers); a resumed run keeps all of it and appends each resume's own environment
        to ``resumes`` (time, hardware, versions, vLLM, models, placement, its setup
        notebook)."""
        return self.root / "manifest.json"

    @property
    def summary(self) -> Path:
        """The decision per experiment against the control (its fields: below)."""
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        """The self-contained report: figures embedded, no network fetches, code hidden."""
        return self.root / "report.html"

    @property
    def params_copy(self) -> Path:
        """The params file as given (copied once at the start; holds no secret)."""
        return self.root / "params.yaml"

    @property
    def params_resolved(self) -> Path:
        """The validated params (the prompts' path absolute, ``source`` the file run):
        every later step and notebook reads the params from here."""
        return self.root / "params.resolved.json"

    @property
    def notebooks(self) -> Path:
        """The executed notebooks, with their injected parameters: the record of what ran."""
        return self.root / "notebooks"

    def setup_notebook(self, n: int = 0) -> Path:
        """The executed ``00_setup`` of the run (``n`` 0), or of its ``n``-th resume
        (``00_setup-resume-<n>.ipynb``: a resume never writes over the original's)."""
        return self.notebooks / ("00_setup.ipynb" if n == 0 else f"00_setup-resume-{n}.ipynb")

    @property
    def analysis_notebook(self) -> Path:
        """The executed analysis notebook of the current ``summary.json``."""
        return self.notebooks / "20_analysis.ipynb"

    def series_notebook(self, block: str) -> Path:
        """The executed ``10_series`` notebook of one replicate block."""
        return self.notebooks / f"10_series-{block}.ipynb"

    @property
    def analyses(self) -> Path:
        """Earlier and failed analyses: one folder each, never written over (a kept one
        holds its ``summary.json``, ``report.html`` and ``20_analysis.ipynb``; a failed one
        its notebook and error page)."""
        return self.root / "analyses"

    def analysis_outputs(self) -> tuple[Path, ...]:
        """The files one analysis writes (summary, report, executed notebook)."""
        return (self.summary, self.report, self.analysis_notebook)

    def analysis_staging(self, stamp: str) -> Path:
        """Where a new analysis is written before it replaces the current one (removed once
        it has)."""
        return self.analyses / f".new-{stamp}"

    def analysis_archive(self, stamp: str, *, failed: bool = False) -> Path:
        """A kept analysis: ``analyses/<stamp>/`` (``failed-<stamp>`` for one that failed);
        a suffix ``-2``, ``-3``… when that folder exists already."""
        base = self.analyses / (f"failed-{stamp}" if failed else stamp)
        path, n = base, 1
        while path.exists():
            n += 1
            path = base.with_name(f"{base.name}-{n}")
        return path

    def owns(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is one of this run folder's own files (a record, a log, a
        result: anything already inside the folder)."""
        p = resolved(path)
        return p.exists() and p != self.root and self.root in p.parents

    @property
    def pidfile(self) -> Path:
        """A server pidfile at the run's top level (written by older versions of the kit)."""
        return self.root / "server.pid"

    def pidfiles(self) -> list[Path]:
        """Every server pidfile of the run: one per launch whose server may still run."""
        return [*sorted(self.launches.glob("*/server.pid")), self.pidfile]

    @property
    def scoring_error(self) -> Path:
        """Why the sampling check could not score the outputs (absent when it could)."""
        return self.root / "output_scores.error.txt"

    @property
    def superseded(self) -> Path:
        """Records of unfinished launches moved aside by ``--resume``."""
        return self.root / "requests.superseded.jsonl"

    @property
    def turn_history(self) -> Path:
        """Multi-turn runs: the control's greedy answers to the earlier turns of every
        question, generated once and fed to every arm of every block."""
        return self.root / TURN_HISTORY_FILE

    @property
    def output_scores(self) -> Path:
        """Scores of the outputs by the target without speculation (sampled runs only)."""
        return self.root / OUTPUT_SCORES_FILE

    @property
    def scoring_record(self) -> Path:
        """Sampled runs: how the scoring went (its server's start, outputs scored and
        failed, the errors), beside that server's own launch files."""
        return self.launch(SCORING_LAUNCH) / "scoring.json"

    @property
    def launches(self) -> Path:
        """One folder per server launch (:class:`LaunchDir`)."""
        return self.root / "launches"

    @property
    def divergences(self) -> Path:
        """Greedy runs: the target's log-probabilities of the control's and the arm's token
        at each answer's first divergence (absent when no answer diverged)."""
        return self.root / DIVERGENCES_FILE

    @property
    def divergence_error(self) -> Path:
        """Why the divergences could not be ranked by the target (absent when they could)."""
        return self.root / "divergences.error.txt"

    @property
    def acceptance_replay(self) -> Path:
        """Each draft launch's acceptance counted outside vLLM (``speclib replay-acceptance``)."""
        return self.root / ACCEPTANCE_REPLAY_FILE

    def launch(self, lid: str) -> Path:
        """One launch's folder: ``<series>-r<replicate>`` (``-l<level>`` for a sweep's
        launch per level; ``scoring`` for a sampled run's scoring server)."""
        return self.launches / lid

    def launch_files(self, lid: str) -> LaunchDir:
        """The file names of one launch's folder."""
        return LaunchDir(self.launch(lid))

    def status_path(self, lid: str) -> Path:
        """One launch's ``status.json`` (:attr:`LaunchDir.status`)."""
        return self.launch_files(lid).status

    def read_status(self, lid: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.status_path(lid).read_text("utf-8"))
        except (OSError, ValueError):
            return None

    def statuses(self) -> list[dict[str, Any]]:
        """Every launch's status.json, in launch-start order."""
        out = []
        for path in sorted(self.launches.glob("*/status.json")):
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
