"""Output-score records: what to score, the target's log-probability of it, and their files.

A sampled run's outputs are scored by the target served without speculation
(:mod:`speclib.run.scoring`) and compared between series
(:mod:`speclib.analysis.speculation.sampling`). This module holds only the records both share — a
:class:`ScoreItem` (one output to score) and an :class:`OutputScore` (its score) — and the
JSON-lines I/O of ``RUN_DIR/output_scores.jsonl``
(:attr:`speclib.core.rundir.RunDir.output_scores`): :func:`append_score` writes one line
and flushes it to disk, :func:`read_scores` reads them back, the last line of an output
winning. A greedy run's divergences (an arm's answer leaving the control's) are ranked by
the same target: a :class:`DivergenceRank` holds both tokens' log-probabilities at the
first differing token, in ``RUN_DIR/divergences.jsonl`` (:func:`write_ranks`,
:func:`read_ranks`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TextIO

from speclib.core.jsonutil import json_lines

__all__ = [
    "SCORE_VERSION",
    "DivergenceKey",
    "DivergenceRank",
    "OutputKey",
    "OutputScore",
    "ScoreItem",
    "append_score",
    "read_ranks",
    "read_scores",
    "sequence_of",
    "write_ranks",
]

SCORE_VERSION = 1
"""Version of the :class:`OutputScore` line format."""

OutputKey = tuple[str, int, int, str, int]
"""The identity of one output: ``(series, replicate, level, prompt_id, repeat)``."""


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
    for data in json_lines(lines):
        score = OutputScore.from_json(data)
        latest[score.key] = score
    return list(latest.values())


def sequence_of(value: Any, cls: type, name: str) -> list[Any]:
    """``value`` as a list of ``cls`` objects (the scorer's items, the scores), else a
    ValueError naming the argument ``name`` and what it got."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(
            f"`{name}` must be a sequence of {cls.__name__} (got {type(value).__name__})"
        )
    items = list(value)
    bad = [type(x).__name__ for x in items if not isinstance(x, cls)]
    if bad:
        raise ValueError(f"`{name}` must hold only {cls.__name__} objects (got {bad[0]})")
    return items


DivergenceKey = tuple[str, int, str]
"""The identity of one greedy divergence: ``(series, level, prompt_id)``."""


@dataclass(frozen=True)
class DivergenceRank:
    """Where an arm's greedy answer first left the control's, and how the target (served
    without speculation) ranks the two tokens there.

    ``position`` is the first differing answer token; ``control_token`` and
    ``experiment_token`` the ids each side produced there (the model's EOS where one side
    ended); ``*_logprob`` and ``*_rank`` the target's log-probability (nats) and rank
    (1 = its greedy choice) of each, given the prompt and the shared answer before
    ``position``. A ranking that failed has ``error`` set and no log-probabilities.
    """

    series: str
    level: int
    prompt_id: str
    position: int
    control_token: int
    experiment_token: int
    control_logprob: float | None = None
    experiment_logprob: float | None = None
    control_rank: int | None = None
    experiment_rank: int | None = None
    error: str | None = None
    version: int = SCORE_VERSION

    @property
    def key(self) -> DivergenceKey:
        return (self.series, self.level, self.prompt_id)

    @property
    def gap(self) -> float | None:
        """How much likelier the target finds the control's token (nats; None if unranked)."""
        if self.control_logprob is None or self.experiment_logprob is None:
            return None
        return self.control_logprob - self.experiment_logprob

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DivergenceRank:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_ranks(path: str | os.PathLike[str], ranks: Iterable[DivergenceRank]) -> None:
    """Write every ranking as JSON lines (the whole file, replaced atomically)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    lines = [json.dumps(r.to_dict(), separators=(",", ":"), allow_nan=False) for r in ranks]
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, target)


def read_ranks(path: str | os.PathLike[str]) -> dict[DivergenceKey, DivergenceRank]:
    """The rankings of a divergences file by key (a missing file gives ``{}``)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    out: dict[DivergenceKey, DivergenceRank] = {}
    for data in json_lines(lines):
        rank = DivergenceRank.from_json(data)
        out[rank.key] = rank
    return out
