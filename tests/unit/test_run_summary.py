"""summary.json's typed model: the one writer and the one reader (speclib.core.run_summary).

Every summary stored in the repository (the stand-in fixture, written before the answer and
integrity existed, and the GPU evidence, as run and as re-analysed) reads into the model
and writes back byte for byte; fields the model does not declare survive a round trip; a
missing, unreadable or malformed file is one error that names the file and the field,
whichever reader meets it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclib.core.run_summary import (
    ComparisonEntry,
    GateEntry,
    SummaryError,
    SummaryNotFound,
    read_summary,
    write_summary,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
STORED = sorted(
    [
        REPO / "tests/fixtures/run-standin-summary.json",
        *REPO.glob("evidence/*/summary.json"),
        *REPO.glob("evidence/*/reanalysis/summary.json"),
    ]
)


def test_the_stored_summaries_are_there() -> None:
    assert len(STORED) >= 6, STORED


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_stored_summary_round_trips_byte_for_byte(path: Path, tmp_path: Path) -> None:
    summary = read_summary(path)
    out = write_summary(tmp_path / "summary.json", summary)
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(REPO)))
def test_the_typed_fields_are_the_files_values(path: Path) -> None:
    raw = json.loads(path.read_text("utf-8"))
    summary = read_summary(path)
    assert summary.experiment == raw["experiment"] and summary.control == raw["control"]
    assert summary.analysis.margin == raw["analysis"]["margin"]
    assert len(summary.comparisons) == len(raw["comparisons"]) > 0
    for typed, c in zip(summary.comparisons, raw["comparisons"], strict=True):
        assert isinstance(typed, ComparisonEntry)
        assert (typed.experiment, typed.load, typed.decision) == (
            c["experiment"], c["load"], c["decision"])  # fmt: skip
        assert typed.tpot_ratio == c["tpot_ratio"] and typed.tpot_ratio_ci == c["tpot_ratio_ci"]
        assert [(g.name, g.status, g.passed) for g in typed.gates] == [
            (g["name"], g["status"], g["passed"]) for g in c["gates"]]  # fmt: skip
        assert all(isinstance(g, GateEntry) for g in typed.gates)
    assert [c.experiment for c in summary.experiments] == [
        c["experiment"] for c in raw["comparisons"] if c["role"] != "aa"]  # fmt: skip
    checks = raw["bench_trust"]["checks"]
    assert [(c.check, c.status) for c in summary.bench_trust.checks] == [
        (c["check"], c["status"]) for c in checks]  # fmt: skip


def test_a_summary_from_an_older_kit_reads_with_defaults_and_gains_nothing(tmp_path) -> None:
    old = REPO / "tests/fixtures/run-standin-summary.json"
    raw = json.loads(old.read_text("utf-8"))
    assert "answer" not in raw and "integrity" not in raw
    summary = read_summary(old)
    assert summary.answer is None and summary.integrity.whole and summary.redecision is None
    assert set(json.loads(write_summary(tmp_path / "s.json", summary).read_text())) == set(raw)


def test_fields_the_model_does_not_declare_are_kept(tmp_path: Path) -> None:
    data = {
        "kit": "speclib",
        "stop_reason": {"code": "decided", "look": 2},  # a field another part may add
        "comparisons": [{"experiment": "spec", "look_ratio": 0.9, "decision": "adopt"}],
    }
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    summary = read_summary(path)
    assert summary.model_extra == {"stop_reason": {"code": "decided", "look": 2}}
    assert summary.comparisons[0].model_extra == {"look_ratio": 0.9}
    assert summary.comparisons[0].decision == "adopt"
    again = write_summary(tmp_path / "again.json", summary)
    assert json.loads(again.read_text()) == data


def test_a_missing_summary_is_not_found_and_says_to_analyse(tmp_path: Path) -> None:
    with pytest.raises(SummaryNotFound, match=r"holds no summary\.json: run `speclib analyze"):
        read_summary(tmp_path / "summary.json")
    assert issubclass(SummaryNotFound, FileNotFoundError)
    assert issubclass(SummaryNotFound, SummaryError) and issubclass(SummaryError, ValueError)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "does not hold a JSON object"),
        ('{"comparisons": "none"}', r"comparisons: Input should be a valid list"),
        ('{"comparisons": [{"load": "c=1"}]}', r"comparisons\[0\]\.experiment: Field required"),
        (
            '{"comparisons": [{"experiment": "x", "gates": [{"name": "ttft", "status": 3}]}]}',
            r"comparisons\[0\]\.gates\[0\]\.status",
        ),
        ('{"integrity": {"missing": "a"}, "analysis": []}', r"and 1 more"),
    ],
)
def test_a_malformed_summary_is_one_error_naming_the_file_and_field(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "summary.json"
    path.write_text(content)
    with pytest.raises(SummaryError, match=message) as err:
        read_summary(path)
    assert str(path) in str(err.value)


def test_compare_and_the_terminal_meet_the_same_error(tmp_path: Path, capsys) -> None:
    from speclib.app.cli import main
    from speclib.report.multirun import compare_runs

    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(SummaryNotFound):
        compare_runs([run])
    (run / "summary.json").write_text('{"comparisons": {}}')
    assert main(["compare", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: summary {run / 'summary.json'} is not a speclib summary")
    assert "comparisons" in err
