"""The fidelity benchmark's arithmetic: truth from a server log, each client's error."""

from __future__ import annotations

import pytest

from speclib.analysis.frames import records_frame
from speclib.analysis.health.bench_result import BenchRequest
from speclib.analysis.health.run_warnings import late_read_warnings
from speclib.core.records import RequestRecord, late_chunks, tpot_s
from tests.benchmarks.fidelity import bench_errors, kit_errors, summarize, truth_of
from tests.fakeserver import Exchange, SentEvent

pytestmark = pytest.mark.unit

T0 = 1000.0  # server receipt


def exchange(key: str, t_recv: float = T0, n: int = 5, ttft: float = 0.04, step: float = 0.02):
    events = [SentEvent("role", t_recv + ttft)]
    events += [
        SentEvent("token", t_recv + ttft + i * step + 1e-5, 1, t_recv + ttft + i * step)
        for i in range(n)
    ]
    end = t_recv + ttft + (n - 1) * step + 2e-5
    events += [SentEvent("finish", end), SentEvent("usage", end), SentEvent("done", end + 1e-5)]
    return Exchange(0, key, {}, {}, t_recv, t_recv, tuple(events), end, "done")


def test_truth_reads_the_log() -> None:
    t = truth_of(exchange('[{"type": "text", "text": "hello"}]'))
    assert t.key == "hello" and t.n_tokens == 5 and t.n_events == 9
    assert t.t_first_token - t.t_recv == pytest.approx(0.04001)
    assert t.t_role == pytest.approx(T0 + 0.04) and t.lateness_s == pytest.approx(1e-5)
    assert truth_of(Exchange(0, "x", {}, {}, T0, None, (), T0, "client_gone")) is None


def test_kit_error_is_measured_minus_true_from_the_servers_receipt() -> None:
    ex = exchange("k")
    tr = truth_of(ex)
    sent = T0 - 0.0003  # the kit stamped its send 0.3 ms before the server got it
    offsets = tuple(tr.t_first_token + i * 0.02 + 0.0002 - sent for i in range(5))
    rec = RequestRecord(
        series="s",
        replicate=0,
        prompt_id="k",
        ok=True,
        t_send_mono=sent,
        chunk_offsets_s=offsets,
        chunk_tokens=(1,) * 5,
        output_tokens=5,
        done_offset_s=tr.t_done + 0.0002 - sent,
        queue_wait_s=0.001,
    )
    [err] = kit_errors([rec], {"k": tr})
    assert err.ttft == pytest.approx(0.0005) and err.send_lag_s == pytest.approx(0.0003)
    assert err.recv_lag_s == pytest.approx(0.0002) and err.tpot == pytest.approx(0, abs=1e-9)
    stats = summarize([err])
    assert stats.ttft_med_ms == pytest.approx(0.5) and stats.queue_med_ms == pytest.approx(1)


def test_bench_requests_pair_with_the_first_exchange_after_their_start() -> None:
    probe, real = exchange("a", t_recv=T0 - 5), exchange("a", t_recv=T0)
    req = BenchRequest(
        ok=True,
        ttft_s=0.045,
        latency_s=0.045 + 0.08 + 2e-5,
        output_tokens=5,
        start_time=T0 - 0.005,
        queue_s=0.0,
        error=None,
    )
    [err] = bench_errors([req], ["a"], [probe, real])
    assert err.send_lag_s == pytest.approx(0.005) and err.ttft == pytest.approx(0.005)
    assert err.recv_lag_s == pytest.approx(0.0, abs=1e-9)
    assert err.tpot == pytest.approx(0.0, abs=1e-9)
    assert bench_errors([req], ["missing"], [probe, real]) == []
    with pytest.raises(ValueError, match="no paired"):
        summarize([])


def _streamed(offsets: tuple[float, ...], series: str = "s", pid: str = "k") -> RequestRecord:
    return RequestRecord(
        series=series,
        replicate=0,
        prompt_id=pid,
        ok=True,
        chunk_offsets_s=offsets,
        chunk_tokens=(1,) * len(offsets),
        output_tokens=len(offsets),
        done_offset_s=offsets[-1] + 0.001,
    )


def test_chunks_read_together_are_late_and_the_analysis_says_so() -> None:
    """A client that was not scheduled reads several chunks in one network read (one stamp):
    its TTFT is overstated and TPOT understated, and the run's warnings name how often."""
    on_time = _streamed(tuple(0.02 + 0.01 * i for i in range(10)))
    stalled = _streamed((0.4,) * 6 + tuple(0.41 + 0.01 * i for i in range(4)), pid="j")
    assert late_chunks(on_time) == 0 and late_chunks(stalled) == 5
    assert tpot_s(stalled) < tpot_s(on_time)  # the stall moved into TTFT
    df = records_frame([on_time, stalled, _streamed((0.02, 0.02, 0.03), series="t")])
    [warning] = late_read_warnings(df)
    assert "1 of 3 streams late" in warning and "s 1/2" in warning and "t 0/1" in warning
    assert late_read_warnings(records_frame([on_time])) == []
