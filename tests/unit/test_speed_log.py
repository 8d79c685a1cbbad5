"""vLLM's log lines that bear on speed, found per launch and gathered per series."""

from __future__ import annotations

from speclib.analysis.speculation.speed_log import kv_concurrency, series_speed_lines, speed_lines

PREFIX = "\x1b[0;36m(EngineCore pid=4242)\x1b[0;0m \x1b[33mWARNING\x1b[0m 12-02 10:00:00 [x.py:7] "
DRAFT_LOG = "\n".join(
    PREFIX + line
    for line in (
        "Async scheduling not supported with draft_model-based speculative decoding and will "
        "be disabled.",
        "Model Runner V2 does not yet support speculative method 'draft_model'; using the V1 "
        "model runner",
        "Triton kernel JIT compilation during inference: rejection_greedy_sample_kernel.",
        "Kernel JIT monitor activated; monitored JIT compilations during inference will warn.",
        "Maximum concurrency for 2,048 tokens per request: 12.50x",
        "Loading weights took 3.1 seconds",
    )
)
CONTROL_LOG = PREFIX + "Maximum concurrency for 2,048 tokens per request: 67.41x"


def test_each_line_that_bears_on_speed_is_found_without_its_prefix() -> None:
    kinds = [x.kind for x in speed_lines(DRAFT_LOG)]
    assert kinds == [
        "async scheduling off",
        "model runner fallback",
        "kernels compiled during requests",
    ]
    assert all("pid=" not in x.line and "\x1b" not in x.line for x in speed_lines(DRAFT_LOG))


def test_a_kv_cache_below_the_load_is_named_with_its_numbers() -> None:
    assert kv_concurrency(DRAFT_LOG) == (2048, 12.5)
    (kv,) = [x for x in speed_lines(DRAFT_LOG, max_concurrency=32) if x.kind.startswith("KV")]
    assert "holds 12.5 requests of 2,048 tokens, fewer than the 32 in flight" in kv.meaning
    assert not [x for x in speed_lines(CONTROL_LOG, max_concurrency=32) if x.kind.startswith("KV")]
    short = speed_lines(DRAFT_LOG, max_concurrency=32, request_tokens=512)  # 25,600 / 512 = 50
    assert not [x for x in short if x.kind.startswith("KV")]


def test_per_series_lines_count_launches_and_drop_what_the_control_logs_too() -> None:
    shared = PREFIX + "Enforce eager set, disabling torch.compile, CUDAGraphs"
    logs = [
        ("control", CONTROL_LOG + "\n" + shared),
        ("draft", DRAFT_LOG + "\n" + shared.replace("4242", "77")),
        ("draft", DRAFT_LOG.replace("4242", "99")),
    ]
    got = series_speed_lines(logs, max_concurrency=8, control="control")
    assert [x["kind"] for x in got["control"]] == ["no CUDA graphs"]
    assert [(x["kind"], x["launches"]) for x in got["draft"]] == [
        ("async scheduling off", 2),
        ("model runner fallback", 2),
        ("kernels compiled during requests", 2),
    ]
