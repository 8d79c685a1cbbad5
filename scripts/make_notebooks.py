"""Regenerate the thin notebooks in notebooks/ (kept in git; edit here, then run this).

``python scripts/make_notebooks.py [OUT_DIR]`` writes ``00_setup``, ``10_series`` and
``20_analysis`` to ``notebooks/`` (or ``OUT_DIR``). Cell ids are derived from the notebook
name and the cell's position, so regenerating an unchanged notebook changes nothing.
Markdown cells tagged ``notebook-only`` are help for JupyterLab users and are left out of
``report.html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

OUT = (
    Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "notebooks"
)
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


def params_cell(src: str) -> nbformat.NotebookNode:
    cell = new_code_cell(src.strip())
    cell.metadata["tags"] = ["parameters"]
    return cell


def help_cell(src: str) -> nbformat.NotebookNode:
    """Markdown shown in JupyterLab only (the report export drops ``notebook-only`` cells)."""
    cell = new_markdown_cell(src.strip())
    cell.metadata["tags"] = ["notebook-only"]
    return cell


def notebook_only_code(src: str) -> nbformat.NotebookNode:
    """A code cell for JupyterLab users (its output is left out of the report)."""
    cell = new_code_cell(src.strip())
    cell.metadata["tags"] = ["notebook-only"]
    return cell


def save(name: str, cells: list[nbformat.NotebookNode]) -> None:
    for i, cell in enumerate(cells):
        cell["id"] = f"{name.replace('_', '-')}-{i}"
    nb = new_notebook(
        cells=cells, metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}}
    )
    OUT.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, OUT / f"{name}.ipynb")


save(
    "00_setup",
    [
        new_markdown_cell(
            "# Setup\nChecks the environment, resolves (or builds) the models, "
            "compares target and draft vocabularies, scans the prompts, chooses the design "
            "(interleaved when all arms fit in memory together) and writes `manifest.json` "
            "with the replicate blocks to run."
        ),
        params_cell("""
run_dir: str = "../runs/interactive"  # run folder to write into
params_file: str = "../params/cpu-demo.yaml"  # params to record in run_dir first ("": the run's)
"""),
        new_code_cell(
            """
from speclib.run.preflight import prepare_run

setup = prepare_run(run_dir, params_file=params_file)  # checks and records params_file
setup
""".strip()
        ),
    ],
)

save(
    "10_series",
    [
        new_markdown_cell(
            "# One replicate block\nStarts the servers of the block's arms together (or "
            "uses their external `base_url`), warms each up, sends every prompt alternating "
            "between arms (interleaved design) or to one arm (sequential), snapshots "
            "`/metrics`, checks each arm's mode and stops the servers."
        ),
        params_cell("""
run_dir: str = "../runs/interactive"  # run folder (its params record; requests.jsonl)
replicate: int = 0  # replicate index of the block (one server per arm and replicate)
arms: str = ""  # names of the arms in this block separated by spaces (empty: every arm)
design: str = "interleaved"  # interleaved: arms alternate per prompt; sequential: one arm
block: str = ""  # block id from the manifest: r0 or r0.1 for a second group (empty means r0)
"""),
        new_code_cell(
            """
from speclib.run.replicate_block import run_block

results = run_block(run_dir, replicate, arms.split(), design=design, block=block)
results
""".strip()
        ),
    ],
)

FIGURE_CELLS = (
    ("sweep_figures", "which k of a tuning sweep (runs with a sweep only)"),
    ("latency_figures", "TTFT, TPOT and end-to-end latency per arm"),
    ("paired_ratio_figures", "per-prompt TPOT ratio, one figure per comparison"),
    ("load_figures", "speed-up against load (several concurrencies only)"),
    ("acceptance_figures", "acceptance by draft position, and against speed-up"),
    ("chunk_figures", "tokens per streamed chunk"),
    ("timeline_figures", "TPOT over the run, and drift when found"),
    ("sampling_figures", "output likelihood under the target (sampled runs only)"),
    ("memory_figures", "server memory per arm"),
)


NEWLINE = "\n"
IMPORT_LINES = NEWLINE.join(f"    {f}," for f, _ in FIGURE_CELLS)


def figure_cell(function: str, what: str) -> nbformat.NotebookNode:
    """One evidence group per cell: change its arguments and re-run this cell alone."""
    return new_code_cell(f"display(*numbers({function}(analysis)))  # {what}")


save(
    "20_analysis",
    [
        help_cell("""
# Analysis and report
Reads a run folder (no server is contacted), decides every experiment against the control
and shows the report: verdict table and conclusion, evidence figures, method and provenance.
Set `run_dir` below to any run folder (`speclib run` writes them under `runs/`), then run
the cells in order. Each figure cell calls one function of `speclib.report.evidence`
(they take the analysis and return captioned figures): change one and re-run that cell
alone. `records` holds one row per request for your own pandas.
"""),
        params_cell("""
run_dir: str = "../runs/cpu-demo"  # run folder holding requests.jsonl (any speclib run)
params_file: str = ""  # optional params file whose analysis settings override the run's
allow_incomplete: bool = False  # decide although records are missing (outputs say what)
summary_file: str = ""  # where to write summary.json (default: run_dir/summary.json)
mix: str = ""  # the user traffic mix, comma separated category shares; empty: workload.mix
"""),
        new_code_cell(
            f"""
from IPython.display import HTML, Markdown, display

from speclib.analysis.run_analysis import analyze_run
from speclib.run.scoring import ensure_scored
from speclib.report.evidence import (
    FigureNumbers,
{IMPORT_LINES}
)
from speclib.report.answers_section import answers_html
from speclib.report.load_section import load_html
from speclib.report.record_notice import record_notice_html
from speclib.report.method import method_html
from speclib.report.why_section import why_html
from speclib.report.forest import forest_figure
from speclib.report.sections import (
    answer_html,
    conclusion_html,
    trust_html,
    verdict_table_html,
)

ensure_scored(run_dir)  # sampled runs: score outputs under the target (once)
analysis = analyze_run(  # writes summary.json; refuses records that are not whole
    run_dir,
    params_file=params_file,
    allow_incomplete=allow_incomplete,
    summary_file=summary_file,
    mix=mix,
)
records = analysis.records  # one row per measured request: explore it with pandas
""".strip()
        ),
        notebook_only_code("records  # the per-request frame every number below comes from"),
        new_code_cell(
            """
numbers = FigureNumbers()  # one figure count for the page
display(  # records not whole or the rule changed (else nothing), the answer, bench trust
    HTML(record_notice_html(analysis)), HTML(answer_html(analysis)), HTML(trust_html(analysis))
)
display(*numbers([forest_figure(analysis)]))  # every arm's interval, the ±δ band, the A/A arm
display(HTML(verdict_table_html(analysis)), HTML(conclusion_html(analysis, headline=False)))
# why this speed-up; what the model answered per kind of prompt; where it stops paying
display(HTML(why_html(analysis)), HTML(answers_html(analysis)), HTML(load_html(analysis)))
display(Markdown("## Evidence"))  # the figures behind the verdicts
""".strip()
        ),
        *(figure_cell(f, what) for f, what in FIGURE_CELLS),
        new_code_cell("display(HTML(method_html(analysis)))"),
    ],
)
print("notebooks written to", OUT)
