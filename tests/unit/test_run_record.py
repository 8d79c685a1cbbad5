"""The params a run folder records (``params/run_record.py``): written once, read by every
later step, independent of the file the user typed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from speclib.core.rundir import RunDir
from speclib.params.loader import load_params
from speclib.params.run_record import recorded_params, write_record
from tests.unit.test_robustness import _params

pytestmark = pytest.mark.unit


def _relative(tmp: Path) -> Path:
    """A params file whose model and prompts are paths relative to its own folder."""
    where = tmp / "study"
    where.mkdir()
    path = _params(where)
    data = yaml.safe_load(path.read_text())
    (where / "model").mkdir()
    data["server"]["model"] = "./model"
    data["workload"]["prompts"] = "prompts.jsonl"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_record_resolves_relative_paths_where_the_file_was(tmp_path, monkeypatch) -> None:
    path = _relative(tmp_path)
    params = load_params(path, check_vllm=False)
    rd = RunDir.at(tmp_path / "run")
    write_record(params, rd)
    assert rd.params_copy.read_text() == path.read_text()
    data = json.loads(rd.params_resolved.read_text())
    assert data["workload"]["prompts"] == str(tmp_path / "study" / "prompts.jsonl")
    monkeypatch.chdir(tmp_path / "run")  # read from elsewhere: same folders
    again = recorded_params(rd.params_resolved)
    assert again.base_dir == tmp_path / "study"
    assert again.resolve_path(again.server.model) == tmp_path / "study" / "model"
    assert again.resolve_path(again.workload.prompts) == params.resolve_path("prompts.jsonl")
    mine, theirs = again.model_dump(), params.model_dump()
    mine["workload"].pop("prompts"), theirs["workload"].pop("prompts")
    assert mine == theirs  # the rest as validated


def test_a_resumed_run_keeps_the_copy_it_started_with(tmp_path) -> None:
    path = _relative(tmp_path)
    rd = RunDir.at(tmp_path / "run")
    write_record(load_params(path, check_vllm=False), rd)
    first = rd.params_copy.read_text()
    path.write_text(path.read_text().replace("fault", "fault2"))
    write_record(load_params(path, check_vllm=False), rd)
    assert rd.params_copy.read_text() == first
    assert json.loads(rd.params_resolved.read_text())["name"] == "fault2"


def test_a_folder_without_a_record_is_a_clear_error(tmp_path) -> None:
    rd = RunDir.at(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="00_setup"):
        recorded_params(rd.params_resolved)


def test_a_resumed_run_continues_with_its_record_and_refuses_another_file(tmp_path) -> None:
    from speclib.params.loader import ParamsError
    from speclib.run.preflight import checked_params

    path = _relative(tmp_path)
    rd = RunDir.at(tmp_path / "run")
    write_record(load_params(path), rd)
    kept = path.read_text()
    path.unlink()  # the file the run was started with is gone: the record is enough
    again = checked_params(None, resume=rd.root)
    assert again.model_dump() == recorded_params(rd.params_resolved).model_dump()
    path.write_text(kept)  # the same file given again: accepted
    assert checked_params(path, resume=rd.root).name == "fault"
    data = yaml.safe_load(kept)
    data["workload"]["max_tokens"] = 7  # an edited file is another run
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError, match=r"workload\.max_tokens.*--resume continues"):
        checked_params(path, resume=rd.root)
    data = yaml.safe_load(kept)
    data["analysis"] = {"margin": 0.2}  # so is another rule: analyze re-decides after
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ParamsError, match=r"analysis\.margin.*differ.*speclib analyze"):
        checked_params(path, resume=rd.root)
    with pytest.raises(ParamsError, match="no params recorded there"):
        checked_params(None, resume=tmp_path / "empty")


def test_a_damaged_record_is_a_params_error_naming_it(tmp_path) -> None:
    """``run --resume`` and ``analyze`` of a folder whose record is damaged: one line naming
    the file and what to do (it was a JSONDecodeError traceback)."""
    from speclib.params.loader import ParamsError

    rd = RunDir.at(tmp_path / "run")
    rd.root.mkdir()
    for text in ('{"name": ', "[1, 2]"):
        rd.params_resolved.write_text(text)
        with pytest.raises(ParamsError, match=r"params\.resolved\.json: cannot be read.*restore"):
            recorded_params(rd.params_resolved)
    rd.params_resolved.write_text('{"name": "x"}')  # readable, not params: the field named
    with pytest.raises(ParamsError, match=r"not valid for this kit: server: Field required"):
        recorded_params(rd.params_resolved)
    rd.params_resolved.unlink()
    rd.params_resolved.mkdir()
    with pytest.raises(ParamsError, match="not a file"):
        recorded_params(rd.params_resolved)
