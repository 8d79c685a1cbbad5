"""An MTP arm's cost per guess, modelled from the weights it reads, and the "why" it feeds.

vLLM cannot serve an MTP layer alone, so ``c`` is the parameters one guess reads (one MTP
module and the LM head) over those of a target step (its decoder layers and the head),
counted from the checkpoint's tensor shapes; the prediction says it is modelled.
"""

from __future__ import annotations

import pytest

from speclib.analysis.speculation.drafting import DraftedShare
from speclib.analysis.speculation.launches import LaunchMetrics
from speclib.analysis.speculation.mtp_cost import mtp_step_weights
from speclib.analysis.speculation.why import explain
from speclib.analysis.verdict.explain import mtp_draft_cost


def _qwen2_layer(prefix: str, h: int, inter: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}self_attn.q_proj.weight": (h, h),
        f"{prefix}self_attn.q_proj.bias": (h,),
        f"{prefix}mlp.up_proj.weight": (inter, h),
        f"{prefix}mlp.down_proj.weight": (h, inter),
        f"{prefix}input_layernorm.weight": (h,),
    }


def _mimo(layers: int, h: int = 8, inter: int = 16, vocab: int = 100) -> dict:
    shapes = {"model.embed_tokens.weight": (vocab, h), "lm_head.weight": (vocab, h)}
    shapes["model.norm.weight"] = (h,)
    for i in range(layers):
        shapes |= _qwen2_layer(f"model.layers.{i}.", h, inter)
    shapes |= _qwen2_layer("model.mtp_layers.0.", h, inter)
    shapes["model.mtp_layers.0.input_proj.weight"] = (h, 2 * h)
    shapes["model.mtp_layers.0.final_layernorm.weight"] = (h,)
    return shapes


def test_a_guess_reads_one_module_and_the_head_against_a_target_step() -> None:
    h, inter, vocab = 8, 16, 100
    layer = h * h + h + 2 * inter * h + h
    found = mtp_step_weights(_mimo(4, h, inter, vocab), num_hidden_layers=4, mtp_modules=1)
    assert found is not None
    assert found.mtp_module_params == layer + 2 * h * h + h
    assert found.head_params == vocab * h  # the target's head: the module has none
    assert found.target_params == 4 * layer + h + vocab * h  # embeddings left out
    assert found.c == pytest.approx(
        (layer + 2 * h * h + h + vocab * h) / (4 * layer + h + vocab * h)
    )
    deeper = mtp_step_weights(_mimo(12, h, inter, vocab), num_hidden_layers=12, mtp_modules=1)
    assert deeper is not None and deeper.c < found.c  # the same guess against a costlier step


def test_layers_past_the_decoder_are_mtp_modules_and_their_own_heads_count() -> None:
    h, vocab = 8, 100
    shapes = {"lm_head.weight": (vocab, h), "model.norm.weight": (h,)}
    for i in range(6):  # 4 decoder layers, then 2 MTP modules (DeepSeek's naming)
        shapes[f"model.layers.{i}.mlp.weight"] = (h, h)
    shapes["model.layers.4.shared_head.head.weight"] = (vocab, h)
    shapes["model.layers.5.shared_head.head.weight"] = (vocab, h)
    found = mtp_step_weights(shapes, num_hidden_layers=4, mtp_modules=2)
    assert found is not None
    assert found.mtp_module_params == h * h and found.head_params == vocab * h
    assert found.target_params == 4 * h * h + h + vocab * h


def test_a_checkpoint_without_mtp_tensors_has_no_model() -> None:
    shapes = {"lm_head.weight": (10, 4), "model.layers.0.mlp.weight": (4, 4)}
    assert mtp_step_weights(shapes, num_hidden_layers=1, mtp_modules=1) is None
    with pytest.raises(ValueError, match="mtp_modules"):
        mtp_step_weights(shapes, num_hidden_layers=1, mtp_modules=0)


def _launch(weights: dict | None) -> LaunchMetrics:
    return LaunchMetrics("l0", "mtp-k3", None, None, None, mtp_weights=weights)


def test_the_why_predicts_mtp_with_a_modelled_c() -> None:
    found = mtp_step_weights(_mimo(4), num_hidden_layers=4, mtp_modules=1)
    assert found is not None
    cost, reason = mtp_draft_cost([_launch(None), _launch(found.to_dict())])
    assert reason is None and cost is not None and cost.c == pytest.approx(found.c)
    assert "modelled, not timed" in cost.source and "hidden state" in cost.source
    share = DraftedShare(100, 100.0, 1.0, 2.5, 8, 8, "per-request metrics")
    why = explain(
        method="mtp",
        k=3,
        stream_factors=(2.5, 1.6, 8),
        measured_speedup=2.5 / 1.6,
        verify_tokens=2.5,
        drafting=share,
        draft_cost=cost,
    )
    assert why.prediction is not None and why.prediction.cost.c == pytest.approx(found.c)
    assert why.prediction.model_step_cost == pytest.approx(1 + 3 * found.c)
    assert "modelled, not timed" in why.summary


def test_an_mtp_arm_without_a_recorded_count_says_why() -> None:
    cost, reason = mtp_draft_cost([_launch(None)])
    assert cost is None and reason is not None and "cannot be served alone" in reason
