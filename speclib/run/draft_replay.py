"""A second instrument for a draft's acceptance: transformers forward passes over the answers.

After a greedy run, :func:`replay_run` loads the target and each ``draft_model`` arm's draft
with transformers (on the GPU when there is one) and, for every answer a draft arm's launch
served between its two ``/metrics`` snapshots (its level warm-ups and measured requests:
:func:`speclib.analysis.speculation.launches.window_records`), runs one forward pass of each
model over the chat-templated prompt and the answer. That gives, at every answer position,
the draft's greedy token and the target's. Past the answer's end the target's own greedy
continuation is added (``k`` tokens), since a last step's drafts are verified, and counted by
vLLM, before the answer is cut at its stop or ``max_tokens``. The steps of greedy
speculation then follow (:func:`speclib.analysis.speculation.replay_check.greedy_steps`):
drafts and accepted tokens per position, per launch, which the analysis holds against the
launch's ``/metrics`` (:func:`~speclib.analysis.speculation.replay_check.replay_rows`).

Beside the launches, the same count along the control's measured answers (the target's own
greedy answers) per prompt category: what each kind of prompt lets the draft accept. And a
check of the instrument itself: how often the target's greedy token in transformers is the
token vLLM's target served (a near tie in the other numerics flips a few).

The result is ``RUN_DIR/acceptance_replay.json``; ``speclib replay-acceptance RUN_DIR`` runs
it (the models must be where the run's params say; nothing is fetched). torch and
transformers are imported only when called.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from speclib.analysis.frames import load_records
from speclib.analysis.speculation.launches import window_records
from speclib.analysis.speculation.replay_check import greedy_steps
from speclib.core.rundir import RunDir, write_json_atomic
from speclib.core.turns import measured_prompts
from speclib.run.launching import resolve_model
from speclib.run.requests import warmup_prompts

__all__ = ["replay_run"]


@dataclass(frozen=True)
class _Answer:
    """One distinct answer: its prompt and tokens, and what the forward passes said."""

    prompt_ids: tuple[int, ...]
    answer: tuple[int, ...]


def _draft_arms(params: Any) -> dict[str, tuple[str, int]]:
    """``draft_model`` arms with a draft folder: name → (draft reference, k)."""
    out = {}
    for series in params.series:
        spec = series.speculative_config or {}
        if spec.get("method") == "draft_model" and isinstance(spec.get("model"), str):
            out[series.name] = (spec["model"], int(spec["num_speculative_tokens"]))
    return out


def _messages(params: Any, rd: RunDir, sent: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    prompts = measured_prompts(params, rd.root)
    out = {p.id: [dict(m) for m in p.as_messages()] for p in prompts}
    warm = [pid for pid in sent["prompt_id"].unique() if str(pid).startswith("warmup-")]
    if warm:
        n = 1 + max(int(str(pid).rsplit("-", 1)[1]) for pid in warm)
        out.update({p.id: [dict(m) for m in p.as_messages()] for p in warmup_prompts(prompts, n)})
    return out


def _chat_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return tuple(int(t) for t in ids)


def _answer_ids(row: Any, eos_id: int) -> tuple[int, ...]:
    ids = tuple(int(t) for t in row.token_ids)
    if row.finish_reason == "stop" and (not ids or ids[-1] != eos_id):
        ids = (*ids, eos_id)  # the step that ended the answer produced its EOS
    return ids


class _Models:
    """The target and one draft in transformers, and the forward passes over an answer."""

    def __init__(self, target_dir: str, device: str, dtype: str) -> None:
        import torch
        from transformers import AutoTokenizer

        self.torch = torch
        self.device = device
        self.dtype = getattr(torch, dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(target_dir)
        self.target = self._load(target_dir)
        self.drafts: dict[str, Any] = {}
        self._target_cache: dict[_Answer, tuple[list[int], list[int]]] = {}

    def _load(self, folder: str) -> Any:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=self.dtype)
        return model.to(self.device).eval()

    def draft(self, folder: str) -> Any:
        if folder not in self.drafts:
            self.drafts[folder] = self._load(folder)
        return self.drafts[folder]

    def target_tokens(self, item: _Answer, extra: int) -> tuple[list[int], list[int]]:
        """The target's greedy token at every answer position, and its greedy continuation
        of ``extra`` tokens past the answer."""
        cached = self._target_cache.get(item)
        if cached is not None and len(cached[1]) >= extra:
            return cached[0], cached[1][:extra]
        torch = self.torch
        full = torch.tensor([[*item.prompt_ids, *item.answer]], device=self.device)
        n_prompt = len(item.prompt_ids)
        with torch.inference_mode():
            out = self.target(full, use_cache=True)
            greedy = out.logits[0, n_prompt - 1 :].argmax(-1).tolist()
            cont, past = [greedy[-1]], out.past_key_values
            while len(cont) < extra:
                step = self.target(
                    torch.tensor([[cont[-1]]], device=self.device),
                    past_key_values=past,
                    use_cache=True,
                )
                past = step.past_key_values
                cont.append(int(step.logits[0, -1].argmax()))
        result = (greedy[:-1], cont[:extra])
        self._target_cache[item] = result
        return result

    def draft_tokens(self, folder: str, item: _Answer, continuation: Sequence[int]) -> list[int]:
        """The draft's greedy token at every position of the answer and the continuation."""
        torch = self.torch
        seq = [*item.prompt_ids, *item.answer, *continuation][:-1]
        n_prompt = len(item.prompt_ids)
        with torch.inference_mode():
            logits = self.draft(folder)(torch.tensor([seq], device=self.device)).logits
        return logits[0, n_prompt - 1 :].argmax(-1).tolist()


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def replay_run(
    run_dir: str | Path,
    *,
    device: str | None = None,
    dtype: str = "float32",
    log: Callable[[str], Any] = print,
) -> Path:
    """Count every ``draft_model`` launch's drafts and accepted tokens per position outside
    vLLM (module docstring) and write ``RUN_DIR/acceptance_replay.json``; return its path.
    A ValueError says why a run cannot be replayed (no draft arm, a sampled run)."""
    from speclib.params.run_record import recorded_params

    started = time.perf_counter()
    rd = RunDir.at(run_dir)
    params = recorded_params(rd.params_resolved)
    arms = _draft_arms(params)
    if not arms:
        raise ValueError(f"{rd.root}: no draft_model arm with a draft folder to replay")
    if params.workload.temperature != 0:
        raise ValueError(f"{rd.root}: a sampled run (temperature > 0); the replay is greedy")
    sent = load_records(rd.root, phase=None)
    messages = _messages(params, rd, sent)
    device = device or _default_device()
    target_dir = resolve_model(params.server.model, params)
    log(f"replay: loading the target {target_dir} on {device} ({dtype})")
    models = _Models(target_dir, device, dtype)
    eos_id = int(models.tokenizer.eos_token_id)
    extra = max(k for _, k in arms.values())
    prompt_ids: dict[str, tuple[int, ...]] = {}
    check = {"positions": 0, "same": 0, "answers": 0, "prompt_token_mismatch": 0}

    def prepared(row: Any) -> _Answer | None:
        pid = str(row.prompt_id)
        if pid not in messages or not row.ok or not row.token_ids:
            return None
        if pid not in prompt_ids:
            prompt_ids[pid] = _chat_ids(models.tokenizer, messages[pid])
        if row.prompt_tokens is not None and int(row.prompt_tokens) != len(prompt_ids[pid]):
            check["prompt_token_mismatch"] += 1
            return None
        return _Answer(prompt_ids[pid], _answer_ids(row, eos_id))

    matches: dict[tuple[str, _Answer], list[bool]] = {}

    def matched(draft_dir: str, item: _Answer) -> list[bool]:
        key = (draft_dir, item)
        if key not in matches:
            fresh = item not in models._target_cache
            greedy, cont = models.target_tokens(item, extra)
            if fresh:
                check["answers"] += 1
                check["positions"] += len(item.answer)
                check["same"] += sum(a == b for a, b in zip(greedy, item.answer, strict=True))
            target = [*item.answer, *cont]
            guess = models.draft_tokens(draft_dir, item, cont)
            matches[key] = [g == t for g, t in zip(guess, target, strict=True)]
        return matches[key]

    launches = []
    for status in rd.statuses():
        name = str(status.get("series"))
        if name not in arms:
            continue
        ref, k = arms[name]
        draft_dir = resolve_model(ref, params)
        window = window_records(
            sent, str(status["launch_id"]), warmup_requests=params.workload.warmup_requests
        )
        drafts, accepted, done, skipped = 0, [0] * k, 0, 0
        for row in window.itertuples(index=False):
            item = prepared(row)
            if item is None:
                skipped += int(bool(row.ok) and bool(row.token_ids))
                continue
            steps, per_pos = greedy_steps(matched(draft_dir, item), len(item.answer), k)
            drafts += steps
            accepted = [a + b for a, b in zip(accepted, per_pos, strict=True)]
            done += 1
        launches.append({"launch_id": status["launch_id"], "series": name, "k": k,
                         "requests": done, "skipped": skipped, "num_drafts": drafts,
                         "accepted_per_pos": accepted})  # fmt: skip
        log(f"replay: {status['launch_id']}: {done} answers, {drafts} steps")
    by_kind = _along_control(params, sent, arms, prepared, matched)
    same = check["same"] / check["positions"] if check["positions"] else None
    result = {
        "device": device,
        "dtype": dtype,
        "target": target_dir,
        "drafts": {name: resolve_model(ref, params) for name, (ref, _) in arms.items()},
        "launches": launches,
        "control_answers": by_kind,
        "target_check": {**check, "same_share": same},
        "seconds": round(time.perf_counter() - started, 1),
    }
    write_json_atomic(rd.acceptance_replay, result)
    return rd.acceptance_replay


def _along_control(
    params: Any,
    sent: pd.DataFrame,
    arms: Mapping[str, tuple[str, int]],
    prepared: Callable[[Any], _Answer | None],
    matched: Callable[[str, _Answer], list[bool]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per draft arm and prompt category: the steps and acceptance greedy speculation gets
    along the control's measured answers (each distinct answer once)."""
    control = sent[(sent["series"] == params.control_name) & (sent["phase"] == "measure")]
    items: dict[_Answer, str] = {}
    for row in control.itertuples(index=False):
        item = prepared(row)
        if item is not None:
            items.setdefault(item, str(row.category))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, (ref, k) in arms.items():
        draft_dir = resolve_model(ref, params)
        kinds: dict[str, dict[str, Any]] = {}
        for item, category in items.items():
            steps, per_pos = greedy_steps(matched(draft_dir, item), len(item.answer), k)
            cell = kinds.setdefault(
                category, {"answers": 0, "tokens": 0, "num_drafts": 0, "accepted_per_pos": [0] * k}
            )
            cell["answers"] += 1
            cell["tokens"] += len(item.answer)
            cell["num_drafts"] += steps
            cell["accepted_per_pos"] = [
                a + b for a, b in zip(cell["accepted_per_pos"], per_pos, strict=True)
            ]
        for cell in kinds.values():
            d = cell["num_drafts"]
            cell["mean_acceptance_length"] = 1 + sum(cell["accepted_per_pos"]) / d if d else None
        out[name] = kinds
    return out
