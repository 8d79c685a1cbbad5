"""Prompt-set adapters (speclib.core.datasets) and reproducible sampling
(speclib.core.prompt_sampling): each format read from a fixture on disk, each malformed
record named by file and line, ids unique, samples reproducible, proportions kept, a short
set recorded (not shrunk silently), the provenance in the manifest, every params fixture
valid."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
import yaml

from speclib.core.datasets import (
    ADAPTERS,
    ReadOptions,
    dataset_sha256,
    load_workload_prompts,
    read_dataset,
    workload_prompts,
)
from speclib.core.prompt_sampling import sample_prompts, stratified_quotas
from speclib.core.prompts import Prompt, PromptSetError, load_prompts, prompts_sha256
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError, load_params
from speclib.params.validation import validate_params
from speclib.params.workload import PROMPT_FORMATS, WorkloadParams

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "datasets"
HAS_DATASETS = importlib.util.find_spec("datasets") is not None


def _load(path: Path, **workload):
    return load_workload_prompts(path, WorkloadParams(prompts=str(path), **workload))


def _ids(loaded) -> list[str]:
    return [p.id for p in loaded.prompts]


def _write(tmp_path: Path, name: str, lines: list) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def _user(text: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": text},)


def test_every_format_has_an_adapter():
    assert set(ADAPTERS) == set(PROMPT_FORMATS)
    with pytest.raises(ValueError, match="`fmt` must be one of"):
        read_dataset(FIX / "speclib.jsonl", "alpaca")


# --- speclib (the default, unchanged) --------------------------------------------------------


def test_speclib_format_is_the_default_and_unchanged():
    path = FIX / "speclib.jsonl"
    loaded = _load(path)
    assert [p.id for p in loaded.prompts] == [p.id for p in load_prompts(path)]
    assert loaded.prompts[0].turns == ()
    assert loaded.provenance["format"] == "speclib"
    assert loaded.provenance["sha256"] == prompts_sha256(path)
    assert _ids(_load(path, num_prompts=2)) == ["s1", "s2"]  # the first N, as before


# --- sharegpt --------------------------------------------------------------------------------


def test_sharegpt_first_turn_skips_records_without_a_human_turn():
    loaded = _load(FIX / "sharegpt.json", format="sharegpt")
    assert _ids(loaded) == ["sg-multi", "sg-single", "sharegpt-3"]  # record 3 has no id
    assert loaded.prompts[0].messages == _user("Name a prime number.")
    assert loaded.prompts[2].messages == _user("Count to three.")  # role/content turns
    assert loaded.provenance["records_read"] == 4
    assert loaded.provenance["skipped"] == 1


def test_sharegpt_history_ends_with_the_last_human_turn():
    loaded = _load(FIX / "sharegpt.json", format="sharegpt", sharegpt_turns="history")
    multi = loaded.prompts[0].messages
    assert [m["role"] for m in multi] == ["system", "user", "assistant", "user"]
    assert multi[-1]["content"] == "And a larger one?"  # the final gpt answer is not sent
    assert loaded.prompts[1].messages == _user("Say hello in French.")


def test_sharegpt_one_record_per_line_is_accepted(tmp_path):
    turns = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]
    path = _write(tmp_path, "sg.jsonl", [{"conversations": turns}, {"conversations": turns[1:]}])
    loaded = _load(path, format="sharegpt")
    assert _ids(loaded) == ["sharegpt-0"] and loaded.provenance["skipped"] == 1


def test_sharegpt_malformed_records_are_named(tmp_path):
    good = {"conversations": [{"from": "human", "value": "hi"}]}
    bad = {"conversations": [{"from": "robot", "value": "beep"}]}
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([good, bad]))
    with pytest.raises(PromptSetError) as info:
        _load(path, format="sharegpt")
    assert f"{path}: record [1]: conversations[0]: unknown speaker 'robot'" in str(info.value)
    path.write_text('[\n  {"conversations": []},\n  {"conversations": [}\n]')
    with pytest.raises(PromptSetError, match=rf"{path}:3: not valid JSON"):
        _load(path, format="sharegpt")
    path.write_text(json.dumps([{"turns": ["hi"]}]))
    with pytest.raises(PromptSetError, match=r"record \[0\]: needs 'conversations'"):
        _load(path, format="sharegpt")


def test_sharegpt_with_no_human_turn_at_all_is_empty(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"from": "gpt", "value": "x"}]}]))
    with pytest.raises(PromptSetError, match=r"empty \(1 record\(s\) read, 1 skipped\)"):
        _load(path, format="sharegpt")


# --- spec-bench / mt-bench -------------------------------------------------------------------


def test_spec_bench_questions_keep_categories_and_turns():
    loaded = _load(FIX / "spec-bench" / "question.jsonl", format="spec-bench")
    assert len(loaded.prompts) == 10 and loaded.prompts[0].id == "81"
    counts = Counter(p.category for p in loaded.prompts)
    assert counts == {"writing": 4, "translation": 3, "math_reasoning": 2, "qa": 1}
    first = loaded.prompts[0]
    assert first.messages == _user("Write a haiku about a lighthouse.")
    assert first.turns == ("Write a haiku about a lighthouse.",)


def test_mt_bench_sends_turn_one_and_keeps_both():
    loaded = _load(FIX / "mt-bench" / "question.jsonl", format="mt-bench")
    assert _ids(loaded) == ["81", "111", "121", "141"]
    for p in loaded.prompts:
        assert len(p.turns) == 2
        assert p.messages == _user(p.turns[0])
    assert loaded.prompts[1].category == "math"


def test_question_without_id_gets_a_format_id(tmp_path):
    path = _write(tmp_path, "q.jsonl", [{"turns": ["a"]}, {"question_id": 5, "turns": ["b"]}])
    assert _ids(_load(path, format="mt-bench")) == ["mt-bench-0", "5"]


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        ({"question_id": 2, "category": "x"}, "'turns' must be a non-empty list"),
        ({"question_id": 2, "turns": ["ok", 3]}, "turns[1] must be a non-empty string"),
        ({"question_id": [2], "turns": ["ok"]}, "id must be a string or an integer"),
        (["not", "an", "object"], "a record must be a JSON object"),
    ],
)
def test_malformed_question_names_file_and_line(tmp_path, record, needle):
    path = _write(tmp_path, "q.jsonl", [{"question_id": 1, "turns": ["fine"]}, "", record])
    with pytest.raises(PromptSetError) as info:
        _load(path, format="spec-bench")
    assert f"{path}:3: " in str(info.value) and needle in str(info.value)


# --- jsonl -----------------------------------------------------------------------------------


def test_generic_jsonl_prompt_or_messages():
    loaded = _load(FIX / "generic.jsonl", format="jsonl")
    assert _ids(loaded) == ["g-prompt", "jsonl-1", "7"]
    assert loaded.prompts[0].messages == _user("List three colours.")
    assert [m["role"] for m in loaded.prompts[1].messages] == ["system", "user"]
    assert [p.category for p in loaded.prompts] == ["chat", "chat", "puzzle"]


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "has both"),
        ({"id": "x", "text": "a"}, "has neither"),
        ({"prompt": "   "}, "'prompt' must be a non-empty string"),
        ({"messages": [{"role": "bot", "content": "b"}]}, "messages[0]: must be an object"),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0]: content must be"),
        ({"prompt": "a", "category": {"x": 1}}, "category must be a string"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path, record, needle):
    path = _write(tmp_path, "g.jsonl", [{"prompt": "fine"}, record])
    with pytest.raises(PromptSetError) as info:
        _load(path, format="jsonl")
    assert f"{path}:2: " in str(info.value) and needle in str(info.value)


def test_invalid_json_line_is_named(tmp_path):
    path = _write(tmp_path, "g.jsonl", [{"prompt": "fine"}, '{"prompt": '])
    with pytest.raises(PromptSetError, match=rf"{path}:2: not valid JSON"):
        _load(path, format="jsonl")


# --- csv -------------------------------------------------------------------------------------


def test_csv_reads_quoted_cells_and_categories():
    loaded = _load(FIX / "prompts.csv", format="csv")
    assert _ids(loaded) == ["c1", "c2", "c3"]
    assert loaded.prompts[0].messages == _user("Summarise: the cat sat, the dog ran.")
    assert loaded.prompts[2].messages == _user('Say "hi" twice.')
    assert [p.category for p in loaded.prompts] == ["summarise", "qa", "qa"]


def test_csv_columns_are_configurable(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("question,kind\nWhat is 2+2?,math\nName a bird.,animals\n")
    loaded = _load(path, format="csv", prompt_column="question")
    assert _ids(loaded) == ["csv-0", "csv-1"]
    assert [p.category for p in loaded.prompts] == ["default", "default"]  # no 'category'
    loaded = _load(path, format="csv", prompt_column="question", category_column="kind")
    assert [p.category for p in loaded.prompts] == ["math", "animals"]
    with pytest.raises(PromptSetError, match=rf"{path}:1: no column 'prompt'"):
        _load(path, format="csv")
    with pytest.raises(PromptSetError, match=rf"{path}:1: no column 'topic'"):
        _load(path, format="csv", prompt_column="question", category_column="topic")


def test_csv_empty_cell_names_the_line_after_a_multiline_cell(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('prompt,category\n"two\nlines",a\n,b\n')
    with pytest.raises(PromptSetError) as info:
        _load(path, format="csv")
    assert f"{path}:4: column 'prompt' must be a non-empty string" in str(info.value)


# --- hf-disk ---------------------------------------------------------------------------------


def test_hf_disk_without_datasets_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    (tmp_path / "ds").mkdir()
    with pytest.raises(PromptSetError) as info:
        _load(tmp_path / "ds", format="hf-disk")
    assert "pip install datasets" in str(info.value) and str(tmp_path / "ds") in str(info.value)


class _FakeDatasetDict(dict):
    """Stands in for datasets.DatasetDict (splits by name)."""


def _fake_datasets(saved: dict[str, object]) -> types.SimpleNamespace:
    """A stand-in ``datasets`` module whose load_from_disk returns what ``saved`` maps the
    folder to (the boundary the adapter talks to, when the real package is absent)."""

    def load_from_disk(path: str) -> object:
        if path not in saved:
            raise FileNotFoundError(f"Directory {path} is neither a Dataset nor a DatasetDict")
        return saved[path]

    return types.SimpleNamespace(load_from_disk=load_from_disk, DatasetDict=_FakeDatasetDict)


def test_hf_disk_rows_through_a_stand_in_datasets_module(tmp_path, monkeypatch):
    rows = [{"id": 3, "prompt": "Say yes.", "category": "a"}, {"messages": None, "prompt": "No."}]
    bad = [{"prompt": "fine"}, {"prompt": None, "messages": None}]
    folders = {name: tmp_path / name for name in ("ds", "dd", "one", "bad", "empty")}
    for folder in folders.values():
        folder.mkdir()
    saved = {
        str(folders["ds"]): rows,
        str(folders["dd"]): _FakeDatasetDict(train=rows, test=rows),
        str(folders["one"]): _FakeDatasetDict(train=rows),
        str(folders["bad"]): bad,
    }
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(saved))
    loaded = _load(folders["ds"], format="hf-disk")
    assert _ids(loaded) == ["3", "hf-disk-1"] and loaded.prompts[1].messages == _user("No.")
    assert _ids(_load(folders["one"], format="hf-disk")) == ["3", "hf-disk-1"]
    with pytest.raises(PromptSetError, match=r"splits \['test', 'train'\]: point workload"):
        _load(folders["dd"], format="hf-disk")
    with pytest.raises(PromptSetError, match=rf"{folders['bad']}: row \[1\]: .* has neither"):
        _load(folders["bad"], format="hf-disk")
    with pytest.raises(PromptSetError, match="not a datasets folder"):
        _load(folders["empty"], format="hf-disk")
    with pytest.raises(PromptSetError, match="needs a folder written by save_to_disk"):
        _load(FIX / "generic.jsonl", format="hf-disk")


@pytest.mark.skipif(not HAS_DATASETS, reason="datasets is not installed")
def test_hf_disk_reads_a_saved_dataset(tmp_path):
    import datasets

    rows = [
        {"id": "h1", "prompt": "Say yes.", "category": "a"},
        {"id": "h2", "prompt": "Say no.", "category": "b"},
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    loaded = _load(tmp_path / "ds", format="hf-disk")
    assert _ids(loaded) == ["h1", "h2"]
    assert loaded.prompts[1].messages == _user("Say no.")
    assert loaded.provenance["sha256"] == dataset_sha256(tmp_path / "ds")
    both = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows)}
    )
    both.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(PromptSetError, match=r"point workload\.prompts at one split"):
        _load(tmp_path / "dd", format="hf-disk")


def test_folder_hash_covers_names_and_bytes(tmp_path):
    folder = tmp_path / "ds"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.arrow").write_bytes(b"one")
    (folder / "sub" / "b.json").write_bytes(b"two")
    first = dataset_sha256(folder)
    assert dataset_sha256(folder) == first
    (folder / "sub" / "b.json").write_bytes(b"tWo")
    assert dataset_sha256(folder) != first
    (folder / "sub" / "b.json").write_bytes(b"two")
    (folder / "a.arrow").rename(folder / "c.arrow")
    assert dataset_sha256(folder) != first


# --- ids -------------------------------------------------------------------------------------


_DUPLICATES = {
    "jsonl ids": (
        "jsonl",
        "d.jsonl",
        [{"id": "a", "prompt": "x"}, {"prompt": "y"}, {"id": "a", "prompt": "z"}],
        ":1",
        ":3",
    ),
    "int and str question ids": (
        "spec-bench",
        "d.jsonl",
        [{"question_id": 9, "turns": ["x"]}, {"question_id": "9", "turns": ["y"]}],
        ":1",
        ":2",
    ),
    "csv id column": ("csv", "d.csv", ["id,prompt", "a,x", "b,y", "a,z"], ":2", ":4"),
    "an id equal to a generated one": (
        "jsonl",
        "d.jsonl",
        [{"prompt": "x"}, {"id": "jsonl-0", "prompt": "y"}],
        ":1",
        ":2",
    ),
}


@pytest.mark.parametrize(
    ("fmt", "name", "lines", "first", "second"), list(_DUPLICATES.values()), ids=list(_DUPLICATES)
)
def test_duplicate_ids_name_both_lines(tmp_path, fmt, name, lines, first, second):
    path = _write(tmp_path, name, lines)
    with pytest.raises(PromptSetError) as info:
        _load(path, format=fmt)
    msg = str(info.value)
    assert msg.startswith(f"{path}{second}: duplicate id") and f"first at {path}{first}" in msg


def test_duplicate_sharegpt_ids_name_both_records(tmp_path):
    rec = {"id": "dup", "conversations": [{"from": "human", "value": "hi"}]}
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([rec, rec]))
    with pytest.raises(PromptSetError, match=r"record \[1\]: duplicate id 'dup' \(first at .*"):
        _load(path, format="sharegpt")


# --- sampling --------------------------------------------------------------------------------


def _synthetic(sizes: dict[str, int]) -> list[Prompt]:
    return [
        Prompt(id=f"{cat}-{i}", messages=_user(f"{cat} {i}"), category=cat)
        for cat, n in sizes.items()
        for i in range(n)
    ]


def test_random_sample_is_reproducible_and_depends_on_the_seed():
    path = FIX / "spec-bench" / "question.jsonl"
    a = _ids(_load(path, format="spec-bench", num_prompts=5, sample="random", sample_seed=3))
    b = _ids(_load(path, format="spec-bench", num_prompts=5, sample="random", sample_seed=3))
    c = _ids(_load(path, format="spec-bench", num_prompts=5, sample="random", sample_seed=4))
    assert a == b and len(set(a)) == 5
    assert a != c


def test_sampling_does_not_depend_on_the_process_hash_seed():
    code = (
        "from speclib.core.datasets import load_workload_prompts as f; "
        "from speclib.params.workload import WorkloadParams as W; "
        "p = 'tests/fixtures/datasets/spec-bench/question.jsonl'; "
        "w = W(prompts=p, format='spec-bench', num_prompts=5, sample='stratified'); "
        "print(','.join(x.id for x in f(p, w).prompts))"
    )
    out = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env
        )
        assert proc.returncode == 0, proc.stderr
        out.append(proc.stdout.strip())
    assert out[0] == out[1] and len(out[0].split(",")) == 5


def test_first_keeps_file_order():
    sample = sample_prompts(_synthetic({"a": 3, "b": 3}), 4)
    assert [p.id for p in sample.prompts] == ["a-0", "a-1", "a-2", "b-0"]
    assert sample.method == "first" and sample.short_by == 0


def test_stratified_splits_in_proportion_and_interleaves():
    prompts = _synthetic({"a": 50, "b": 30, "c": 20})
    sample = sample_prompts(prompts, 10, method="stratified", seed=0)
    assert Counter(p.category for p in sample.prompts) == {"a": 5, "b": 3, "c": 2}
    assert [p.category for p in sample.prompts[:6]] == ["a", "b", "c"] * 2
    again = sample_prompts(prompts, 10, method="stratified", seed=0)
    other = sample_prompts(prompts, 10, method="stratified", seed=1)
    assert [p.id for p in again.prompts] == [p.id for p in sample.prompts]
    assert [p.id for p in other.prompts] != [p.id for p in sample.prompts]


def test_stratified_largest_remainder():
    # shares 3.5, 2.1, 1.4: floors 3, 2, 1, the seat left goes to the largest remainder (a)
    assert stratified_quotas({"a": 5, "b": 3, "c": 2}, 7) == {"a": 4, "b": 2, "c": 1}
    # shares 2.4, 1.8, 1.2, 0.6: floors 2, 1, 1, 0; remainders .8 (t) and .6 (q) get seats
    sizes = {"w": 4, "t": 3, "m": 2, "q": 1}
    assert stratified_quotas(sizes, 6) == {"w": 2, "t": 2, "m": 1, "q": 1}
    # equal remainders and sizes: the earlier category first
    assert stratified_quotas({"x": 1, "y": 1, "z": 1}, 2) == {"x": 1, "y": 1, "z": 0}
    for n in range(0, 11):
        quotas = stratified_quotas(sizes, n)
        assert sum(quotas.values()) == n and all(quotas[c] <= sizes[c] for c in sizes)


def test_stratified_fixture_order():
    loaded = _load(
        FIX / "spec-bench" / "question.jsonl",
        format="spec-bench",
        num_prompts=6,
        sample="stratified",
        sample_seed=1,
    )
    cats = [p.category for p in loaded.prompts]
    assert cats == ["writing", "translation", "math_reasoning", "qa", "writing", "translation"]


@pytest.mark.parametrize("method", ["first", "random", "stratified"])
def test_asking_for_more_than_the_set_keeps_all_and_records_short_by(method):
    loaded = _load(FIX / "speclib.jsonl", num_prompts=5, sample=method)
    assert sorted(_ids(loaded)) == ["s1", "s2", "s3"]
    prov = loaded.provenance
    assert (prov["requested"], prov["returned"], prov["short_by"]) == (5, 3, 2)
    assert prov["sample"] == method


def test_bad_sampling_arguments_are_named():
    prompts = _synthetic({"a": 2})
    with pytest.raises(ValueError, match="`n` must be a positive integer"):
        sample_prompts(prompts, 0)
    with pytest.raises(ValueError, match="`method` must be one of"):
        sample_prompts(prompts, 1, method="systematic")


# --- params, validation, call sites, manifest ------------------------------------------------


def _fixture_params(tmp_path: Path, name: str, **workload) -> Path:
    data = yaml.safe_load((FIX / f"params-{name}.yaml").read_text())
    data["workload"].update(workload)
    path = tmp_path / f"params-{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    if name != "hf-disk":
        src = FIX / data["workload"]["prompts"]
        (tmp_path / data["workload"]["prompts"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, tmp_path / data["workload"]["prompts"])
    return path


@pytest.mark.parametrize(
    ("name", "n_prompts"),
    [("speclib", 2), ("sharegpt", 2), ("spec-bench", 6), ("mt-bench", 4), ("jsonl", 3), ("csv", 3)],
)
def test_every_params_fixture_validates(name, n_prompts):
    result = validate_params(FIX / f"params-{name}.yaml")
    assert len(result.prompts) == n_prompts
    assert result.params.workload.format == name
    dumped = result.params.model_dump()  # as params.resolved.json records it
    assert ExperimentParams.model_validate(dumped).workload == result.params.workload


def test_hf_disk_params_fixture(tmp_path):
    path = _fixture_params(tmp_path, "hf-disk")
    if not HAS_DATASETS:
        (tmp_path / "hf-dataset").mkdir()
        with pytest.raises(ParamsError) as info:
            load_params(path)
        assert "workload.format: 'hf-disk' needs the datasets package" in str(info.value)
        assert "pip install datasets" in str(info.value)
        assert load_params(path, check_files=False).workload.format == "hf-disk"
        return
    import datasets

    rows = [{"prompt": "Say yes."}, {"prompt": "Say no."}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf-dataset"))
    assert [p.id for p in validate_params(path).prompts] == ["hf-disk-0", "hf-disk-1"]


def test_unknown_format_names_the_field(tmp_path):
    with pytest.raises(ParamsError) as info:
        load_params(_fixture_params(tmp_path, "jsonl", format="alpaca"))
    msg = str(info.value)
    assert "workload.format" in msg and '"alpaca"' in msg and "'sharegpt'" in msg


def test_a_format_option_of_another_format_is_refused(tmp_path):
    with pytest.raises(ParamsError, match=r"workload\.sharegpt_turns applies to format 'sharegpt'"):
        load_params(_fixture_params(tmp_path, "jsonl", sharegpt_turns="history"))
    with pytest.raises(ParamsError, match=r"workload\.prompt_column applies to format 'csv'"):
        load_params(_fixture_params(tmp_path, "sharegpt", prompt_column="text"))


def test_validate_names_the_malformed_line(tmp_path):
    path = _fixture_params(tmp_path, "mt-bench")
    prompts = tmp_path / "mt-bench" / "question.jsonl"
    lines = prompts.read_text().splitlines()
    lines[1] = json.dumps({"question_id": 111, "turns": "not a list"})
    prompts.write_text("\n".join(lines) + "\n")
    load_params(path)  # the schema and the files are fine; the content is validate's job
    with pytest.raises(ParamsError) as info:
        validate_params(path)
    msg = str(info.value)
    assert str(path) in msg and "workload.prompts" in msg and f"{prompts}:2: 'turns'" in msg


def test_validate_notes_skipped_records_and_a_short_set(tmp_path):
    path = _fixture_params(tmp_path, "sharegpt", num_prompts=9)
    notes = "\n".join(validate_params(path).notes)
    assert "1 of 4 record(s) of the sharegpt prompt set skipped" in notes
    assert "asks for 9 prompts, the set has 3" in notes


def test_workload_prompts_resolves_the_path_against_the_params_file(tmp_path):
    params = load_params(_fixture_params(tmp_path, "csv"))
    loaded = workload_prompts(params)
    assert loaded.provenance["path"] == str(tmp_path / "prompts.csv")
    assert _ids(loaded) == ["c1", "c2", "c3"]
    assert ReadOptions.of(params.workload) == ReadOptions("first", "prompt", "category")


def test_progress_counts_the_prompts_of_any_format(tmp_path):
    from speclib.app.progress import arm_request_total
    from speclib.core.rundir import RunDir

    params = load_params(_fixture_params(tmp_path, "sharegpt", num_prompts=None))
    rd = RunDir.at(tmp_path / "run")
    rd.root.mkdir()
    data = params.model_dump()
    data["workload"]["prompts"] = str(params.resolve_path(params.workload.prompts))
    rd.params_resolved.write_text(json.dumps(data))
    assert arm_request_total(rd.root) == 6  # 3 prompts (1 skipped) x 2 repeats: 4 waves at c=1
    data["workload"]["min_waves"] = 1
    rd.params_resolved.write_text(json.dumps(data))
    assert arm_request_total(rd.root) == 3  # 3 prompts x 1 level x 1 repeat


def test_manifest_records_the_provenance(tmp_path):
    from speclib.run.manifest import build_manifest

    params = load_params(_fixture_params(tmp_path, "spec-bench", num_prompts=12))
    manifest = build_manifest(params, models={}, order=[], hardware_info={"cpu_count": 2})
    entry = manifest["prompts"]
    prompts = tmp_path / "spec-bench" / "question.jsonl"
    assert entry["path"] == str(prompts) and entry["sha256"] == prompts_sha256(prompts)
    assert entry["format"] == "spec-bench" and entry["sample"] == "stratified"
    assert (entry["records_read"], entry["skipped"], entry["sample_seed"]) == (10, 0, 1)
    assert (entry["requested"], entry["returned"], entry["short_by"]) == (12, 10, 2)
    loaded = workload_prompts(params)
    given = build_manifest(params, models={}, order=[], hardware_info={}, prompts=loaded)
    assert given["prompts"] == entry
    json.dumps(manifest)  # the manifest stays plain JSON
