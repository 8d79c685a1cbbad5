"""The demo pair's chat format and its byte-level BPE tokenizer.

The special tokens, the chat template every demo model folder carries, its Python twin
:func:`render_chat` (used to build the corpus text and to check the template), and the
tokenizer: trained on the rendered chats (:func:`train_tokenizer`), wrapped as a Hugging
Face fast tokenizer (:func:`hf_tokenizer`) and saved with the template in
``tokenizer_config.json`` (:func:`save_tokenizer`). tokenizers and transformers are
imported only inside the functions that need them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from speclib.demo.prompts_gen import Chat
from speclib.demo.recipe import DemoRecipe

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "BOS_TOKEN",
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "encode_chats",
    "hf_tokenizer",
    "render_chat",
    "save_tokenizer",
    "train_tokenizer",
]

BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<|begin|>", "<|end|>", "<|pad|>"
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, "<|user|>", "<|assistant|>", "<|system|>", PAD_TOKEN)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('demo chat template: unknown role ' + message['role']) }}{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def render_chat(user: str, assistant: str | None = None) -> str:
    """Python twin of :data:`CHAT_TEMPLATE` for one user turn (and, to train, its answer)."""
    text = f"{BOS_TOKEN}<|user|>\n{user}{EOS_TOKEN}\n<|assistant|>\n"
    return text if assistant is None else f"{text}{assistant}{EOS_TOKEN}\n"


def train_tokenizer(chats: Sequence[Chat], recipe: DemoRecipe) -> Tokenizer:
    """A byte-level BPE tokenizer (at most ``recipe.max_vocab`` tokens) trained on ``chats``,
    with :data:`SPECIAL_TOKENS` first, in that order (their ids are their indices)."""
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


def hf_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """``tokenizer`` as a Hugging Face fast tokenizer with the demo's special tokens and
    :data:`CHAT_TEMPLATE`."""
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


def save_tokenizer(hf_tok: PreTrainedTokenizerFast, folder: Path) -> None:
    """Save the tokenizer; the chat template also goes into ``tokenizer_config.json``."""
    hf_tok.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def encode_chats(tokenizer: Tokenizer, chats: Sequence[Chat]) -> list[tuple[list[int], int]]:
    """Token ids of each chat and how many of them belong to the prompt (not trained on)."""
    full = tokenizer.encode_batch([render_chat(c.user, c.assistant) for c in chats])
    prompts = tokenizer.encode_batch([render_chat(c.user) for c in chats])
    return [(f.ids, len(p.ids)) for f, p in zip(full, prompts, strict=True)]
