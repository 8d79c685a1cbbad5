"""The acceptance a synthetic draft must give on the outputs a launch produced.

A draft or EAGLE-3 head built by :mod:`speclib.demo.synthetic` declares its acceptance
(``speclib-synthetic.json`` in its folder). Beyond that expectation, its greedy acceptance on
given outputs is exact: :func:`speclib.demo.synthetic.expected_acceptance` replays the verify
steps (both guess from the current token alone, so one replay serves both). After a block,
:func:`acceptance_truth` computes both for each ``draft_model`` arm whose draft is such a
folder and each ``eagle3`` arm whose head is, from the arm's measured records, so the
analysis can hold the acceptance vLLM reported (``/metrics`` deltas) against a truth. Any
other arm has none (None).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speclib.core.records import RequestRecord
from speclib.params.experiment import ExperimentParams
from speclib.params.server import SeriesParams

__all__ = ["acceptance_truth"]

# The method each synthetic folder's role is declared for.
_ROLE_OF_METHOD = {"draft_model": "draft", "eagle3": "eagle3"}


def acceptance_truth(
    params: ExperimentParams, series: SeriesParams, records: Sequence[RequestRecord]
) -> dict[str, Any] | None:
    """Declared and exact acceptance of this arm's synthetic draft or EAGLE-3 head on its
    measured outputs (greedy requests only), or None where the arm has neither."""
    from speclib.demo.synthetic import (
        SyntheticRecipe,
        chain_maps,
        declared_acceptance,
        expected_acceptance,
        read_declaration,
    )
    from speclib.run.launching import resolve_model

    spec = series.speculative_config or {}
    role = _ROLE_OF_METHOD.get(str(spec.get("method")))
    if role is None or not isinstance(spec.get("model"), str):
        return None
    if params.workload.temperature != 0:
        return None  # the truth is for greedy decoding
    declaration = read_declaration(Path(resolve_model(spec["model"], params)))
    if not declaration or declaration.get("role") != role:
        return None
    k = int(spec["num_speculative_tokens"])
    recipe = SyntheticRecipe(**declaration["recipe"])
    _, draft_next = chain_maps(recipe)
    outputs = [r.token_ids for r in records if r.ok and r.phase == "measure" and r.token_ids]
    return {
        "k": k,
        "agreement": declaration["agreement_realised"],
        "declared": declared_acceptance(declaration["agreement_realised"], k),
        "expected": expected_acceptance(draft_next, outputs, k),
        "n_requests": len(outputs),
    }
