"""Params files: every bad input gets one clear message naming file, field and value."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from speclib.params.loader import ParamsError, load_params

REPO = Path(__file__).resolve().parents[2]


def _base(tmp_path: Path) -> dict:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"id": "a", "category": "x", "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    draft = tmp_path / "draft"
    draft.mkdir()
    return {
        "name": "t",
        "server": {"model": str(draft)},
        "series": [
            {"name": "control"},
            {
                "name": "exp",
                "speculative_config": {
                    "method": "draft_model",
                    "model": str(draft),
                    "num_speculative_tokens": 3,
                },
            },
        ],
        "workload": {"prompts": "prompts.jsonl"},
    }


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _error(tmp_path: Path, data: dict) -> str:
    path = _write(tmp_path, data)
    with pytest.raises(ParamsError) as info:
        load_params(path)
    msg = str(info.value)
    assert str(path) in msg  # the file is always named
    return msg


def test_valid_file_loads_and_resolves_relative_paths(tmp_path):
    params = load_params(_write(tmp_path, _base(tmp_path)))
    assert params.control_name == "control"
    assert params.resolve_path(params.workload.prompts) == tmp_path / "prompts.jsonl"
    assert params.server.host == "127.0.0.1"
    assert params.series[1].wants_per_request_metrics
    assert not params.series[0].wants_per_request_metrics


def test_unknown_key_names_field_and_value(tmp_path):
    data = _base(tmp_path)
    data["workload"]["max_token"] = 64
    msg = _error(tmp_path, data)
    assert "workload.max_token" in msg and "unknown key" in msg and "64" in msg


def test_wrong_type(tmp_path):
    data = _base(tmp_path)
    data["workload"]["concurrency"] = "many"
    msg = _error(tmp_path, data)
    assert "workload.concurrency" in msg and '"many"' in msg


def test_missing_prompt_file(tmp_path):
    data = _base(tmp_path)
    data["workload"]["prompts"] = "nope.jsonl"
    msg = _error(tmp_path, data)
    assert "workload.prompts" in msg and "nope.jsonl" in msg


def test_missing_local_model_folder(tmp_path):
    data = _base(tmp_path)
    data["series"][1]["speculative_config"]["model"] = str(tmp_path / "no-such-draft")
    msg = _error(tmp_path, data)
    assert "speculative_config.model" in msg and "no-such-draft" in msg
    assert "name='exp'" in msg


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"method": "medusa2", "num_speculative_tokens": 2}, "unknown speculative method"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "positive integer"),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 3,
                "prompt_lookup_min": 5,
                "prompt_lookup_max": 2,
            },
            "prompt_lookup_min (5) must be <= prompt_lookup_max (2)",
        ),
        (
            {
                "method": "draft_model",
                "model": "x/y",
                "num_speculative_tokens": 3,
                "tensor_parallel_size": 1,
            },
            "draft_tensor_parallel_size",
        ),
        ({"method": "draft_model", "num_speculative_tokens": 3}, "needs 'model'"),
    ],
)
def test_bad_speculative_config(tmp_path, spec, needle):
    data = _base(tmp_path)
    data["series"][1]["speculative_config"] = spec
    msg = _error(tmp_path, data)
    assert needle in msg and "series[1]" in msg


def test_per_request_metrics_on_control_refused(tmp_path):
    data = _base(tmp_path)
    data["series"][0]["per_request_metrics"] = True
    msg = _error(tmp_path, data)
    assert "per_request_metrics" in msg and "speculative_config" in msg


def test_duplicate_series_names(tmp_path):
    data = _base(tmp_path)
    data["series"].append(
        {"name": "exp", "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}
    )
    assert "duplicate series names: ['exp']" in _error(tmp_path, data)


def test_empty_prompt_set(tmp_path):
    data = _base(tmp_path)
    (tmp_path / "prompts.jsonl").write_text("\n")
    from speclib.core.prompts import PromptSetError, load_prompts

    params = load_params(_write(tmp_path, data))
    with pytest.raises(PromptSetError, match="empty"):
        load_prompts(params.resolve_path(params.workload.prompts))


def test_non_loopback_host_needs_opt_in_and_key(tmp_path):
    data = _base(tmp_path)
    data["server"]["host"] = "0.0.0.0"
    assert "allow_remote" in _error(tmp_path, data)
    data["server"]["allow_remote"] = True
    assert "api_key_env is required" in _error(tmp_path, data)


def test_api_key_env_must_be_set(tmp_path, monkeypatch):
    data = _base(tmp_path)
    data["server"]["api_key_env"] = "SPECLIB_TEST_KEY_UNSET"
    monkeypatch.delenv("SPECLIB_TEST_KEY_UNSET", raising=False)
    assert "SPECLIB_TEST_KEY_UNSET" in _error(tmp_path, data)


@pytest.mark.parametrize("flag", ["--speculative-model=x", "--num-speculative-tokens"])
def test_deprecated_flags_point_to_speculative_config(tmp_path, flag):
    data = _base(tmp_path)
    data["server"]["extra_args"] = [flag]
    msg = _error(tmp_path, data)
    assert "speculative_config" in msg and "server.extra_args" in msg


def test_exactly_one_control(tmp_path):
    data = _base(tmp_path)
    data["series"][0]["speculative_config"] = {"method": "ngram", "num_speculative_tokens": 2}
    assert "control" in _error(tmp_path, data)


def test_not_yaml_mapping(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ParamsError, match="top level must be a mapping"):
        load_params(path)


def test_shipped_params_files_validate():
    for path in sorted((REPO / "params").glob("*.yaml")):
        load_params(path, check_files=False)


def test_cli_validate_typo_gets_one_line_answer(tmp_path):
    data = _base(tmp_path)
    data["workload"]["temprature"] = 0.5
    path = _write(tmp_path, data)
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "workload.temprature: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cache_reset_only_on_loopback(tmp_path, monkeypatch):
    data = _base(tmp_path)
    data["protocol"] = {"cache_policy": "reset"}
    load_params(_write(tmp_path, data))  # loopback: allowed
    monkeypatch.setenv("SPECLIB_TEST_KEY", "x")
    data["server"].update(host="10.1.2.3", allow_remote=True, api_key_env="SPECLIB_TEST_KEY")
    msg = _error(tmp_path, data)
    assert "cache_policy 'reset'" in msg and "loopback" in msg


def test_load_levels_and_rates(tmp_path):
    data = _base(tmp_path)
    data["workload"].update(concurrency=[1, 4], request_rates=[2.5])
    levels = load_params(_write(tmp_path, data)).workload.levels
    assert [(lv.concurrency, lv.request_rate) for lv in levels] == [(1, None), (4, None), (4, 2.5)]
    data["workload"]["concurrency"] = [2, 2]
    assert "distinct" in _error(tmp_path, data)


@pytest.mark.parametrize(
    ("workload", "needle"),
    [
        ({"max_tokens": 1}, "max_tokens must be >= 2: TPOT"),
        ({"max_tokens": 8, "min_tokens": 9}, "min_tokens (9) must be <= max_tokens (8)"),
    ],
)
def test_token_counts_that_measure_nothing(tmp_path, workload, needle):
    data = _base(tmp_path)
    data["workload"].update(workload)
    assert needle in _error(tmp_path, data)


def test_run_until_decided_needs_two_first_blocks(tmp_path):
    """The first look of run-until-decided is workload.replicates: one block cannot decide."""
    data = _base(tmp_path)
    data["workload"]["replicates"] = 1
    data.setdefault("protocol", {})["max_replicates"] = 4
    assert "workload.replicates (1) must be >= 2 with protocol.max_replicates" in _error(
        tmp_path, data
    )
    data["workload"]["replicates"] = 2
    assert load_params(_write(tmp_path, data), check_files=False).protocol.max_replicates == 4


def test_target_resolution_is_for_a_calibration_run(tmp_path):
    """protocol.target_resolution: a fraction in (0, 1), only with protocol.aa and the
    control alone, and at least two first blocks (one block has no resolution)."""
    data = _base(tmp_path)
    data["protocol"] = {"aa": True, "target_resolution": 0.1}
    assert "protocol.target_resolution is for a calibration run" in _error(tmp_path, data)
    data["series"] = data["series"][:1]
    data["workload"]["replicates"] = 1
    assert "must be >= 2 with protocol.target_resolution" in _error(tmp_path, data)
    data["workload"]["replicates"] = 3
    for bad in (0, 1.5, "fine"):
        data["protocol"]["target_resolution"] = bad
        assert "target_resolution" in _error(tmp_path, data)
    data["protocol"].update(target_resolution=0.1, target_resolutoin=0.1)
    assert "target_resolutoin" in _error(tmp_path, data)  # unknown keys are refused
    del data["protocol"]["target_resolutoin"]
    loaded = load_params(_write(tmp_path, data), check_files=False)
    assert loaded.protocol.target_resolution == 0.1


def test_the_calibration_params_file_sets_a_target_resolution():
    params = load_params(REPO / "params" / "cpu-demo-aa.yaml", check_files=False)
    assert params.protocol.target_resolution == 0.10
    assert params.workload.replicates == 3 and params.protocol.max_replicates == 6


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_speculative_keys_checked_against_installed_vllm(tmp_path):
    data = _base(tmp_path)
    data["series"][1]["speculative_config"]["num_speculative_token"] = 3
    msg = _error(tmp_path, data)
    assert "series[1] (name='exp').speculative_config.num_speculative_token: unknown key" in msg
    assert "did you mean 'num_speculative_tokens'" in msg
    load_params(_write(tmp_path, data), check_vllm=False)  # the kit's own rules only
