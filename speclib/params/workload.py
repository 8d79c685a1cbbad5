"""The ``workload`` section of a params file: what is sent.

:class:`WorkloadParams` is what is sent: the same prompts, in the same order, to every
series, at one or more load levels (:attr:`WorkloadParams.levels`, each a
:class:`~speclib.params.protocol.LoadLevel`). How the arms are run and judged (the
``protocol`` and ``analysis`` sections) is in :mod:`speclib.params.protocol`. Every
field is described, since the descriptions are the params file's documentation.

Import these names from :mod:`speclib.params.loader`, the public face of the params file.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from speclib.params.limits import (
    BLOCKS,
    CONCURRENCY,
    PROMPTS,
    RATE,
    REPEATS,
    TIMEOUT_S,
    WARMUP,
    bounded,
    describe_limit,
)
from speclib.params.protocol import LoadLevel
from speclib.params.server import StrictModel

__all__ = [
    "PROMPT_FORMATS",
    "TURN_FORMATS",
    "PromptFormat",
    "WorkloadParams",
]

PromptFormat = Literal["speclib", "sharegpt", "spec-bench", "mt-bench", "jsonl", "csv", "hf-disk"]
PROMPT_FORMATS: tuple[str, ...] = get_args(PromptFormat)
TURN_FORMATS = ("mt-bench", "spec-bench")
"""The formats whose questions have several turns (``workload.multi_turn``)."""
_FORMAT_OPTIONS = {  # workload key -> the only format it applies to
    "sharegpt_turns": "sharegpt",
    "prompt_column": "csv",
    "category_column": "csv",
}


class WorkloadParams(StrictModel):
    """What is sent: the same prompts, in the same order, to every series."""

    prompts: str = Field(
        description="The prompt set: a file (a folder for format hf-disk), read as "
        "workload.format says."
    )
    mix: dict[str, float] | None = Field(
        None,
        description="Each prompt category's share of the user's real traffic, e.g. {fresh: "
        "0.8, echo: 0.2} (shares in [0, 1] summing to 1, every category one of the prompt "
        "set's). The traffic's TPOT ratio, its interval and the verdict are for this mix "
        "(each side's mean TPOT is the categories' mean TPOTs at these shares); every output "
        "says the mix, a category it leaves out named; default: the prompts as sent.",
    )
    format: PromptFormat = Field(
        "speclib",
        description="How workload.prompts is read (speclib.core.datasets): speclib (the kit's "
        "JSONL: id, messages, category), sharegpt (ShareGPT JSON), spec-bench and mt-bench "
        "(question.jsonl: turn 1 is sent, every turn is kept), jsonl (prompt or messages, "
        "optional id and category), csv, hf-disk (a datasets folder from save_to_disk; needs "
        "pip install 'speclib[datasets]'). Nothing is downloaded.",
    )
    sharegpt_turns: Literal["first", "history"] = Field(
        "first",
        description="format sharegpt: first: the first human turn as one user message; "
        "history: the conversation up to and including its last human turn.",
    )
    prompt_column: str = Field(
        "prompt", min_length=1, description="format csv: the column holding the prompt."
    )
    category_column: str | None = Field(
        None,
        min_length=1,
        description="format csv: the column holding the category (unset: 'category' when "
        "the file has it, else every prompt is in category 'default').",
    )
    multi_turn: bool = Field(
        False,
        description="format mt-bench or spec-bench: send every turn of each question, not "
        "only turn 1: one prompt per turn (ids <question_id>#t1, #t2, ...), turn k carrying "
        "user turn 1, the answer to it, ..., user turn k. The earlier answers are the "
        "control's, generated once greedily (temperature 0) before any measured request "
        "and fed to every arm of every block (RUN_DIR/turn_history.jsonl), so every arm "
        "gets identical inputs; each turn is measured and paired like any prompt, and the "
        "report gives the TPOT ratio per turn. workload.num_prompts counts questions.",
    )
    history_max_tokens: int | None = Field(
        None,
        ge=1,
        description="workload.multi_turn: output tokens of each earlier-turn answer the "
        "control generates for the history (unset: workload.max_tokens).",
    )
    num_prompts: int | None = bounded(
        None,
        PROMPTS,
        gt=0,
        description="How many prompts to send (workload.sample says which; unset: all). "
        "More than the set has keeps them all, and the manifest records how many short.",
    )
    sample: Literal["first", "random", "stratified"] = Field(
        "first",
        description="Which prompts: first: the first N in file order; random: N drawn with "
        "workload.sample_seed, in drawn order; stratified: N split across categories in "
        "proportion to their sizes (largest remainder), each drawn with the seed, categories "
        "interleaved round-robin.",
    )
    sample_seed: int = Field(0, description="Seed of workload.sample random and stratified.")
    repeats: int = bounded(
        1, REPEATS, ge=1, description="Times each prompt is sent per series launch."
    )
    max_tokens: int = Field(
        64, description="Output tokens per request; at least 2 (TPOT needs a second token)."
    )
    min_tokens: int | None = Field(
        None, ge=0, description="Per-request min_tokens (at most max_tokens; unset: none)."
    )
    ignore_eos: bool = Field(False, description="Generate max_tokens even past EOS.")
    truncation_expected: bool = Field(
        False,
        description="max_tokens is a deliberate window (only each answer's start matters): "
        "the workload check then reports the share of answers cut at max_tokens without a "
        "warning. Declared before the run; ignored with ignore_eos, which always warns.",
    )
    temperature: float = Field(
        0.0,
        ge=0,
        description="Sampling temperature; 0 is greedy (outputs compared with the control's), "
        "above 0 analysis.score_outputs auto scores every output under the target.",
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling bound (1: off).")
    top_k: int | None = Field(None, description="Unset by default (see known CPU bugs).")
    seed: int | None = Field(None, description="Per-request sampling seed.")
    concurrency: int | list[int] = Field(
        1,
        description="Requests in flight at once; a list runs one load level per value. "
        + describe_limit(CONCURRENCY),
    )
    request_rates: list[float] | None = Field(
        None,
        description="Poisson arrival rates (requests/s), one open-loop load level each. "
        + describe_limit(RATE, " requests/s"),
    )
    arrival_seed: int = Field(0, description="Seed of the Poisson arrival times.")
    replicates: int = bounded(
        1,
        BLOCKS,
        ge=1,
        description="Replicate blocks: each starts a fresh server for every arm; an arm's "
        "TPOT interval has blocks - 1 degrees of freedom (one block decides nothing).",
    )
    warmup_requests: int = bounded(
        2, WARMUP, ge=0, description="Unmeasured requests before a series."
    )
    level_warmup: bool = Field(
        True,
        description="Before each load level, every server gets unmeasured requests at that "
        "level's concurrency, in its shapes (max_tokens, prompts like the measured ones): "
        "max(concurrency, warmup_requests) of them, so no measured request is the first "
        "batch of its size a server runs (kernels compiled per batch shape, CUDA graphs). "
        "The first level at concurrency 1 is covered by the series' warm-up.",
    )
    min_waves: int = bounded(
        4,
        REPEATS,
        ge=1,
        description="Each closed-loop level is measured for at least this many waves: "
        "at least min_waves x concurrency requests per arm, the prompt list repeated as "
        "often as needed (more repeats at that level only). See docs/method.md for why 4.",
    )
    request_timeout_s: float = bounded(
        300.0, TIMEOUT_S, gt=0, description="Seconds before a request counts as failed (timeout)."
    )
    max_error_rate: float = Field(
        0.5, gt=0, le=1, description="Stop a series early when this share of requests fail."
    )

    @model_validator(mode="after")
    def _options_of_the_format(self) -> WorkloadParams:
        # a default value passes, so a dumped section (params.resolved.json) loads again
        for key, fmt in _FORMAT_OPTIONS.items():
            changed = getattr(self, key) != type(self).model_fields[key].default
            if changed and self.format != fmt:
                raise ValueError(
                    f"workload.{key} applies to format {fmt!r} only "
                    f"(workload.format is {self.format!r})"
                )
        return self

    @model_validator(mode="after")
    def _turns_need_a_turn_format(self) -> WorkloadParams:
        if self.multi_turn and self.format not in TURN_FORMATS:
            raise ValueError(
                f"workload.multi_turn needs a prompt format with turns ({' or '.join(TURN_FORMATS)}"
                f"); workload.format is {self.format!r}"
            )
        if self.history_max_tokens is not None and not self.multi_turn:
            raise ValueError(
                "workload.history_max_tokens applies to workload.multi_turn: true only "
                "(multi_turn is false)"
            )
        return self

    @field_validator("mix")
    @classmethod
    def _mix_shares(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("workload.mix must name at least one category")
        for name, share in value.items():
            if not 0 <= share <= 1:
                raise ValueError(f"workload.mix: the share of category {name!r} must be in "
                                 f"[0, 1] (got {share!r})")  # fmt: skip
        total = sum(value.values())
        if abs(total - 1) > 1e-6:
            raise ValueError(f"workload.mix: the shares must sum to 1 (got {total:g})")
        return value

    @property
    def history_tokens(self) -> int:
        """Output tokens of each earlier-turn answer of the history (multi-turn runs)."""
        return self.history_max_tokens or self.max_tokens

    @field_validator("max_tokens")
    @classmethod
    def _two_tokens_at_least(cls, value: int) -> int:
        if value < 2:
            raise ValueError(
                f"max_tokens must be >= 2: TPOT (time per output token) is measured between "
                f"the first and the last token, so a {value}-token answer measures nothing"
            )
        return value

    @model_validator(mode="after")
    def _min_below_max(self) -> WorkloadParams:
        if self.min_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens}) "
                "(vLLM refuses the request otherwise)"
            )
        return self

    @field_validator("concurrency")
    @classmethod
    def _positive_levels(cls, value: int | list[int]) -> int | list[int]:
        values = value if isinstance(value, list) else [value]
        if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
            raise ValueError("concurrency must be a positive integer or a list of distinct ones")
        if max(values) > CONCURRENCY.value:
            raise ValueError(
                f"concurrency {max(values)} is above {CONCURRENCY.shown()} ({CONCURRENCY.why})"
            )
        return value

    @field_validator("request_rates")
    @classmethod
    def _positive_rates(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (not value or any(r <= 0 for r in value)):
            raise ValueError("request_rates must be a non-empty list of positive numbers")
        if value and max(value) > RATE.value:
            raise ValueError(
                f"request rate {max(value):g} req/s is above {RATE.shown()} ({RATE.why})"
            )
        return value

    def repeats_at(self, level: LoadLevel, n_prompts: int) -> int:
        """Times the prompt list is sent per arm at ``level``: ``repeats``, raised at a
        closed-loop level until the requests make ``min_waves`` waves of its concurrency
        (an open-loop level is paced by its rate: ``repeats``)."""
        if level.request_rate is not None or n_prompts < 1:
            return self.repeats
        return max(self.repeats, -(-self.min_waves * level.concurrency // n_prompts))

    @property
    def levels(self) -> list[LoadLevel]:
        """Load levels in run order: closed-loop concurrencies, then Poisson rates."""
        concs = self.concurrency if isinstance(self.concurrency, list) else [self.concurrency]
        out = [LoadLevel(concurrency=c) for c in concs]
        out += [LoadLevel(concurrency=max(concs), request_rate=r) for r in self.request_rates or []]
        return out
