"""What determines the demo pair: the model sizes and the training schedule.

A :class:`DemoRecipe` (with a :class:`ModelShape` for the target) is everything that the
built pair depends on besides the corpus; :func:`speclib.demo.models.recipe_key` hashes it
into the cache key, so a changed recipe rebuilds. :data:`DEFAULT_RECIPE` is the pair the
CPU demo serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_RECIPE", "DemoRecipe", "ModelShape"]


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
