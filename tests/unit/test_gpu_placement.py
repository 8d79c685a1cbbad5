"""Servers on GPUs: placement, derived memory shares, the memory plan and the start order.

The plan and the order are pure functions, checked on hand-made GPUs; the start order and
the command line are then checked through the CLI with the stand-in server (real
processes), whose params name GPUs: placement needs no GPU, only ``nvidia-smi`` does.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from speclib.params.loader import ParamsError, load_params
from speclib.run.placement import GpuInfo, memory_plan, placements, start_after
from tests.helpers import fake_servers_left, kit_cache_with_facts
from tests.unit.test_robustness import _params, _run


def _load(tmp: Path, *, series_gpus: dict[str, list[int]] | None = None, **server) -> object:
    path = _params(tmp, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["server"].update(server)
    data["series"].append(
        {"name": "spec2", "speculative_config": {**data["series"][1]["speculative_config"]}}
    )
    for s in data["series"]:
        if series_gpus and s["name"] in series_gpus:
            s["gpus"] = series_gpus[s["name"]]
    path.write_text(yaml.safe_dump(data))
    return load_params(path)


REPO = Path(__file__).resolve().parents[2]
H200 = [GpuInfo(0, "NVIDIA H200", 143771.0, 500.0), GpuInfo(1, "NVIDIA H200", 143771.0, 0.0)]


def test_servers_sharing_a_gpu_split_the_default_share(tmp_path: Path) -> None:
    params = _load(tmp_path, gpus=[0])
    placed = placements(params, n_gpus=1)
    assert {p.gpus for p in placed.values()} == {(0,)}
    assert [p.utilization for p in placed.values()] == [0.3, 0.3, 0.3]  # 0.90 / 3
    assert all(p.derived for p in placed.values())
    assert not memory_plan([list(placed)], placed, H200).problems


def test_arms_on_separate_gpus_split_only_with_their_neighbours(tmp_path: Path) -> None:
    params = _load(tmp_path, series_gpus={"control": [0], "spec": [1], "spec2": [1]})
    placed = placements(params, n_gpus=2)
    assert placed["control"].utilization == 0.9 and placed["control"].gpus == (0,)
    assert placed["spec"].utilization == placed["spec2"].utilization == 0.45
    order = start_after(["control", "spec", "spec2"], placed)
    assert order == {"control": (), "spec": (), "spec2": ("spec",)}


def test_a_set_share_that_cannot_fit_is_an_error_with_the_numbers(tmp_path: Path) -> None:
    params = _load(tmp_path, gpus=[0], gpu_memory_utilization=0.85)
    placed = placements(params, n_gpus=1)
    plan = memory_plan([list(placed)], placed, H200)
    assert any("control 0.85 + spec 0.85 + spec2 0.85 = 2.55" in p for p in plan.problems)
    assert any("over the limit 0.95" in p for p in plan.problems)


def test_the_plan_counts_memory_other_processes_hold(tmp_path: Path) -> None:
    params = _load(tmp_path, gpus=[0], gpu_memory_utilization=0.31)
    placed = placements(params, n_gpus=1)
    busy = [GpuInfo(0, "NVIDIA H200", 143771.0, 60000.0)]
    (problem,) = memory_plan([list(placed)], placed, busy).problems
    assert "0.93 × 143771 MiB = 133707 MiB, but only 83771 MiB are free" in problem
    assert "60000 MiB in use by other processes" in problem


def test_a_gpu_the_machine_lacks_is_named(tmp_path: Path) -> None:
    params = _load(tmp_path, series_gpus={"spec2": [3]})
    placed = placements(params, n_gpus=2)
    plan = memory_plan([list(placed)], placed, H200)
    assert any(
        "GPU 3 is named for spec2 but this machine has GPUs [0, 1]" in p for p in plan.problems
    )


def test_without_a_gpu_nothing_is_placed_unless_named(tmp_path: Path) -> None:
    params = _load(tmp_path)
    placed = placements(params, n_gpus=0)
    assert all(p.gpus is None and p.utilization is None for p in placed.values())
    assert set(start_after(list(placed), placed).values()) == {()}


def test_gpus_must_name_one_gpu_per_tensor_parallel_rank(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"server.*names 1 GPU\(s\) but tensor_parallel_size"):
        _load(tmp_path, gpus=[0], tensor_parallel_size=2)
    with pytest.raises(ParamsError, match="distinct GPU indices"):
        _load(tmp_path, series_gpus={"spec": [1, 1]})


def test_the_aa_arm_runs_on_the_experiments_gpus_when_they_differ(tmp_path: Path) -> None:
    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["protocol"]["aa"] = True
    data["series"][1]["gpus"] = [1]
    path.write_text(yaml.safe_dump(data))
    params = load_params(path)
    arms = {a.name: params.gpus_of(a) for a in params.arms}
    assert arms == {"control": None, "spec": [1], "aa": [1]}


def _statuses(run: Path) -> dict[str, dict]:
    out = {}
    for f in (run / "launches").glob("*/status.json"):
        s = json.loads(f.read_text())
        out[s["series"]] = s
    return out


def _commands(run: Path) -> dict[str, dict]:
    return {
        f.parent.name.rsplit("-r", 1)[0]: json.loads(f.read_text())
        for f in (run / "launches").glob("*/command.json")
    }


def test_servers_sharing_a_gpu_start_one_after_another(tmp_path: Path) -> None:
    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"aa": True, "switch_pause_s": 0}
    data["server"]["gpus"] = [0]
    path.write_text(yaml.safe_dump(data))
    proc = _run(["run", str(path), "--out", str(tmp_path / "run")], env={"FAKE_VLLM_START_S": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    status = _statuses(tmp_path / "run")
    starts = sorted(
        (s["started_at"], s["started_at"] + s["server_ready_s"]) for s in status.values()
    )
    for (_, ready), (start, _) in itertools.pairwise(starts):
        assert start >= ready - 0.05  # the next starts once the one before is ready
    commands = _commands(tmp_path / "run")
    for cmd in commands.values():
        assert cmd["env"]["CUDA_VISIBLE_DEVICES"] == "0"
        i = cmd["argv"].index("--gpu-memory-utilization")
        assert cmd["argv"][i + 1] == "0.3"  # 0.90 split among three servers
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["placement"]["aa"] == {
        "gpus": [0],
        "gpu_memory_utilization": 0.3,
        "derived": True,
        "kv_cache_gib": None,
        "kv_auto": False,
    }
    assert manifest["memory_plan"]["problems"] == []


def test_servers_on_separate_gpus_start_together(tmp_path: Path) -> None:
    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"switch_pause_s": 0}
    data["series"][0]["gpus"], data["series"][1]["gpus"] = [0], [1]
    path.write_text(yaml.safe_dump(data))
    proc = _run(["run", str(path), "--out", str(tmp_path / "run")], env={"FAKE_VLLM_START_S": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = _statuses(tmp_path / "run")
    assert abs(status["control"]["started_at"] - status["spec"]["started_at"]) < 0.9
    commands = _commands(tmp_path / "run")
    assert commands["control"]["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert commands["spec"]["env"]["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_tensor_parallel_target_is_placed_and_planned_per_gpu(tmp_path: Path) -> None:
    from speclib.run.launching import build_launch_spec

    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["server"].update(tensor_parallel_size=2, launcher=None)
    data["series"][1] = {
        "name": "draft",
        "speculative_config": {
            "method": "draft_model",
            "model": str(tmp_path),
            "num_speculative_tokens": 4,
            "draft_tensor_parallel_size": 1,
        },
    }
    data["series"].append({**data["series"][1], "name": "draft-tp2", "gpus": [2, 3]})
    data["series"][2]["speculative_config"] = {
        **data["series"][1]["speculative_config"],
        "draft_tensor_parallel_size": 2,
    }
    path.write_text(yaml.safe_dump(data))
    params = load_params(path, check_vllm=False)
    placed = placements(params, n_gpus=4)
    assert placed["control"].gpus == placed["draft"].gpus == (0, 1)
    assert placed["draft-tp2"].gpus == (2, 3) and placed["draft-tp2"].utilization == 0.9
    assert placed["control"].utilization == 0.45  # two servers on GPUs 0 and 1
    spec = build_launch_spec(
        params,
        params.series_by_name("draft-tp2"),
        log_path=tmp_path / "log",
        pidfile=None,
        tmpdir=tmp_path,
        cache_root=tmp_path / "cache",
    )
    argv = list(spec.argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["draft_tensor_parallel_size"] == 2 and "tensor_parallel_size" not in config
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    four = [GpuInfo(i, "NVIDIA H200", 143771.0, 0.0) for i in range(4)]
    plan = memory_plan([list(placed)], placed, four)
    assert [(r["gpu"], r["servers"]) for r in plan.rows] == [
        (0, ["control", "draft"]),
        (1, ["control", "draft"]),
        (2, ["draft-tp2"]),
        (3, ["draft-tp2"]),
    ]
    assert not plan.problems
    two = four[:2]
    assert any(
        "GPU 2 is named for draft-tp2" in p
        for p in memory_plan([list(placed)], placed, two).problems
    )


def test_validate_refuses_servers_that_cannot_fit_one_gpu(tmp_path: Path, capsys) -> None:
    from speclib.app.cli import main

    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["server"].update(gpus=[0], gpu_memory_utilization=0.6)
    data["protocol"] = {"design": "interleaved"}
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    assert "2 servers × gpu_memory_utilization 0.6 = 1.20 of each GPU do not fit" in (
        capsys.readouterr().err
    )
    data["protocol"] = {"design": "auto"}  # one server per block: fits
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "placement: control on GPU 0, share 0.6" in out


def test_servers_that_may_start_together_wait_for_none_and_the_others_wait_for_them(
    tmp_path: Path,
) -> None:
    params = _load(tmp_path, gpus=[0])
    placed = placements(params, n_gpus=1)
    assert start_after(["control", "spec", "spec2"], placed) == {
        "control": (),
        "spec": ("control",),
        "spec2": ("control", "spec"),
    }
    # spec never ran on the shared cache: it starts alone, after the two that start together
    order = start_after(["control", "spec", "spec2"], placed, together={"control", "spec2"})
    assert order == {"control": (), "spec": ("control", "spec2"), "spec2": ()}


def test_a_fixed_kv_cache_must_fit_in_each_share(tmp_path: Path) -> None:
    params = _load(tmp_path, gpus=[0], kv_cache_memory_gib=60)
    placed = placements(params, n_gpus=1)  # 0.3 of 140.4 GiB each: 42.1 GiB
    plan = memory_plan([list(placed)], placed, H200, kv_cache_gib=60)
    assert len(plan.problems) == 3 and "kv_cache_memory_gib 60 GiB for spec" in plan.problems[1]
    assert "42.1 GiB" in plan.problems[0]
    ok = memory_plan([list(placed)], placed, H200, kv_cache_gib=8)
    assert not ok.problems and ok.rows[0]["kv_cache_gib"] == 8


def test_a_config_key_leaves_out_the_port_and_follows_the_vllm_version() -> None:
    from speclib.run.compile_cache import config_key

    a = config_key(["--model", "m", "--port", "1234", "--seed", "0"], "0.26.0")
    assert a == config_key(["--model", "m", "--port", "99", "--seed", "0"], "0.26.0")
    assert a == config_key(["--model", "m", "--port=7", "--seed", "0"], "0.26.0")
    assert a != config_key(["--model", "m", "--port", "1234", "--seed", "1"], "0.26.0")
    assert a != config_key(["--model", "m", "--port", "1234", "--seed", "0"], "0.32.0")


def test_with_a_fixed_kv_cache_a_later_block_starts_its_servers_together(
    tmp_path: Path,
) -> None:
    path = _params(tmp_path, n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["protocol"] = {"switch_pause_s": 0, "compile_cache": "shared", "max_replicates": None}
    data["server"].update(gpus=[0], kv_cache_memory_gib=2)
    data["workload"]["replicates"] = 2
    path.write_text(yaml.safe_dump(data))
    cache = kit_cache_with_facts(tmp_path / "cache")  # the shared compile cache starts empty
    env = {"FAKE_VLLM_START_S": "1", "SPECLIB_CACHE": str(cache)}
    proc = _run(["run", str(path), "--out", str(tmp_path / "run")], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake_servers_left()
    status = {}
    for f in (tmp_path / "run" / "launches").glob("*/status.json"):
        s = json.loads(f.read_text())
        status[(s["series"], s["replicate"])] = s
    first = sorted((status[(a, 0)] for a in ("control", "spec")), key=lambda s: s["started_at"])
    # block r0: nothing started on the shared cache before, so one after another
    assert first[1]["started_at"] >= first[0]["started_at"] + first[0]["server_ready_s"] - 0.05
    assert first[1]["extra"]["start_after"] == [first[0]["series"]]
    # block r1: both configurations are on record, so together
    c1, s1 = status[("control", 1)], status[("spec", 1)]
    assert abs(c1["started_at"] - s1["started_at"]) < 0.9
    assert c1["extra"]["start_after"] == s1["extra"]["start_after"] == []
    for cmd in _commands(tmp_path / "run").values():
        i = cmd["argv"].index("--kv-cache-memory-bytes")
        assert cmd["argv"][i + 1] == str(2 * 2**30)
    assert len(list((tmp_path / "cache" / "vllm-cache" / "speclib-started").glob("*.json"))) == 2


H100 = [GpuInfo(0, "NVIDIA H100 80GB HBM3", 81559.0, 0.0)]


def test_weights_and_fixed_kv_caches_that_cannot_fit_the_free_memory_are_an_error(
    tmp_path: Path,
) -> None:
    """Servers of the GPU demo's pair (target 7.7 GiB, target + draft 9.0 GiB) with 20 GiB of
    KV cache each and the reserve for activations cannot fit an 80 GB card; with 3 GiB they
    can."""
    params = _load(tmp_path, gpus=[0])
    placed = placements(params, n_gpus=1)
    weights = {"control": 7.7, "spec": 9.0, "spec2": 9.0}
    plan = memory_plan([list(placed)], placed, H100, kv_cache_gib=20, weights_gib=weights)
    assert len(plan.problems) == 1  # 20 GiB fits each share (23.9 GiB): only the sum fails
    assert "(control 7.7 + spec 9.0 + spec2 9.0 GiB)" in plan.problems[0]
    assert "3 × server.kv_cache_memory_gib 20 GiB" in plan.problems[0]
    assert "6 GiB each for activations" in plan.problems[0]
    assert "take 103.7 GiB" in plan.problems[0] and "only 79.6 GiB are free" in plan.problems[0]
    ok = memory_plan([list(placed)], placed, H100, kv_cache_gib=3, weights_gib=weights)
    assert not ok.problems and ok.rows[0]["weights_gib"] == weights
    # an arm whose weights are not known (a hub id) leaves the sum unknown: no refusal
    partial = {"control": 7.7, "spec": 9.0}
    assert not memory_plan(
        [list(placed)], placed, H100, kv_cache_gib=20, weights_gib=partial
    ).problems
    assert not memory_plan([list(placed)], placed, H100, kv_cache_gib=20).problems


def test_weights_larger_than_a_servers_share_are_an_error(tmp_path: Path) -> None:
    """Without a fixed KV cache each server profiles inside its share: three servers of a
    30 GB checkpoint at 0.3 of an 80 GB card (23.9 GiB each) cannot load it."""
    params = _load(tmp_path, gpus=[0])
    placed = placements(params, n_gpus=1)
    plan = memory_plan([list(placed)], placed, H100, weights_gib={"spec": 28.0, "control": 20.0})
    assert len(plan.problems) == 1 and plan.problems[0].startswith("GPU 0: spec's checkpoints")
    assert "its share 0.3 × 79.6 GiB = 23.9 GiB" in plan.problems[0]
    # on two GPUs (tensor parallel) the same checkpoint is half as large on each
    (tmp_path / "tp").mkdir()
    two = placements(_load(tmp_path / "tp", gpus=[0, 1], tensor_parallel_size=2), n_gpus=2)
    gpus = [*H100, GpuInfo(1, "NVIDIA H100 80GB HBM3", 81559.0, 0.0)]
    assert not memory_plan([list(two)], two, gpus, weights_gib={"spec": 28.0}).problems


def test_the_weights_weighed_are_the_checkpoints_each_arm_loads(tmp_path: Path) -> None:
    from speclib.run.placement import checkpoint_gib
    from speclib.run.preflight import arm_weights_gib

    target, draft = tmp_path / "target", tmp_path / "draft"
    for folder, gib in ((target, 2), (draft, 0.5)):
        folder.mkdir()
        with open(folder / "model.safetensors", "wb") as f:
            f.truncate(int(gib * 2**30))  # sparse: the size is what counts
        (folder / "config.json").write_text("{}")
    assert checkpoint_gib(target) == 2 and checkpoint_gib(tmp_path / "none") is None
    assert checkpoint_gib(tmp_path) is None  # a folder without weight files
    (tmp_path / "p").mkdir()
    path = _params(tmp_path / "p", n_prompts=4)
    data = yaml.safe_load(path.read_text())
    data["server"]["model"] = str(target)
    data["series"].append(
        {"name": "draft", "speculative_config": {"method": "draft_model", "model": str(draft),
                                                 "num_speculative_tokens": 2}}
    )  # fmt: skip
    data["series"].append(
        {"name": "hub-draft", "speculative_config": {"method": "draft_model",
                                                     "model": "Qwen/Qwen3-0.6B",
                                                     "num_speculative_tokens": 2}}
    )  # fmt: skip
    data["series"].append(
        {"name": "remote", "base_url": "http://127.0.0.1:9/v1",
         "speculative_config": {"method": "draft_model", "model": str(draft),
                                "num_speculative_tokens": 2}}
    )  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    weights = arm_weights_gib(load_params(path))
    # a hub id's weights are not known here; "remote" is not started by the kit
    assert weights == {"control": 2, "spec": 2, "draft": 2.5}


DEMO_WEIGHTS = {"control": 8.217, "draft-k2": 9.617, "draft-k4": 9.617, "ngram-k4": 8.217}


def test_an_automatic_kv_cache_is_what_the_gpu_leaves_after_weights_and_reserves() -> None:
    """The GPU demo's four servers (weights from the pair's declared shapes): 3.75 GiB of KV
    cache each on an 80 GB H100, 18.25 GiB on an H200; a GPU too small is refused."""
    from speclib.run.placement import MIN_AUTO_KV_GIB, RESERVE_GIB, auto_kv_gib

    assert auto_kv_gib(81559 / 1024, list(DEMO_WEIGHTS.values())) == 3.75
    assert auto_kv_gib(143771 / 1024, list(DEMO_WEIGHTS.values())) == 18.25
    room = 81559 / 1024 * 0.95 - 4 * (3.75 + RESERVE_GIB) - sum(DEMO_WEIGHTS.values())
    assert 0 <= room < 4 * 0.25  # rounded down to 0.25 GiB, nothing more left over
    assert auto_kv_gib(40.0, list(DEMO_WEIGHTS.values())) < MIN_AUTO_KV_GIB
    with pytest.raises(ValueError, match="weights_gib"):
        auto_kv_gib(80.0, [])


def test_the_gpu_demo_fits_an_h100_and_an_h200_with_an_automatic_kv_cache(monkeypatch) -> None:
    """The same params: every server gets the automatic size of its card, the plan passes
    on both cards, and a card with 18 GiB held by another process is refused by name."""
    import speclib.run.placement as placement

    monkeypatch.setattr(placement, "is_cpu_build", lambda: False)  # a GPU build of vLLM
    params = load_params(REPO / "params" / "gpu-demo.yaml")
    for gpus, want in ((H100, 10.5), (H200, 29.75)):  # three servers: 0.90 / 3 each
        totals = {g.index: g.total_mib / 1024 for g in gpus}
        placed = placements(params, n_gpus=1, totals_gib=totals, weights_gib=DEMO_WEIGHTS)
        assert {p.kv_cache_gib for p in placed.values()} == {want}
        assert all(p.kv_auto and p.utilization == 0.3 for p in placed.values())
        plan = memory_plan([list(placed)], placed, gpus, weights_gib=DEMO_WEIGHTS)
        assert not plan.problems, plan.problems
        assert plan.rows[0]["kv_cache_gib"] == want and plan.rows[0]["kv_auto"]
    busy = [GpuInfo(0, "NVIDIA H100 80GB HBM3", 81559.0, 18345.0)]
    totals = {0: 81559 / 1024}
    placed = placements(params, n_gpus=1, totals_gib=totals, weights_gib=DEMO_WEIGHTS)
    plan = memory_plan([list(placed)], placed, busy, weights_gib=DEMO_WEIGHTS)
    assert any("18345 MiB in use by other processes" in p for p in plan.problems)
    # a neighbour of unknown weights (a hub id): vLLM profiles, nothing is fixed
    unknown = placements(params, n_gpus=1, totals_gib=totals, weights_gib={"control": 8.2})
    assert {p.kv_cache_gib for p in unknown.values()} == {None}
    # on a GPU too small for its three servers the plan says to run fewer arms together
    small = [GpuInfo(0, "small", 40960.0, 0.0)]
    placed = placements(params, n_gpus=1, totals_gib={0: 40.0}, weights_gib=DEMO_WEIGHTS)
    plan = memory_plan([list(placed)], placed, small, weights_gib=DEMO_WEIGHTS)
    assert any("kv_cache_memory_gib auto leaves" in p and "fewer arms" in p for p in plan.problems)
