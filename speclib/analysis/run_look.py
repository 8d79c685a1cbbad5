"""The look of a run until decided, after each block: whether a verdict is still open.

:func:`look_at_run` analyses the run folder as it stands
(:func:`speclib.analysis.run_analysis.analyze_run`, nothing written) and reads what the
first screen would show: every arm's word at every load and every segment its answer
names, at this look's level of the run's α spending. The run is decided when none is
still inconclusive (:func:`speclib.analysis.verdict.still_open.open_verdicts`): "mixed",
"untrustworthy" (so an A/A arm that shows an effect ends the run), "failed" and a launch in
the wrong mode are final; a gate's "reject" over an open TPOT interval is not, since the
gates are weighed once, after the stop, without α spent on looks. A calibration run
(``protocol.target_resolution``) is decided by its A/A resolution alone, its width,
never where it lies. The look reads the same analysis the report is made from, so the run
stops on what the report will say.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from speclib.analysis.health.integrity import require_whole
from speclib.analysis.run_analysis import analyze_run
from speclib.core.rundir import RunDir
from speclib.core.stopping import OpenVerdict, look_line

__all__ = ["Look", "look_at_run"]


@dataclass(frozen=True)
class Look:
    """One look: ``decided`` (stop adding blocks), after ``blocks`` blocks at family
    confidence ``confidence`` (None without α spending: a fixed design or a calibration),
    the verdicts still ``open``, and for a calibration run its result (``calibration``:
    :func:`speclib.analysis.verdict.resolution.calibration` as a mapping, else None)."""

    decided: bool
    blocks: int
    confidence: float | None
    open: tuple[OpenVerdict, ...] = ()
    calibration: dict | None = None

    @property
    def line(self) -> str:
        """The look in words, for the run's log."""
        text = (self.calibration or {}).get("text")
        return look_line(self.blocks, self.confidence, self.open, decided=self.decided,
                         calibration=text)  # fmt: skip


def look_at_run(rd: RunDir) -> Look:
    """The look after the blocks so far (the params the folder records)."""
    require_whole(rd.root, allow_incomplete=False)
    with warnings.catch_warnings():  # the analysis's data warnings belong to the report
        warnings.simplefilter("ignore")
        an = analyze_run(rd.root, write=False)
    blocks = an.stopping.blocks if an.stopping is not None else 0
    found = an.calibration
    if found is not None:  # the width alone decides
        return Look(bool(found.get("reached")), blocks, None, calibration=found)
    still = an.stopping.open if an.stopping is not None else ()
    return Look(not still, blocks, an.look_confidence, still)
