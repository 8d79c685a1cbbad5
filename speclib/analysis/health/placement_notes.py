"""Where the arms ran, as the report says it: the GPUs of each, and when they differ.

The manifest's ``placement`` (written before any server started,
:mod:`speclib.run.placement`) gives each arm's GPUs and memory share. Arms on different
GPUs differ by hardware as well as by configuration: :func:`placement_warnings` says so,
and whether the A/A arm (placed on the experiment's GPUs) measures that difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["placement_line", "placement_warnings"]


def _gpus(entry: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    gpus = (entry or {}).get("gpus")
    return tuple(gpus) if gpus is not None else None


def placement_line(placement: Mapping[str, Mapping[str, Any]]) -> str | None:
    """``control GPU 0 (0.22), draft-k4 GPU 0 (0.22)``; None where nothing was placed."""
    parts = []
    for arm, entry in placement.items():
        gpus = _gpus(entry)
        if gpus is None:
            continue
        share = entry.get("gpu_memory_utilization")
        word = "GPUs" if len(gpus) > 1 else "GPU"
        parts.append(
            f"{arm} {word} {','.join(map(str, gpus))}" + (f" ({share:g})" if share else "")
        )
    return ", ".join(parts) or None


def placement_warnings(
    placement: Mapping[str, Mapping[str, Any]], *, control: str, aa: str | None
) -> list[str]:
    """A warning for each experiment that ran on other GPUs than the control."""
    mine = _gpus(placement.get(control))
    out = []
    for arm, entry in placement.items():
        theirs = _gpus(entry)
        if arm in (control, aa) or theirs is None or theirs == mine:
            continue
        if aa is not None and _gpus(placement.get(aa)) == theirs:
            tail = f"the A/A arm ran on {list(theirs)} too, so its ratio carries that difference"
        else:
            tail = "no A/A arm ran there, so it is not measured: set protocol.aa: true"
        out.append(
            f"{arm} ran on GPU(s) {list(theirs)}, the control on {list(mine or ())}: the "
            f"arms differ by hardware as well as by configuration; {tail}"
        )
    return out
