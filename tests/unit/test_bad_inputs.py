"""Impossible configurations are refused before anything allocates (issue #54).

Each case is a params file a user could write by mistake: a count with no sane value, a
boolean where a count belongs, an infinite timeout, a series named like the A/A arm, a run
folder at a system folder, a speculative checkpoint folder that a server could not load.
``validate_params`` (what ``speclib validate`` runs) refuses each with a
:class:`ParamsError` naming the field and why; two go through the CLI (exit 2, one screen,
``doctor`` too).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from speclib.params.loader import ParamsError
from speclib.params.validation import validate_params
from tests.helpers import stand_in_checkpoint

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PROMPT = '{"id": "a", "category": "x", "messages": [{"role": "user", "content": "hi"}]}\n'


def _write(tmp_path: Path, data: dict | str) -> Path:
    (tmp_path / "prompts.jsonl").write_text(PROMPT)
    path = tmp_path / "p.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _params(tmp_path: Path, **sections: dict) -> dict:
    data = {
        "name": "t",
        "server": {"model": str(tmp_path)},
        "series": [
            {"name": "control"},
            {
                "name": "exp",
                "speculative_config": {
                    "method": "ngram",
                    "num_speculative_tokens": 3,
                    "prompt_lookup_max": 3,
                },
            },
        ],
        "workload": {"prompts": "prompts.jsonl", "max_tokens": 8},
    }
    for key, values in sections.items():
        data[key] = {**data.get(key, {}), **values} if isinstance(values, dict) else values
    return data


def _refused(tmp_path: Path, data: dict | str, *says: str) -> str:
    with pytest.raises(ParamsError) as err:
        validate_params(_write(tmp_path, data))
    text = str(err.value)
    assert len(text.splitlines()) <= 12, text
    for words in says:
        assert words in text, text
    return text


@pytest.mark.parametrize(
    ("section", "values", "says"),
    [
        ("workload", {"replicates": 10**12}, "workload.replicates: too large: at most 1000"),
        ("workload", {"concurrency": 10**9}, "concurrency 1000000000 is above 4096"),
        ("workload", {"concurrency": [1, 10**9]}, "is above 4096"),
        ("workload", {"request_rates": [1e9]}, "is above 10 000"),
        ("workload", {"num_prompts": 10**12}, "workload.num_prompts: too large"),
        ("workload", {"repeats": 10**9}, "workload.repeats: too large: at most 1000"),
        ("workload", {"min_waves": 10**9}, "workload.min_waves: too large"),
        ("workload", {"warmup_requests": 10**9}, "workload.warmup_requests: too large"),
        ("analysis", {"n_resamples": 10**13}, "analysis.n_resamples: too large: at most 100 000"),
        ("analysis", {"seed": -1}, "analysis.seed"),
        ("protocol", {"max_replicates": 10**9}, "protocol.max_replicates: too large"),
        ("protocol", {"slot_requests": 10**9}, "protocol.slot_requests: too large"),
        ("server", {"start_timeout_s": 1e12}, "server.start_timeout_s: too large: at most 86 400"),
    ],
)
def test_an_absurd_count_is_refused_with_its_bound_and_why(
    tmp_path: Path, section: str, values: dict, says: str
) -> None:
    text = _refused(tmp_path, _params(tmp_path, **{section: values}), says)
    assert "value:" in text


def test_a_bound_and_its_reason_are_in_the_params_reference() -> None:
    from speclib.params.loader import ExperimentParams

    doc = (REPO / "docs" / "params.md").read_text()
    field = ExperimentParams.model_fields["workload"].annotation.model_fields["replicates"]
    assert "At most 1000: each block starts every arm's servers afresh" in field.description
    assert "At most 1000: each block starts every arm" in doc


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("  replicates: true\n", "workload.replicates: Input should be a valid integer"),
        ("  request_timeout_s: .inf\n", "workload.request_timeout_s: Input should be a finite"),
        ("  request_timeout_s: .nan\n", "workload.request_timeout_s: Input should be a finite"),
        ("  max_tokens: 8.5\n", "workload.max_tokens: Input should be a valid integer"),
    ],
)
def test_a_value_is_taken_as_written(tmp_path: Path, text: str, says: str) -> None:
    data = _params(tmp_path)
    data["workload"] = {"prompts": "prompts.jsonl"}
    _refused(tmp_path, yaml.safe_dump(data) + text, says)


def test_segment_edges_must_be_finite_and_positive(tmp_path: Path) -> None:
    base = yaml.safe_dump(_params(tmp_path))
    nan = base + "analysis:\n  segment_edges: {prompt_length: [.nan]}\n"
    _refused(tmp_path, nan, "segment_edges.prompt_length[0]: Input should be a finite number")
    neg = _params(tmp_path, analysis={"segment_edges": {"prompt_length": [-5, 10]}})
    _refused(tmp_path, neg, "list of positive token counts", "-5")


@pytest.mark.parametrize("name", ["aa", "x.draft-alone"])
def test_a_series_named_like_a_kit_arm_is_refused_whether_or_not_it_is_on(
    tmp_path: Path, name: str
) -> None:
    data = _params(tmp_path)
    data["series"][1]["name"] = name
    _refused(tmp_path, data, f"series[1] (name={name!r}).name", "reserved", "rename it")


def test_a_name_too_long_for_a_file_name_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, _params(tmp_path, name="x" * 300), "name: too long: at most 100 characters")


def test_output_dir_at_a_system_folder_home_or_inside_a_run_is_refused(tmp_path: Path) -> None:
    for where, says in (
        ("/", "the file system's root"),
        ("/etc", "a system folder"),
        ("/usr/bin", "a system folder"),
        ("~", "holds other files than a run's"),
        ("/tmp", "holds other files than a run's"),
        (str(tmp_path / ("x" * 300)), "longer than a file name may be"),
    ):
        _refused(tmp_path, _params(tmp_path, output_dir=where), "output_dir: ", says)
    run = tmp_path / "run"
    run.mkdir()
    (run / "requests.jsonl").write_text("")
    _refused(tmp_path, _params(tmp_path, output_dir=str(run)), "holds a run already", "--resume")
    inside = str(run / "again")
    _refused(tmp_path, _params(tmp_path, output_dir=inside), f"inside the run folder {run}")
    validate_params(_write(tmp_path, _params(tmp_path, output_dir=str(tmp_path / "new"))))


def _head(folder: Path, *, config: object = None, weights: bytes | None = None) -> Path:
    folder.mkdir(parents=True)
    if config is not None:
        (folder / "config.json").write_text(
            config if isinstance(config, str) else json.dumps(config)
        )
    if weights is not None:
        (folder / "model.safetensors").write_bytes(weights)
    return folder


HEAD = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}


def _eagle3(tmp_path: Path, head: Path, method: str = "eagle3") -> dict:
    data = _params(tmp_path)
    data["series"][1]["speculative_config"] = {
        "method": method,
        "model": str(head),
        "num_speculative_tokens": 3,
    }
    return data


def test_a_checkpoint_folder_without_what_a_server_loads_is_refused(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    whole = struct.pack("<Q", len(header)) + header + bytes(16)
    cases = {
        "empty": (None, None, ["config.json: not in", "weights: no *.safetensors"]),
        "cfg-folder": ("folder", whole, ["config.json: ", "is not a file"]),
        "cfg-torn": ('{"architectures": [', whole, ["config.json: ", "is not valid JSON"]),
        "no-weights": (HEAD, None, ["weights: no *.safetensors or pytorch_model.bin"]),
        "garbage": (HEAD, b"garbage!", ["model.safetensors: not a safetensors file"]),
        "truncated": (HEAD, whole[:-8], ["model.safetensors: truncated"]),
    }
    for name, (config, weights, says) in cases.items():
        head = _head(
            tmp_path / name, config=None if config == "folder" else config, weights=weights
        )
        if config == "folder":
            (head / "config.json").mkdir()
        text = _refused(tmp_path, _eagle3(tmp_path, head), *says)
        assert "not on this machine" not in text, text  # the false note of before


def test_a_sharded_checkpoint_needs_its_shards(tmp_path: Path) -> None:
    head = stand_in_checkpoint(tmp_path / "head", HEAD)
    (head / "model.safetensors").rename(head / "part-1.safetensors")
    index = {"weight_map": {"w": "part-1.safetensors", "v": "part-2.safetensors"}}
    (head / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(tmp_path, _eagle3(tmp_path, head), "shard(s) part-2.safetensors not in the folder")


def test_an_eagle3_head_as_draft_model_is_refused(tmp_path: Path) -> None:
    head = stand_in_checkpoint(tmp_path / "head", HEAD)
    _refused(
        tmp_path,
        _eagle3(tmp_path, head, "draft_model"),
        "is an EAGLE/EAGLE-3 head (LlamaForCausalLMEagle3)",
        "use method 'eagle3'",
    )


def test_a_method_written_in_capitals_gets_a_suggestion_and_no_wrong_reason(
    tmp_path: Path,
) -> None:
    head = stand_in_checkpoint(tmp_path / "head", HEAD)
    text = _refused(tmp_path, _eagle3(tmp_path, head, "EAGLE3"), "did you mean 'eagle3'")
    assert "drafts from the text itself" not in text


def test_a_symlink_loop_is_not_found_not_a_traceback(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    _refused(
        tmp_path, _eagle3(tmp_path, loop), "speculative_config.model: local model folder not found"
    )
    _refused(tmp_path, _params(tmp_path, server={"model": str(loop)}), "server.model: local model")
    data = _params(tmp_path)
    data["workload"]["prompts"] = str(loop)
    _refused(tmp_path, data, "workload.prompts: file not found")


def test_validate_and_doctor_refuse_an_absurd_count_in_one_screen(tmp_path: Path) -> None:
    path = _write(tmp_path, _params(tmp_path, workload={"replicates": 10**12}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for verb in ("validate", "doctor"):
        proc = subprocess.run(
            [sys.executable, "-m", "speclib", verb, str(path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 2, (verb, proc.stdout, proc.stderr)
        assert "workload.replicates: too large" in proc.stderr
        assert "Traceback" not in proc.stderr and "ready to run" not in proc.stdout


def test_a_draft_length_beyond_its_bound_is_refused(tmp_path: Path) -> None:
    data = _params(tmp_path)
    data["series"][1]["speculative_config"]["num_speculative_tokens"] = 10**9
    _refused(tmp_path, data, "num_speculative_tokens 1000000000 is above 256")


def test_an_output_dir_with_other_files_is_refused_by_validate(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    _refused(tmp_path, _params(tmp_path, output_dir=str(busy)), "holds other files")


def test_segment_edges_that_split_no_request_are_noted() -> None:
    import pandas as pd

    from speclib.analysis.verdict.segments import unsplit_edges

    df = pd.DataFrame(
        {
            "series": ["control"] * 3 + ["spec"],
            "prompt_tokens": [7, 8, 9, 400],
            "output_tokens": [16, 16, 16, 16],
        }
    )
    edges = {"prompt_length": [1000.0], "output_length": [10.0, 20.0]}
    notes = unsplit_edges(df, control="control", edges=edges)
    assert len(notes) == 2
    assert "prompt_length [1000.0] split no data" in notes[0] and "7–9 prompt tokens" in notes[0]
    assert unsplit_edges(df, control="control", edges={"prompt_length": [8.0]}) == []
    assert unsplit_edges(df, control="control", edges=None) == []
