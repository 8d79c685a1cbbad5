"""The weights an MTP arm's guesses read, counted from its checkpoint and kept with its launch.

An MTP draft's cost per guess cannot be timed apart (vLLM cannot serve its layers alone), so
the "why" models it from what a guess reads
(:mod:`speclib.analysis.speculation.mtp_cost`). The checkpoint is on this machine only while
the run goes on, so each launch of an ``mtp`` arm records the count in its ``status.json``
(``extra.mtp_step_weights``), from the safetensors headers and ``config.json`` of the model
vLLM takes the MTP layers from: the series' ``model``, else the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speclib.analysis.speculation.mtp_cost import mtp_step_weights
from speclib.params.experiment import ExperimentParams
from speclib.params.server import SeriesParams
from speclib.params.spec_compat import read_config, tensor_shapes

__all__ = ["MTP_MODULE_KEYS", "launch_mtp_weights"]

MTP_MODULE_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
"""Where checkpoints declare their MTP modules (the keys vLLM's ``hf_config_override`` reads)."""


def _int_of(cfg: Mapping[str, Any], key: str) -> int | None:
    for scope in (cfg, cfg.get("text_config") or {}):
        value = scope.get(key) if isinstance(scope, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def launch_mtp_weights(params: ExperimentParams, series: SeriesParams) -> dict[str, Any] | None:
    """The weights model of an ``mtp`` arm's guesses (None for any other arm, a checkpoint
    not on this machine, or one whose tensors say nothing of MTP)."""
    from speclib.run.launching import resolve_model

    spec = series.speculative_config or {}
    if spec.get("method") != "mtp" or series.base_url or params.server.base_url:
        return None
    folder = Path(resolve_model(str(spec.get("model") or params.server.model), params))
    cfg, shapes = read_config(folder), tensor_shapes(folder)
    if cfg is None or shapes is None:
        return None
    layers = _int_of(cfg, "num_hidden_layers")
    modules = next((n for k in MTP_MODULE_KEYS if (n := _int_of(cfg, k))), None)
    if not layers or not modules:
        return None
    found = mtp_step_weights(shapes, num_hidden_layers=layers, mtp_modules=modules)
    return found.to_dict() if found else None
