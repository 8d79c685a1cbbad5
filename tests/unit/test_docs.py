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


def _span(rows: list[dict]) -> str:
    ratios = sorted(r["tpot_ratio"] for r in rows)
    return f"×{ratios[0]:.2f}–{ratios[-1]:.2f}"


def test_the_readmes_gpu_figures_are_the_committed_runs() -> None:
    """The README's GPU paragraph quotes decisions, TPOT ratios and segment ratios: they are
    the committed runs' summaries (re-analysed with the segment answer)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    loads = ("c=1", "c=8", "c=32")
    h100 = _gpu_comparisons("evidence/gpu-h100/reanalysis/summary.json")
    eagle = [h100["eagle3-k3", c] for c in loads]
    draft = [h100["draft-k3", c] for c in loads]
    ngram = [h100["ngram-k4", c] for c in loads]
    assert all(c["decision"] == "adopt" for c in eagle)
    assert all(c["decision"] == "reject" for c in draft)
    assert all(c["decision"] == "mixed" for c in ngram)
    assert ngram[0]["pooled_decision"] == "adopt"
    assert f"EAGLE-3 k=3 at every load (TPOT {_span(eagle)})" in text
    assert f"draft_model k=3 at every load ({_span(draft)})" in text
    assert f'pooled ×{ngram[0]["tpot_ratio"]:.2f} "adopt" at c=1' in text
    for name in ("echo", "fresh"):
        s = _segment("evidence/gpu-h100/reanalysis/summary.json", "ngram-k4", "c=1", name)
        assert f"×{s['estimate']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]" in text, name
    h200 = _gpu_comparisons("evidence/gpu-h200/reanalysis/summary.json")
    k2 = [h200["draft-k2", c] for c in loads]
    assert all(c["decision"] == "reject" for c in k2)
    assert f"draft_model k=2 was rejected at every load ({_span(k2)})" in text
    n200 = [h200["ngram-k4", c] for c in loads]
    assert [c["decision"] for c in n200] == ["mixed", "mixed", "inconclusive"]
    assert all(c["pooled_decision"] == "inconclusive" for c in n200)
    assert f"pooled {_span(n200)} and inconclusive, is mixed at c = 1 and 8" in text


def test_the_readmes_h100_demo_figures_are_the_committed_run() -> None:
    """The README's sentence on params/gpu-demo.yaml on one H100 80GB quotes the committed
    run's decisions, TPOT ratios and n-gram segments (evidence/gpu-h100-demo)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    path = "evidence/gpu-h100-demo/summary.json"
    runs = _gpu_comparisons(path)
    k4 = [runs["draft-k4", c] for c in ("c=1", "c=8", "c=32")]
    assert all(c["decision"] == "reject" for c in k4)
    assert f"draft_model k=4 was rejected at every load ({_span(k4)})" in text
    k2 = [runs["draft-k2", c] for c in ("c=1", "c=8", "c=32")]
    assert [c["decision"] for c in k2] == ["reject", "inconclusive", "inconclusive"]
    assert f"k=2 at c=1 (×{k2[0]['tpot_ratio']:.2f}; inconclusive at c = 8 and 32)" in text
    ngram = [runs["ngram-k4", c]["decision"] for c in ("c=1", "c=8")]
    assert ngram == ["mixed", "mixed"]
    echo, fresh = (_segment(path, "ngram-k4", "c=1", name) for name in ("echo", "fresh"))
    assert f"(echo ×{echo['estimate']:.2f}, fresh ×{fresh['estimate']:.2f} at c=1)" in text


def test_the_two_commands_are_on_the_readmes_first_screen() -> None:
    """A user looks for how to run it first: both README commands in its first 40 lines."""
    head = README.read_text(encoding="utf-8").splitlines()[:40]
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert any(line.startswith(command) for line in head), f"{command} not in lines 1-40"
