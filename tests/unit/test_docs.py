"""The docs keep their promises: the params reference is the models' own, the README stays a
short guide, and every file it (or a page of docs/) points to exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# repo folders whose paths, written as `code` in the README, must exist
_TRACKED = ("docs/", "scripts/", "params/", "prompts/", "speclib/", "tests/", "notebooks/")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`\s]+)`")


def _generator(name: str = "make_params_doc"):
    path = REPO / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _links(page: Path) -> list[tuple[str, str]]:
    """``(file, anchor)`` of every local markdown link of a page (file "" for the page)."""
    text = page.read_text(encoding="utf-8")
    found = [m.group(1) for m in _LINK.finditer(text)]
    local = [t for t in found if "://" not in t and not t.startswith("mailto:")]
    return [(t.split("#")[0], t.partition("#")[2]) for t in local]


def _local_links(page: Path) -> list[str]:
    return [file for file, _ in _links(page) if file]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        in_code ^= line.startswith("```")
        if not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_params_doc_is_generated_from_the_models() -> None:
    expected = _generator().render()
    committed = (REPO / "docs" / "params.md").read_text(encoding="utf-8")
    assert committed == expected, (
        "docs/params.md differs from the params models: run "
        ".venv/bin/python scripts/make_params_doc.py and commit docs/params.md"
    )


def test_params_doc_has_every_field_of_every_section() -> None:
    gen = _generator()
    text = gen.render()
    for path, model in gen.sections():
        assert (f"## `{path}`" if path else "## Top level") in text
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{path or 'top level'}.{name} missing"
    assert "## `analysis.slo`" in text and "## `series[]`" in text


def test_run_folder_doc_is_generated_from_the_contract() -> None:
    expected = _generator("make_run_folder_doc").render()
    committed = (REPO / "docs" / "run-folder.md").read_text(encoding="utf-8")
    assert committed == expected, (
        "docs/run-folder.md differs from speclib/core/rundir.py, records.py and "
        "run_summary.py: run .venv/bin/python scripts/make_run_folder_doc.py and commit it"
    )


def test_run_folder_doc_lists_every_file_and_every_summary_field() -> None:
    from speclib.core.run_summary import RunSummary
    from speclib.core.rundir import LaunchDir, RunDir

    gen = _generator("make_run_folder_doc")
    text = gen.render()
    listed = dict(gen.files())
    members = [
        m for cls in (RunDir, LaunchDir) for m in vars(cls).values()
        if isinstance(m, property) and m.fget.__annotations__.get("return") == "Path"
    ]  # fmt: skip
    assert len(listed) >= len(members) > 25
    for path in ("requests.jsonl", "run.log", "output_scores.jsonl", "output_scores.error.txt",
                 "requests.superseded.jsonl", "launches/<launch_id>/status.json",
                 "launches/<launch_id>/metrics_l<i>_{before,after}.prom",
                 "notebooks/10_series-<block>.ipynb", "summary.json"):  # fmt: skip
        assert path in listed and f"| `{path}` |" in text, path
    assert "blocks.jsonl" not in text  # nothing writes it
    for path, model in gen.sections(RunSummary):
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"summary.json {path}.{name} missing"

    class Undocumented:
        @property
        def stray(self) -> Path:
            return Path("/RUN_DIR/stray.json")

    with pytest.raises(SystemExit, match="no docstring"):
        gen._members(Undocumented, Undocumented())


def test_readme_is_a_short_guide() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines (at most 300)"


def test_every_file_the_readme_points_to_exists() -> None:
    text = README.read_text(encoding="utf-8")
    targets = _local_links(README)
    targets += [
        m.group(1).rstrip(".,:;)")
        for m in _CODE.finditer(text)
        if m.group(1).startswith(_TRACKED) and "*" not in m.group(1)
    ]
    assert any(t.startswith("docs/") and t.endswith(".md") for t in targets)
    missing = sorted({t for t in targets if not (REPO / t).exists()})
    assert not missing, f"README.md points to missing files: {missing}"


def test_every_link_between_the_docs_pages_resolves() -> None:
    missing = []
    for page in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for file, anchor in _links(page):
            target = page.parent / file if file else page
            if not target.exists():
                missing.append(f"{page.name} → {file}")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                missing.append(f"{page.name} → {file}#{anchor} (no such heading)")
    assert not missing, missing


def _gpu_comparisons(path: str) -> dict[tuple[str, str], dict]:
    import json

    summary = json.loads((REPO / path).read_text(encoding="utf-8"))
    return {(c["experiment"], c["load"]): c for c in summary["comparisons"]}


def _segment(path: str, arm: str, load: str, name: str) -> dict:
    import json

    summary = json.loads((REPO / path).read_text(encoding="utf-8"))
    level = next(a for a in summary["answer"]["arms"] if (a["arm"], a["load"]) == (arm, load))
    return next(s for s in level["segments"] if (s["cut"], s["segment"]) == ("category", name))


# The README's GPU table: (run folder's summary, arm, the row's label), each row's cells at
# c = 1, 8, 32 ("–" where the run had no such load).
GPU_TABLE = (
    ("evidence/gpu-h100/reanalysis/summary.json", "eagle3-k3", "EAGLE-3 k=3"),
    ("evidence/gpu-h100/reanalysis/summary.json", "draft-k3", "draft_model k=3"),
    ("evidence/gpu-h100/reanalysis/summary.json", "ngram-k4", "n-gram k=4"),
    ("evidence/gpu-h100-coder/summary.json", "draft-k3", "draft_model k=3"),
    ("evidence/gpu-h100-mtp/summary.json", "mtp-k3", "MTP k=3"),
    ("evidence/gpu-h200/reanalysis/summary.json", "draft-k2", "draft_model k=2"),
    ("evidence/gpu-h200/reanalysis/summary.json", "ngram-k4", "n-gram k=4"),
)


def _cell(c: dict | None) -> str:
    if c is None:
        return "–"
    word = c["decision"]
    word = f"**{word}**" if word == "mixed" else word
    return f"{word} ×{c['tpot_ratio']:.2f}"


def test_the_readmes_gpu_table_is_the_committed_runs() -> None:
    """Each row of the README's GPU table is its committed run's summary (re-analysed by
    today's kit): the final word and the traffic's TPOT ratio at each load."""
    rows = [
        line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("| ")
    ]
    for path, arm, label in GPU_TABLE:
        runs = _gpu_comparisons(path)
        cells = " | ".join(_cell(runs.get((arm, load))) for load in ("c=1", "c=8", "c=32"))
        assert any(f"| {label} | {cells} |" in row for row in rows), (path, arm, cells)


def test_the_readmes_gpu_sentences_are_the_committed_runs() -> None:
    """The sentences under the table: the n-gram arm's segments on the first H100, its typical
    request at c=1 (the geometric mean the traffic's ratio replaced), the MTP truth check."""
    import json

    text = " ".join(README.read_text(encoding="utf-8").split())
    path = "evidence/gpu-h100/reanalysis/summary.json"
    for name in ("echo", "fresh"):
        s = _segment(path, "ngram-k4", "c=1", name)
        assert f"×{s['estimate']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]" in text, name
    ngram = _gpu_comparisons(path)["ngram-k4", "c=1"]
    typical = ngram["tpot_ratios"]["typical_request"]["estimate"]
    assert ngram["tpot_decision"] == "equivalent"
    assert f'would have said ×{typical:.2f} "adopt" at c=1' in text
    mtp = json.loads((REPO / "evidence/gpu-h100-mtp/summary.json").read_text(encoding="utf-8"))
    truth = mtp["acceptance_truth"]
    assert all(t["measured_drafts"] == t["expected_drafts"] for t in truth)
    assert f"({truth[0]['measured_drafts']:,} drafts per launch)" in text
    demo = _gpu_comparisons("evidence/gpu-h100-demo/reanalysis/summary.json")
    assert all(demo["draft-k4", c]["decision"] == "reject" for c in ("c=1", "c=8", "c=32"))
    assert [demo["ngram-k4", c]["decision"] for c in ("c=1", "c=8")] == ["mixed", "mixed"]
    assert "draft_model k=4 rejected at every load, n-gram mixed at c = 1 and 8" in text


def test_the_two_commands_are_on_the_readmes_first_screen() -> None:
    """A user looks for how to run it first: both README commands in its first 40 lines."""
    head = README.read_text(encoding="utf-8").splitlines()[:40]
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert any(line.startswith(command) for line in head), f"{command} not in lines 1-40"
