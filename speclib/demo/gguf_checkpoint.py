"""A GGUF file as a float Hugging Face checkpoint, a draft cut from it, and their agreement.

:func:`convert_gguf` loads a GGUF file with transformers' own GGUF loading
(``from_pretrained(..., gguf_file=...)``, which needs the ``gguf`` and ``accelerate``
packages; no dequantizer of the kit's own), asks it to unpack every weight, and saves a
float32 or bfloat16 folder with the tokenizer, its chat template and a generation config that ``vllm
serve`` and ``AutoTokenizer`` load. :func:`cut_draft` keeps a target's embeddings, first
decoder layers, final norm and tied head as a draft of the same vocabulary.
:func:`greedy_agreement` measures how often that draft's greedy token is the target's along
the target's own greedy answers. torch and transformers are imported only when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["convert_gguf", "cut_draft", "greedy_agreement"]


def convert_gguf(gguf: Path, out: Path, *, dtype: str = "float32") -> dict[str, Any]:
    """Write ``gguf`` as a Hugging Face folder in ``out`` (weights in ``dtype``, float32 or
    bfloat16; tokenizer with its chat template; generation config) through transformers'
    GGUF loading; return its shape and tokenizer facts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    extra: dict[str, Any] = {}
    try:  # transformers >= 5 can keep GGUF blocks; ask it to unpack every weight instead
        from transformers import GgufConfig

        extra["quantization_config"] = GgufConfig(gguf_file=str(gguf), dequantize=True)
    except ImportError:  # transformers 4 always dequantizes a GGUF file at load
        pass
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, **extra
    )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # every weight is dense float now: drop the GGUF marking
        quantizer.remove_quantization_config(model)
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError(f"{gguf.name}: transformers left weights that are not float32")
    if not tokenizer.chat_template:
        raise ValueError(f"{gguf.name} carries no chat template")
    eos_id = tokenizer.eos_token_id
    model.config.eos_token_id = eos_id
    model.config.bos_token_id = tokenizer.bos_token_id
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id, do_sample=False
    )
    if dtype != "float32":  # unpacked in float32, written in the serving dtype
        model = model.to(getattr(torch, dtype))
        model.config.dtype = dtype
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    cfg = model.config
    return {
        "architecture": type(model).__name__,
        "layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tied_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
        "dtype": dtype,
        "tokenizer": {
            "eos_token": tokenizer.eos_token,
            "eos_token_id": eos_id,
            "bos_token": tokenizer.bos_token,
            "chat_template_chars": len(tokenizer.chat_template),
        },
    }


def cut_draft(target_dir: Path, out: Path, layers: int) -> dict[str, Any]:
    """Write a draft made of the target's embeddings, first ``layers`` decoder layers, final
    norm and head (tied as the target's) into ``out``, with the target's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    if not 0 < layers < model.config.num_hidden_layers:
        raise ValueError(f"draft layers must be in 1..{model.config.num_hidden_layers - 1}")
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:layers]
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(target_dir).save_pretrained(out)
    return {"layers": layers, "parameters": sum(p.numel() for p in model.parameters())}


def greedy_agreement(
    target_dir: Path, draft_dir: Path, prompts: Sequence[str], *, max_tokens: int = 48
) -> dict[str, Any]:
    """How often the draft's greedy next token is the target's, along the target's own greedy
    answer to each prompt (chat template applied): per prompt and overall, with the share of
    answers that ended in EOS. Both run in float32, on the GPU when there is one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
    target, draft = target.to(device).eval(), draft.to(device).eval()
    per_prompt, hits, total, eos_ended = [], 0, 0, 0
    with torch.inference_mode():
        for prompt in prompts:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}],
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            )["input_ids"].to(device)
            full = target.generate(
                ids, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id
            )
            answer = full[0, ids.shape[1] :]
            eos_ended += int(answer.numel() > 0 and answer[-1].item() == tokenizer.eos_token_id)
            guesses = draft(full).logits[0, ids.shape[1] - 1 : -1].argmax(-1)
            agree = int((guesses == answer).sum())
            hits, total = hits + agree, total + answer.numel()
            per_prompt.append(round(agree / max(answer.numel(), 1), 4))
    return {
        "overall": round(hits / max(total, 1), 4),
        "per_prompt": per_prompt,
        "tokens": total,
        "eos_ended": eos_ended,
        "prompts": len(prompts),
    }
