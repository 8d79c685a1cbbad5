"""Params, strictly (issue #45): what a YAML loader or vLLM would let pass silently is refused
by ``speclib validate`` with exit 2 and one screen naming the file, the line or field, and
what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

PROMPT = '{"id": "a", "category": "x", "messages": [{"role": "user", "content": "hi"}]}\n'


def _base(tmp_path: Path, spec: dict | None = None) -> dict:
    (tmp_path / "prompts.jsonl").write_text(PROMPT)
    return {
        "name": "t",
        "server": {"model": "demo:target"},
        "series": [
            {"name": "control"},
            {
                "name": "exp",
                "speculative_config": spec
                or {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
            },
        ],
        "workload": {"prompts": "prompts.jsonl", "max_tokens": 8},
    }


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "speclib", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def refused(path: Path, *says: str) -> str:
    proc = validate(path)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and str(path) in proc.stderr
    assert len(proc.stderr.splitlines()) <= 12, proc.stderr
    for words in says:
        assert words in proc.stderr, proc.stderr
    return proc.stderr


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_key_written_twice_names_the_key_and_both_lines(tmp_path: Path) -> None:
    _base(tmp_path)
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: t\n"
        "server: {model: 'demo:target'}\n"
        "series: [{name: control}]\n"
        "workload:\n"
        "  prompts: prompts.jsonl\n"
        "  max_tokens: 48\n"
        "  max_tokens: 32\n"
    )
    refused(path, "'max_tokens' is written twice, at line 6 and at line 7", "keep one")


def test_a_section_written_twice_is_refused(tmp_path: Path) -> None:
    data = _base(tmp_path)
    text = yaml.safe_dump(data, sort_keys=False) + "analysis:\n  margin: 0.1\n"
    text += "analysis:\n  margin: 0.2\n"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    lines = text.splitlines()
    first = lines.index("analysis:") + 1
    refused(path, f"'analysis' is written twice, at line {first} and at line {first + 2}")


def test_non_utf8_bytes_give_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(yaml.safe_dump(_base(tmp_path)).encode() + b"description: caf\xe9\n")
    err = refused(path, "not UTF-8 text", "save the params file as UTF-8")
    assert len(err.strip().splitlines()) == 1


def test_an_unreadable_file_gives_one_line_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "p.yaml"
    folder.mkdir()
    err = refused(folder, "cannot read params file")
    assert len(err.strip().splitlines()) == 1


def test_output_dir_that_is_a_file_is_refused_by_validate(tmp_path: Path) -> None:
    data = _base(tmp_path)
    (tmp_path / "taken").write_text("a file")
    data["output_dir"] = "taken"
    refused(_write(tmp_path, data), "output_dir: an existing file, not a folder")


def test_a_literal_secret_in_server_env_is_refused_and_never_echoed(tmp_path: Path) -> None:
    data = _base(tmp_path)
    data["server"]["env"] = {"HF_TOKEN": "hf_verysecret123", "OMP_NUM_THREADS": "2"}
    err = refused(_write(tmp_path, data), "server.env", "HF_TOKEN", "export it in the shell")
    assert "hf_verysecret123" not in err and "<redacted>" in err


def test_a_plain_server_env_still_validates(tmp_path: Path) -> None:
    data = _base(tmp_path)
    data["server"]["env"] = {"OMP_NUM_THREADS": "2"}
    proc = validate(_write(tmp_path, data))
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_k_above_what_max_model_len_allows_is_refused(tmp_path: Path) -> None:
    data = _base(tmp_path)
    data["server"]["max_model_len"] = 128  # k itself is at most 256 (params/limits.py)
    data["series"][1]["speculative_config"]["num_speculative_tokens"] = 100
    data["workload"]["max_tokens"] = 48
    refused(
        _write(tmp_path, data),
        "series[1] (name='exp').speculative_config.num_speculative_tokens",
        "server.max_model_len = 128",
        "workload.max_tokens = 48",
        "at most 78",
    )
    data["series"][1]["speculative_config"]["num_speculative_tokens"] = 78
    assert "num_speculative_tokens" not in validate(_write(tmp_path, data)).stderr


def test_a_model_for_ngram_is_refused_naming_the_method(tmp_path: Path) -> None:
    spec = {"method": "ngram", "model": "demo:draft", "num_speculative_tokens": 3}
    spec["prompt_lookup_max"] = 3
    refused(
        _write(tmp_path, _base(tmp_path, spec)),
        "speculative_config.model: ignored by method 'ngram'",
        "no draft model",
    )


def test_prompt_lookup_for_a_draft_model_is_refused_naming_the_method(tmp_path: Path) -> None:
    spec = {"method": "draft_model", "model": "demo:draft", "num_speculative_tokens": 3}
    spec["prompt_lookup_max"] = 3
    refused(
        _write(tmp_path, _base(tmp_path, spec)),
        "speculative_config.prompt_lookup_max: ignored by method 'draft_model'",
        "only ngram",
    )


def test_a_secret_is_told_by_the_words_of_its_name() -> None:
    """HF_TOKEN or OPENAI_API_KEY hold secrets; MAX_TOKENS or FAKE_VLLM_TOKENS hold counts
    (a stand-in's knob the kit's own tests set in server.env), VLLM_KEY_CACHE a setting."""
    from speclib.params.server import SECRET_NAME

    for name in ("HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASS", "APIKEY"):
        assert SECRET_NAME.search(name), name
    for name in ("MAX_TOKENS", "FAKE_VLLM_TOKENS", "VLLM_KEY_CACHE", "KEYBOARD_LAYOUT"):
        assert not SECRET_NAME.search(name), name
