"""What an MTP step costs, modelled from the target's checkpoint: the ``c`` of ``method: mtp``.

An MTP draft is no separate model. Its layers ship inside the target's checkpoint (MiMo's
``model.mtp_layers.*``, DeepSeek's and GLM's layers past ``num_hidden_layers``, Qwen3.5's
``mtp.*``), and each guess runs one of them on the target's own last hidden state (which the
verify pass has already computed) and the embedding of the token before, then the target's
LM head. Its cost per guess cannot be timed apart: vLLM cannot serve an MTP layer alone, so
``analysis.measure_draft_cost`` has nothing to start. It is modelled instead from what a
step reads: at small batches a decode step streams every weight it uses once, so its time
is about proportional to the weights it reads. :func:`mtp_step_weights` counts them from the
safetensors headers: ``c`` = (one MTP module + the LM head) / (the target's decoder layers +
the LM head); embeddings are left out of both (a step reads one row of them). The result is
a model of the cost, not a measurement: the "why" names it so, and its gap to the measured
step cost shows what the model leaves out (kernel launches, attention over the KV cache,
the scheduling around a step), which dominates tiny models and CPUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["MtpStepWeights", "mtp_step_weights"]

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class MtpStepWeights:
    """The parameters one MTP guess and one target step read, and their ratio ``c``."""

    mtp_module_params: int  # one MTP module (vLLM reuses it for every guess of a step)
    mtp_modules: int
    head_params: int  # the LM head the guess ends in (the target's, unless the module has one)
    target_params: int  # the target's decoder layers, final norm and LM head
    c: float

    def to_dict(self) -> dict[str, Any]:
        """The mapping a launch's ``status.json`` carries (``extra.mtp_step_weights``)."""
        return asdict(self)


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def mtp_step_weights(
    shapes: Mapping[str, tuple[int, ...]], *, num_hidden_layers: int, mtp_modules: int
) -> MtpStepWeights | None:
    """The weights model of an MTP step from a target checkpoint's tensor shapes
    (``shapes``: name → shape, as its safetensors headers give them), its decoder's
    ``num_hidden_layers`` and its ``mtp_modules`` (``num_nextn_predict_layers`` or alike).
    None where the checkpoint holds no MTP tensors or no LM head."""
    if num_hidden_layers < 1 or mtp_modules < 1:
        raise ValueError("`num_hidden_layers` and `mtp_modules` must be positive integers")
    mtp = head = target = 0
    own_head = 0
    for name, shape in shapes.items():
        n = _numel(shape)
        layer = _LAYER.search(name)
        if "mtp" in name or (layer is not None and int(layer.group(1)) >= num_hidden_layers):
            mtp += n
            if "head" in name:
                own_head += n
        elif "lm_head" in name:
            head += n
        elif "embed" in name:
            continue
        else:
            target += n
    if not mtp or not head:
        return None
    module = (mtp - own_head) // mtp_modules
    guess_head = own_head // mtp_modules if own_head else head
    step = module + guess_head
    return MtpStepWeights(
        mtp_module_params=module,
        mtp_modules=mtp_modules,
        head_params=guess_head,
        target_params=target + head,
        c=step / (target + head),
    )
