"""The streaming client against a real local server that replays scripted SSE streams."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from speclib.core.records import RequestRecord, append_record, e2e_s, read_records, tpot_s, ttft_s
from speclib.measure import (
    RequestSpec,
    RunOutcome,
    build_request_body,
    chat_url,
    run_requests,
    run_requests_sync,
)
from tests.fakeserver import Exchange, FakeServer, Script, token_id, token_text

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

TOL_S = 0.005  # measured vs true send time on loopback (median chunk)
WORST_S = 0.03  # any single chunk, leaving room for a loaded CI machine
SPEC = {
    "mean_acceptance_length": 3.2,
    "draft_acceptance_rate": 0.55,
    "acceptance_histogram": [1, 2, 3, 4, 5],
    "num_spec_steps": 5,
    "num_accepted_draft_tokens": 11,
    "num_draft_tokens": 20,
    "num_spec_tokens": 4,
}


@pytest.fixture
def server():
    with FakeServer() as srv:
        yield srv


def spec_for(key: str, *, repeat: int = 0, **body: object) -> RequestSpec:
    messages = [{"role": "user", "content": key}]
    return RequestSpec(
        key, repeat, "cat", build_request_body(model="m", messages=messages, max_tokens=64, **body)
    )


def run(
    server: FakeServer, scripts: dict[str, Script], *, keys: list[str] | None = None, **kwargs
) -> tuple[list[RequestRecord], RunOutcome]:
    """Script the server, send one request per key, return records in finishing order."""
    server.set_scripts(scripts)
    records: list[RequestRecord] = []
    kwargs.setdefault("concurrency", 1)
    specs = kwargs.pop("specs", None) or [spec_for(k) for k in (keys or list(scripts))]
    outcome = run_requests_sync(
        base_url=server.base_url,
        specs=specs,
        sink=records.append,
        series="ctl",
        replicate=0,
        launch_id="L1",
        **kwargs,
    )
    return records, outcome


def by_id(records: list[RequestRecord]) -> dict[str, RequestRecord]:
    return {r.prompt_id: r for r in records}


def expected_text(first: int, n: int) -> str:
    return "".join(token_text(i) for i in range(first, first + n))


def assert_timings_match(rec: RequestRecord, ex: Exchange) -> None:
    """TTFT/TPOT/E2E from the record agree with the server's true send times.

    A chunk cannot arrive before it was sent, so every lag is ≥ 0; the median chunk lags
    by under ``TOL_S`` and none by more than ``WORST_S``.
    """
    true_ttft = ex.token_times[0] - rec.t_send_mono
    true_e2e = ex.done_time - rec.t_send_mono
    n = sum(ex.token_counts)
    true_tpot = (true_e2e - true_ttft) / (n - 1)
    assert 0 <= ttft_s(rec) - true_ttft < WORST_S
    assert 0 <= e2e_s(rec) - true_e2e < WORST_S
    assert tpot_s(rec) == pytest.approx(true_tpot, abs=2 * WORST_S / (n - 1))
    arrivals = [rec.t_send_mono + o for o in rec.chunk_offsets_s]
    lags = sorted(a - t for a, t in zip(arrivals, ex.token_times, strict=True))
    assert lags[0] >= 0 and lags[len(lags) // 2] < TOL_S and lags[-1] < WORST_S


# --------------------------------------------------------------------------- request bodies


def test_body_streams_with_usage_and_token_ids_and_omits_none() -> None:
    body = json.loads(
        build_request_body(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            seed=3,
            extra={"foo": 1, "bar": None},
        )
    )
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["return_token_ids"] is True
    assert body["seed"] == 3 and body["foo"] == 1 and body["temperature"] == 0.0
    for absent in ("top_k", "min_tokens", "cache_salt", "bar"):
        assert absent not in body
    with_k = json.loads(build_request_body(model="m", messages=[], max_tokens=5, top_k=4))
    assert with_k["top_k"] == 4


@pytest.mark.parametrize(
    ("kwargs", "name"), [({"max_tokens": 0}, "max_tokens"), ({"cache_salt": ""}, "cache_salt")]
)
def test_body_rejects_bad_values_naming_the_argument(kwargs: dict, name: str) -> None:
    args = {"model": "m", "messages": [], "max_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=name):
        build_request_body(**args)


def test_chat_url_accepts_root_or_v1() -> None:
    assert chat_url("http://h:1/") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1") == "http://h:1/v1/chat/completions"


# --------------------------------------------------------------------------- good streams


def test_single_token_chunks_give_true_timings(server: FakeServer) -> None:
    [rec], outcome = run(server, {"one": Script(n_tokens=12, ttft_s=0.06, step_s=0.01)})
    ex = server.exchange("one")
    assert rec.ok and rec.error is None and rec.status == 200
    assert rec.chunk_tokens == (1,) * 12 and sum(rec.chunk_tokens) == rec.output_tokens == 12
    assert rec.text == expected_text(0, 12)
    assert rec.token_ids == tuple(token_id(i) for i in range(12))
    assert rec.finish_reason == "length" and rec.prompt_tokens == 7 and rec.spec is None
    assert (rec.series, rec.replicate, rec.launch_id, rec.category) == ("ctl", 0, "L1", "cat")
    assert rec.t_start == pytest.approx(time.time(), abs=5)
    assert 0 <= rec.queue_wait_s < 0.05
    assert 0 < rec.headers_offset_s <= rec.chunk_offsets_s[0]
    assert 0.06 <= ttft_s(rec) < 0.06 + WORST_S  # the server never sends early
    assert tpot_s(rec) == pytest.approx(0.01, abs=0.003)  # absolute schedule: no drift
    assert_timings_match(rec, ex)
    assert outcome.n_ok == 1 and outcome.n_failed == 0 and not outcome.aborted
    assert outcome.stamp_source in ("protocol", "reader") and outcome.wall_s > 0.1


@pytest.mark.parametrize("token_ids", [True, False], ids=["token_ids", "usage_delta"])
def test_multi_token_chunks_are_counted_and_spec_metrics_kept(
    server: FakeServer, token_ids: bool
) -> None:
    script = Script(
        n_tokens=14,
        tokens_per_chunk=(1, 4),
        ttft_s=0.04,
        step_s=0.015,
        spec=SPEC,
        send_token_ids=token_ids,
        finish_reason="stop",
    )
    [rec], _ = run(server, {"spec": script})
    ex = server.exchange("spec")
    assert rec.ok
    assert rec.chunk_tokens == (1, 4, 4, 4, 1) == tuple(ex.token_counts)
    assert sum(rec.chunk_tokens) == rec.output_tokens == 14
    assert rec.text == expected_text(0, 14) and rec.finish_reason == "stop"
    assert rec.token_ids == (tuple(token_id(i) for i in range(14)) if token_ids else None)
    assert rec.spec == SPEC
    assert_timings_match(rec, ex)


def test_counts_one_token_per_content_chunk_without_ids_or_usage(server: FakeServer) -> None:
    plain = spec_for(
        "plain", extra={"stream_options": {"include_usage": True}, "return_token_ids": None}
    )
    [rec], _ = run(server, {"plain": Script(n_tokens=5, send_token_ids=False)}, specs=[plain])
    assert rec.ok and rec.chunk_tokens == (1,) * 5 and rec.output_tokens == 5
    assert rec.token_ids is None


def test_token_on_finish_chunk_and_events_split_across_reads(server: FakeServer) -> None:
    script = Script(n_tokens=6, tokens_per_chunk=2, finish_in_last_chunk=True, fragment_bytes=7)
    [rec], _ = run(server, {"frag": script})
    assert rec.ok and rec.chunk_tokens == (2, 2, 2) and rec.output_tokens == 6
    assert rec.text == expected_text(0, 6) and rec.finish_reason == "length"


def test_reasoning_text_kept_apart_and_its_tokens_counted(server: FakeServer) -> None:
    [rec], _ = run(server, {"think": Script(n_tokens=6, tokens_per_chunk=2, reasoning_tokens=3)})
    assert rec.ok and rec.extra["reasoning_text"] == expected_text(0, 3)
    assert rec.text == expected_text(3, 3)
    assert sum(rec.chunk_tokens) == rec.output_tokens == 6


# --------------------------------------------------------------------------- failures


def test_http_errors_become_failed_records_and_the_run_goes_on(server: FakeServer) -> None:
    scripts = {
        "e500": Script(status=500, error_message="engine dead"),
        "e400": Script(status=400, error_message="top_k is not allowed"),
        "text": Script(status=503, error_body="<html>  overloaded </html>"),
        "fine": Script(n_tokens=3),
    }
    records, outcome = run(server, scripts)
    got = by_id(records)
    assert [r.prompt_id for r in records] == list(scripts)
    assert got["e500"].status == 500 and got["e500"].error == "HTTP 500: engine dead"
    assert got["e400"].status == 400 and "top_k is not allowed" in got["e400"].error
    assert got["text"].error == "HTTP 503: <html> overloaded </html>"
    assert all(not got[k].ok and got[k].extra["error_kind"] == "http" for k in ("e500", "e400"))
    assert ttft_s(got["e500"]) is None and got["e500"].chunk_offsets_s == ()
    assert got["fine"].ok
    assert (outcome.n_ok, outcome.n_failed, outcome.n_not_attempted) == (1, 3, 0)


@pytest.mark.parametrize(
    ("script", "kind", "message"),
    [
        (Script(n_tokens=8, cut_after=3), "cut", "stream cut"),
        (Script(n_tokens=8, send_done=False), "no_done", "without [DONE]"),
        (
            Script(n_tokens=8, error_event_after=3, error_message="kv cache oom"),
            "error_event",
            "error event: kv cache oom",
        ),
    ],
    ids=["cut", "no_done", "error_event"],
)
def test_broken_streams_fail_but_keep_what_arrived(
    server: FakeServer, script: Script, kind: str, message: str
) -> None:
    [rec], outcome = run(server, {"broken": script})
    assert not rec.ok and rec.status == 200
    assert rec.extra["error_kind"] == kind and message in rec.error
    n = 8 if kind == "no_done" else 3
    assert rec.text == expected_text(0, n) and rec.chunk_tokens == (1,) * n
    assert len(rec.chunk_offsets_s) == n and rec.done_offset_s is None
    assert ttft_s(rec) is None and e2e_s(rec) is None  # failed requests have no latency
    assert outcome.n_failed == 1


def test_timeout_fails_the_request_only(server: FakeServer) -> None:
    scripts = {"hang": Script(n_tokens=8, hang_after=2), "fine": Script(n_tokens=2)}
    t0 = time.perf_counter()
    records, outcome = run(server, scripts, concurrency=2, timeout_s=0.3)
    got = by_id(records)
    assert time.perf_counter() - t0 < 3
    assert not got["hang"].ok and got["hang"].extra["error_kind"] == "timeout"
    assert "0.3 s" in got["hang"].error and got["hang"].text == expected_text(0, 2)
    assert got["fine"].ok and outcome.n_ok == 1 and outcome.n_failed == 1


def test_connection_refused_is_a_failed_record() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    records: list[RequestRecord] = []
    outcome = run_requests_sync(
        base_url=f"http://127.0.0.1:{port}",
        specs=[spec_for("x")],
        concurrency=1,
        sink=records.append,
        series="s",
        replicate=0,
        launch_id="L",
    )
    [rec] = records
    assert not rec.ok and rec.status is None and rec.extra["error_kind"] == "connection"
    assert outcome.n_failed == 1


# --------------------------------------------------------------------------- scheduling


@pytest.mark.parametrize("concurrency", [1, 4])
def test_concurrency_is_honoured_and_reached(server: FakeServer, concurrency: int) -> None:
    server.set_scripts(default=Script(n_tokens=3, ttft_s=0.05, step_s=0.005))
    specs = [spec_for(f"c{i}") for i in range(3 * concurrency)]
    records, outcome = run(server, {}, specs=specs, concurrency=concurrency)
    assert server.max_in_flight == concurrency
    assert len(records) == len(specs) and outcome.n_ok == len(specs)
    assert {r.concurrency for r in records} == {concurrency}


def test_error_rate_abort_leaves_the_rest_not_attempted(server: FakeServer) -> None:
    server.set_scripts(default=Script(status=500, ttft_s=0.0))
    specs = [spec_for(f"a{i}") for i in range(30)]
    records, outcome = run(
        server, {}, specs=specs, concurrency=2, max_error_rate=0.5, min_requests_before_abort=4
    )
    assert outcome.aborted and "max_error_rate" in outcome.aborted_reason
    attempted = outcome.n_ok + outcome.n_failed
    assert 4 <= attempted <= 6 and len(records) == attempted == len(server.exchanges())
    assert outcome.n_not_attempted == 30 - attempted
    assert outcome.not_attempted == tuple(s.prompt_id for s in specs[attempted:])
    assert outcome.not_attempted_index == tuple(range(attempted, 30))


def test_progress_counts_finishes_and_a_broken_callback_is_dropped(server: FakeServer) -> None:
    server.set_scripts(default=Script(n_tokens=1))
    ticks: list[int] = []
    _, outcome = run(server, {}, specs=[spec_for(f"g{i}") for i in range(3)], progress=ticks.append)
    assert ticks == [1, 1, 1]
    json.dumps(outcome.to_dict())  # JSON-ready for status files

    def broken(n: int) -> None:
        raise RuntimeError("widget gone")

    with pytest.warns(RuntimeWarning, match="widget gone"):
        _, outcome = run(server, {}, specs=[spec_for(f"h{i}") for i in range(3)], progress=broken)
    assert outcome.n_ok == 3


def test_no_abort_below_the_minimum_count(server: FakeServer) -> None:
    server.set_scripts(default=Script(status=500))
    specs = [spec_for(f"m{i}") for i in range(3)]
    _, outcome = run(server, {}, specs=specs, max_error_rate=0.1, min_requests_before_abort=8)
    assert not outcome.aborted and outcome.n_failed == 3


def test_arrival_offsets_schedule_sends_and_measure_queue_wait(server: FakeServer) -> None:
    server.set_scripts(default=Script(n_tokens=2, ttft_s=0.1))
    specs = [spec_for(f"o{i}") for i in range(3)]
    records, _ = run(server, {}, specs=specs, concurrency=1, arrival_offsets_s=[0.0, 0.0, 0.3])
    got = by_id(records)
    sends = [got[f"o{i}"].t_send_mono for i in range(3)]
    assert sends[1] - sends[0] == pytest.approx(0.1, abs=0.03)  # waited for the only slot
    assert got["o1"].queue_wait_s == pytest.approx(0.1, abs=0.03)
    assert sends[2] - sends[0] == pytest.approx(0.3, abs=0.03)  # due time, slot was free
    assert got["o2"].queue_wait_s < 0.02


def test_invalid_arguments_are_named(server: FakeServer) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        run(server, {"x": Script()}, concurrency=0)
    with pytest.raises(ValueError, match="arrival_offsets_s"):
        run(server, {"x": Script()}, arrival_offsets_s=[0.0, 1.0])


# --------------------------------------------------------------------------- sink and key


def test_records_are_appended_to_jsonl_as_each_request_finishes(
    server: FakeServer, tmp_path: Path
) -> None:
    scripts = {"slow": Script(n_tokens=2, ttft_s=0.4), "fast": Script(n_tokens=2)}
    path = tmp_path / "requests.jsonl"
    written: dict[str, float] = {}
    with path.open("a", encoding="utf-8") as fh:

        def sink(rec: RequestRecord) -> None:
            append_record(fh, rec)
            written[rec.prompt_id] = time.perf_counter()

        server.set_scripts(scripts)
        run_requests_sync(
            base_url=server.base_url,
            specs=[spec_for(k) for k in scripts],
            concurrency=2,
            sink=sink,
            series="s",
            replicate=1,
            launch_id="L",
        )
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and all(json.loads(line)["ttft_s"] is not None for line in lines)
    recs = list(read_records(path))
    assert [r.prompt_id for r in recs] == ["fast", "slow"]
    slow = recs[1]
    assert written["fast"] < slow.t_send_mono + slow.done_offset_s  # on disk while slow ran


def test_api_key_sent_as_bearer_and_never_recorded(server: FakeServer, tmp_path: Path) -> None:
    key = "sk-test-0123456789"
    scripts = {"auth": Script(n_tokens=2), "denied": Script(status=401, error_message=f"bad {key}")}
    path = tmp_path / "requests.jsonl"
    server.set_scripts(scripts)
    with path.open("a", encoding="utf-8") as fh:
        run_requests_sync(
            base_url=server.base_url,
            specs=[spec_for(k) for k in scripts],
            concurrency=1,
            sink=lambda r: append_record(fh, r),
            series="s",
            replicate=0,
            launch_id="L",
            api_key=key,
        )
    assert server.exchange("auth").headers["Authorization"] == f"Bearer {key}"
    text = path.read_text(encoding="utf-8")
    assert key not in text and "HTTP 401: bad <api-key>" in text


def test_sink_failure_stops_the_run_and_is_raised(server: FakeServer) -> None:
    # The sink runs on its own thread; the loop learns of its failure at the next finish. Each
    # answer takes 50 ms, so the thread has run long before the twentieth is sent: with
    # instant answers a busy CI machine let all 20 through before it was scheduled (2026-12-06).
    server.set_scripts(default=Script(n_tokens=1, ttft_s=0.05))

    def sink(rec: RequestRecord) -> None:
        raise OSError("disk full")

    specs = [spec_for(f"s{i}") for i in range(20)]
    with pytest.raises(OSError, match="disk full"):
        run_requests_sync(
            base_url=server.base_url,
            specs=specs,
            concurrency=1,
            sink=sink,
            series="s",
            replicate=0,
            launch_id="L",
        )
    assert len(server.exchanges()) < 20


# --------------------------------------------------------------------------- event loops


def test_sync_entry_works_inside_a_running_event_loop(server: FakeServer) -> None:
    server.set_scripts({"nb": Script(n_tokens=3)})
    records: list[RequestRecord] = []

    async def notebook_cell() -> tuple[RunOutcome, str]:
        outcome = run_requests_sync(
            base_url=server.base_url,
            specs=[spec_for("nb")],
            concurrency=1,
            sink=records.append,
            series="s",
            replicate=0,
            launch_id="L",
        )
        return outcome, threading.current_thread().name

    outcome, thread = asyncio.run(notebook_cell())
    assert outcome.n_ok == 1 and records[0].ok and thread == "MainThread"


def test_coroutine_entry_on_the_callers_loop(server: FakeServer) -> None:
    server.set_scripts({"aw": Script(n_tokens=3)})
    records: list[RequestRecord] = []
    outcome = asyncio.run(
        run_requests(
            base_url=server.base_url,
            specs=[spec_for("aw")],
            concurrency=1,
            sink=records.append,
            series="s",
            replicate=0,
            launch_id="L",
        )
    )
    assert outcome.n_ok == 1 and outcome.event_loop == "asyncio" and records[0].ok


# --------------------------------------------------------------------------- the stand-in


def test_fake_server_in_a_process_serves_health_metrics_and_its_log() -> None:
    script = Script(n_tokens=4, tokens_per_chunk=2, ttft_s=0.02, spec=SPEC)
    with FakeServer({"p": script}, mode="process") as srv:
        with urllib.request.urlopen(srv.base_url + "/health", timeout=5) as resp:
            assert resp.status == 200
        records, _ = run(srv, {}, keys=["p"])
        with urllib.request.urlopen(srv.base_url + "/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        ex = srv.exchange("p")
        assert records[0].ok and ex.outcome == "done" and ex.token_counts == [2, 2]
        assert_timings_match(records[0], ex)  # perf_counter is shared across processes
        assert 'vllm:spec_decode_num_accepted_tokens_total{model_name="fake-model"} 11' in metrics
        assert srv.max_in_flight == 1
