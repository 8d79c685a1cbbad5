"""``speclib validate FILE`` as a child process: each input that used to pass validation and
fail later (or measure nothing) now exits 2 with a message naming the file and the field or
line; nothing starts. vLLM itself is introspected, never started."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import stand_in_checkpoint

REPO = Path(__file__).resolve().parents[2]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed")

_NO_VLLM = (
    "import sys; sys.modules['vllm'] = None; "  # a client-only install: vLLM cannot be imported
    "from speclib.app.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _prompt(pid: str, content: str = "hi", role: str = "user") -> str:
    return json.dumps({"id": pid, "messages": [{"role": role, "content": content}]})


def _params(tmp_path: Path, **workload) -> dict:
    (tmp_path / "prompts.jsonl").write_text(_prompt("a") + "\n" + _prompt("b") + "\n")
    draft = stand_in_checkpoint(tmp_path / "draft")
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
        "workload": {"prompts": "prompts.jsonl", **workload},
    }


def _validate(tmp_path: Path, data: dict, *, code: str | None = None):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    head = ["-c", code] if code else ["-m", "speclib"]
    proc = subprocess.run(
        [sys.executable, *head, "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode == 2:
        assert str(path) in proc.stderr  # the params file is always named
        assert len(proc.stderr.splitlines()) <= 20  # one screen
    return proc


def _spec(data: dict) -> dict:
    return data["series"][1]["speculative_config"]


def test_valid_file_passes_and_says_what_it_checked(tmp_path):
    proc = _validate(tmp_path, _params(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout and "2 prompt(s)" in proc.stdout
    assert "prompt lengths not checked" in proc.stdout  # the target folder has no tokenizer
    if HAS_VLLM:
        assert "checked against vllm.config" in proc.stdout


@needs_vllm
def test_unknown_speculative_key_refused_before_any_start(tmp_path):
    data = _params(tmp_path)
    _spec(data)["bogus_key"] = 3
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2
    assert "series[1] (name='exp').speculative_config.bogus_key: unknown key" in proc.stderr
    assert "SpeculativeConfig" in proc.stderr


@needs_vllm
def test_key_check_follows_the_installed_vllm(tmp_path):
    # suffix_decoding_max_tree_depth is a field of the installed vLLM's SpeculativeConfig but
    # not of older ones: vLLM 0.10's vllm/config/speculative.py has no suffix decoding at all
    # (no "suffix" method, no suffix_decoding_* fields; it arrived in 0.11). A hand-kept list
    # written for 0.10 would refuse it; the check reads the installed class instead.
    from speclib.vllm_facts.spec_schema import installed_spec_schema

    schema = installed_spec_schema().schema
    assert schema is not None and "suffix_decoding_max_tree_depth" in schema.fields
    data = _params(tmp_path)
    data["series"][1]["speculative_config"] = {
        "method": "suffix",
        "num_speculative_tokens": 8,
        "suffix_decoding_max_tree_depth": 16,
    }
    assert _validate(tmp_path, data).returncode == 0
    _spec(data)["suffix_decoding_max_tree_dept"] = _spec(data).pop("suffix_decoding_max_tree_depth")
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2
    assert "speculative_config.suffix_decoding_max_tree_dept: unknown key" in proc.stderr
    assert "did you mean 'suffix_decoding_max_tree_depth'" in proc.stderr


@needs_vllm
def test_method_and_values_checked_against_vllm(tmp_path):
    data = _params(tmp_path)
    _spec(data)["method"] = "eagel"
    _spec(data)["draft_tensor_parallel_size"] = 1
    _spec(data)["rejection_sample_method"] = "nope"
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2
    assert "speculative_config.method: unknown speculative method" in proc.stderr
    assert "did you mean 'eagle'" in proc.stderr
    assert "rejection_sample_method" in proc.stderr and '"standard"' in proc.stderr


@needs_vllm
def test_values_are_checked_without_importing_jsonschema(tmp_path):
    # every kernel of a run validates its params: jsonschema's import costs seconds there
    data = _params(tmp_path)
    _spec(data)["rejection_sample_method"] = "nope"  # vLLM's schema: one of three names
    _spec(data)["suffix_decoding_max_tree_depth"] = "three"  # vLLM's schema: an integer
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    code = (
        "import sys; from speclib.params.loader import ParamsError, load_params\n"
        "try:\n    load_params(sys.argv[1])\nexcept ParamsError as exc:\n    print(exc)\n"
        "print('jsonschema imported:', 'jsonschema' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert "rejection_sample_method" in proc.stdout and '"standard"' in proc.stdout, proc.stdout
    assert "suffix_decoding_max_tree_depth" in proc.stdout and "integer" in proc.stdout
    assert "jsonschema imported: False" in proc.stdout, proc.stderr


def test_the_cli_skips_jsonschemas_iri_checker():
    code = (
        "import sys; from speclib.app.cli import main\n"
        "try:\n    main(['validate', '--help'])\nexcept SystemExit:\n    pass\n"
        "import papermill, jsonschema\n"
        "print('iri checker:', 'iri' in jsonschema.FormatChecker.checkers)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)  # fmt: skip
    assert "iri checker: False" in proc.stdout, proc.stdout + proc.stderr


def test_tensor_parallel_size_keeps_the_kits_message(tmp_path):
    data = _params(tmp_path)
    _spec(data)["tensor_parallel_size"] = 1
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2 and "draft_tensor_parallel_size" in proc.stderr


def test_without_vllm_falls_back_to_the_kits_checks_and_says_so(tmp_path):
    data = _params(tmp_path)
    _spec(data)["bogus_key"] = 3  # not caught without vLLM: only the kit's own rules apply
    proc = _validate(tmp_path, data, code=_NO_VLLM)
    assert proc.returncode == 0, proc.stderr
    assert "note: vLLM is not installed here" in proc.stdout
    assert "kit's own rules" in proc.stdout
    _spec(data)["method"] = "medusa2"
    proc = _validate(tmp_path, data, code=_NO_VLLM)
    assert proc.returncode == 2
    assert "speculative_config.method: unknown speculative method" in proc.stderr
    assert "vLLM is not installed here" in proc.stderr


def test_max_tokens_one_refused_with_the_reason(tmp_path):
    proc = _validate(tmp_path, _params(tmp_path, max_tokens=1))
    assert proc.returncode == 2
    assert "workload.max_tokens: max_tokens must be >= 2" in proc.stderr
    assert "TPOT" in proc.stderr


def test_malformed_last_prompt_line_names_file_and_line(tmp_path):
    data = _params(tmp_path)
    with (tmp_path / "prompts.jsonl").open("a") as f:
        f.write('{"id": "c", "messages": [{"role": "user", "content": "cut')
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2
    assert f"workload.prompts: {tmp_path / 'prompts.jsonl'}:3: not valid JSON" in proc.stderr


def test_duplicate_prompt_id_refused(tmp_path):
    data = _params(tmp_path)
    with (tmp_path / "prompts.jsonl").open("a") as f:
        f.write(_prompt("a", "again") + "\n")
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2
    assert "prompts.jsonl:3: duplicate id 'a' (first on line 1)" in proc.stderr


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (_prompt("c", role="usr"), "messages[0]: role must be one of system, user, assistant"),
        (_prompt("c", content="  "), "messages[0]: content must be a non-empty string"),
    ],
)
def test_bad_message_refused(tmp_path, line, needle):
    data = _params(tmp_path)
    with (tmp_path / "prompts.jsonl").open("a") as f:
        f.write(line + "\n")
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2
    assert f"prompts.jsonl:3: {needle}" in proc.stderr


def _local_target(folder: Path, *, max_positions: int) -> Path:
    """A model folder with a config and a word-level tokenizer with a chat template."""
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    folder.mkdir()
    special = ["<s>", "<unk>", "<|user|>", "<|assistant|>"]
    vocab = {w: i for i, w in enumerate([*special, "hi", "a", "long", "prompt"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(special)
    tok.save(str(folder / "tokenizer.json"))
    template = (
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} "
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
    config.update(bos_token="<s>", unk_token="<unk>")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": max_positions}))
    return folder


# With the chat template, "short" is 4 tokens (<s> <|user|> hi <|assistant|>) and "longest"
# is 8 (<s> <|user|> a long long long prompt <|assistant|>); max_tokens is 8.
@pytest.mark.parametrize(
    ("max_model_len", "max_positions", "needles"),
    [
        (16, 512, None),  # 8 + 8 = 16 fits exactly
        (
            None,
            12,
            [
                "1 of 2 prompt(s)",
                "'longest', is 8 tokens",
                "8 + max_tokens 8 = 16 > the model's max_position_embeddings 12",
                "silently cut max_tokens",
            ],
        ),
        (6, 512, ["2 of 2 prompt(s)", "= 16 > server.max_model_len 6", "refuses a prompt"]),
    ],
)
def test_prompts_must_fit_max_model_len(tmp_path, max_model_len, max_positions, needles):
    data = _params(tmp_path, max_tokens=8)
    target = _local_target(tmp_path / "target", max_positions=max_positions)
    data["server"].update(model=str(target), max_model_len=max_model_len)
    (tmp_path / "prompts.jsonl").write_text(
        _prompt("short") + "\n" + _prompt("longest", "a long long long prompt") + "\n"
    )
    proc = _validate(tmp_path, data)
    if needles is None:
        assert proc.returncode == 0, proc.stderr
        assert "prompt lengths not checked" not in proc.stdout
        return
    assert proc.returncode == 2
    assert "workload.max_tokens / " in proc.stderr
    for needle in needles:
        assert needle in proc.stderr


def test_demo_prompts_do_not_fit_max_model_len_16(tmp_path):
    from speclib.demo.models import demo_model_dir

    demo_model_dir("target", log=lambda _m: None)  # validate counts tokens with a built pair
    data = yaml.safe_load((REPO / "params" / "cpu-demo.yaml").read_text())
    data["workload"]["prompts"] = str(REPO / "prompts" / "demo-mixed.jsonl")
    data["server"]["max_model_len"] = 16
    proc = _validate(tmp_path, data)
    assert proc.returncode == 2
    assert "12 of 12 prompt(s)" in proc.stderr and "> server.max_model_len 16" in proc.stderr
    assert "vLLM refuses a prompt longer than max_model_len" in proc.stderr
