"""The embedded default model pair: a tiny Llama target and draft built offline, on the CPU.

No model hub is needed for the CPU demo: :func:`build_demo_pair` trains, deterministically
and in a few minutes on two idle cores, a 4-layer Llama core (3.8 M parameters) on the
synthetic chats of :mod:`speclib.demo.prompts_gen`, with one byte-level BPE tokenizer trained on
the same chats. The draft (2.2 M parameters) starts as the core's embeddings, first two
layers and head, and is then distilled on the core's next-token distributions, so it agrees
with the target most of the time on those tasks (draft-model speculation pays off) and
rarely on unseen prompts (it does not). The target is the core plus ``ballast_layers``
untrained blocks (library initialisation): they rarely change its greedy output but make
each target forward pass cost several draft passes, the regime speculative decoding is built
for (a 4-layer target on CPU costs barely more per step than its 2-layer draft, and no draft
could pay for itself there).

Both folders are ordinary Hugging Face model folders (``config.json``, safetensors weights,
``generation_config.json``, a fast tokenizer with a chat template, eos = ``<|end|>``) that
``vllm serve <folder>`` and ``AutoTokenizer`` load. They are cached under
``$SPECLIB_CACHE`` (default ``~/.cache/speclib``) as ``demo-<key>/{target,draft}``, where
``key`` hashes the :class:`DemoRecipe`, :data:`BUILDER_VERSION` and the corpus, so a change
of recipe rebuilds. A build happens in a temporary folder renamed into place, under a file
lock, so concurrent callers build once and never see a half-written pair.

torch, transformers and tokenizers are imported only when a build is needed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from speclib.demo.prompts_gen import KNOWN_KINDS, REPEAT_KINDS, Chat, generate_chats

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

__all__ = [
    "BOS_TOKEN",
    "BUILDER_VERSION",
    "CHAT_TEMPLATE",
    "DEFAULT_RECIPE",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "DemoPair",
    "DemoRecipe",
    "ModelShape",
    "build_demo_pair",
    "default_cache_dir",
    "demo_model_dir",
    "main",
    "recipe_key",
    "render_chat",
]

BUILDER_VERSION = 1
BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<|begin|>", "<|end|>", "<|pad|>"
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, "<|user|>", "<|assistant|>", "<|system|>", PAD_TOKEN)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('demo chat template: unknown role ' + message['role']) }}{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
_INFO_FILE = "build-info.json"
_IGNORE = -100


@dataclass(frozen=True)
class ModelShape:
    """Size of one Llama model (head size is ``hidden // heads``; 64 suits vLLM's CPU kernels)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int


@dataclass(frozen=True)
class DemoRecipe:
    """Everything that determines the built pair; its hash is the cache key."""

    seed: int = 0
    n_chats: int = 6000
    max_vocab: int = 4096  # BPE trainer cap; the corpus usually needs fewer
    max_position_embeddings: int = 1024
    target: ModelShape = field(default_factory=lambda: ModelShape(4, 256, 688, 4))
    draft_layers: int = 2  # the draft starts as the target's first layers, then is distilled
    # Untrained blocks appended to the trained target (initialisation scale): they barely
    # change its outputs but make one target forward cost several draft forwards, as in real
    # pairs. Without them a 4-layer target on CPU costs little more than its draft per step.
    ballast_layers: int = 12
    target_steps: int = 400
    draft_steps: int = 150
    batch_size: int = 8
    lr: float = 3e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 20
    weight_decay: float = 0.01
    beta2: float = 0.95
    tie_embeddings: bool = False  # tied tables make bigram cycles (A→B→C→A) hard to learn
    threads: int = 2
    eval_chats: int = 12  # held-out chats for the agreement check logged at the end

    def __post_init__(self) -> None:
        positive = ("n_chats", "target_steps", "draft_steps", "batch_size", "threads", "eval_chats")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
        if not isinstance(self.ballast_layers, int) or self.ballast_layers < 0:
            raise ValueError(
                f"`ballast_layers` must be a non-negative integer, got {self.ballast_layers!r}"
            )
        if not 1 <= self.draft_layers < self.target.layers:
            raise ValueError(
                f"`draft_layers` must be between 1 and target.layers - 1 "
                f"({self.target.layers - 1}), got {self.draft_layers!r}"
            )
        if self.target.hidden % self.target.heads:
            raise ValueError(f"`target.hidden` must be a multiple of `target.heads`: {self.target}")


DEFAULT_RECIPE = DemoRecipe()


@dataclass(frozen=True)
class DemoPair:
    """A built pair: where it is, its cache key and what its tokenizer looks like."""

    root: Path
    target_dir: Path
    draft_dir: Path
    key: str
    vocab_size: int
    bos_token: str
    eos_token: str
    eos_token_id: int
    chat_template: str


def recipe_key(recipe: DemoRecipe = DEFAULT_RECIPE) -> str:
    """Short hash (12 hex digits) of ``recipe``, :data:`BUILDER_VERSION` and the corpus text.

    Hashing the generated corpus too means an edit of the chat templates in
    :mod:`speclib.demo.prompts_gen` also gives a new key, hence a rebuild.
    """
    corpus = _corpus_digest(recipe.n_chats, recipe.seed)
    blob = json.dumps(
        {"builder": BUILDER_VERSION, "recipe": asdict(recipe), "corpus": corpus}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=8)
def _corpus_digest(n_chats: int, seed: int) -> str:
    digest = hashlib.sha256()
    for chat in generate_chats(n_chats, seed=seed):
        digest.update(render_chat(chat.user, chat.assistant).encode())
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``$SPECLIB_CACHE`` if set, else ``~/.cache/speclib``."""
    env = os.environ.get("SPECLIB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "speclib"


def render_chat(user: str, assistant: str | None = None) -> str:
    """Python twin of :data:`CHAT_TEMPLATE` for one user turn (and, to train, its answer)."""
    text = f"{BOS_TOKEN}<|user|>\n{user}{EOS_TOKEN}\n<|assistant|>\n"
    return text if assistant is None else f"{text}{assistant}{EOS_TOKEN}\n"


# --- cache, lock, atomic publish -------------------------------------------------------------
def _is_complete(folder: Path) -> bool:
    return (folder / _INFO_FILE).is_file() and all(
        (folder / name / "config.json").is_file() for name in ("target", "draft")
    )


def _pair_from_folder(folder: Path) -> DemoPair:
    info = json.loads((folder / _INFO_FILE).read_text())
    tok = info["tokenizer"]
    return DemoPair(
        root=folder,
        target_dir=folder / "target",
        draft_dir=folder / "draft",
        key=info["key"],
        vocab_size=tok["vocab_size"],
        bos_token=tok["bos_token"],
        eos_token=tok["eos_token"],
        eos_token_id=tok["eos_token_id"],
        chat_template=tok["chat_template"],
    )


@contextlib.contextmanager
def _file_lock(path: Path, log: Callable[[str], Any]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the ``with`` body."""
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build of the demo pair ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``, moving an older ``final`` aside first (caller holds lock)."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)


def build_demo_pair(
    *,
    cache_dir: Path | None = None,
    force: bool = False,
    log: Callable[[str], Any] = print,
    recipe: DemoRecipe = DEFAULT_RECIPE,
) -> DemoPair:
    """Return the cached demo pair, building it first if missing (or if ``force``).

    The pair lives in ``<cache_dir>/demo-<key>/{target,draft}`` with ``build-info.json``
    beside them (recipe, timings, losses, draft/target agreement, weight hashes).
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    key = recipe_key(recipe)
    final = root / f"demo-{key}"
    if not force and _is_complete(final):
        return _pair_from_folder(final)
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f"demo-{key}.lock", log):
        if _is_complete(final) and not force:
            return _pair_from_folder(final)  # another process built it while we waited
        for stale in root.glob(f".demo-{key}.*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".demo-{key}.tmp-", dir=root))
        try:
            tmp.chmod(0o755)  # mkdtemp makes it private; the published pair is world-readable
            _build_into(tmp, recipe=recipe, key=key, log=log)
            _publish(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"demo pair ready in {final}")
    return _pair_from_folder(final)


def demo_model_dir(
    name: Literal["target", "draft"],
    *,
    cache_dir: Path | None = None,
    log: Callable[[str], Any] | None = None,
) -> Path:
    """Folder of the demo ``target`` or ``draft`` model, building the pair if missing."""
    if name not in ("target", "draft"):
        raise ValueError(f"`name` must be 'target' or 'draft', got {name!r}")
    pair = build_demo_pair(cache_dir=cache_dir, log=log or _stderr)
    return pair.target_dir if name == "target" else pair.draft_dir


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the build -------------------------------------------------------------------------------
def _build_into(out: Path, *, recipe: DemoRecipe, key: str, log: Callable[[str], Any]) -> None:
    """Build the pair into the empty folder ``out`` (tokenizer, target, draft, build info)."""
    import torch

    started, cpu_started = time.perf_counter(), time.process_time()
    load_before = os.getloadavg()[0]
    threads_before = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        chats = generate_chats(recipe.n_chats, seed=recipe.seed)
        tokenizer = _train_tokenizer(chats, recipe)
        log(f"tokenizer: {tokenizer.get_vocab_size()} tokens ({_since(started)})")
        target, draft, losses, timings = _train_pair(
            _encode(tokenizer, chats), tokenizer, recipe, log
        )
        hf_tok = _hf_tokenizer(tokenizer)
        for name, model in (("target", target), ("draft", draft)):
            model.save_pretrained(out / name)
            _save_tokenizer(hf_tok, out / name)
        held_out = generate_chats(recipe.eval_chats, seed=recipe.seed + 7919)
        agreement = _agreement(target, draft, tokenizer, held_out)
        log(f"held-out agreement: {json.dumps(agreement)}")
    finally:
        torch.set_num_threads(threads_before)
    timings["total_s"] = round(time.perf_counter() - started, 2)
    timings["cpu_s"] = round(time.process_time() - cpu_started, 2)
    timings["load_avg_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    info = _build_info(out, recipe, key, tokenizer, timings, losses, agreement)
    (out / _INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(f"built in {timings['total_s']:.1f} s ({timings['cpu_s']:.0f} s of CPU)")


def _train_pair(
    examples: Sequence[tuple[list[int], int]],
    tokenizer: Tokenizer,
    recipe: DemoRecipe,
    log: Callable[[str], Any],
) -> tuple[LlamaForCausalLM, LlamaForCausalLM, dict[str, list[float]], dict[str, float]]:
    """Train the target's core on the corpus, distill the draft (its first layers) from the
    core, then append the untrained ballast blocks to the target."""
    t0 = time.perf_counter()
    core = _new_model(recipe.target, _padded_vocab(tokenizer.get_vocab_size()), recipe)
    log(f"target core: {_describe(core)}")
    losses = {"target": _train(core, examples, recipe=recipe, log=log, name="target")}
    timings = {"train_target_s": round(time.perf_counter() - t0, 2)}
    t0 = time.perf_counter()
    draft = _truncated_copy(core, recipe.draft_layers)
    log(f"draft: {_describe(draft)}, distilled from the target core")
    losses["draft"] = _train(draft, examples, recipe=recipe, log=log, name="draft", teacher=core)
    timings["train_draft_s"] = round(time.perf_counter() - t0, 2)
    target = _with_ballast(core, recipe.ballast_layers, seed=recipe.seed + 1)
    log(f"target: {_describe(target)} ({recipe.ballast_layers} untrained blocks appended)")
    return target, draft, losses, timings


def _with_ballast(core: LlamaForCausalLM, n: int, *, seed: int) -> LlamaForCausalLM:
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


def _train_tokenizer(chats: Sequence[Chat], recipe: DemoRecipe) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.max_vocab,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((render_chat(c.user, c.assistant) for c in chats), trainer)
    return tokenizer


def _hf_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (BOS_TOKEN, EOS_TOKEN)],
        model_max_length=1024,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def _save_tokenizer(hf_tok: PreTrainedTokenizerFast, folder: Path) -> None:
    """Save the tokenizer; the chat template also goes into ``tokenizer_config.json``."""
    hf_tok.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _padded_vocab(n: int) -> int:
    return -(-n // 64) * 64


def _encode(tokenizer: Tokenizer, chats: Sequence[Chat]) -> list[tuple[list[int], int]]:
    """Token ids of each chat and how many of them belong to the prompt (not trained on)."""
    full = tokenizer.encode_batch([render_chat(c.user, c.assistant) for c in chats])
    prompts = tokenizer.encode_batch([render_chat(c.user) for c in chats])
    return [(f.ids, len(p.ids)) for f, p in zip(full, prompts, strict=True)]


def _new_model(shape: ModelShape, vocab: int, recipe: DemoRecipe) -> LlamaForCausalLM:
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


def _truncated_copy(target: LlamaForCausalLM, layers: int) -> LlamaForCausalLM:
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


def _agreement(
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _build_info(
    out: Path,
    recipe: DemoRecipe,
    key: str,
    tokenizer: Tokenizer,
    timings: dict[str, float],
    losses: dict[str, list[float]],
    agreement: dict[str, float],
) -> dict[str, Any]:
    import tokenizers
    import torch
    import transformers

    return {
        "key": key,
        "builder_version": BUILDER_VERSION,
        "recipe": asdict(recipe),
        "task_kinds": {"known": list(KNOWN_KINDS), "repeat": list(REPEAT_KINDS)},
        "tokenizer": {
            "vocab_size": tokenizer.get_vocab_size(),
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
            "chat_template": CHAT_TEMPLATE,
        },
        "timings": timings,
        "loss_by_tenth": losses,
        "held_out": agreement,
        "weights_sha256": {
            name: _sha256(out / name / "model.safetensors") for name in ("target", "draft")
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }


# --- command line ----------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``speclib build-demo``: build (or find) the demo pair and print where it is."""
    parser = argparse.ArgumentParser(
        prog="speclib build-demo",
        description="Build the embedded tiny demo model pair offline (about 3 min on 2 cores).",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="default: $SPECLIB_CACHE or ~/.cache/speclib"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--quiet", action="store_true", help="print only the two folders")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    log = (lambda _msg: None) if args.quiet else _stderr
    pair = build_demo_pair(cache_dir=args.cache_dir, force=args.force, log=log)
    print(f"target: {pair.target_dir}")
    print(f"draft:  {pair.draft_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
