"""Training the demo pair: the target's core, the distilled draft, the untrained ballast.

:func:`train_pair` trains a small Llama core on the encoded corpus (cross-entropy on the
answer tokens, AdamW with warmup and cosine decay), makes the draft from the core's
embeddings, first ``draft_layers`` blocks and head (:func:`truncated_copy`) and distils it
on the core's next-token distributions, then appends ``ballast_layers`` untrained blocks to
the core to make the target (:func:`with_ballast`). :func:`agreement` measures on held-out
chats how often the draft's greedy next token is the target's. Everything is seeded by the
recipe, so a build is deterministic. torch and transformers are imported only inside the
functions.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from speclib.demo.prompts_gen import KNOWN_KINDS, Chat
from speclib.demo.recipe import DemoRecipe, ModelShape
from speclib.demo.tokenizer import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, SPECIAL_TOKENS, render_chat

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

__all__ = ["agreement", "new_model", "train_pair", "truncated_copy", "with_ballast"]

_IGNORE = -100


def train_pair(
    examples: Sequence[tuple[list[int], int]],
    tokenizer: Tokenizer,
    recipe: DemoRecipe,
    log: Callable[[str], Any],
) -> tuple[LlamaForCausalLM, LlamaForCausalLM, dict[str, list[float]], dict[str, float]]:
    """Train the target's core on the corpus, distill the draft (its first layers) from the
    core, then append the untrained ballast blocks to the target."""
    t0 = time.perf_counter()
    core = new_model(recipe.target, _padded_vocab(tokenizer.get_vocab_size()), recipe)
    log(f"target core: {_describe(core)}")
    losses = {"target": _train(core, examples, recipe=recipe, log=log, name="target")}
    timings = {"train_target_s": round(time.perf_counter() - t0, 2)}
    t0 = time.perf_counter()
    draft = truncated_copy(core, recipe.draft_layers)
    log(f"draft: {_describe(draft)}, distilled from the target core")
    losses["draft"] = _train(draft, examples, recipe=recipe, log=log, name="draft", teacher=core)
    timings["train_draft_s"] = round(time.perf_counter() - t0, 2)
    target = with_ballast(core, recipe.ballast_layers, seed=recipe.seed + 1)
    log(f"target: {_describe(target)} ({recipe.ballast_layers} untrained blocks appended)")
    return target, draft, losses, timings


def with_ballast(core: LlamaForCausalLM, n: int, *, seed: int) -> LlamaForCausalLM:
    """``core`` with ``n`` freshly initialised blocks after its own (same norm and head).

    The new blocks keep the library's initialisation (normal, std ``initializer_range``),
    so each adds a small update to the trained residual stream: for the default recipe the
    greedy output changed on none of 768 held-out tokens, while every forward pass costs
    what ``n`` more blocks cost.
    """
    import torch
    from transformers import LlamaForCausalLM

    if n == 0:
        return core
    config = core.config.__class__.from_dict(core.config.to_dict())
    config.num_hidden_layers = core.config.num_hidden_layers + n
    torch.manual_seed(seed)
    target = LlamaForCausalLM(config)
    result = target.load_state_dict(core.state_dict(), strict=False)
    fresh = {k.split(".")[2] for k in result.missing_keys}
    if result.unexpected_keys or fresh != {
        str(i) for i in range(core.config.num_hidden_layers, config.num_hidden_layers)
    }:
        raise RuntimeError(f"ballast: unexpected weight layout {result}")
    target.generation_config = core.generation_config
    target.eval()
    return target


def _since(t0: float) -> str:
    return f"{time.perf_counter() - t0:.1f} s"


def _padded_vocab(n: int) -> int:
    return -(-n // 64) * 64


def new_model(shape: ModelShape, vocab: int, recipe: DemoRecipe) -> LlamaForCausalLM:
    """A freshly initialised (seeded) Llama of ``shape`` over ``vocab`` token ids."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = {t: SPECIAL_TOKENS.index(t) for t in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)}
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=recipe.max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=recipe.tie_embeddings,
        bos_token_id=ids[BOS_TOKEN],
        eos_token_id=ids[EOS_TOKEN],
        pad_token_id=ids[PAD_TOKEN],
        dtype="float32",
    )
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = ids[BOS_TOKEN]
    model.generation_config.eos_token_id = ids[EOS_TOKEN]
    model.generation_config.pad_token_id = ids[PAD_TOKEN]
    return model


def _describe(model: LlamaForCausalLM) -> str:
    cfg = model.config
    n_params = sum(p.numel() for p in model.parameters())
    return f"{cfg.num_hidden_layers}x{cfg.hidden_size}, {n_params / 1e6:.2f} M params"


def truncated_copy(target: LlamaForCausalLM, layers: int) -> LlamaForCausalLM:
    """A new model made of the target's embeddings, first ``layers`` blocks, norm and head."""
    from transformers import LlamaForCausalLM

    config = target.config.__class__.from_dict(target.config.to_dict())
    config.num_hidden_layers = layers
    draft = LlamaForCausalLM(config)
    kept = {
        k: v
        for k, v in target.state_dict().items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers
    }
    draft.load_state_dict(kept, strict=True)
    draft.generation_config = target.generation_config
    return draft


def _batches(
    examples: Sequence[tuple[list[int], int]], *, batch_size: int, rng: random.Random
) -> list[list[int]]:
    """One epoch of index batches: shuffled, length-bucketed (little padding), shuffled again."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    chunk = batch_size * 16
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: len(examples[i][0]))
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def _collate(
    examples: Sequence[tuple[list[int], int]], idx: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    width = max(len(examples[i][0]) for i in idx)
    pad = SPECIAL_TOKENS.index(PAD_TOKEN)
    inputs = torch.full((len(idx), width), pad, dtype=torch.long)
    labels = torch.full((len(idx), width), _IGNORE, dtype=torch.long)
    for row, i in enumerate(idx):
        ids, n_prompt = examples[i]
        inputs[row, : len(ids)] = torch.tensor(ids)
        labels[row, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
    return inputs, labels


def _lr_at(step: int, recipe: DemoRecipe, steps: int) -> float:
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, steps - recipe.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return recipe.lr * (recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * cosine)


def _train(
    model: LlamaForCausalLM,
    examples: Sequence[tuple[list[int], int]],
    *,
    recipe: DemoRecipe,
    log: Callable[[str], Any],
    name: str,
    teacher: LlamaForCausalLM | None = None,
) -> list[float]:
    """AdamW on the answer tokens; returns the mean loss of each tenth of the run.

    Without ``teacher`` the loss is cross-entropy on the corpus; with one it is the KL
    divergence from the teacher's next-token distribution (distillation), which makes the
    student agree with the teacher rather than with the corpus.
    """
    import torch
    import torch.nn.functional as F

    steps = recipe.target_steps if teacher is None else recipe.draft_steps
    rng = random.Random(recipe.seed)
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=recipe.lr,
        weight_decay=recipe.weight_decay,
        betas=(0.9, recipe.beta2),
    )
    model.train()
    queue: list[list[int]] = []
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(steps):
        if not queue:
            queue = _batches(examples, batch_size=recipe.batch_size, rng=rng)
        inputs, labels = _collate(examples, queue.pop())
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, recipe, steps)
        logits = model(input_ids=inputs).logits[:, :-1]
        if teacher is None:
            loss = F.cross_entropy(
                logits.flatten(0, 1), labels[:, 1:].flatten(), ignore_index=_IGNORE
            )
        else:
            loss = _distill_loss(logits, inputs, labels, teacher)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % max(1, steps // 5) == 0 or step + 1 == steps:
            log(f"{name}: step {step + 1}/{steps} loss {loss.item():.3f} ({_since(t0)})")
    model.eval()
    tenth = max(1, len(losses) // 10)
    chunks = [losses[i : i + tenth] for i in range(0, len(losses), tenth)]
    return [round(sum(chunk) / len(chunk), 4) for chunk in chunks]


def _distill_loss(
    logits: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor, teacher: LlamaForCausalLM
) -> torch.Tensor:
    """KL(teacher ‖ student) averaged over the answer positions."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        target_logp = F.log_softmax(teacher(input_ids=inputs).logits[:, :-1], dim=-1)
    keep = labels[:, 1:] != _IGNORE
    student_logp = F.log_softmax(logits[keep], dim=-1)
    return F.kl_div(student_logp, target_logp[keep], log_target=True, reduction="batchmean")


def agreement(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    tokenizer: Tokenizer,
    chats: Sequence[Chat],
    *,
    new_tokens: int = 64,
) -> dict[str, float]:
    """On held-out chats: how often the draft's greedy next token equals the target's (along
    the target's greedy output), and how often the target's output matches the reference."""
    import torch

    eos = SPECIAL_TOKENS.index(EOS_TOKEN)
    agree = total = exact = 0
    by_group = {"known": [0, 0], "repeat": [0, 0]}
    with torch.inference_mode():
        for chat in chats:
            prompt = tokenizer.encode(render_chat(chat.user)).ids
            reference = tokenizer.encode(chat.assistant).ids[:new_tokens]
            ids = torch.tensor([prompt])
            out = target.generate(
                ids, max_new_tokens=new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos
            )
            gen = out[0, len(prompt) :]
            exact += int(gen[: len(reference)].tolist() == reference)
            draft_next = draft(input_ids=out[:, :-1]).logits[0, len(prompt) - 1 :].argmax(-1)
            hits = int((draft_next == gen).sum())
            agree, total = agree + hits, total + len(gen)
            group = by_group["known" if chat.kind in KNOWN_KINDS else "repeat"]
            group[0], group[1] = group[0] + hits, group[1] + len(gen)
    result = {"draft_agreement": round(agree / max(1, total), 4)}
    result |= {f"draft_agreement_{g}": round(a / max(1, n), 4) for g, (a, n) in by_group.items()}
    result["target_exact_match"] = round(exact / max(1, len(chats)), 4)
    return result
