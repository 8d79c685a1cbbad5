"""Two instruments that agree: CPU placement of servers, the server's own stamps in the
records, the instrument the verdict uses, exclusions counted with their reasons, and the
bench-trust checks failing on data built to fail them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from speclib.analysis.frames import records_frame
from speclib.analysis.health.instrument import (
    InstrumentChoice,
    apply_instrument,
    choose_instrument,
    exclusion_table,
    launch_agreement,
)
from speclib.analysis.health.trust import (
    aa_check,
    bench_trust,
    exclusion_check,
    instrument_check,
    late_check,
    pre_checks,
    problem_of,
    ttft_lag_causes,
    ttft_problems,
)
from speclib.analysis.stats.paired import RatioCI
from speclib.core.prometheus import histogram_mean
from speclib.core.records import RequestRecord, server_tpot_s, server_ttft_s, tpot_s
from speclib.serve import priority
from speclib.serve.priority import autogroup_of, place, place_client
from speclib.serve.supervisor import start_supervised, stop_supervised

# ---------------------------------------------------------------- CPU priority of servers


def test_a_supervised_server_shares_the_kits_autogroup_and_ranks_below_it():
    with tempfile.TemporaryFile() as log:
        sup = start_supervised(("sleep", "30"), env=dict(os.environ), log=log, nice=19)
        try:
            facts = place(sup.pid, nice=19)
            assert os.getsid(sup.pid) == os.getsid(0)  # no new session: no new autogroup
            assert os.getpgid(sup.pid) == sup.pid  # but its own process group
            assert facts["server_nice"] == 19 and facts["client_nice"] == os.nice(0)
            if facts["autogroups_enabled"]:
                assert facts["same_autogroup"] is True
            assert facts["ranked_below_client"] is True
            assert facts["action"] == "none needed"
        finally:
            stop_supervised(sup, grace_s=1.0)


def test_hidden_autogroups_fall_back_to_sessions(monkeypatch):
    """Where /proc/<pid>/autogroup cannot be read, a shared session means a shared
    autogroup, and another session means another one whose rank is unknown."""
    monkeypatch.setattr(priority, "autogroup_of", lambda pid="self": None)
    monkeypatch.setattr(priority, "_autogroups_enabled", lambda: True)
    with tempfile.TemporaryFile() as log:
        sup = start_supervised(("sleep", "30"), env=dict(os.environ), log=log, nice=19)
        try:
            facts = priority.place(sup.pid, nice=19)
            assert facts["same_autogroup"] is True and facts["ranked_below_client"] is True
        finally:
            stop_supervised(sup, grace_s=1.0)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        facts = priority.place(proc.pid, nice=19)
        assert facts["same_autogroup"] is False and facts["ranked_below_client"] is None
    finally:
        proc.kill()
        proc.wait()


def test_a_hidden_client_autogroup_leaves_the_rank_unknown(monkeypatch):
    """The server's autogroup readable (and already at the server's niceness), the
    client's hidden: another session, nothing to do, and no claim about the rank."""
    own = {"self", os.getpid(), str(os.getpid())}
    monkeypatch.setattr(
        priority, "autogroup_of", lambda pid="self": None if pid in own else ("/autogroup-9", 19)
    )
    monkeypatch.setattr(priority, "_autogroups_enabled", lambda: True)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        facts = priority.place(proc.pid, nice=19)
        assert facts["same_autogroup"] is False
        assert facts["action"] == "server's autogroup already at nice 19"
        assert facts["server_autogroup_nice"] == 19 and facts["client_autogroup_nice"] is None
        assert facts["ranked_below_client"] is None
    finally:
        proc.kill()
        proc.wait()


def test_a_server_in_its_own_session_gets_its_autogroup_niced():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import os, time; os.nice(19); time.sleep(30)"],
        start_new_session=True,
    )
    try:
        time.sleep(0.3)
        facts = place(proc.pid, nice=19)
        if not facts["autogroups_enabled"]:  # no autogroups: plain niceness ranks it
            assert facts["ranked_below_client"] is True
            return
        # another session is another autogroup, read from /proc or (hidden) from the session
        assert facts["same_autogroup"] is False
        server_group = autogroup_of(proc.pid)
        if server_group is None:  # hidden: nothing is claimed
            assert "cannot be read" in facts["action"], facts
            assert facts["ranked_below_client"] is None
            return
        assert facts["action"] == "set the server's autogroup nice to 19", facts
        assert server_group[1] == 19
        # the client's own autogroup hidden (seen on a CI host): its rank is unknown
        client_group = autogroup_of(os.getpid())
        assert facts["ranked_below_client"] is (None if client_group is None else True)
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- the server's own stamps


def _rec(series="control", *, ok=True, offsets=(0.02, 0.03, 0.04), timing=None, **kw):
    base = dict(
        series=series,
        replicate=0,
        prompt_id=kw.pop("prompt_id", "p0"),
        ok=ok,
        launch_id=kw.pop("launch_id", f"{series}-r0"),
        chunk_offsets_s=tuple(offsets),
        chunk_tokens=tuple(1 for _ in offsets),
        output_tokens=len(offsets),
        done_offset_s=offsets[-1] if offsets else None,
        server_timing=timing,
    )
    base.update(kw)
    return RequestRecord(**base)


def test_server_tpot_and_ttft_come_from_the_servers_stamps_not_the_client():
    timing = {"queue_time_ms": 1.0, "time_to_first_token_ms": 15.0, "mean_itl_ms": 10.0}
    late = _rec(offsets=(0.3, 0.3, 0.3), timing=timing)  # all chunks in one late read
    assert tpot_s(late) == 0.0
    assert server_tpot_s(late) == pytest.approx(0.010)
    assert server_ttft_s(late) == pytest.approx(0.016)
    assert server_tpot_s(_rec(ok=False, timing=timing)) is None
    assert server_tpot_s(_rec(timing=None)) is None


def test_the_stream_parser_keeps_the_servers_timing_and_spec_metrics_apart():
    from speclib.measure.sse import Accumulator, handle_event

    acc = Accumulator(t0=0.0, t_start=0.0)
    usage = {
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        "metrics": {
            "mean_itl_ms": 9.5,
            "time_to_first_token_ms": 12.0,
            "speculative_decoding": {"num_draft_tokens": 8},
        },
    }
    handle_event(acc, 0.1, json.dumps(usage).encode())
    assert acc.server_timing == {"mean_itl_ms": 9.5, "time_to_first_token_ms": 12.0}
    assert acc.spec == {"num_draft_tokens": 8}


def test_histogram_mean_is_the_window_delta():
    name = "vllm:request_time_per_output_token_seconds"
    before = f'{name}_sum{{model_name="m"}} 1.0\n{name}_count{{model_name="m"}} 10\n'
    after = f'{name}_sum{{model_name="m"}} 1.3\n{name}_count{{model_name="m"}} 40\n'
    mean, n = histogram_mean(before, after, name)
    assert n == 30 and mean == pytest.approx(0.01)
    assert histogram_mean(after, after, name) is None


# ---------------------------------------------------------------- instrument and exclusions


def _frame(late_control: int, *, stamps=True, n=10) -> pd.DataFrame:
    recs = []
    for arm in ("control", "spec"):
        for i in range(n):
            late = arm == "control" and i < late_control
            offsets = (0.3,) * 5 if late else tuple(0.02 + 0.01 * j for j in range(5))
            timing = {"mean_itl_ms": 10.0, "time_to_first_token_ms": 20.0} if stamps else None
            recs.append(_rec(arm, prompt_id=f"p{i}", offsets=offsets, timing=timing))
    return records_frame(recs)


def test_the_verdict_uses_the_servers_stamps_when_every_arm_has_them():
    df = _frame(late_control=4)
    choice = choose_instrument(df, ["control", "spec"])
    assert choice.tpot == "server"
    out = apply_instrument(df, choice)
    assert out["tpot_excluded"].isna().all()  # a late read does not cost a server stamp
    assert out["tpot_s"].tolist() == pytest.approx([0.010] * 20)
    assert out["tpot_client_s"].iloc[0] == 0.0  # the client's own view is kept beside it


def test_without_server_stamps_the_client_is_used_and_late_reads_are_excluded_and_counted():
    df = _frame(late_control=4, stamps=False)
    choice = choose_instrument(df, ["control", "spec"])
    assert choice.tpot == "client"
    out = apply_instrument(df, choice)
    table = exclusion_table(out).set_index("series")
    assert table.loc["control", "excluded"] == 4
    assert table.loc["control", "reasons"] == {"read late": 4}
    assert table.loc["spec", "excluded"] == 0
    check = exclusion_check(exclusion_table(out))
    assert check.status == "fail" and "40.0 points" in check.detail
    assert "control" in check.per_arm and "read late 4" in check.per_arm["control"]


def test_one_arm_without_stamps_puts_every_arm_on_the_client():
    df = _frame(late_control=0)
    df.loc[df["series"] == "spec", "tpot_server_s"] = float("nan")
    choice = choose_instrument(df, ["control", "spec"])
    assert choice.tpot == "client" and "spec (10/10)" in choice.reason


def test_failed_and_short_requests_are_excluded_with_their_reason():
    recs = [
        _rec(ok=False, offsets=(), prompt_id="a"),
        _rec(offsets=(0.02,), prompt_id="b", timing={"time_to_first_token_ms": 5.0}),
        _rec(prompt_id="c", timing={"mean_itl_ms": 10.0}),
    ]
    out = apply_instrument(records_frame(recs), InstrumentChoice("server", "test"))
    assert out["tpot_excluded"].tolist() == ["failed", "fewer than 2 output tokens", None]


# ---------------------------------------------------------------- agreement and trust


def _write_window(folder: Path, level: int, tpot_s: float, n: int, ttft_s: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name_t, name_f = (
        "vllm:request_time_per_output_token_seconds",
        "vllm:time_to_first_token_seconds",
    )
    (folder / f"metrics_l{level}_before.prom").write_text(
        f"{name_t}_sum 0\n{name_t}_count 0\n{name_f}_sum 0\n{name_f}_count 0\n"
    )
    (folder / f"metrics_l{level}_after.prom").write_text(
        f"{name_t}_sum {tpot_s * n}\n{name_t}_count {n}\n"
        f"{name_f}_sum {ttft_s * n}\n{name_f}_count {n}\n"
    )


def test_a_client_that_read_late_disagrees_with_the_server_and_fails_the_bench(tmp_path):
    df = apply_instrument(_frame(late_control=4), InstrumentChoice("server", "test"))
    for arm in ("control", "spec"):
        _write_window(tmp_path / "launches" / f"{arm}-r0", 0, 0.010, 10, 0.020)
    agreement = launch_agreement(df, tmp_path).set_index("launch_id")
    assert agreement.loc["spec-r0", "agrees"]  # read on time: 10 ms and 20 ms both ways
    assert agreement.loc["spec-r0", "tpot_gap"] == pytest.approx(0.0, abs=1e-9)
    control = agreement.loc["control-r0"]
    assert not control["agrees"] and control["tpot_gap"] == pytest.approx(-0.4)
    assert control["ttft_gap_ms"] == pytest.approx(0.4 * 300 + 0.6 * 20 - 20)
    assert control["n_read_late"] == 4
    checks = pre_checks(agreement.reset_index(), df, exclusion_table(df), None, pd.DataFrame())
    by = {c.check: c for c in checks}
    assert (
        by["instruments agree"].status == "fail" and "control-r0" in by["instruments agree"].detail
    )
    assert by["late reads"].status == "fail" and by["late reads"].per_arm["control"] == "4/10"
    assert by["exclusions"].status == "pass"  # the server instrument excluded nothing
    assert by["CPU starvation"].status == "not assessed"
    assert "instruments agree" in problem_of(checks)
    panel = bench_trust(checks, [], margin=0.05)
    assert panel["untrustworthy"] and not panel["trusted"]


def test_every_check_passes_on_a_clean_bench(tmp_path):
    df = apply_instrument(_frame(late_control=0), InstrumentChoice("server", "test"))
    for arm in ("control", "spec"):
        _write_window(tmp_path / "launches" / f"{arm}-r0", 0, 0.010, 10, 0.020)
    agreement = launch_agreement(df, tmp_path)
    assert agreement["agrees"].all()
    idle = pd.DataFrame({"block": ["r0"], "arm": ["control"]})
    checks = pre_checks(agreement, df, exclusion_table(df), None, idle)
    assert [c.status for c in checks] == ["pass"] * 4
    assert problem_of(checks) is None
    assert instrument_check(pd.DataFrame()).status == "not assessed"
    assert late_check(pd.DataFrame()).status == "not assessed"


def _ci(lo: float, hi: float, blocks: int = 4) -> RatioCI:
    """A block interval of an A/A arm (``blocks - 1`` df), symmetric on the log scale."""
    return RatioCI(
        estimate=(lo * hi) ** 0.5, ci_low=lo, ci_high=hi, confidence_level=0.95,
        method="blocks", n_pairs=8 * blocks, n_launches=blocks, median_delta=0.0,
        wilcoxon_p=None, between_launch_share=None, more_launches_help=None,
        var_between=None, var_within=None, n_resamples=0, df=blocks - 1,
    )  # fmt: skip


class _Comp:
    def __init__(self, lo, hi, word="inconclusive"):
        self.cis = {"tpot_s": _ci(lo, hi)}
        self.word = word


def test_the_aa_check_reports_resolution_and_fails_on_a_false_effect():
    assert aa_check([], 0.05).status == "not assessed"
    ok = aa_check([_Comp(0.97, 1.04)], 0.05)  # log half-width 0.0348: ±3.5 %
    assert ok.status == "pass"
    assert ok.figure == "resolution ±3.5 % (δ = ±5 %): equivalent"
    assert ok.detail.startswith("bench check: resolution ±3.5 %")
    coarse = aa_check([_Comp(0.88, 1.15)], 0.05)
    assert (
        coarse.status == "pass" and "more blocks would likely make it equivalent" in coarse.detail
    )
    useless = aa_check([_Comp(0.1, 9.3)], 0.05)
    assert useless.status == "not assessed" and "too wide" in useless.detail
    assert aa_check([_Comp(0.85, 0.94, "adopt")], 0.05).status == "fail"
    near = aa_check([_Comp(0.907, 0.973)], 0.05)  # excludes 1, inside the rule's reach
    assert near.status == "pass" and "excludes 1" in near.detail
    panel = bench_trust([], [_Comp(0.97, 1.04)], 0.05)
    assert panel["trusted"]


def test_the_client_is_pinned_only_where_two_cores_are_free_of_server_threads():
    every = os.sched_getaffinity(0)
    pinned_to = {min(every)}
    code = f"import os, time; os.sched_setaffinity(0, {pinned_to!r}); time.sleep(30)"
    server = subprocess.Popen([sys.executable, "-c", code])
    client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)
        placed = place_client(client.pid, [server.pid])
        free = sorted(every - pinned_to)
        if len(free) >= 2:
            assert placed["client_cpu"] == free[-1]
            assert os.sched_getaffinity(client.pid) == {free[-1]}
        else:  # a 2-core host: no core to spare, the client keeps every core
            assert placed["client_cpu"] is None and "no free core" in placed["why"]
            assert os.sched_getaffinity(client.pid) == every
    finally:
        for proc in (server, client):
            proc.kill()
            proc.wait()


def test_late_reads_gate_the_verdict_only_when_it_uses_the_clients_stamps(tmp_path):
    df = apply_instrument(_frame(late_control=4), InstrumentChoice("server", "test"))
    agreement = pd.DataFrame(
        [
            {
                "series": "control",
                "launch_id": "control-r0",
                "agrees": True,
                "tpot_gap": 0.01,
                "ttft_gap_ms": 2.0,
            }
        ]
    )
    idle = pd.DataFrame({"block": ["r0"], "arm": ["control"]})
    server = pre_checks(agreement, df, exclusion_table(df), None, idle, instrument="server")
    late = next(c for c in server if c.check == "late reads")
    assert late.status == "fail" and not late.gating
    assert problem_of(server) is None  # shown, but the verdict does not rest on the client
    panel = bench_trust(server, [_Comp(0.97, 1.04)], 0.05)
    assert not panel["trusted"] and not panel["untrustworthy"]
    client = pre_checks(agreement, df, exclusion_table(df), None, idle, instrument="client")
    assert "late reads" in problem_of(client)


def _agree_rows(
    gaps: dict[str, float],
    tpot_gap: float = 0.001,
    client_lag_ms: float | None = None,
    read_late: int = 0,
) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"series": arm, "launch_id": f"{arm}-r0", "level": 2, "block": "r0",
             "agrees": abs(gap) <= 10, "tpot_gap": tpot_gap, "ttft_gap_ms": gap,
             "n_read_late": read_late, "client_lag_max_ms": client_lag_ms}
            for arm, gap in gaps.items()
        ]
    )  # fmt: skip


def test_an_equal_ttft_lag_at_high_load_passes_and_is_reported():
    """Measured on the CPU load demo at c = 12: the client read first tokens 11–19 ms after
    the server stamped them in every arm alike (TPOT within 0.25 %)."""
    check = instrument_check(_agree_rows({"control": 13.1, "draft-k2": 11.1, "draft-k4": 11.9}))
    assert check.status == "pass"
    assert "up to 13.1 ms after the server stamped them" in check.detail


def test_an_unequal_ttft_lag_warns_without_gating_and_a_tpot_gap_gates():
    """Measured on the CPU load demo at c = 32: TPOT within 0.6 % on every launch, the
    client's TTFT lag 75 ms in one arm and 34 ms in another of the same block."""
    unequal = instrument_check(_agree_rows({"control": 74.8, "spec": 34.3}))
    assert unequal.status == "fail" and not unequal.gating
    assert "differs by up to 40.5 ms" in unequal.detail and "TPOT verdicts stand" in unequal.detail
    assert problem_of([unequal]) is None
    why = ttft_problems(_agree_rows({"control": 74.8, "spec": 34.3}), {2: "c=32"})
    assert list(why) == [2] and "at c=32" in why[2]
    assert ttft_problems(_agree_rows({"control": 13.1, "spec": 11.1}), {2: "c=32"}) == {}
    tpot = instrument_check(_agree_rows({"control": 2.0, "spec": 2.0}, tpot_gap=0.08))
    assert tpot.status == "fail" and tpot.gating and tpot.figure == "2 of 2 launch windows off"


def test_an_unequal_ttft_lag_the_client_cannot_have_made_is_the_servers():
    """Measured on one H200 at c = 32 (evidence/gpu-h200): TTFT lag 20 ms in the control and
    36-42 ms in the speculative arms of one block, while the client read every stream on time
    and its loop-lag probe's worst tick was 1.1 ms late: vLLM's API process, not the client."""
    gaps = {"control": 20.4, "draft-k4": 41.5}
    rows = _agree_rows(gaps, client_lag_ms=1.1)
    assert ttft_lag_causes(rows) == {2: (pytest.approx(21.1), pytest.approx(11.1))}
    check = instrument_check(rows)
    assert check.status == "pass"
    assert "differs between arms by up to 21.1 ms" in check.detail
    assert "bounds any delay of its own to 11.1 ms" in check.detail
    assert "the TTFT gate uses it" in check.detail
    assert ttft_problems(rows, {2: "c=32"}) == {}  # the TTFT gate is assessed there
    # The same lags where the client may have made them: a stalled loop (its bound, 40 ms,
    # covers the 21 ms spread), a stream read late, or no probe figure at all.
    for maybe in (
        _agree_rows(gaps, client_lag_ms=30.0),
        _agree_rows(gaps, client_lag_ms=1.1, read_late=3),
        _agree_rows(gaps),
    ):
        assert ttft_lag_causes(maybe)[2][1] is None
        assert instrument_check(maybe).status == "fail"
        assert list(ttft_problems(maybe, {2: "c=32"})) == [2]


def test_the_agreement_carries_the_clients_worst_probe_tick_per_window(tmp_path):
    df = apply_instrument(_frame(late_control=0), InstrumentChoice("server", "test"))
    for arm, lag in (("control", 0.0011), ("spec", None)):
        folder = tmp_path / "launches" / f"{arm}-r0"
        _write_window(folder, 0, 0.010, 10, 0.020)
        client = {} if lag is None else {"loop_lag_max_s": lag}
        levels = [{"level": 1, "client": {"loop_lag_max_s": 9.0}}, {"level": 0, "client": client}]
        (folder / "status.json").write_text(json.dumps({"levels": levels}))
    agreement = launch_agreement(df, tmp_path).set_index("launch_id")
    assert agreement.loc["control-r0", "client_lag_max_ms"] == pytest.approx(1.1)
    assert pd.isna(agreement.loc["spec-r0", "client_lag_max_ms"])


def test_an_unassessable_ttft_leaves_the_gate_not_assessed():
    from speclib.analysis.verdict.decision import Decision
    from speclib.analysis.verdict.gates import GateEvidence, TtftGate, apply_gates

    dec = Decision("adopt", "faster", 0.05, 0.95)
    evidence = GateEvidence(
        control_error_rate=0.0, experiment_error_rate=0.0, ttft_problem="busy client at c=32"
    )
    verdict = apply_gates(dec, evidence, [TtftGate(margin=0.5)])
    gate = next(g for g in verdict.gates if g.name == "ttft")
    assert gate.status == "not assessed" and gate.detail == "busy client at c=32"
    assert verdict.word == "adopt"
