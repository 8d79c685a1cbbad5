"""Which ``speculative_config`` fields a speculative method reads, so ignored ones are refused.

vLLM accepts every ``SpeculativeConfig`` field with every method and silently ignores those
a method does not read: a ``model`` given with ``method: ngram`` is dropped (vLLM sets the
model to ``"ngram"`` itself), ``prompt_lookup_*`` means nothing to a draft model. A params
file that sets such a field describes an experiment other than the one that runs, so it is
refused, naming the method. The field families are read from the installed vLLM's
``SpeculativeConfig`` (:class:`~speclib.vllm_facts.spec_schema.SpecSchema`): its fields named
``prompt_lookup_*`` configure the n-gram proposer and ``suffix_decoding_*`` suffix decoding
(vLLM's own grouping, ``# Ngram proposer configuration`` / ``# Suffix decoding
configuration``); the draft model's own fields mean nothing to the model-free methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from speclib.vllm_facts.spec_schema import KeyProblem

__all__ = ["ignored_field_problems"]

_MODEL_FREE = ("ngram", "ngram_gpu", "suffix")
"""Methods that propose from the text itself: no draft model, no draft weights."""
_FAMILIES = {"prompt_lookup_": ("ngram", "ngram_gpu"), "suffix_decoding_": ("suffix",)}
"""Field-name prefix → the methods that read those fields."""
_DRAFT_MODEL_FIELDS = ("model", "revision", "code_revision", "quantization")
"""The draft checkpoint's own fields (vLLM: "only takes effect when using the draft
model-based speculative method")."""


def _readers(key: str, methods: Iterable[str]) -> tuple[str, ...] | None:
    """The methods that read ``key``; ``None`` when every method may."""
    known = set(methods)
    for prefix, readers in _FAMILIES.items():
        if key.startswith(prefix):
            return tuple(m for m in readers if m in known) or readers
    if key in _DRAFT_MODEL_FIELDS:
        return tuple(m for m in known if m not in _MODEL_FREE) or None
    return None


def ignored_field_problems(
    spec: Mapping[str, Any], *, fields: Iterable[str], methods: Iterable[str]
) -> list[KeyProblem]:
    """Keys of ``spec`` that its ``method`` does not read (one :class:`KeyProblem` each).

    ``fields`` and ``methods``: the installed ``SpeculativeConfig``'s field names and
    ``method`` values (only fields it has are judged). Without a ``method`` nothing is
    judged (vLLM infers it from the model), nor with a method vLLM does not have (the
    method itself is refused)."""
    method = spec.get("method")
    names, methods = set(fields), tuple(methods)
    if not isinstance(method, str) or method not in methods:
        return []  # no method, or one vLLM does not have: that is the problem to name
    problems = []
    for key, value in spec.items():
        if key == "method" or key not in names:
            continue
        readers = _readers(key, methods)
        if readers is None or method in readers:
            continue
        if key in _DRAFT_MODEL_FIELDS:
            why = f"method {method!r} drafts from the text itself, with no draft model"
        else:
            why = f"only {' and '.join(sorted(set(readers)))} read(s) it"
        problems.append(
            KeyProblem(
                key=key,
                message=f"ignored by method {method!r} ({why}); vLLM would drop it "
                "silently: remove it, or change the method",
                value=value,
            )
        )
    return problems
