"""The synthetic target with an MTP layer, in plain torch, as vLLM's MiMo runs it.

The tiny preset's MTP target is built on CPU. Its decoder must follow the same chain as the
Qwen3 target (run by transformers' Qwen2, the layers its config names), and its MTP layer,
re-implemented as vLLM's ``MiMoMultiTokenPredictorLayer`` runs it
(``vllm/model_executor/models/mimo_mtp.py``: the token's embedding and the previous hidden
state normed and concatenated, ``input_proj``, one Qwen2 decoder layer, the final norm, the
target's head), must guess :func:`mtp_guess_map`'s word for every word, on every step (vLLM
feeds its own output back as the next step's hidden state and reuses the one layer), in
float32 and bfloat16. The real server's run is ``tests/integration/test_synthetic_real.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from speclib.demo.models import built_demo_dir, demo_model_dir
from speclib.demo.synthetic import (
    FIRST_WORD,
    MTP_ARCHITECTURE,
    MTP_LAYERS,
    PRESETS,
    SyntheticRecipe,
    chain_maps,
    guess_map,
    mtp_guess_map,
    parse_synthetic_ref,
    read_declaration,
    weight_bytes,
)
from speclib.params.spec_compat import tensor_shapes

torch = pytest.importorskip("torch")


def _rms(x, w, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class MtpLayer:
    """vLLM's MiMo MTP layer over one sequence (causal attention; no RoPE: whatever the
    attention returns, the layer's ``o_proj`` is what decides how much of it is added)."""

    def __init__(self, folder: Path, dtype) -> None:
        from safetensors.torch import load_file

        self.w = {k: v.to(dtype) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.cfg = json.loads((folder / "config.json").read_text())

    def __call__(self, tokens, previous):
        w, p = self.w, "model.mtp_layers.0."
        cfg = self.cfg
        embeds = w["model.embed_tokens.weight"][tokens]
        x = torch.cat(
            [
                _rms(previous, w[p + "hidden_layernorm.weight"]),
                _rms(embeds, w[p + "token_layernorm.weight"]),
            ],
            dim=-1,
        )
        hs = x @ w[p + "input_proj.weight"].T
        h = _rms(hs, w[p + "input_layernorm.weight"])
        heads, groups = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        d = cfg["hidden_size"] // heads
        n = len(tokens)
        q = (h @ w[p + "self_attn.q_proj.weight"].T + w[p + "self_attn.q_proj.bias"]).view(
            n, heads, d
        )
        k = (h @ w[p + "self_attn.k_proj.weight"].T + w[p + "self_attn.k_proj.bias"]).view(
            n, groups, d
        )
        v = (h @ w[p + "self_attn.v_proj.weight"].T + w[p + "self_attn.v_proj.bias"]).view(
            n, groups, d
        )
        k, v = (t.repeat_interleave(heads // groups, dim=1) for t in (k, v))
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
        attn = torch.einsum("hqk,khd->qhd", scores.float().softmax(-1).to(q.dtype), v)
        residual = hs + attn.reshape(n, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        m = _rms(residual, w[p + "post_attention_layernorm.weight"])
        gate, up = m @ w[p + "mlp.gate_proj.weight"].T, m @ w[p + "mlp.up_proj.weight"].T
        out = residual + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        final = _rms(out, w[p + "final_layernorm.weight"])
        return final @ w["lm_head.weight"].T, final  # logits, the state fed to the next step


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict:
    cache = tmp_path_factory.mktemp("mtp")
    log = lambda _m: None  # noqa: E731
    return {
        "mtp": demo_model_dir("tiny/mtp@0.6", cache_dir=cache, log=log),
        "recipe": SyntheticRecipe(preset="tiny", agreement=0.6),
        "cache": cache,
    }


def test_the_target_is_a_mimo_checkpoint_vllm_reads(tiny: dict) -> None:
    cfg = json.loads((tiny["mtp"] / "config.json").read_text())
    shape = PRESETS["tiny"].mtp
    assert cfg["architectures"] == [MTP_ARCHITECTURE] and cfg["model_type"] == "mimo"
    assert cfg["auto_map"] == {"AutoConfig": "configuration_mimo.MiMoConfig"}
    assert cfg["num_nextn_predict_layers"] == MTP_LAYERS == 1
    assert cfg["hidden_size"] == shape.heads * shape.head_dim  # vLLM's Qwen2 derives head_dim
    assert not cfg["tie_word_embeddings"] and cfg["num_hidden_layers"] == shape.layers
    shapes = tensor_shapes(tiny["mtp"])
    assert shapes is not None
    mtp = {n for n in shapes if n.startswith("model.mtp_layers.0.")}
    # the names vLLM's MiMoMTP maps onto its layer (the rest of the layer is a Qwen2 layer)
    for part in ("token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm"):
        assert f"model.mtp_layers.0.{part}.weight" in mtp
    assert shapes["model.mtp_layers.0.input_proj.weight"] == (shape.hidden, 2 * shape.hidden)
    assert "model.mtp_layers.0.self_attn.q_proj.bias" in mtp  # Qwen2 attention has biases
    assert not any("q_norm" in n for n in shapes)  # and no q/k norms
    size = sum(math.prod(s) for s in shapes.values()) * 4  # float32
    assert size == weight_bytes(tiny["recipe"], "mtp")
    declared = read_declaration(tiny["mtp"])
    assert declared["role"] == "mtp" and "method mtp" in declared["declared_for"]
    assert declared["declared"]["3"]["acceptance_per_position"] == pytest.approx(
        [declared["agreement_realised"] ** i for i in (1, 2, 3)]
    )


def test_mimos_config_and_tokenizer_load_as_vllm_loads_them(tiny: dict) -> None:
    from transformers import AutoConfig, AutoTokenizer

    # vLLM with --trust-remote-code: MiMo's config class from the folder, and the word-level
    # tokenizer (a model_type qwen2 would get transformers' Qwen2 tokenizer: empty prompts)
    cfg = AutoConfig.from_pretrained(tiny["mtp"], trust_remote_code=True, local_files_only=True)
    assert type(cfg).__name__ == "MiMoConfig" and cfg.num_nextn_predict_layers == MTP_LAYERS
    tok = AutoTokenizer.from_pretrained(tiny["mtp"], trust_remote_code=True, local_files_only=True)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "w0 w1 w2"}], tokenize=True, add_generation_prompt=True
    )
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert list(ids) == [FIRST_WORD, FIRST_WORD + 1, FIRST_WORD + 2]


def test_the_decoder_follows_the_targets_chain(tiny: dict) -> None:
    from transformers import Qwen2ForCausalLM

    target_next, _ = chain_maps(tiny["recipe"])
    model = Qwen2ForCausalLM.from_pretrained(tiny["mtp"])  # MiMo's decoder; MTP layers unused
    words = torch.arange(FIRST_WORD, FIRST_WORD + PRESETS["tiny"].words)
    with torch.no_grad():
        logits = model(words[None, :]).logits[0]
    assert (logits.argmax(-1).numpy() == target_next[words.numpy()]).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_guess_is_the_mtp_maps_next_word(tiny: dict, dtype: str) -> None:
    dt = getattr(torch, dtype)
    guess, _ = mtp_guess_map(tiny["recipe"])
    layer = MtpLayer(tiny["mtp"], dt)
    h = layer.cfg["hidden_size"]
    rng = np.random.default_rng(3)
    for _ in range(3):
        tokens = torch.tensor(rng.integers(FIRST_WORD, FIRST_WORD + PRESETS["tiny"].words, 200))
        with torch.no_grad():
            # step 1: position t sees token t+1 and the target's hidden state of t (any: its
            # norm's weight is zero)
            logits, state = layer(tokens, torch.randn(len(tokens), h).to(dt) * 40)
            assert (logits.argmax(-1).numpy() == guess[tokens.numpy()]).all()
            # steps 2..4 from the last position: its own guess and its own output state
            for _step in range(3):
                word = int(logits[-1].argmax())
                tokens = torch.cat([tokens, torch.tensor([word])])
                logits, step = layer(tokens, torch.cat([state[:1], state]))
                state = torch.cat([state, step[-1:]])
                assert int(logits[-1].argmax()) == int(guess[word])


def test_the_map_agrees_where_the_draft_does_and_misses_elsewhere() -> None:
    for rate in (0.0, 0.3, 0.7, 1.0):
        recipe = SyntheticRecipe(preset="tiny", agreement=rate)
        target_next, draft_next = chain_maps(recipe)
        guess, anchor = mtp_guess_map(recipe)
        words = np.flatnonzero(target_next >= 0)
        agree = guess[words] == target_next[words]
        draft_agree = draft_next[words] == target_next[words]
        assert guess[anchor] == target_next[anchor]
        if draft_agree.any():
            assert (agree == draft_agree).all()
        assert (guess[words][~agree] == target_next[anchor]).all()
        assert (guess_map(recipe, "mtp") == guess).all()
        assert (guess_map(recipe, "draft") == draft_next).all()


def test_the_layer_agrees_at_the_rate_asked_over_the_vocabulary(tiny: dict) -> None:
    target_next, _ = chain_maps(tiny["recipe"])
    layer = MtpLayer(tiny["mtp"], torch.float32)
    ids = torch.arange(FIRST_WORD, FIRST_WORD + PRESETS["tiny"].words)
    with torch.no_grad():
        logits, _ = layer(ids, torch.zeros(len(ids), layer.cfg["hidden_size"]))
    agree = float(np.mean(logits.argmax(-1).numpy() == target_next[ids.numpy()]))
    assert agree == pytest.approx(read_declaration(tiny["mtp"])["agreement_realised"])
    assert abs(agree - 0.6) < 0.03


def test_mtp_references_parse_and_are_found_once_built(tiny: dict, monkeypatch) -> None:
    assert parse_synthetic_ref("qwen3-4b/mtp@0.8") == ("qwen3-4b", "mtp", 0.8)
    assert parse_synthetic_ref("tiny/mtp") == ("tiny", "mtp", 0.7)
    with pytest.raises(ValueError, match="mtp"):
        parse_synthetic_ref("tiny/target@0.5")
    monkeypatch.setenv("SPECLIB_CACHE", str(tiny["cache"]))
    assert built_demo_dir("tiny/mtp@0.6") == tiny["mtp"]
    assert built_demo_dir("tiny/mtp@0.5") is None  # another agreement is another target
    assert built_demo_dir("tiny/target") is None  # the MTP target is built whole, alone


def _mtp_params(tmp_path: Path, model: Path):
    import yaml

    from speclib.params.loader import load_params

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "messages": [{"role": "user", "content": "w1 w2"}]}\n')
    path = tmp_path / "p.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "m",
                "server": {"model": str(model)},
                "series": [
                    {"name": "control"},
                    {
                        "name": "mtp-k3",
                        "speculative_config": {"method": "mtp", "num_speculative_tokens": 3},
                    },
                ],
                "workload": {"prompts": str(prompts), "temperature": 0.0},
            }
        )
    )
    return load_params(path)


def test_an_mtp_arms_truth_and_weights_come_from_its_target(tiny: dict, tmp_path: Path) -> None:
    from speclib.core.records import RequestRecord
    from speclib.demo.synthetic import expected_acceptance
    from speclib.run.mtp_weights import launch_mtp_weights
    from speclib.run.synthetic_truth import acceptance_truth

    params = _mtp_params(tmp_path, tiny["mtp"])
    control, mtp = params.series
    target_next, _ = chain_maps(tiny["recipe"])
    guess, _ = mtp_guess_map(tiny["recipe"])
    walk = [FIRST_WORD + 5]
    while len(walk) < 300:
        walk.append(int(target_next[walk[-1]]))
    record = RequestRecord(
        series="mtp-k3", replicate=0, prompt_id="a", ok=True, token_ids=tuple(walk)
    )
    assert acceptance_truth(params, control, [record]) is None
    truth = acceptance_truth(params, mtp, [record])
    assert truth is not None and truth["k"] == 3
    assert truth["expected"] == expected_acceptance(guess, [walk], 3, target_next=target_next)
    assert truth["agreement"] == read_declaration(tiny["mtp"])["agreement_realised"]
    weights = launch_mtp_weights(params, mtp)
    shape, vocab = PRESETS["tiny"].mtp, PRESETS["tiny"].vocab_size
    assert weights is not None and weights["head_params"] == vocab * shape.hidden
    assert launch_mtp_weights(params, control) is None
