"""The acceptance a synthetic draft must give on the outputs a launch produced.

A draft, an EAGLE-3 head or a target with an MTP layer built by
:mod:`speclib.demo.synthetic` declares its acceptance (``speclib-synthetic.json`` in its
folder). Beyond that expectation, its greedy acceptance on given outputs is exact:
:func:`speclib.demo.synthetic.expected_acceptance` replays the verify steps (all three guess
from the current token alone, so one replay serves them, each with its own guess map). After
a block, :func:`acceptance_truth` computes both for each ``draft_model`` arm whose draft is
such a folder, each ``eagle3`` arm whose head is, and each ``mtp`` arm whose target (or
``model``) is, from the arm's measured records, so the analysis can hold the acceptance vLLM
reported (``/metrics`` deltas) against a truth. Any other arm has none (None). The outputs
replayed are those of the launch's ``/metrics`` window (:func:`metrics_window`: its level
warm-ups and measured requests), and each one's last step is verified against the target's
continuation past ``max_tokens`` (vLLM counts what it accepts there before cutting the
output), so the truth counts what the counters count.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speclib.core.records import RequestRecord
from speclib.params.experiment import ExperimentParams
from speclib.params.server import SeriesParams

__all__ = ["TRUTH_METHODS", "acceptance_truth", "metrics_window"]

# The method each synthetic folder's role is declared for.
_ROLE_OF_METHOD = {"draft_model": "draft", "eagle3": "eagle3", "mtp": "mtp"}
TRUTH_METHODS = frozenset(_ROLE_OF_METHOD)  # the methods a synthetic folder declares a truth for


def metrics_window(
    records: Sequence[RequestRecord], launch_id: str, *, warmup_requests: int
) -> list[RequestRecord]:
    """A launch's records between its ``metrics_before`` and ``metrics_after`` snapshots, in
    ``requests.jsonl``'s order: all but its series' warm-up (its first ``warmup_requests``
    records of phase ``warmup``), as
    :func:`speclib.analysis.speculation.launches.window_records` reads them."""
    mine = [r for r in records if r.launch_id == launch_id]
    warm = [i for i, r in enumerate(mine) if r.phase == "warmup"][:warmup_requests]
    skip = set(warm)
    return [r for i, r in enumerate(mine) if i not in skip]


def acceptance_truth(
    params: ExperimentParams, series: SeriesParams, records: Sequence[RequestRecord]
) -> dict[str, Any] | None:
    """Declared and exact acceptance of this arm's synthetic draft, EAGLE-3 head or MTP
    layer on the outputs of ``records`` (its launch's :func:`metrics_window`; greedy
    requests only), or None where the arm has none.
    An ``mtp`` arm's layers are in its target (vLLM takes the target when the series names
    no ``model``)."""
    from speclib.demo.synthetic import (
        SyntheticRecipe,
        chain_maps,
        declared_acceptance,
        expected_acceptance,
        guess_map,
        read_declaration,
    )
    from speclib.run.launching import resolve_model

    spec = series.speculative_config or {}
    role = _ROLE_OF_METHOD.get(str(spec.get("method")))
    model = spec.get("model")
    if role == "mtp" and model is None:
        model = params.server.model
    if role is None or not isinstance(model, str):
        return None
    if params.workload.temperature != 0:
        return None  # the truth is for greedy decoding
    declaration = read_declaration(Path(resolve_model(model, params)))
    if not declaration or declaration.get("role") != role:
        return None
    k = int(spec["num_speculative_tokens"])
    recipe = SyntheticRecipe(**declaration["recipe"])
    draft_next = guess_map(recipe, role)
    target_next, _ = chain_maps(recipe)
    outputs = [r.token_ids for r in records if r.ok and r.token_ids]
    return {
        "k": k,
        "agreement": declaration["agreement_realised"],
        "declared": declared_acceptance(declaration["agreement_realised"], k),
        "expected": expected_acceptance(draft_next, outputs, k, target_next=target_next),
        "n_requests": len(outputs),
    }
