"""Unit tests for speclib.core.prometheus: Prometheus parsing, deltas and the typed counter views."""

# ruff: noqa: E501  (the fixture reproduces real exposition lines verbatim)

from __future__ import annotations

import http.server
import threading
import urllib.error
from collections.abc import Iterator
from typing import ClassVar

import pytest

from speclib.core.prometheus import (
    ACCEPTED_PER_POS,
    NUM_DRAFTS,
    CounterResetError,
    PrefixCacheDelta,
    SpecCounters,
    metric_sum,
    metrics_delta,
    parse_prometheus,
    prefix_cache_delta,
    spec_counters_delta,
)
from speclib.serve.httpapi import fetch_metrics

pytestmark = pytest.mark.unit

MODEL = 'tiny "target"\\v1'  # the exposition escapes both the quotes and the backslash

# As prometheus_client.generate_latest() writes vLLM's counters (names and labels as in
# vllm/v1/spec_decode/metrics.py and vllm/v1/metrics/loggers.py): `_total` samples,
# `_created` gauges, a histogram, an info gauge, and two engines (data parallel).
BEFORE = r"""# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny \"target\"\\v1"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="tiny \"target\"\\v1"} 5.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny \"target\"\\v1"} 1.795946640517593e+09
vllm:spec_decode_num_drafts_created{engine="1",model_name="tiny \"target\"\\v1"} 1.795946640517593e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny \"target\"\\v1"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="tiny \"target\"\\v1"} 20.0
# HELP vllm:spec_decode_num_draft_tokens_created Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_created gauge
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="tiny \"target\"\\v1"} 1.7959466405176318e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny \"target\"\\v1"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="tiny \"target\"\\v1"} 10.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny \"target\"\\v1",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny \"target\"\\v1",position="1"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny \"target\"\\v1",position="2"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny \"target\"\\v1",position="3"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny \"target\"\\v1",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny \"target\"\\v1",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny \"target\"\\v1",position="2"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny \"target\"\\v1",position="3"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny \"target\"\\v1"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny \"target\"\\v1"} 256.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="tiny \"target\"\\v1"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny \"target\"\\v1"} 1.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny \"target\"\\v1"} 1.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny \"target\"\\v1"} 0.05
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="None"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny \"target\"\\v1"} 1.0
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
"""


def _bump(text: str, changes: dict[str, str]) -> str:
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


AFTER = _bump(
    BEFORE,
    {
        # engine 0: +20 drafts, +80 draft tokens, +60 accepted; engine 1: +10, +40, +20
        'drafts_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 10.0': (
            'drafts_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 30.0'
        ),
        'drafts_total{engine="1",model_name="tiny \\"target\\"\\\\v1"} 5.0': (
            'drafts_total{engine="1",model_name="tiny \\"target\\"\\\\v1"} 15.0'
        ),
        'draft_tokens_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 40.0': (
            'draft_tokens_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 120.0'
        ),
        'draft_tokens_total{engine="1",model_name="tiny \\"target\\"\\\\v1"} 20.0': (
            'draft_tokens_total{engine="1",model_name="tiny \\"target\\"\\\\v1"} 60.0'
        ),
        'accepted_tokens_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 30.0': (
            'accepted_tokens_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 90.0'
        ),
        'accepted_tokens_total{engine="1",model_name="tiny \\"target\\"\\\\v1"} 10.0': (
            'accepted_tokens_total{engine="1",model_name="tiny \\"target\\"\\\\v1"} 30.0'
        ),
        'v1",position="0"} 9.0': 'v1",position="0"} 28.0',
        'v1",position="1"} 8.0': 'v1",position="1"} 25.0',
        'v1",position="2"} 7.0': 'v1",position="2"} 21.0',
        'v1",position="3"} 6.0': 'v1",position="3"} 16.0',
        'v1",position="0"} 4.0': 'v1",position="0"} 13.0',
        'v1",position="1"} 3.0': 'v1",position="1"} 9.0',
        'v1",position="2"} 2.0': 'v1",position="2"} 6.0',
        'v1",position="3"} 1.0': 'v1",position="3"} 2.0',
        'queries_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 1000.0': (
            'queries_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 1512.0'
        ),
        'hits_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 256.0': (
            'hits_total{engine="0",model_name="tiny \\"target\\"\\\\v1"} 512.0'
        ),
        'vllm:num_requests_running{engine="0",model_name="tiny \\"target\\"\\\\v1"} 1.0': (
            'vllm:num_requests_running{engine="0",model_name="tiny \\"target\\"\\\\v1"} 0.0'
        ),
    },
)

CONTROL = r"""# HELP vllm:prefix_cache_queries_total Prefix cache queries.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="t"} 64.0
"""


def _labels(**kv: str) -> frozenset[tuple[str, str]]:
    return frozenset(kv.items())


# --------------------------------------------------------------------------- parser


def test_parse_unescapes_label_values_and_keeps_every_sample() -> None:
    s = parse_prometheus(BEFORE)
    assert s[(NUM_DRAFTS, _labels(engine="0", model_name=MODEL))] == 10.0
    assert MODEL == 'tiny "target"\\v1'
    key = (ACCEPTED_PER_POS, _labels(engine="1", model_name=MODEL, position="3"))
    assert s[key] == 1.0
    created = ("vllm:spec_decode_num_drafts_created", _labels(engine="0", model_name=MODEL))
    assert s[created] == pytest.approx(1.795946640517593e9)
    inf = (
        "vllm:time_to_first_token_seconds_bucket",
        _labels(engine="0", le="+Inf", model_name=MODEL),
    )
    assert s[inf] == 1.0
    assert s[("process_cpu_seconds_total", frozenset())] == 12.5
    info = [k for k in s if k[0] == "vllm:cache_config_info"]
    assert dict(info[0][1])["block_size"] == "128"


def test_parse_special_values_timestamps_newline_escape_and_openmetrics() -> None:
    text = (
        'm{a="x\\ny"} NaN\n'
        "n +Inf 1700000000000\n"
        "o -Inf\n"
        '# TYPE p counter\np_total{ b = "1" , } 3 # {trace_id="abc"} 1.0\n'
        "# EOF\n"
    )
    s = parse_prometheus(text)
    nan = s[("m", _labels(a="x\ny"))]
    assert nan != nan
    assert s[("n", frozenset())] == float("inf")
    assert s[("o", frozenset())] == float("-inf")
    assert s[("p_total", _labels(b="1"))] == 3.0


@pytest.mark.parametrize(
    "bad",
    ['m{a="x} 1', "m{a=x} 1", "lonely", 'm{a="1"} notanumber', 'm{a="1",a="2"} 1', "m 1\nm 2"],
)
def test_parse_rejects_malformed_lines_naming_them(bad: str) -> None:
    with pytest.raises(ValueError, match="line"):
        parse_prometheus(bad)


def test_metric_sum_sums_label_sets_and_filters() -> None:
    assert metric_sum(BEFORE, NUM_DRAFTS) == 15.0
    assert metric_sum(BEFORE, NUM_DRAFTS, where={"engine": "1"}) == 5.0
    assert metric_sum(BEFORE, "vllm:nope_total") is None


# --------------------------------------------------------------------------- deltas


def test_metrics_delta_counts_new_samples_from_zero_and_allows_gauges_to_fall() -> None:
    before = parse_prometheus("a_total 2\ng 5\nold 1\n")
    after = parse_prometheus("a_total 7\ng 3\nnew_total 4\n")
    d = metrics_delta(before, after)
    assert d[("a_total", frozenset())] == 5
    assert d[("g", frozenset())] == -2
    assert d[("new_total", frozenset())] == 4
    assert ("old", frozenset()) not in d


def test_spec_counters_delta_sums_engines_and_derives_rates() -> None:
    sc = spec_counters_delta(BEFORE, AFTER)
    assert sc == SpecCounters(
        num_drafts=30,
        num_draft_tokens=120,
        num_accepted_tokens=80,
        accepted_per_pos=(28, 23, 18, 11),
        present=True,
    )
    assert sc.acceptance_rate == pytest.approx(80 / 120)
    assert sc.mean_acceptance_length == pytest.approx(1 + 80 / 30)
    assert sc.per_position_rate == pytest.approx((28 / 30, 23 / 30, 18 / 30, 11 / 30))
    # histogram: exactly j accepted; sums to the drafts and its weighted sum to accepted
    hist = sc.histogram
    assert hist == (2, 5, 5, 7, 11)
    assert sum(hist) == sc.num_drafts
    assert sum(j * h for j, h in enumerate(hist)) == sc.num_accepted_tokens
    only0 = spec_counters_delta(BEFORE, AFTER, where={"engine": "0"})
    assert (only0.num_drafts, only0.num_draft_tokens, only0.num_accepted_tokens) == (20, 80, 60)


def test_no_drafts_in_window_gives_none_not_zero_percent() -> None:
    sc = spec_counters_delta(BEFORE, BEFORE)
    assert sc.present
    assert (sc.num_drafts, sc.num_draft_tokens, sc.num_accepted_tokens) == (0, 0, 0)
    assert sc.acceptance_rate is None
    assert sc.mean_acceptance_length is None
    assert sc.per_position_rate is None
    assert sc.histogram is None


def test_missing_spec_metrics_are_reported_as_absent() -> None:
    sc = spec_counters_delta(CONTROL, CONTROL)
    assert not sc.present
    assert sc.num_drafts == 0 and sc.accepted_per_pos == ()
    assert sc.acceptance_rate is None
    assert sc.to_dict()["present"] is False


def test_counter_reset_raises() -> None:
    with pytest.raises(CounterResetError, match="restarted"):
        spec_counters_delta(AFTER, BEFORE)


def test_prefix_cache_delta() -> None:
    pc = prefix_cache_delta(BEFORE, AFTER)
    assert pc == PrefixCacheDelta(queries=512, hits=256, present=True)
    assert pc.hit_rate == 0.5
    none = prefix_cache_delta(CONTROL, CONTROL)
    assert none.present and none.hit_rate is None
    absent = prefix_cache_delta("x 1\n", "x 2\n")
    assert not absent.present and absent.queries == 0


# --------------------------------------------------------------------------- fetch


class _Handler(http.server.BaseHTTPRequestHandler):
    seen_auth: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        type(self).seen_auth.append(self.headers.get("Authorization"))
        if self.path != "/metrics":
            self.send_error(404)
            return
        body = BEFORE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_fetch_metrics_from_a_real_http_server(metrics_server: str) -> None:
    _Handler.seen_auth.clear()
    text = fetch_metrics(metrics_server + "/", api_key="sekret", timeout=5)
    assert parse_prometheus(text) == parse_prometheus(BEFORE)
    assert _Handler.seen_auth == ["Bearer sekret"]
    fetch_metrics(metrics_server)
    assert _Handler.seen_auth[-1] is None


def test_fetch_metrics_errors(metrics_server: str) -> None:
    with pytest.raises(urllib.error.HTTPError):
        fetch_metrics(metrics_server + "/v1")
    with pytest.raises(ValueError, match="base_url"):
        fetch_metrics("file:///etc")


def test_settled_snapshots_wait_for_every_servers_counters_at_once(monkeypatch, tmp_path):
    """Each server's snapshot is taken again until its spec counters stop moving; the
    servers wait at once (each one's second read comes before any server's third), and the
    results keep the order asked."""
    import speclib.run.launch_record as lr

    reads: list[str] = []
    moves = {"a": 2, "b": 1, "c": 0}  # how many more reads each server's counters move for

    def fake_snapshot(base_url, path, api_key_):
        reads.append(base_url)
        n = reads.count(base_url)
        value = min(n, moves[base_url] + 1)
        return f"vllm:spec_decode_num_drafts_total {value}\n"

    monkeypatch.setattr(lr, "snapshot", fake_snapshot)
    got = lr.settled_snapshots([(s, tmp_path / s) for s in ("a", "b", "c")], None)
    assert got == [f"vllm:spec_decode_num_drafts_total {moves[s] + 1}\n" for s in "abc"]
    assert {s: reads.count(s) for s in "abc"} == {s: moves[s] + 2 for s in "abc"}
    second_reads = [i for i, s in enumerate(reads) if reads[: i + 1].count(s) == 2]
    third_read_a = [i for i, s in enumerate(reads) if s == "a"][2]
    assert max(second_reads) < third_read_a  # b's and c's waits did not come after a's
