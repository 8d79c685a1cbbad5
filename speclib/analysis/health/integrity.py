"""Whether a run folder's records are whole, checked before anything is decided from them.

A verdict is only as good as the records under it. Before the analysis decides, this module
checks what a run wrote against what the run itself says it wrote:

- every line of ``requests.jsonl`` parses (a damaged line is named as ``file:line``) and the
  file holds measured requests; so does every line of the other JSON-lines files the
  analysis reads (each launch's ``cpu.jsonl`` and ``memory.jsonl``, a multi-turn history,
  output scores);
- ``manifest.json`` is readable, and ``launches/`` is present when the folder is a kit run;
- every replicate block of the design (the manifest's ``blocks``) has a ``status.json`` for
  each of its launches;
- each launch's ``status.json`` request counts (``n_ok``, ``n_failed``) match the measured
  records of that launch in ``requests.jsonl``.

:func:`check_integrity` returns a frozen :class:`Integrity`; ``problems`` empty means whole.
A folder that holds only ``requests.jsonl`` (records measured elsewhere, described by a
params file) has no launch evidence to check; it is ``records_only`` and says so. A kit run
(a folder with ``launches/``) without its manifest is not whole: the manifest holds the
design and its blocks, without which the run's design would be guessed; a manifest that is
there but unreadable is a problem, and ``launches/`` must be there when the manifest's
design lists blocks. A folder with no measured record at all cannot be decided, even with
``--allow-incomplete`` (:func:`require_whole`).

The records read on the way are summed up too (``measured``, the ``series`` and prompt
``categories`` they name), so a caller can check them against params (records of another
experiment) without reading the file again.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.rundir import RunDir

__all__ = ["Integrity", "RunNotWhole", "check_integrity", "require_whole"]

_MAX_LISTED = 12
"""Problems listed one per line in an error; the rest are counted (one screen)."""


class RunNotWhole(ValueError):
    """A run folder's records are not whole; the message lists what is missing or damaged
    and what to do."""


@dataclass(frozen=True)
class Integrity:
    """What a run folder is missing or has damaged (empty ``problems``: whole).

    ``records_only``: the folder holds records but neither a manifest nor ``launches/``
    (measured elsewhere); the launch checks do not apply and the outputs say so.
    ``allowed``: decided although not whole (``--allow-incomplete``)."""

    problems: tuple[str, ...] = ()
    records_only: bool = False
    allowed: bool = False
    measured: int = 0
    """Measured records read (every launch, ok or failed)."""
    series: tuple[str, ...] = ()
    """The series (arms) the measured records name, sorted."""
    categories: tuple[str, ...] = ()
    """The prompt categories the measured records name, sorted."""

    @property
    def whole(self) -> bool:
        """No record is missing or damaged."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The ``integrity`` entry of ``summary.json``."""
        return {
            "whole": self.whole,
            "missing": list(self.problems),
            "records_only": self.records_only,
            "decided_incomplete": bool(self.problems) and self.allowed,
        }

    def message(self, run_dir: Path) -> str:
        """One screen: what is not whole, that nothing was written, and what to do."""
        shown = list(self.problems[:_MAX_LISTED])
        more = len(self.problems) - len(shown)
        lines = [f"{run_dir}: the run's records are not whole ({len(self.problems)} problem(s)):"]
        lines += [f"  - {p}" for p in shown]
        if more:
            lines.append(f"  … and {more} more")
        lines.append(
            "nothing was written (an earlier summary.json and report.html are kept as they are). "
            "Restore the named files from a copy of the run folder, or decide on what is "
            "there with --allow-incomplete (every output then says what is missing)."
        )
        return "\n".join(lines)


def _read_json(path: Path) -> tuple[Any, str | None]:
    """A JSON file's content, or why it cannot be read (one line)."""
    try:
        text = path.read_text("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror})"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"


@dataclass
class _Seen:
    """What the measured records name (built while reading them)."""

    series: set[str]
    categories: set[str]


def _records(rd: RunDir) -> tuple[Counter[tuple[str, bool]], list[str], _Seen]:
    """Measured requests per (launch, ok), every damaged line as ``file:line``, and the
    series and categories the measured records name."""
    counts: Counter[tuple[str, bool]] = Counter()
    problems: list[str] = []
    seen = _Seen(set(), set())
    name = rd.requests.name
    try:
        raw = rd.requests.read_bytes()
    except FileNotFoundError:
        return counts, [f"{name}: missing (the run's per-request records)"], seen
    except OSError as exc:
        return counts, [f"{name}: cannot be read ({exc.strerror})"], seen
    for i, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            problems.append(f"{name}:{i}: not UTF-8 text (byte {exc.start + 1} of the line)")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{name}:{i}: not a JSON record ({exc.msg}, column {exc.colno})")
            continue
        if not isinstance(data, dict):
            problems.append(f"{name}:{i}: not a JSON object ({type(data).__name__})")
            continue
        if data.get("phase", "measure") == "measure":
            counts[(str(data.get("launch_id")), bool(data.get("ok")))] += 1
            seen.series.add(str(data.get("series")))
            if data.get("category") is not None:
                seen.categories.add(str(data.get("category")))
    if not problems and not counts:
        problems.append(f"{name}: holds no measured request (an empty or emptied file)")
    return counts, problems, seen


def _jsonl_problems(rd: RunDir) -> list[str]:
    """Every damaged line of the other JSON-lines files the analysis reads (each launch's
    CPU and memory samples, a multi-turn history, output scores)."""
    paths = [rd.turn_history, rd.output_scores]
    for folder in sorted(rd.launches.glob("*/")):
        files = rd.launch_files(folder.name)
        paths += [files.cpu, files.memory]
    problems = []
    for path in paths:
        try:
            raw = path.read_bytes()
        except OSError:
            continue  # absent: optional files
        rel = path.relative_to(rd.root)
        for i, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                problems.append(f"{rel}:{i}: not a JSON record")
                break  # one per file is enough to name it
    return problems


def _statuses(
    rd: RunDir, measured: set[str], planned: set[str]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every launch's ``status.json`` by launch id, and the unreadable or missing ones.

    A launch folder without ``status.json`` is missing one only when the run measured it:
    it has records (``measured``). One the design names (``planned``) is reported by
    :func:`_block_problems`; any other is an auxiliary server's (the sampled run's scoring
    server, a null check), which measures nothing and writes no status."""
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for folder in sorted(p for p in rd.launches.iterdir() if p.is_dir()):
        path = rd.status_path(folder.name)
        rel = path.relative_to(rd.root)
        if not path.exists():
            if folder.name in measured and folder.name not in planned:
                problems.append(f"{rel}: missing (the launch's outcome and request counts)")
            continue
        data, why = _read_json(path)
        if why or not isinstance(data, dict):
            problems.append(f"{rel}: {why or 'not a JSON object'}")
            continue
        found[folder.name] = data
    return found, problems


def _block_problems(manifest: dict[str, Any], statuses: dict[str, Any], rd: RunDir) -> list[str]:
    """Every block of the design has a ``status.json`` for each of its launches."""
    problems = []
    for block in manifest.get("blocks") or []:
        missing = [lid for lid in block.get("launch_ids") or [] if lid not in statuses]
        for lid in missing:
            if rd.status_path(lid).exists():
                continue  # unreadable: named by _statuses
            problems.append(
                f"block {block.get('block')}: launch {lid} has no "
                f"launches/{lid}/status.json (its server's records and evidence)"
            )
    return problems


def _count_problems(
    statuses: dict[str, dict[str, Any]], counts: Counter, *, planned: bool
) -> list[str]:
    """Each launch's ``status.json`` counts against its measured records; with a design
    (``planned``), records of a launch with no ``status.json`` too."""
    problems = []
    for lid, status in statuses.items():
        want_ok, want_failed = status.get("n_ok"), status.get("n_failed")
        if want_ok is None or want_failed is None:
            continue  # a status from before the counts were recorded
        got_ok, got_failed = counts.get((lid, True), 0), counts.get((lid, False), 0)
        if not status.get("ok", True):  # a launch that failed mid-way: the requests cut
            want_failed = got_failed  # off by its crash are recorded after its status
        if (got_ok, got_failed) != (int(want_ok), int(want_failed)):
            problems.append(
                f"launch {lid}: status.json counts {want_ok} ok + {want_failed} failed "
                f"measured requests, requests.jsonl holds {got_ok} ok + {got_failed} failed"
            )
    known = set(statuses)
    strays = sorted({lid for lid, _ in counts} - known)
    if known and strays and planned:
        problems.append(
            f"requests.jsonl: records of launch(es) {', '.join(strays)} with no status.json"
        )
    return problems


def check_integrity(
    run_dir: str | os.PathLike[str], *, allowed: bool = False, records: bool = True
) -> Integrity:
    """Check a run folder's records against what the run says it wrote (module docstring).

    ``allowed``: the caller decides on what is there anyway (recorded in the result).
    ``records``: also read every line of ``requests.jsonl`` (the slow part on large runs).
    """
    rd = RunDir.at(run_dir)
    counts, problems, seen = _records(rd) if records else (Counter(), [], _Seen(set(), set()))
    problems += _jsonl_problems(rd) if records else []
    has_manifest = rd.manifest.exists()
    has_launches = rd.launches.is_dir()
    read = {
        "allowed": allowed,
        "measured": sum(counts.values()),
        "series": tuple(sorted(seen.series)),
        "categories": tuple(sorted(seen.categories)),
    }
    if not has_manifest and not has_launches:
        return Integrity(tuple(problems), records_only=True, **read)
    manifest: dict[str, Any] = {}
    if not has_manifest:
        problems.append(
            f"{rd.manifest.name}: missing (the run's design, its blocks, where and with what "
            "it ran); without it the design would be guessed"
        )
    else:
        data, why = _read_json(rd.manifest)
        if why or not isinstance(data, dict):
            problems.append(
                f"{rd.manifest.name}: {why or 'not a JSON object'} (the design, its blocks "
                "and warnings)"
            )
        else:
            manifest = data
    if not has_launches and not manifest.get("blocks") and not problems:
        return Integrity((), records_only=True, **read)  # a manifest with no design
    if not has_launches:
        problems.append("launches/: missing (every launch's status, counters, logs and mode check)")
        return Integrity(tuple(problems), **read)
    planned = {
        lid for block in manifest.get("blocks") or [] for lid in block.get("launch_ids") or []
    }
    statuses, unreadable = _statuses(rd, {lid for lid, _ in counts}, planned)
    problems += unreadable
    problems += _block_problems(manifest, statuses, rd)
    if records:
        problems += _count_problems(statuses, counts, planned=bool(manifest.get("blocks")))
    return Integrity(tuple(problems), **read)


def require_whole(run_dir: str | os.PathLike[str], *, allow_incomplete: bool) -> Integrity:
    """:func:`check_integrity`, raising :class:`RunNotWhole` unless ``allow_incomplete``;
    a folder with no measured record is refused even then: there is nothing to decide on."""
    found = check_integrity(run_dir, allowed=allow_incomplete)
    root = RunDir.at(run_dir).root
    if found.problems and not allow_incomplete:
        raise RunNotWhole(found.message(root))
    if not found.measured:
        raise RunNotWhole(
            f"{root}: no measured request can be read from its records, so there is nothing "
            "to decide, even with --allow-incomplete:\n"
            + "\n".join(f"  - {p}" for p in found.problems[:_MAX_LISTED])
            + "\nnothing was written (an earlier summary.json and report.html are kept as "
            "they are); restore requests.jsonl from a copy of the run folder"
        )
    return found
