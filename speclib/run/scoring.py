"""Score a run's outputs by the target served without speculation (the HTTP scorer).

Each output is scored by the target model itself (:func:`score_outputs`): the
chat-templated prompt tokens (``POST /tokenize`` with ``messages``) followed by the output
token ids are sent to ``POST /v1/completions`` as a token-id prompt with ``max_tokens: 1``,
``temperature: 0`` and ``prompt_logprobs: 0``; vLLM returns the log-probability of every
prompt token given the tokens before it, and the output positions give the output's mean
per-token log-probability (nats/token). An item without recorded token ids is
re-tokenized from its text (``source="text"``). With ``temperature > 0`` the request asks
for the top-20 log-probs at every position, and each score also gets the calibration
residual and the count of tokens outside the requested top-p nucleus
(:func:`speclib.analysis.speculation.nucleus.expected_logprob`,
:func:`speclib.analysis.speculation.nucleus.outside_nucleus`). A failure is data: an
:class:`~speclib.core.scores.OutputScore` with ``mean_logprob=None`` and ``error``.

The run step (:func:`score_run`): after all series, launch the target without speculation
(the control's launch, :mod:`speclib.run.launching`), score every successful measured
record of every series into ``RUN_DIR/output_scores.jsonl`` (one line per output, appended
and flushed as each finishes), stop the server. The comparison of the scores is
:mod:`speclib.analysis.speculation.sampling`'s; HTTP goes through :mod:`speclib.serve.httpapi`.

The HTTP scorer, parsing vLLM's log-prob entries and the run step are one job (turn a
run's outputs into scores) and change together.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import time
import urllib.error
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.analysis.speculation.nucleus import expected_logprob, outside_nucleus
from speclib.core.records import read_records
from speclib.core.rundir import SCORING_LAUNCH, RunDir, write_json_atomic
from speclib.core.scores import (
    DivergenceRank,
    OutputScore,
    ScoreItem,
    append_score,
    read_ranks,
    read_scores,
    sequence_of,
    write_ranks,
)
from speclib.core.turns import measured_prompts
from speclib.run.launching import api_key, resolve_model, server_for
from speclib.serve.httpapi import HTTPError, request_bytes, served_model

__all__ = [
    "ensure_ranked",
    "ensure_scored",
    "find_divergences",
    "items_from_records",
    "rank_divergences",
    "score_outputs",
    "score_run",
    "scoring_enabled",
]

_CLAMPED_LOGPROB = -9999.0  # vLLM clamps -inf prompt log-probs to this value
_ERROR_CHARS = 300


def items_from_records(
    records: Iterable[Any], messages: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[ScoreItem]:
    """Items for every successful measured record that produced output.

    ``records`` are :class:`~speclib.core.records.RequestRecord` objects; ``messages`` maps a
    prompt id to its chat messages. Records of unknown prompts are skipped (warm-up prompts
    never reach here: only ``phase == "measure"`` is kept).
    """
    out = []
    for rec in records:
        if not rec.ok or rec.phase != "measure" or rec.prompt_id not in messages:
            continue
        ids = tuple(rec.token_ids) if rec.token_ids else None
        if ids is None and not rec.text:
            continue
        out.append(ScoreItem(
            series=rec.series, replicate=rec.replicate, prompt_id=rec.prompt_id,
            repeat=rec.repeat, messages=tuple(dict(m) for m in messages[rec.prompt_id]),
            token_ids=ids, text=rec.text or None, level=getattr(rec, "level", 0),
        ))  # fmt: skip
    return out


# ------------------------------------------------------------------------------ scoring


class _ScoreError(Exception):
    """One item could not be scored; the message goes into ``OutputScore.error``."""


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 1] + "…"


class _Api:
    """Tiny JSON-over-HTTP client for the two endpoints used here (thread-safe)."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            _, raw, _ = request_bytes(
                self.base_url + path, api_key=self.api_key, body=body, timeout=self.timeout_s
            )
        except HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            raise _ScoreError(f"{path}: HTTP {exc.code}: {_excerpt(detail)}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise _ScoreError(f"{path}: {type(exc).__name__}: {reason}") from None
        try:
            data = json.loads(raw)
        except ValueError:
            raise _ScoreError(f"{path}: response is not JSON: {_excerpt(repr(raw))}") from None
        if not isinstance(data, dict):
            raise _ScoreError(f"{path}: unexpected response: {_excerpt(repr(data))}")
        return data


def _token_list(data: Mapping[str, Any], what: str) -> list[int]:
    tokens = data.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise _ScoreError(f"/tokenize ({what}): no 'tokens' list in the response")
    return tokens


def _prompt_ids(api: _Api, model: str, messages: Sequence[Mapping[str, Any]]) -> list[int]:
    body = {"model": model, "messages": [dict(m) for m in messages], "add_generation_prompt": True}
    return _token_list(api.post("/tokenize", body), "messages")


def _output_ids(api: _Api, model: str, item: ScoreItem) -> tuple[list[int], str]:
    if item.token_ids:
        return list(item.token_ids), "token_ids"
    if item.text:
        body = {"model": model, "prompt": item.text, "add_special_tokens": False}
        return _token_list(api.post("/tokenize", body), "text"), "text"
    raise _ScoreError("empty output: nothing to score")


def _logprob_at(entry: Any, token: int, pos: int) -> float:
    if not isinstance(entry, Mapping):
        raise _ScoreError(f"prompt_logprobs[{pos}] is {entry!r}, expected a mapping")
    hit = entry.get(str(token), entry.get(token))  # JSON keys are strings
    value = hit.get("logprob") if isinstance(hit, Mapping) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _ScoreError(f"prompt_logprobs[{pos}] holds no log-prob for token {token}")
    if not math.isfinite(value):
        raise _ScoreError(f"prompt_logprobs[{pos}]: non-finite log-prob {value!r}")
    return float(value)


def _output_entries(response: Mapping[str, Any], prompt: list[int], n_prompt: int) -> list[Any]:
    try:
        plp = response["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise _ScoreError("/v1/completions: no choices[0].prompt_logprobs") from None
    if not isinstance(plp, list) or len(plp) != len(prompt):
        got = len(plp) if isinstance(plp, list) else type(plp).__name__
        raise _ScoreError(f"prompt_logprobs has {got} entries for {len(prompt)} prompt tokens")
    return plp[n_prompt:]


def _entry_values(entry: Mapping[Any, Any]) -> list[tuple[float, int | None]]:
    out = []
    for v in entry.values():
        lp = v.get("logprob") if isinstance(v, Mapping) else None
        if isinstance(lp, (int, float)) and not isinstance(lp, bool) and math.isfinite(lp):
            rank = v.get("rank")
            out.append((float(lp), rank if isinstance(rank, int) else None))
    return out


def _top_k(values: list[tuple[float, int | None]], k: int) -> list[float]:
    """The K largest log-probs of an entry (it may also hold the scored token, ranked > K)."""
    if all(r is not None for _, r in values):
        return [lp for lp, r in values if r is not None and r <= k]
    return sorted((lp for lp, _ in values), reverse=True)[:k]


def _residuals(
    entries: list[Any], logprobs: list[float], sampling: tuple[float, float, int]
) -> tuple[list[float], int | None]:
    """Per-position calibration residuals and the count of tokens outside the nucleus."""
    temperature, top_p, k = sampling
    out, outside = [], 0
    check = temperature <= 1 and top_p < 1
    for entry, lp in zip(entries, logprobs, strict=True):
        values = _entry_values(entry)
        lps = [v for v, _ in values]
        out.append(lp - expected_logprob(lps, temperature=temperature, top_p=top_p))
        if check:
            top = _top_k(values, k)
            outside += outside_nucleus(top, lp, temperature=temperature, top_p=top_p)
    return out, outside if check else None


def _score_item(
    api: _Api,
    model: str,
    item: ScoreItem,
    prompt_ids: list[int],
    sampling: tuple[float, float, int] | None,
) -> OutputScore:
    out_ids, source = _output_ids(api, model, item)
    if not out_ids:
        raise _ScoreError("empty output: nothing to score")
    prompt = [*prompt_ids, *out_ids]
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": sampling[2] if sampling else 0}  # fmt: skip
    n = len(prompt_ids)
    entries = _output_entries(api.post("/v1/completions", body), prompt, n)
    lps = [_logprob_at(e, prompt[n + i], n + i) for i, e in enumerate(entries)]
    total = math.fsum(lps)
    residual = outside = None
    if sampling:
        res, outside = _residuals(entries, lps, sampling)
        residual = math.fsum(res) / len(res)
    return OutputScore(
        **item.identity(), mean_logprob=total / len(lps), sum_logprob=total, min_logprob=min(lps),
        n_tokens=len(lps), n_impossible=sum(v <= _CLAMPED_LOGPROB for v in lps),
        prompt_tokens=len(prompt_ids), source=source, mean_residual=residual,
        n_outside_nucleus=outside,
    )  # fmt: skip


def _failed(item: ScoreItem, error: str, prompt_tokens: int | None = None) -> OutputScore:
    return OutputScore(
        **item.identity(), mean_logprob=None, prompt_tokens=prompt_tokens, error=error
    )


def _messages_key(messages: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps([dict(m) for m in messages], sort_keys=True, ensure_ascii=False)


def _validate_items(items: Any) -> list[ScoreItem]:
    items = sequence_of(items, ScoreItem, "items")
    keys = [x.key for x in items]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"`items` holds the output {dup} twice")
    return items


def score_outputs(
    base_url: str,
    items: Sequence[ScoreItem],
    *,
    model: str,
    api_key: str | None = None,
    concurrency: int = 2,
    timeout_s: float = 120.0,
    sink: Callable[[OutputScore], None] | None = None,
    temperature: float | None = None,
    top_p: float = 1.0,
    top_logprobs: int = 20,
) -> list[OutputScore]:
    """Score every item by the target at ``base_url`` (served without speculation).

    Returns one :class:`OutputScore` per item, in the order of ``items``; a failure is a
    score with ``mean_logprob=None`` and ``error`` (never an exception). ``sink`` is
    called with each score as it finishes (from the calling thread), e.g. to append it to
    ``output_scores.jsonl``. Each distinct prompt is tokenized once through ``/tokenize``.
    With ``temperature > 0`` (the sampling the outputs were drawn with, and ``top_p``) each
    score also gets ``mean_residual``, from the ``top_logprobs`` most likely tokens at
    every position (vLLM's ``--max-logprobs`` defaults to 20).
    """
    items = _validate_items(items)
    if not isinstance(model, str) or not model:
        raise ValueError(f"`model` must be a non-empty string (got {model!r})")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"`concurrency` must be a positive integer (got {concurrency!r})")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"`timeout_s` must be a positive number (got {timeout_s!r})")
    sampling = None
    if temperature is not None and temperature > 0:
        if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
            raise ValueError(f"`top_p` must be in (0, 1] (got {top_p!r})")
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or top_logprobs < 1:
            raise ValueError(f"`top_logprobs` must be a positive integer (got {top_logprobs!r})")
        sampling = (float(temperature), float(top_p), top_logprobs)
    api = _Api(base_url, api_key, float(timeout_s))
    by_prompt: dict[str, Sequence[Mapping[str, Any]]] = {}
    for it in items:
        by_prompt.setdefault(_messages_key(it.messages), it.messages)
    prompts: dict[str, list[int] | str] = {}
    results: dict[int, OutputScore] = {}
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="speclib-score") as pool:
        futs = {pool.submit(_prompt_ids, api, model, m): k for k, m in by_prompt.items()}
        for fut in as_completed(futs):
            try:
                prompts[futs[fut]] = fut.result()
            except _ScoreError as exc:
                prompts[futs[fut]] = str(exc)
            except Exception as exc:  # an odd response must not stop the run
                prompts[futs[fut]] = f"{type(exc).__name__}: {_excerpt(str(exc))}"
        jobs = {}
        for i, it in enumerate(items):
            ids = prompts[_messages_key(it.messages)]
            if isinstance(ids, str):
                results[i] = _failed(it, f"prompt not tokenized: {ids}")
                if sink is not None:
                    sink(results[i])
                continue
            jobs[pool.submit(_score_item, api, model, it, ids, sampling)] = i
        for fut in as_completed(jobs):
            i = jobs[fut]
            try:
                results[i] = fut.result()
            except _ScoreError as exc:
                ids = prompts[_messages_key(items[i].messages)]
                results[i] = _failed(items[i], str(exc), len(ids))
            except Exception as exc:  # a bug or an odd response must not lose the others
                results[i] = _failed(items[i], f"{type(exc).__name__}: {_excerpt(str(exc))}")
            if sink is not None:
                sink(results[i])
    return [results[i] for i in range(len(items))]


# ------------------------------------------------------------------------- the run step


def scoring_enabled(params: Any) -> bool:
    """Whether a run scores its outputs: ``analysis.score_outputs`` on/off, or auto
    (on exactly when the workload samples, i.e. ``temperature > 0``)."""
    mode = getattr(params.analysis, "score_outputs", "auto")
    if mode == "auto":
        return params.workload.temperature > 0
    return mode == "on"


def _run_items(params: Any, run_dir: Path) -> list[ScoreItem]:
    rd = RunDir.at(run_dir)
    if not rd.requests.exists():
        raise FileNotFoundError(f"{rd.requests} does not exist: nothing to score")
    messages = {p.id: p.as_messages() for p in measured_prompts(params, rd.root)}
    return items_from_records(read_records(rd.requests), messages)


def score_run(params: Any, run_dir: str | os.PathLike[str], *, concurrency: int = 2) -> Path:
    """Score every successful measured output of every series of a run; return the file.

    Launches the target the way the control series runs (no speculation) as launch
    ``scoring`` (log in ``RUN_DIR/launches/scoring/server.log``), or, when the control
    measures an external endpoint, scores against that endpoint. Outputs already scored in
    ``RUN_DIR/output_scores.jsonl`` are skipped, so a resumed run scores only what is new
    and starts no server when nothing is. Raises :class:`~speclib.serve.process.ServerStartError`
    when the server does not start; a single failure is a line with ``error`` set.
    ``RUN_DIR/launches/scoring/scoring.json`` says how many were scored and which errors
    occurred.
    """
    rd = RunDir.at(run_dir)
    out = rd.output_scores
    done = {s.key for s in read_scores(out) if s.ok}
    todo = [it for it in _run_items(params, rd.root) if it.key not in done]
    out.touch()
    if not todo:
        return out
    control = params.series_by_name(params.control_name)
    key = api_key(params)
    info: dict[str, Any] = {"items": len(todo), "started_at": time.time()}
    scorer = server_for(params, control, rd, SCORING_LAUNCH)
    with out.open("a", encoding="utf-8") as fh, scorer as up:
        base_url, handle, spec = up
        info["base_url"] = base_url if handle is None else None
        if handle is not None and handle.ready_at is not None:
            info["server_ready_s"] = handle.ready_at - handle.started_at
        model = spec.served_model if spec is not None else served_model(base_url, api_key=key)
        got = score_outputs(
            base_url, todo, model=model, api_key=key, concurrency=concurrency,
            timeout_s=params.workload.request_timeout_s, sink=lambda s: append_score(fh, s),
            temperature=params.workload.temperature, top_p=params.workload.top_p,
        )  # fmt: skip
    info.update(
        ended_at=time.time(), scored=sum(s.ok for s in got), failed=sum(not s.ok for s in got),
        errors=sorted({s.error for s in got if s.error})[:20],
    )  # fmt: skip
    write_json_atomic(rd.scoring_record, info)
    return out


def ensure_scored(run_dir: str | os.PathLike[str]) -> str:
    """The sampling check as a pipeline step (the analysis notebook runs it first, in batch
    and in JupyterLab alike): score the run's outputs when its params ask for it.

    Returns what happened in words. Never raises for a scoring failure: it is written to
    ``RUN_DIR/output_scores.error.txt``, and the analysis then says "correctness unknown"
    and refuses to adopt. Outputs already scored are skipped, so a re-analysis starts no
    server.
    """
    from speclib.params.run_record import recorded_params

    rd = RunDir.at(run_dir)
    params = recorded_params(rd.params_resolved)
    if not scoring_enabled(params):
        return "sampling check not needed (greedy run, or analysis.score_outputs: off)"
    try:
        path = score_run(params, rd.root)
    except Exception as exc:  # the analysis reports "correctness unknown"
        why = f"{type(exc).__name__}: {exc}"
        rd.scoring_error.write_text(why, encoding="utf-8")
        return f"sampling check failed: {why[:500]}"
    rd.scoring_error.unlink(missing_ok=True)
    return f"sampling check: outputs scored in {path}"


# ---------------------------------------------------------------- greedy divergences


@dataclass(frozen=True)
class _Divergence:
    """One arm's answer that left the control's: where, and the two tokens there."""

    series: str
    level: int
    prompt_id: str
    messages: tuple[Mapping[str, Any], ...]
    prefix: tuple[int, ...]
    control_token: int
    experiment_token: int


def _eos_id(params: Any) -> int | None:
    """The served target's EOS id from its folder's generation or model config (None when
    the model is no local folder, or says none)."""
    folder = Path(resolve_model(params.server.model, params))
    for name in ("generation_config.json", "config.json"):
        try:
            eos = json.loads((folder / name).read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, ValueError):
            continue
        eos = eos[0] if isinstance(eos, list) and eos else eos
        if isinstance(eos, int):
            return eos
    return None


def _ended(rec: Any, eos: int | None) -> tuple[int, ...]:
    ids = tuple(rec["token_ids"] or ())
    if rec.get("finish_reason") == "stop" and eos is not None and (not ids or ids[-1] != eos):
        ids = (*ids, eos)  # the answer ended with the model's EOS, which the stream left out
    return ids


def find_divergences(params: Any, run_dir: str | os.PathLike[str]) -> list[_Divergence]:
    """Every (arm, load level, prompt) whose greedy answer differs from the control's, as
    the analysis compares them (:func:`speclib.analysis.speculation.agreement.compare_outputs`),
    with the shared answer before the first differing token and both tokens there. Pairs
    that differ only past one side's cut at ``max_tokens`` are left out (nothing to rank)."""
    from speclib.analysis.speculation.agreement import compare_outputs

    rd = RunDir.at(run_dir)
    if params.workload.temperature != 0 or not rd.requests.exists():
        return []
    messages = {p.id: p.as_messages() for p in measured_prompts(params, rd.root)}
    rows = [dict(vars(r)) for r in read_records(rd.requests) if r.phase == "measure"]
    eos = _eos_id(params) if any(r.get("finish_reason") == "stop" for r in rows) else None
    for r in rows:
        r["token_ids"] = _ended(r, eos) if r.get("token_ids") else r.get("token_ids")
    out = []
    control = params.control_name
    for level in sorted({int(r.get("level") or 0) for r in rows}):
        at = [r for r in rows if int(r.get("level") or 0) == level]
        ctrl = [r for r in at if r["series"] == control]
        firsts: dict[str, dict[str, Any]] = {}
        for r in ctrl:
            if r.get("ok") and r.get("token_ids"):
                firsts.setdefault(r["prompt_id"], r)
        for name in params.experiments:
            exp = [r for r in at if r["series"] == name]
            mine: dict[str, dict[str, Any]] = {}
            for r in exp:
                if r.get("ok") and r.get("token_ids"):
                    mine.setdefault(r["prompt_id"], r)
            for pid, agreement in compare_outputs(ctrl, exp).items():
                if agreement.exact_match or agreement.unit != "tokens" or pid not in messages:
                    continue
                if pid not in firsts or pid not in mine:
                    continue
                c, e = firsts[pid]["token_ids"], mine[pid]["token_ids"]
                d = agreement.first_divergence
                if d is None or d >= len(c) or d >= len(e):
                    continue
                out.append(_Divergence(name, level, pid, tuple(messages[pid]), tuple(c[:d]),
                                       int(c[d]), int(e[d])))  # fmt: skip
    return out


def _rank_one(api: _Api, model: str, item: _Divergence, prompt_ids: list[int]) -> DivergenceRank:
    """The target's log-probability and rank of both tokens after the shared prefix."""
    got: dict[int, tuple[float, int | None]] = {}
    for token in (item.control_token, item.experiment_token):
        prompt = [*prompt_ids, *item.prefix, token]
        body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": 1}  # fmt: skip
        entry = _output_entries(api.post("/v1/completions", body), prompt, len(prompt) - 1)[0]
        lp = _logprob_at(entry, token, len(prompt) - 1)
        hit = entry.get(str(token), entry.get(token))
        rank = hit.get("rank") if isinstance(hit, Mapping) else None
        got[token] = (lp, rank if isinstance(rank, int) else None)
    (c_lp, c_rank), (e_lp, e_rank) = got[item.control_token], got[item.experiment_token]
    return _rank_of(item, control_logprob=c_lp, experiment_logprob=e_lp,
                    control_rank=c_rank, experiment_rank=e_rank)  # fmt: skip


def _rank_of(item: _Divergence, **ranked: Any) -> DivergenceRank:
    """The record of ``item``'s ranking: ``ranked`` holds the log-probabilities and ranks,
    or ``error``."""
    return DivergenceRank(
        series=item.series, level=item.level, prompt_id=item.prompt_id,
        position=len(item.prefix), control_token=item.control_token,
        experiment_token=item.experiment_token, **ranked,
    )  # fmt: skip


def rank_divergences(
    base_url: str,
    items: Sequence[_Divergence],
    *,
    model: str,
    api_key: str | None = None,
    timeout_s: float = 120.0,
) -> list[DivergenceRank]:
    """Rank both tokens of every divergence by the target at ``base_url`` (served without
    speculation; ``prompt_logprobs`` of the prompt, the shared answer and each token). A
    failure is a rank with ``error`` set, never an exception."""
    api = _Api(base_url, api_key, float(timeout_s))
    prompts: dict[str, list[int] | str] = {}
    out = []
    for item in items:
        key = _messages_key(item.messages)
        if key not in prompts:
            try:
                prompts[key] = _prompt_ids(api, model, item.messages)
            except _ScoreError as exc:
                prompts[key] = str(exc)
        ids = prompts[key]
        try:
            if isinstance(ids, str):
                raise _ScoreError(f"prompt not tokenized: {ids}")
            out.append(_rank_one(api, model, item, ids))
        except Exception as exc:  # an odd response must not lose the others
            why = str(exc) if isinstance(exc, _ScoreError) else f"{type(exc).__name__}: {exc}"
            out.append(_rank_of(item, error=_excerpt(why)))
    return out


def ensure_ranked(
    run_dir: str | os.PathLike[str], *, params: Any = None, launch: str = "ranking"
) -> str:
    """The greedy outputs check as a pipeline step (the analysis notebook runs it): where an
    arm's greedy answer differs from the control's, launch the target without speculation
    (the control's launch, as launch ``launch``) and rank both tokens at the first
    difference into ``RUN_DIR/divergences.jsonl``, which the outputs gate reads (a near tie
    is not held against the arm). Divergences ranked already are kept, so a re-analysis
    starts no server. ``params``: the run's recorded params unless given (a run ranked on
    another machine than its own: scripts/rank_here.py). Never raises: a failure goes to
    ``divergences.error.txt`` and the divergences then count as they are. Returns what
    happened in words."""
    from speclib.params.run_record import recorded_params

    rd = RunDir.at(run_dir)
    params = params if params is not None else recorded_params(rd.params_resolved)
    if params.workload.temperature != 0:
        return "divergence ranking not needed (a sampled run)"
    try:
        items = find_divergences(params, rd.root)
        known = read_ranks(rd.divergences)
        todo = [d for d in items if (d.series, d.level, d.prompt_id) not in known
                or known[(d.series, d.level, d.prompt_id)].error]  # fmt: skip
        if not items:
            rd.divergence_error.unlink(missing_ok=True)
            return "every greedy answer equals the control's: nothing to rank"
        if not todo:
            return f"{len(items)} divergence(s) ranked already"
        key = api_key(params)
        control = params.series_by_name(params.control_name)
        with server_for(params, control, rd, launch) as (base_url, _, spec):
            model = spec.served_model if spec is not None else served_model(base_url, api_key=key)
            got = rank_divergences(base_url, todo, model=model, api_key=key,
                                   timeout_s=params.workload.request_timeout_s)  # fmt: skip
        known.update({r.key: r for r in got})
        write_ranks(rd.divergences, known.values())
    except Exception as exc:  # the analysis then counts every divergence against the arm
        why = f"{type(exc).__name__}: {exc}"
        rd.divergence_error.write_text(why, encoding="utf-8")
        return f"divergence ranking failed: {why[:500]}"
    rd.divergence_error.unlink(missing_ok=True)
    failed = sum(r.error is not None for r in got)
    return f"{len(got)} divergence(s) ranked by the target ({failed} failed)"
