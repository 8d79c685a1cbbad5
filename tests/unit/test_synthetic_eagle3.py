"""The synthetic EAGLE-3 head's math in plain torch, as vLLM's ``Eagle3LlamaForCausalLM`` runs it.

The tiny preset's head is built on CPU and run by a re-implementation of vLLM's EAGLE-3
layer (``vllm/model_executor/models/llama_eagle3.py``: the input token's embedding and the
hidden state normed and concatenated, rotary causal attention with grouped KV heads,
``norm_before_residual``, the final norm, the head) fed as vLLM's proposer feeds it: the
target's three tapped layers through ``fc`` on the first step, the head's own pre-norm
output on the next ones. Its argmax must be the agreement map's next word for every word,
on every step, in float32 and in bfloat16 (the GPU's dtype). The real server's run is
``tests/integration/test_synthetic_real.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from speclib.demo.models import built_demo_dir, demo_model_dir
from speclib.demo.synthetic import (
    EAGLE3_ARCHITECTURE,
    FIRST_WORD,
    PRESETS,
    SyntheticRecipe,
    chain_maps,
    eagle3_aux_layers,
    parse_synthetic_ref,
    read_declaration,
)

torch = pytest.importorskip("torch")


def _rms(x, w, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def _rope(x, positions, theta):  # neox style, as vLLM's Llama attention
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = positions.float()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., : d // 2].float(), x[..., d // 2 :].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Head:
    """vLLM's EAGLE-3 Llama layer over one sequence (no KV cache: causal recompute)."""

    def __init__(self, folder: Path, dtype) -> None:
        from safetensors.torch import load_file

        self.cfg = json.loads((folder / "config.json").read_text())
        self.w = {k: v.to(dtype) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.attn: torch.Tensor | None = None

    def forward(self, tokens, hidden, positions):
        w, c, p = self.w, self.cfg, "layers.0."
        heads, groups, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        embeds = _rms(w["embed_tokens.weight"][tokens], w[p + "input_layernorm.weight"])
        assert c["norm_before_residual"]
        hs = _rms(hidden, w[p + "hidden_norm.weight"])
        residual = hs
        x = torch.cat([embeds, hs], dim=-1)
        n = len(tokens)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(n, heads, d)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(n, groups, d)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(n, groups, d)
        q, k = _rope(q, positions, c["rope_theta"]), _rope(k, positions, c["rope_theta"])
        k = k.repeat_interleave(heads // groups, dim=1)
        v = v.repeat_interleave(heads // groups, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / d**0.5
        scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
        self.attn = scores.softmax(-1)
        out = torch.einsum("hqk,khd->qhd", self.attn, v.float()).to(x.dtype).reshape(n, -1)
        residual = out @ w[p + "self_attn.o_proj.weight"].T + residual
        h = _rms(residual, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        mlp = (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        residual = mlp + residual
        final = _rms(residual, w["norm.weight"])
        return final @ w["lm_head.weight"].T, residual  # logits, the pre-norm hidden state


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict:
    cache = tmp_path_factory.mktemp("eagle3")
    log = lambda _m: None  # noqa: E731
    return {
        "target": demo_model_dir("tiny/target", cache_dir=cache, log=log),
        "head": demo_model_dir("tiny/eagle3@0.6", cache_dir=cache, log=log),
        "recipe": SyntheticRecipe(preset="tiny", agreement=0.6),
    }


def test_the_head_is_a_vllm_eagle3_checkpoint_of_the_targets_shape(tiny: dict) -> None:
    from safetensors import safe_open

    cfg = json.loads((tiny["head"] / "config.json").read_text())
    shape = PRESETS["tiny"]
    assert cfg["architectures"] == [EAGLE3_ARCHITECTURE] and cfg["model_type"] == "llama"
    assert cfg["target_hidden_size"] == shape.target.hidden == cfg["hidden_size"]
    assert cfg["vocab_size"] == cfg["draft_vocab_size"] == shape.vocab_size
    assert cfg["eagle_aux_hidden_state_layer_ids"] == eagle3_aux_layers(shape.target.layers)
    assert all(0 <= i < shape.target.layers for i in cfg["eagle_aux_hidden_state_layer_ids"])
    assert len(set(cfg["eagle_aux_hidden_state_layer_ids"])) == 3  # vLLM taps each layer once
    with safe_open(str(tiny["head"] / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert f.get_tensor("fc.weight").shape == (shape.eagle3.hidden, 3 * shape.target.hidden)
    assert "d2t" not in names and not any(n.startswith("model.") for n in names)
    with (
        safe_open(str(tiny["target"] / "model.safetensors"), "pt") as t,
        safe_open(str(tiny["head"] / "model.safetensors"), "pt") as h,
    ):
        shared = t.get_tensor("model.embed_tokens.weight")
        assert torch.equal(shared, h.get_tensor("embed_tokens.weight"))
    declared = read_declaration(tiny["head"])
    assert declared["role"] == "eagle3" and "eagle3" in declared["declared_for"]
    assert declared["declared"]["3"]["mean_acceptance_length"] == pytest.approx(
        1 + sum(declared["agreement_realised"] ** i for i in (1, 2, 3))
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_draft_step_guesses_the_agreement_maps_next_word(tiny: dict, dtype: str) -> None:
    from transformers import AutoModelForCausalLM

    dt = getattr(torch, dtype)
    target_next, draft_next = chain_maps(tiny["recipe"])
    head = Head(tiny["head"], dt)
    target = AutoModelForCausalLM.from_pretrained(tiny["target"])
    aux = head.cfg["eagle_aux_hidden_state_layer_ids"]
    rng = np.random.default_rng(5)
    words = FIRST_WORD + PRESETS["tiny"].words
    for _ in range(3):
        prompt = [int(w) for w in rng.integers(FIRST_WORD, words, 150)]
        seq = [*prompt, int(target_next[prompt[-1]])]  # the target's first answer token
        with torch.no_grad():
            out = target(torch.tensor([seq]), output_hidden_states=True)
            # vLLM's aux state of layer i is its input (hidden + residual): HF's hidden_states[i]
            taps = torch.cat([out.hidden_states[i][0] for i in aux], dim=-1).to(dt)
            hidden = taps @ head.w["fc.weight"].T
            # step 1 (vLLM shifts the tokens: position t sees token t+1 and the state of t)
            tokens, positions = torch.tensor(seq[1:]), torch.arange(len(seq) - 1)
            logits, prenorm = head.forward(tokens, hidden[:-1], positions)
            got = logits.argmax(-1).numpy()
            assert (got == draft_next[tokens.numpy()]).all()
            attn = head.attn
            assert attn is not None and float(attn.diagonal(dim1=1, dim2=2).min()) > 0.999
            # steps 2..5 from the last position: the drafted token and the head's own state
            for _step in range(4):
                guess = int(logits[-1].argmax())
                tokens = torch.cat([tokens, torch.tensor([guess])])
                hidden_in = torch.cat([hidden[: len(seq) - 1], prenorm[len(seq) - 2 :]])
                positions = torch.arange(len(tokens))
                logits, step_prenorm = head.forward(tokens, hidden_in, positions)
                prenorm = torch.cat([prenorm, step_prenorm[-1:]])
                assert int(logits[-1].argmax()) == int(draft_next[guess])


def test_the_head_agrees_at_the_rate_asked_over_the_vocabulary(tiny: dict) -> None:
    target_next, draft_next = chain_maps(tiny["recipe"])
    head = Head(tiny["head"], torch.float32)
    ids = torch.arange(FIRST_WORD, FIRST_WORD + PRESETS["tiny"].words)
    ids = ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(1))]
    with torch.no_grad():  # every word once, in one sequence: each attends to itself
        hidden = torch.randn(len(ids), head.cfg["hidden_size"])
        logits, _ = head.forward(ids, hidden, torch.arange(len(ids)))
    got = logits.argmax(-1).numpy()
    assert (got == draft_next[ids.numpy()]).all()
    agree = float(np.mean(got == target_next[ids.numpy()]))
    assert agree == pytest.approx(read_declaration(tiny["head"])["agreement_realised"])
    assert abs(agree - 0.6) < 0.03


def test_eagle3_references_parse_and_are_found_once_built(tmp_path: Path, monkeypatch) -> None:
    assert parse_synthetic_ref("qwen3-4b/eagle3@0.8") == ("qwen3-4b", "eagle3", 0.8)
    assert parse_synthetic_ref("tiny/eagle3") == ("tiny", "eagle3", 0.7)
    with pytest.raises(ValueError, match="eagle3"):
        parse_synthetic_ref("tiny/eagle2@0.5")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        parse_synthetic_ref("tiny/eagle3@1.5")
    monkeypatch.setenv("SPECLIB_CACHE", str(tmp_path))
    assert built_demo_dir("tiny/eagle3@0.5") is None
    folder = demo_model_dir("tiny/eagle3@0.5", log=lambda _m: None)
    assert built_demo_dir("tiny/eagle3@0.5") == folder
    assert built_demo_dir("tiny/target") is not None  # the head was built from the target
