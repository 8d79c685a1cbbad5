"""The analysis of a stored run folder writes the summary.json it wrote before the refactor.

``tests/fixtures/run-standin/`` is a whole run through the CLI with the stand-in server
(``tests/fake_vllm.py``: interleaved design, an A/A arm, an n-gram arm, 3 replicate blocks,
concurrency 1 and 2, 6 prompts), pruned to what the analysis reads: ``requests.jsonl``,
``manifest.json``, ``params.resolved.json`` (and ``params.yaml``) and, per launch,
``status.json``, ``metrics_before.prom``, ``metrics_after.prom``, ``memory.jsonl``,
``cpu.jsonl`` and ``server.log``. Its prompt set is
``tests/fixtures/run-standin-prompts.jsonl``. ``tests/fixtures/run-standin-summary.json``
is what :func:`speclib.analysis.run_analysis.analyze_run` wrote for that folder at commit
33bcc60, before ``speclib.analysis`` was split into subpackages, with its TPOT figures
re-derived once since, when the verdict's ratio became the traffic's (issue 53: every
block-model TPOT figure changed on purpose, no verdict word did); re-running the analysis
on a copy must give the same summary, field for field.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from speclib.analysis.run_analysis import analyze_run
from speclib.core.reason_text import render
from speclib.core.reasons import Reason

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUN = FIXTURES / "run-standin"
PROMPTS = FIXTURES / "run-standin-prompts.jsonl"
STORED = FIXTURES / "run-standin-summary.json"

VOLATILE = ("run_dir",)
"""Top-level summary fields that depend on where the copy lies, not on the analysis: only
the copy's absolute path. (Launch timestamps and commands come from the stored
``status.json`` files and are compared; the summary carries no version or clock reading.)"""

ADDED_SINCE = {
    "server_commands": None,  # no manifest 'cli' entry in a run folder from before it
    "placement": {},
    "placement_line": None,
    "memory_plan": None,
    "speed_log": {"control": [], "spec": [], "aa": []},  # the stand-in logs none of vLLM's
    "acceptance_truth": [],
    "acceptance_truth_line": None,
    "acceptance_replay": None,  # speclib replay-acceptance never ran on it
    "acceptance_replay_line": None,
    "integrity": {  # the records checked whole before deciding (analysis/health/integrity.py)
        "whole": True,
        "missing": [],
        "records_only": False,
        "decided_incomplete": False,
    },
    "redecision": None,  # decided under the run's own params
    "compile_events": [],  # the stand-in logs no compile
    "stopping": {  # run until decided (core/stopping.py): a folder whose runner recorded none
        "code": None,
        "blocks": 3,
        "at_least": 3,
        "at_most": 3,
        "budget_min": None,
        "elapsed_min": None,
        "block_min": [],
        "next_block_min": None,
        "open": [],
    },
}
"""Fields the summary gained after the fixture was stored (the stack's facts,
speclib/analysis/health/stack.py), with the values this folder must give them; every other
field is compared with the stored one."""

ADDED_TO_ROWS = {"instrument_agreement": "client_lag_max_ms"}
ADDED_NONE_TO_ROWS = {"series": ("peak_gpu_bytes", "weights_gib", "kv_cache_gib")}
"""Fields each row of a list gained after the fixture was stored that a CPU run leaves
empty: the server's GPU memory (nvidia-smi) and what its log says its weights and KV cache
took on a GPU."""
"""Fields each row of a list gained after the fixture was stored: the client's worst loop-lag
probe tick per launch window (ms), read from the stored ``status.json``; the stand-in run's
client ran its probe in every window."""

DRAFTING_FIELDS = (
    "acceptance_rate",
    "decode_steps",
    "drafted_steps",
    "undrafted_share",
    "drafted_share_source",
    "requests_drafted",
    "n_requests",
)
"""Fields the why's decomposition gained after the fixture was stored (every decode step
counted, drafted or not: speclib/analysis/speculation/drafting.py)."""


def pop_drafting(new: dict[str, Any], stored: dict[str, Any]) -> None:
    """Take the drafting fields out of ``new`` after checking them on this folder, whose
    stand-in n-gram server drafts on every step (k = 3, 2 accepted per step, 5 steps per
    request) and streams what it counts; and the why's words, which now say so, out of both."""
    for row in new["launch_metrics"]:
        drafting = row.pop("drafting")
        if row["series"] == "spec":
            assert drafting["drafted_share"] == 1.0 and drafting["agrees"], drafting
            assert drafting["stream_accepted"] == drafting["accepted"] == 2 * 5 * 12, drafting
        else:
            assert drafting is None
    for old, c in zip(stored["comparisons"], new["comparisons"], strict=True):
        stream = c["acceptance"].pop("stream")
        assert stream["matches"] is (True if c["experiment"] == "spec" else None), stream
        why = c["explanation"]
        if why is None:
            continue
        d = why["decomposition"]
        assert [d.pop(k) for k in ("drafted_share_source", "undrafted_share")] == [
            "per-request metrics",
            0.0,
        ]
        assert d["verify_tokens_source"] == "per-request metrics"
        assert "0% of decode steps had no draft (0 of 90" in why["summary"]
        for k in DRAFTING_FIELDS:
            d.pop(k, None)
        old_d = old["explanation"]["decomposition"]
        old_d["verify_tokens_source"] = d["verify_tokens_source"]
        old["explanation"]["summary"] = why["summary"]


def pop_divergence_fields(new: dict[str, Any]) -> None:
    """Take out what each comparison gained with the near-tie classes and the why per kind
    (issue 55) and the divergences where the control's own answers vary (found on the H100,
    2026-12-06), checked on this folder: every greedy answer equals the control's, so no
    divergence and a gate rate of the exact-match rate; the n-gram arm's streams give each
    prompt category tokens per step above 1."""
    for c in new["comparisons"]:
        assert c.pop("divergences") == {}
        agreement = c["agreement"]
        if agreement is not None:
            kinds = ("n_near_tie", "n_real", "n_unranked", "n_control_varies")
            extra = [agreement.pop(k) for k in kinds]
            assert extra == [0, 0, 0, 0] and agreement.pop("gate_rate") == 1.0
        kinds = c.pop("why_by_category")
        if c["experiment"] == "spec":
            assert kinds and all(w["tokens_per_step"] > 1 for w in kinds.values()), kinds
        else:
            assert kinds == {}


ADDED_TO_COMPARISONS = ("pooled_decision", "short_reason", "segment_sentence")
"""Fields each experiment's comparison gained with the answer (issue 44): the stored run has
no segment, so its pooled word is its answer."""

BOOTSTRAP_ONLY = ("wilcoxon_p", "between_launch_share", "more_launches_help", "var_between",
                  "var_within", "n_resamples")  # fmt: skip
BLOCK_DIAGNOSTICS = ("se_log", "se_within_log", "instance_share", "more_blocks_help", "own_df",
                     "heterogeneity_f", "heterogeneity_p")  # fmt: skip


def one_interval_shape(stored: Any, new: Any) -> None:
    """Every ratio interval is one type since issue 57 (speclib/analysis/stats/
    ratio_interval.py): in ``stored``, a block interval's bootstrap-era fields go
    (``n_launches`` is ``n_blocks``; no Wilcoxon p, resamples or between-launch variance)
    and its arm name goes (the mapping's key names it); in ``new``, the fields it gained
    (which method, the reference, ``mixed``, ``decidable``, a block interval's diagnostics)
    are checked against the interval and taken out."""
    if isinstance(new, dict) and "method_kind" in new and isinstance(stored, dict):
        kind = new.pop("method_kind")
        decidable = new["decidable"] if "decidable" in stored else new.pop("decidable")
        assert decidable is (new["ci_high"] is not None and (new["df"] or 1) > 0)
        assert new.pop("mixed") is False
        stored["n_blocks"] = stored.pop("n_launches", stored.get("n_blocks"))
        stored.pop("arm", None)
        block = kind in ("blocks", "no_blocks")
        assert (new["reference"] in ("control", "controls")) if block else new["reference"] is None
        for key in ("reference", "median_delta", *(BLOCK_DIAGNOSTICS if block else ())):
            if key not in stored:  # the block analysis of noise[] had them before
                new.pop(key)
        for key in BOOTSTRAP_ONLY if block else ():
            stored.pop(key, None)
    if isinstance(new, dict) and isinstance(stored, dict):
        for key in stored.keys() & new.keys():
            one_interval_shape(stored[key], new[key])
    elif isinstance(new, list) and isinstance(stored, list):
        for a, b in zip(stored, new, strict=False):
            one_interval_shape(a, b)


def pop_reason_data(new: dict[str, Any]) -> None:
    """Take out the reasons as data (issue 57: ``reason_codes`` beside ``reasons``, a gate's
    ``reason`` beside its ``detail``, a bench check's ``reason`` beside its ``text``), each
    checked to render to the words stored beside it (speclib/core/reason_text.py)."""

    def words(entry: dict[str, Any]) -> str:
        return render(Reason.from_dict(entry))

    for c in new["comparisons"]:
        assert [words(r) for r in c.pop("reason_codes")] == c["reasons"]
        for g in c["gates"]:
            assert words(g.pop("reason")) == g["detail"]
        if c.get("bench_check"):
            assert words(c["bench_check"].pop("reason")) == c["bench_check"]["text"]
    for arm in new["answer"]["arms"]:
        assert [words(r) for r in arm.pop("reason_codes")] == arm["reasons"]
    for level in new["noise"]:
        check = (level.get("aa") or {}).get("bench_check")
        if check:
            assert words(check.pop("reason")) == check["text"]


REL_TOL = 1e-9
"""Floats may differ in the last bits between BLAS builds; nothing else may differ."""


def analyze_copy(tmp: Path) -> dict[str, Any]:
    """Copy the stored run folder under ``tmp``, point its params at the copied prompt set,
    analyse it, and return the summary.json it wrote."""
    run = tmp / "run"
    shutil.copytree(RUN, run)
    prompts = tmp / "prompts.jsonl"
    shutil.copy(PROMPTS, prompts)
    resolved = run / "params.resolved.json"
    params = json.loads(resolved.read_text())
    params["workload"]["prompts"] = str(prompts)
    resolved.write_text(json.dumps(params, indent=2))
    analyze_run(run)
    return json.loads((run / "summary.json").read_text())


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Every place where ``new`` differs from ``old`` (floats within :data:`REL_TOL`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{path}.{k}: missing" for k in old if k not in new]
        out += [f"{path}.{k}: new" for k in new if k not in old]
        for k in old.keys() & new.keys():
            out += differences(old[k], new[k], f"{path}.{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items -> {len(new)}"]
        pairs = enumerate(zip(old, new, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(old, float) and isinstance(new, float):
        if math.isclose(old, new, rel_tol=REL_TOL) or (math.isnan(old) and math.isnan(new)):
            return []
    elif type(old) is type(new) and old == new:
        return []
    return [f"{path}: {old!r} -> {new!r}"]


def test_the_stored_run_gives_the_stored_summary(tmp_path: Path) -> None:
    stored = json.loads(STORED.read_text())
    new = analyze_copy(tmp_path)
    assert new["run_dir"] == str(tmp_path / "run")
    for key in VOLATILE:
        stored.pop(key)
        new.pop(key)
    for key, value in ADDED_SINCE.items():
        assert key not in stored and new.pop(key) == value, key
    for key, field in ADDED_TO_ROWS.items():
        lags = [row.pop(field) for row in new[key]]
        assert all(field not in row for row in stored[key])
        assert all(isinstance(lag, float) and 0 <= lag < 1000 for lag in lags), lags
    pop_reason_data(new)
    pop_drafting(new, stored)
    pop_divergence_fields(new)
    answer = new.pop("answer")
    experiments = [c for c in stored["comparisons"] if c["role"] != "aa"]
    assert [a["word"] for a in answer["arms"]] == [c["decision"] for c in experiments]
    assert answer["headline"] == [] and answer["mix"] is None
    for c in new["comparisons"]:
        if c["role"] != "aa":
            assert c.pop("pooled_decision") == c["decision"]
            assert c.pop("short_reason") is None and c.pop("segment_sentence") is None
    for key, fields in ADDED_NONE_TO_ROWS.items():
        for row in new[key]:
            assert all(row.pop(f) is None for f in fields), row
    one_interval_shape(stored, new)
    assert differences(stored, new) == []


def test_the_fixture_is_small() -> None:
    size = sum(p.stat().st_size for p in [*RUN.rglob("*"), PROMPTS, STORED] if p.is_file())
    assert size < 1_000_000
