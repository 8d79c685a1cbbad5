"""``speclib validate``: everything that can be checked about an experiment before any server
starts, as one function of the params file.

On top of :func:`speclib.params.loader.load_params` (the schema, the installed vLLM's
``SpeculativeConfig``, files that must exist) it reads the whole prompt set in its
``workload.format`` (every record parses, ids unique, messages well formed; a malformed
record is named by file and line), each series' speculative checkpoint against the target
(:mod:`speclib.params.spec_compat`: EAGLE/EAGLE-3 heads, MTP layers, a draft's vocabulary, read
from the config files and the installed vLLM's source) and, when the target's tokenizer is on this
machine (a local folder, a built demo pair, or a hub id already in the local cache), renders
every prompt with the chat template and checks that prompt + ``max_tokens`` fits
``max_model_len`` (vLLM refuses a longer prompt, and silently cuts ``max_tokens`` when prompt
+ ``max_tokens`` is too long, so those requests measure shorter answers); a multi-turn run's
every turn is checked, each earlier answer counted at its most, ``history_max_tokens``
tokens (the answers themselves are generated at run time). What cannot be checked
here is said in ``notes``, never silently skipped. transformers is imported only for that
length check.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.datasets import workload_prompts
from speclib.core.prompts import Prompt, PromptSetError
from speclib.core.rundir import RunDir
from speclib.core.turns import expand_turns, sent_prompt_count
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError, load_params
from speclib.params.server import SPEC_METHODS, resolve_model_ref
from speclib.params.spec_compat import DemoResolver, require_checkpoints_fit
from speclib.vllm_facts.spec_schema import installed_spec_schema

__all__ = [
    "DemoResolver",
    "PromptLength",
    "Validation",
    "mix_problem",
    "prompt_lengths",
    "validate_params",
]

"""Maps a demo model name ("target", "draft") to its folder if already built, else None."""


@dataclass(frozen=True)
class Validation:
    """A params file that passed every check, with what could not be checked."""

    params: ExperimentParams
    prompts: tuple[Prompt, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class PromptLength:
    """One prompt's length in tokens, chat template and generation prompt included."""

    id: str
    tokens: int


def validate_params(
    path: str | os.PathLike[str], *, resolve_demo: DemoResolver | None = None
) -> Validation:
    """Check a params file as far as possible without a server; raise :class:`ParamsError`.

    ``resolve_demo`` maps a demo name (``"target"``) to its folder when the demo pair is
    already built, else ``None`` (core cannot build it); without it demo targets skip the
    length check, with a note.
    """
    source = str(path)
    params = load_params(path)
    if problem := _output_dir_taken(params):
        raise ParamsError(f"{source}: invalid params\n  - {problem}")
    notes = _spec_notes(params)
    checkpoints = require_checkpoints_fit(params, source, resolve_demo=resolve_demo)
    notes += checkpoints.notes
    prompt_file = params.resolve_path(params.workload.prompts)
    try:
        loaded = workload_prompts(params)
    except PromptSetError as exc:
        raise ParamsError(f"{source}: invalid prompt file\n  - workload.prompts: {exc}") from None
    prompts = loaded.prompts
    if problem := mix_problem(params, prompts):
        raise ParamsError(f"{source}: invalid params\n  - {problem}")
    notes += _prompt_set_notes(loaded.provenance)
    if params.workload.multi_turn:
        notes.append(_turn_note(params, prompts))
    target, why = _local_target(params, resolve_demo)
    if target is None:
        notes.append(f"prompt lengths not checked against max_model_len: {why}")
    else:
        problem, note = _fit_problem(params, prompts, target, prompt_file)
        if problem:
            raise ParamsError(f"{source}: prompts do not fit\n  - {problem}")
        if note:
            notes.append(note)
    return Validation(params=params, prompts=prompts, notes=tuple(notes))


def _output_dir_taken(params: ExperimentParams) -> str | None:
    """``output_dir`` holds a run, or other files: ``speclib run`` would refuse it."""
    if not params.output_dir:
        return None
    rd = RunDir(params.resolve_path(params.output_dir))
    if rd.holds_run():
        return (
            f"output_dir: {rd.root} holds a run already: `speclib run` refuses it (`speclib "
            f"run --resume {rd.root}` continues that run); name a new folder for a new run"
        )
    if not rd.is_empty():
        return (
            f"output_dir: {rd.root} holds other files: `speclib run` starts a run only in a "
            "new or empty folder; name a new one"
        )
    return None


def mix_problem(params: ExperimentParams, prompts: Sequence[Prompt]) -> str | None:
    """Why ``workload.mix`` does not fit the prompt set (a category it names that no prompt
    has), else None."""
    have = {p.category for p in prompts}
    unknown = sorted(set(params.workload.mix or {}) - have)
    if not unknown:
        return None
    return (f"workload.mix: category {unknown[0]!r} is not in the prompt set (its "
            f"categories: {', '.join(sorted(have))})")  # fmt: skip


def _prompt_set_notes(provenance: dict[str, Any]) -> list[str]:
    """What the prompt set's provenance should tell before a run: records skipped, fewer
    prompts than ``workload.num_prompts`` asks for."""
    notes = []
    if provenance["skipped"]:
        notes.append(
            f"{provenance['skipped']} of {provenance['records_read']} record(s) of the "
            f"{provenance['format']} prompt set skipped (no human turn)"
        )
    if provenance["short_by"]:
        notes.append(
            f"workload.num_prompts asks for {provenance['requested']} prompts, the set has "
            f"{provenance['returned']}: all {provenance['returned']} are sent (short by "
            f"{provenance['short_by']}, recorded in the manifest)"
        )
    return notes


def _turn_note(params: ExperimentParams, questions: Sequence[Prompt]) -> str:
    """What a multi-turn run sends: prompts per question, and how the history is made."""
    n = sent_prompt_count(questions, params.workload)
    return (
        f"workload.multi_turn: {len(questions)} question(s) sent as {n} prompt(s), one per "
        f"turn; the earlier turns' answers are the control's, greedy, up to "
        f"{params.workload.history_tokens} tokens each, generated once before measuring"
    )


def _checked_prompts(
    params: ExperimentParams, questions: Sequence[Prompt]
) -> tuple[list[Prompt], dict[str, int]]:
    """The prompts whose length is checked, and tokens to add to each: a multi-turn run's
    turns with empty earlier answers, each answer counted as ``history_tokens`` tokens."""
    if not params.workload.multi_turn:
        return list(questions), {}
    turns = expand_turns(questions, {q.id: [""] * len(q.turns) for q in questions})
    budget = params.workload.history_tokens
    return turns, {p.id: budget * ((p.turn or 1) - 1) for p in turns}


def _spec_notes(params: ExperimentParams) -> list[str]:
    if all(s.speculative_config is None for s in params.series):
        return []
    lookup = installed_spec_schema()
    if lookup.schema is None:
        return [
            f"{lookup.note}: speculative_config checked with the kit's own rules only "
            f"(methods {', '.join(SPEC_METHODS)}; other keys are not checked)"
        ]
    notes = [
        f"speculative_config checked against {lookup.schema.class_path} of vLLM "
        f"{lookup.schema.vllm_version} (installed here)"
    ]
    if params.server.launcher:
        notes.append(
            "server.launcher is set: the vLLM it runs may differ from the one checked here"
        )
    return notes


def _local_target(
    params: ExperimentParams, resolve_demo: DemoResolver | None
) -> tuple[str | None, str]:
    """Where the target's tokenizer can be read from, or ``None`` and why not."""
    if params.server.base_url or all(s.base_url for s in params.series):
        return None, "the target runs elsewhere (base_url)"
    kind, where = resolve_model_ref(params.server.model, params.base_dir)
    if kind == "local":
        return where, ""
    if kind == "demo":
        folder = resolve_demo(where) if resolve_demo else None
        if folder is None:
            return None, f"{params.server.model} is not built yet (speclib build-demo builds it)"
        return str(folder), ""
    return where, ""  # a hub id: only from the local cache, nothing is downloaded


def prompt_lengths(prompts: Sequence[Prompt], tokenizer: Any) -> list[PromptLength]:
    """Token count of each prompt as vLLM's chat endpoint sees it.

    vLLM renders the chat template to text (with the generation prompt) and tokenizes that
    text without adding special tokens again.
    """
    out = []
    for p in prompts:
        text = tokenizer.apply_chat_template(
            p.as_messages(), tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        out.append(PromptLength(id=p.id, tokens=len(ids)))
    return out


def _model_limit(target: str) -> int | None:
    config = Path(target) / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("max_position_embeddings")
    return value if isinstance(value, int) else None


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _load_tokenizer(target: str, *, trust_remote_code: bool = False) -> tuple[Any, str | None]:
    folder = Path(target)
    if folder.is_dir() and not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return None, f"no tokenizer files in {target}"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None, "transformers is not installed"
    try:
        return AutoTokenizer.from_pretrained(
            target, local_files_only=True, trust_remote_code=trust_remote_code
        ), None
    except Exception as exc:  # not cached, no tokenizer files, remote code...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"cannot load the tokenizer of {target} from local files ({first[:160]})"


def _fit_problem(
    params: ExperimentParams, prompts: Sequence[Prompt], target: str, prompt_file: Path
) -> tuple[str | None, str | None]:
    """``(problem, note)``: the error when a prompt does not fit, else a note (or neither)."""
    limit = params.server.max_model_len
    limit_name = "server.max_model_len"
    if limit is None:
        limit, limit_name = _model_limit(target), "the model's max_position_embeddings"
    if limit is None:
        return (
            None,
            "prompt lengths not checked: no server.max_model_len and no "
            "max_position_embeddings in the target's config.json",
        )
    # as the servers load it: the target's own code only where they may run it (MiMo's config)
    trust = "--trust-remote-code" in params.server.extra_args
    tokenizer, why = _load_tokenizer(target, trust_remote_code=trust)
    if tokenizer is None:
        return None, f"prompt lengths not checked against max_model_len: {why}"
    if not getattr(tokenizer, "chat_template", None):
        return None, "prompt lengths not checked: the target's tokenizer has no chat template"
    checked, reserve = _checked_prompts(params, prompts)
    lengths = [
        PromptLength(x.id, x.tokens + reserve.get(x.id, 0))
        for x in prompt_lengths(checked, tokenizer)
    ]
    max_tokens = params.workload.max_tokens
    over = [x for x in lengths if x.tokens + max_tokens > limit]
    if not over:
        return None, None
    worst = max(over, key=lambda x: x.tokens)
    if worst.tokens > limit:
        effect = "vLLM refuses a prompt longer than max_model_len"
    else:
        effect = "vLLM would silently cut max_tokens for them, so they measure shorter answers"
    history = (
        f" and {params.workload.history_tokens} per earlier answer (workload.history_max_tokens)"
        if reserve.get(worst.id)
        else ""
    )
    return (
        f"workload.max_tokens / {limit_name}: {len(over)} of {len(lengths)} prompt(s) of "
        f"{prompt_file} do not fit; the longest, {worst.id!r}, is {worst.tokens} tokens "
        f"with the chat template{history}, and {worst.tokens} + max_tokens {max_tokens} = "
        f"{worst.tokens + max_tokens} > {limit_name} {limit} ({effect}): raise "
        "max_model_len, lower max_tokens or shorten the prompts"
    ), None
