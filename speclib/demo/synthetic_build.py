"""Writing a synthetic pair's model folders: the chain weights (torch, on the GPU when there
is one), the Qwen3 config and the word-level tokenizer with its chat template, and the
declaration each folder carries (``speclib-synthetic.json``; a draft's declares its
acceptance for k = 1 … 8). The target's EAGLE-3 head is built from the target's folder (it
reads the target's embeddings, which the torch generator drew on that machine's device).
The target with an MTP layer (``MiMoForCausalLM``, Qwen2 layers) is a folder of its own,
built whole: its MTP layer reads its embeddings' flags.

What the pair is (its shapes, maps and acceptance) is :mod:`speclib.demo.synthetic`; this
module only turns a :class:`SyntheticRecipe` into folders vLLM can serve. torch,
transformers, tokenizers and safetensors are imported when a folder is written, not on
import.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from speclib.demo.synthetic import (
    DECLARATION_FILE,
    EAGLE3_ARCHITECTURE,
    EAGLE3_VERSION,
    FIRST_WORD,
    MTP_ARCHITECTURE,
    MTP_LAYERS,
    MTP_VERSION,
    SYNTHETIC_VERSION,
    QwenShape,
    SyntheticRecipe,
    chain_maps,
    declared_acceptance,
    eagle3_aux_layers,
    mtp_guess_map,
)

__all__ = [
    "build_synthetic_draft",
    "build_synthetic_eagle3",
    "build_synthetic_mtp",
    "build_synthetic_target",
]

# The score of a query against its own key (after the 1/sqrt(head_dim) scale): any other
# position's key scores at most about half of it, so softmax leaves the others < e^-25.
SELF_SCORE = 64.0

UNK, EOS = "<unk>", "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if not loop.first %} {% endif %}"
    "{{ message['content'] }}{% endfor %}"
)


def _realised_agreement(recipe: SyntheticRecipe) -> float:
    target_next, draft_next = chain_maps(recipe)
    words = target_next >= 0
    return float(np.mean(target_next[words] == draft_next[words]))


def _torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def _save_weights(tensors: dict, folder: Path, dtype: str) -> None:
    """``folder/model.safetensors``: ``tensors`` in ``dtype``, on the CPU."""
    from safetensors.torch import save_file

    cast = _torch_dtype(dtype)
    save_file(
        {k: v.to(cast).contiguous().cpu() for k, v in tensors.items()},
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )


def _save_tokenizer(recipe: SyntheticRecipe, folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {UNK: 0, EOS: 1, **{f"w{i}": FIRST_WORD + i for i in range(recipe.shape.words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([UNK, EOS])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        eos_token=EOS,
        pad_token=EOS,
        model_max_length=recipe.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _config_args(recipe: SyntheticRecipe, shape: QwenShape) -> dict[str, Any]:
    """What a synthetic model's transformers config is made of, Qwen3 or Qwen2 (MiMo)."""
    return {
        "vocab_size": recipe.shape.vocab_size,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "max_position_embeddings": recipe.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,  # the head is not the embedding: it maps to the next word
        "eos_token_id": 1,
        "pad_token_id": 1,
        "bos_token_id": None,
    }


def _write_config(config: Any, folder: Path, dtype: str, **fields: Any) -> None:
    """``config.json`` (with the dtype under both names: transformers 4 reads one, 5 the
    other, and ``fields`` over the rest) and a greedy ``generation_config.json``."""
    config.save_pretrained(folder)
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data["torch_dtype"] = data["dtype"] = dtype
    data.update(fields)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": 1, "pad_token_id": 1, "do_sample": False}, indent=2) + "\n"
    )


def _save_config(recipe: SyntheticRecipe, shape: QwenShape, folder: Path) -> None:
    from transformers import Qwen3Config

    config = Qwen3Config(**_config_args(recipe, shape), head_dim=shape.head_dim)
    config.architectures = ["Qwen3ForCausalLM"]
    _write_config(config, folder, recipe.dtype)


def _weights(shape: QwenShape, next_map: np.ndarray, *, seed: int, device: str) -> dict:
    """The chain weights: random unit embeddings, zero output projections, and a head whose
    row ``j`` sums the embeddings of the words that point to ``j``."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    vocab, h = len(next_map), shape.hidden

    def randn(*size: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*size, generator=gen, device=device) * std

    embed = torch.randn(vocab, h, generator=gen, device=device)
    embed /= embed.norm(dim=1, keepdim=True)
    words = torch.from_numpy(np.flatnonzero(next_map >= 0)).to(device)
    head = torch.zeros(vocab, h, device=device)
    head.index_add_(0, torch.from_numpy(next_map).to(device)[words], embed[words])
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    out = {"model.embed_tokens.weight": embed, "lm_head.weight": head}
    out["model.norm.weight"] = torch.ones(h, device=device)
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        out[p + "self_attn.q_proj.weight"] = randn(q, h)
        out[p + "self_attn.k_proj.weight"] = randn(kv, h)
        out[p + "self_attn.v_proj.weight"] = randn(kv, h)
        out[p + "self_attn.o_proj.weight"] = torch.zeros(h, q, device=device)
        out[p + "self_attn.q_norm.weight"] = torch.ones(shape.head_dim, device=device)
        out[p + "self_attn.k_norm.weight"] = torch.ones(shape.head_dim, device=device)
        out[p + "mlp.gate_proj.weight"] = randn(shape.intermediate, h)
        out[p + "mlp.up_proj.weight"] = randn(shape.intermediate, h)
        out[p + "mlp.down_proj.weight"] = torch.zeros(h, shape.intermediate, device=device)
        out[p + "input_layernorm.weight"] = torch.ones(h, device=device)
        out[p + "post_attention_layernorm.weight"] = torch.ones(h, device=device)
    return out


def _write_model(
    recipe: SyntheticRecipe, shape: QwenShape, next_map: np.ndarray, folder: Path, seed: int
) -> None:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    folder.mkdir(parents=True, exist_ok=True)
    tensors = _weights(shape, next_map, seed=seed, device=device)
    _save_weights(tensors, folder, recipe.dtype)
    del tensors
    _save_config(recipe, shape, folder)
    _save_tokenizer(recipe, folder)


def _info(recipe: SyntheticRecipe, role: str, started: float) -> dict[str, Any]:
    shape = {
        "target": recipe.shape.target,
        "draft": recipe.shape.draft,
        "mtp": recipe.shape.mtp,
    }.get(role)
    return {
        "builder": "speclib.demo.synthetic",
        "builder_version": SYNTHETIC_VERSION,
        "role": role,
        "recipe": asdict(recipe),
        "shape": asdict(shape or recipe.shape.eagle3),
        "build_s": round(time.perf_counter() - started, 2),
    }


def _declare(
    info: dict[str, Any], recipe: SyntheticRecipe, method: str, realised: float | None = None
) -> None:
    realised = _realised_agreement(recipe) if realised is None else realised
    info["agreement_realised"] = realised
    info["declared"] = {str(k): declared_acceptance(realised, k) for k in range(1, 9)}
    target = (
        "this folder as the target (its own MTP layer, reused for every guess)"
        if method == "mtp"
        else "this folder's target (demo:<preset>/target of the same seed)"
    )
    info["declared_for"] = (
        f"greedy decoding (temperature 0) with method {method} and {target}; position i of "
        "k is accepted with probability agreement ** i"
    )


def build_synthetic_target(recipe: SyntheticRecipe, folder: Path, *, log: Callable) -> None:
    """Write the target of ``recipe``'s pair into the empty ``folder``."""
    started = time.perf_counter()
    target_next, _ = chain_maps(recipe)
    _write_model(recipe, recipe.shape.target, target_next, folder, seed=recipe.seed * 2 + 1)
    info = _info(recipe, "target", started)
    (folder / DECLARATION_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(f"synthetic {recipe.preset} target built in {info['build_s']:.1f} s")


def build_synthetic_draft(recipe: SyntheticRecipe, folder: Path, *, log: Callable) -> None:
    """Write the draft of ``recipe``'s pair (agreement ``recipe.agreement``) into ``folder``,
    with the acceptance it declares for k = 1 … 8."""
    started = time.perf_counter()
    _, draft_next = chain_maps(recipe)
    _write_model(recipe, recipe.shape.draft, draft_next, folder, seed=recipe.seed * 2 + 2)
    info = _info(recipe, "draft", started)
    _declare(info, recipe, "draft_model")
    (folder / DECLARATION_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(
        f"synthetic {recipe.preset} draft (agreement {info['agreement_realised']:.4f}) built "
        f"in {info['build_s']} s"
    )


# --- the EAGLE-3 head ------------------------------------------------------------------------
def _eagle3_weights(
    shape: QwenShape, embed: Any, draft_next: np.ndarray, *, target_hidden: int, seed: int
) -> dict:
    """The head's tensors, named as in published EAGLE-3 checkpoints (vLLM prefixes
    ``model.``). ``embed``: the target's embeddings (float32, on the build device).

    The head answers from its input token alone (the module docstring of
    :mod:`speclib.demo.synthetic` says why): ``hidden_norm`` is zero, so with
    ``norm_before_residual`` the hidden state adds nothing; every query equals its own key
    (a random projection of the token's normalised embedding, of norm² ``SELF_SCORE`` ·
    sqrt(head_dim)), so attention returns the current position's value; the value of kv
    group ``g`` is the normalised embedding's coordinates ``g·d … (g+1)·d`` and ``o_proj``
    writes the first query head of each group back to those coordinates; the MLP adds zero;
    ``lm_head`` row ``j`` is the unit residual of the word whose ``draft_next`` is ``j``.
    """
    import torch

    device = embed.device
    gen = torch.Generator(device=device).manual_seed(seed)
    vocab, h = embed.shape
    d, heads, groups = shape.head_dim, shape.heads, shape.kv_heads
    width = groups * d
    if h != shape.hidden or width > h or heads % groups:
        raise ValueError(f"an EAGLE-3 head of {shape} cannot copy a {h}-wide embedding")

    def randn(*size: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*size, generator=gen, device=device) * std

    normed = embed * torch.rsqrt(embed.pow(2).mean(dim=1, keepdim=True) + 1e-6)  # as RMSNorm
    keys = randn(width, h, std=(SELF_SCORE * d**0.5 / (d * h)) ** 0.5)
    k_proj = torch.zeros(width, 2 * h, device=device)
    k_proj[:, :h] = keys
    per_group = heads // groups
    q_proj = torch.zeros(heads * d, 2 * h, device=device)
    o_proj = torch.zeros(h, heads * d, device=device)
    v_proj = torch.zeros(width, 2 * h, device=device)
    for g in range(groups):
        rows = slice(g * d, (g + 1) * d)
        for j in range(per_group):
            q_proj[(g * per_group + j) * d : (g * per_group + j + 1) * d, :h] = keys[rows]
        v_proj[rows, g * d : (g + 1) * d] = torch.eye(d, device=device)
        first = g * per_group * d
        o_proj[rows, first : first + d] = torch.eye(d, device=device)
    residual = torch.zeros_like(normed)
    residual[:, :width] = normed[:, :width]
    unit = residual / residual.norm(dim=1, keepdim=True).clamp_min(1e-6)
    words = torch.from_numpy(np.flatnonzero(draft_next >= 0)).to(device)
    head = torch.zeros(vocab, h, device=device)
    head.index_add_(0, torch.from_numpy(draft_next).to(device)[words], unit[words])
    p = "layers.0."
    return {
        "embed_tokens.weight": embed,  # the target's: vLLM shares it (identical weights)
        "fc.weight": randn(h, 3 * target_hidden),
        p + "self_attn.q_proj.weight": q_proj,
        p + "self_attn.k_proj.weight": k_proj,
        p + "self_attn.v_proj.weight": v_proj,
        p + "self_attn.o_proj.weight": o_proj,
        p + "mlp.gate_proj.weight": randn(shape.intermediate, h),
        p + "mlp.up_proj.weight": randn(shape.intermediate, h),
        p + "mlp.down_proj.weight": torch.zeros(h, shape.intermediate, device=device),
        p + "input_layernorm.weight": torch.ones(h, device=device),
        p + "hidden_norm.weight": torch.zeros(h, device=device),
        p + "post_attention_layernorm.weight": torch.ones(h, device=device),
        "norm.weight": torch.ones(h, device=device),
        "lm_head.weight": head,
    }


def _save_eagle3_config(recipe: SyntheticRecipe, folder: Path) -> None:
    shape, target = recipe.shape.eagle3, recipe.shape.target
    aux = eagle3_aux_layers(target.layers)
    config = {
        "architectures": [EAGLE3_ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "max_position_embeddings": recipe.max_position_embeddings,
        "vocab_size": recipe.shape.vocab_size,
        "draft_vocab_size": recipe.shape.vocab_size,  # no d2t: every word can be drafted
        "target_hidden_size": target.hidden,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "norm_before_residual": True,
        "eagle_aux_hidden_state_layer_ids": aux,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
        "eos_token_id": 1,
        "pad_token_id": 1,
        "torch_dtype": recipe.dtype,
        "dtype": recipe.dtype,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build_synthetic_eagle3(
    recipe: SyntheticRecipe, folder: Path, *, target_dir: Path, log: Callable
) -> None:
    """Write the EAGLE-3 head of ``recipe``'s target (agreement ``recipe.agreement``, the
    draft's map) into ``folder``, from the built target in ``target_dir``."""
    import torch
    from safetensors import safe_open

    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    folder.mkdir(parents=True, exist_ok=True)
    with safe_open(str(target_dir / "model.safetensors"), "pt") as weights:
        embed = weights.get_tensor("model.embed_tokens.weight")
    embed = embed.to(device=device, dtype=torch.float32)
    _, draft_next = chain_maps(recipe)
    tensors = _eagle3_weights(
        recipe.shape.eagle3,
        embed,
        draft_next,
        target_hidden=recipe.shape.target.hidden,
        seed=recipe.seed * 2 + 3,
    )
    _save_weights(tensors, folder, recipe.dtype)
    del tensors
    _save_eagle3_config(recipe, folder)
    _save_tokenizer(recipe, folder)
    info = _info(recipe, "eagle3", started)
    info["eagle3_version"] = EAGLE3_VERSION
    _declare(info, recipe, "eagle3")
    (folder / DECLARATION_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(
        f"synthetic {recipe.preset} EAGLE-3 head (agreement {info['agreement_realised']:.4f}) "
        f"built in {info['build_s']} s"
    )


# --- the target with an MTP layer ---------------------------------------------------------------
# Where the MTP layer must not agree, its one reading neuron adds this many times the input's
# norm along the anchor word's embedding: the head's row for the anchor's successor then
# scores about this many times the right row.
MTP_WRONG_MARGIN = 4.0
MTP_FLAG_GAIN = 16.0  # the reading neuron's gate and up weights on the flag (silu(-16) ~ 0)


def _mtp_embeddings(
    vocab: int, h: int, agrees: np.ndarray, *, gen: Any, device: str
) -> tuple[Any, Any]:
    """``(embed, head_part)``: unit embeddings whose last coordinate is the flag
    (+1/sqrt(h) on agreeing words and non-words, -1/sqrt(h) elsewhere: after an RMSNorm, ±1),
    and the same vectors with the flag zeroed (what the head's rows are made of, so the
    target's own next token never sees the flag)."""
    import torch

    delta = h**-0.5
    embed = torch.randn(vocab, h, generator=gen, device=device)
    embed[:, -1] = 0.0
    embed *= (1.0 - delta**2) ** 0.5 / embed.norm(dim=1, keepdim=True)
    flag = torch.full((vocab,), delta, device=device)
    flag[torch.from_numpy(np.flatnonzero(~agrees)).to(device)] = -delta
    embed[:, -1] = flag
    head_part = embed.clone()
    head_part[:, -1] = 0.0
    return embed, head_part


def _mtp_weights(
    shape: QwenShape,
    target_next: np.ndarray,
    guess: np.ndarray,
    anchor: int,
    *,
    seed: int,
    device: str,
) -> dict:
    """The MiMo target's tensors, named as in MiMo's checkpoints (vLLM's ``MiMoMTP`` maps
    ``model.mtp_layers.0.*`` onto its layer): the chain in Qwen2 layers (zero ``o_proj`` and
    ``down_proj``; zero q/k/v biases) and one MTP layer that answers from the input token's
    embedding. ``hidden_layernorm`` is zero (the target's hidden state adds nothing),
    ``input_proj`` copies the normalised embedding (its hidden-state half random, reading
    zeros), the attention adds zero (``o_proj``), and the MLP's neuron 0 reads the flag:
    ``silu(16) * 16`` where the layer must miss, ~0 where it agrees, written along the
    anchor's embedding so the shared head answers ``target_next[anchor]``."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    vocab, h = len(target_next), shape.hidden
    if shape.heads * shape.head_dim != h:
        raise ValueError(f"vLLM's Qwen2 attention needs heads x head_dim = hidden: {shape}")

    def randn(*size: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*size, generator=gen, device=device) * std

    words = np.flatnonzero(target_next >= 0)
    agrees = np.ones(vocab, dtype=bool)
    agrees[words] = guess[words] == target_next[words]
    embed, head_part = _mtp_embeddings(vocab, h, agrees, gen=gen, device=device)
    head = torch.zeros(vocab, h, device=device)
    word_ids = torch.from_numpy(words).to(device)
    head.index_add_(0, torch.from_numpy(target_next).to(device)[word_ids], head_part[word_ids])
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    out = {"model.embed_tokens.weight": embed, "lm_head.weight": head}
    out["model.norm.weight"] = torch.ones(h, device=device)

    def qwen2_layer(p: str) -> None:
        out[p + "self_attn.q_proj.weight"] = randn(q, h)
        out[p + "self_attn.k_proj.weight"] = randn(kv, h)
        out[p + "self_attn.v_proj.weight"] = randn(kv, h)
        out[p + "self_attn.q_proj.bias"] = torch.zeros(q, device=device)
        out[p + "self_attn.k_proj.bias"] = torch.zeros(kv, device=device)
        out[p + "self_attn.v_proj.bias"] = torch.zeros(kv, device=device)
        out[p + "self_attn.o_proj.weight"] = torch.zeros(h, q, device=device)
        out[p + "mlp.gate_proj.weight"] = randn(shape.intermediate, h)
        out[p + "mlp.up_proj.weight"] = randn(shape.intermediate, h)
        out[p + "mlp.down_proj.weight"] = torch.zeros(h, shape.intermediate, device=device)
        out[p + "input_layernorm.weight"] = torch.ones(h, device=device)
        out[p + "post_attention_layernorm.weight"] = torch.ones(h, device=device)

    for i in range(shape.layers):
        qwen2_layer(f"model.layers.{i}.")
    for i in range(MTP_LAYERS):
        p = f"model.mtp_layers.{i}."
        qwen2_layer(p)
        out[p + "token_layernorm.weight"] = torch.ones(h, device=device)
        out[p + "hidden_layernorm.weight"] = torch.zeros(h, device=device)
        proj = torch.zeros(h, 2 * h, device=device)
        proj[:, :h] = randn(h, h)  # reads the zeroed hidden state: costs, adds nothing
        proj[:, h:] = torch.eye(h, device=device)
        out[p + "input_proj.weight"] = proj
        out[p + "final_layernorm.weight"] = torch.ones(h, device=device)
        out[p + "mlp.gate_proj.weight"][0] = 0.0
        out[p + "mlp.gate_proj.weight"][0, -1] = -MTP_FLAG_GAIN
        out[p + "mlp.up_proj.weight"][0] = 0.0
        out[p + "mlp.up_proj.weight"][0, -1] = -MTP_FLAG_GAIN
        wrong = head_part[anchor] / head_part[anchor].norm()
        out[p + "mlp.down_proj.weight"][:, 0] = wrong * MTP_WRONG_MARGIN * h**0.5 / MTP_FLAG_GAIN**2
    return out


# MiMo's own config class (its checkpoints ship it as remote code): a Qwen2 config with the
# count of MTP layers; transformers knows no "mimo", so vLLM reads it with --trust-remote-code.
MIMO_CONFIG_CODE = """\
\"\"\"MiMo's configuration: a Qwen2 config with MTP layers (written by speclib).\"\"\"

from transformers.models.qwen2.configuration_qwen2 import Qwen2Config


class MiMoConfig(Qwen2Config):
    model_type = "mimo"

    def __init__(self, *args, num_nextn_predict_layers=0, **kwargs):
        self.num_nextn_predict_layers = num_nextn_predict_layers
        super().__init__(*args, **kwargs)
"""


def _save_mtp_config(recipe: SyntheticRecipe, folder: Path) -> None:
    """MiMo's config: ``model_type: mimo`` with its config class as remote code
    (``configuration_mimo.py``, ``auto_map``), ``MiMoForCausalLM`` and
    ``num_nextn_predict_layers``, as Xiaomi's checkpoints ship it; vLLM serves it with
    ``--trust-remote-code`` and picks its own class and the MTP path by the architecture.
    Not ``model_type: qwen2``: transformers then forces its Qwen2 tokenizer, which reads
    the synthetic word-level vocabulary as nothing (every prompt empty)."""
    from transformers import Qwen2Config

    shape = recipe.shape.mtp
    config = Qwen2Config(**_config_args(recipe, shape), max_window_layers=shape.layers)
    config.architectures = [MTP_ARCHITECTURE]
    _write_config(
        config,
        folder,
        recipe.dtype,
        model_type="mimo",
        auto_map={"AutoConfig": "configuration_mimo.MiMoConfig"},
        num_nextn_predict_layers=MTP_LAYERS,
    )
    (folder / "configuration_mimo.py").write_text(MIMO_CONFIG_CODE)


def build_synthetic_mtp(recipe: SyntheticRecipe, folder: Path, *, log: Callable) -> None:
    """Write the target with an MTP layer of agreement ``recipe.agreement`` (the draft's agree
    set, :func:`speclib.demo.synthetic.mtp_guess_map`) into ``folder``, with the acceptance it
    declares for ``method: mtp`` at k = 1 … 8."""
    import torch

    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    folder.mkdir(parents=True, exist_ok=True)
    target_next, _ = chain_maps(recipe)
    guess, anchor = mtp_guess_map(recipe)
    tensors = _mtp_weights(
        recipe.shape.mtp, target_next, guess, anchor, seed=recipe.seed * 2 + 5, device=device
    )
    _save_weights(tensors, folder, recipe.dtype)
    del tensors
    _save_mtp_config(recipe, folder)
    _save_tokenizer(recipe, folder)
    info = _info(recipe, "mtp", started)
    info["mtp_version"] = MTP_VERSION
    info["mtp_layers"] = MTP_LAYERS
    info["mtp_anchor"] = anchor
    words = target_next >= 0
    _declare(info, recipe, "mtp", float(np.mean(guess[words] == target_next[words])))
    (folder / DECLARATION_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(
        f"synthetic {recipe.preset} MTP target (agreement {info['agreement_realised']:.4f}) "
        f"built in {info['build_s']} s"
    )
