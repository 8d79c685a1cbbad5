"""Rank a finished greedy run's divergences with its target served on this machine.

For a run whose own machine went away before the run's ranking step (``speclib run`` ranks
after its last block; evidence/gpu-h100-coder lost its device first): the run's target
(``server.model`` of its recorded params, resolved here), served by this machine's vLLM
without speculation, ranks both tokens at every first difference into the folder's
``divergences.jsonl`` by the ranking step itself (:func:`speclib.run.scoring.ensure_ranked`,
given these params and the launch ``ranking-here``, whose command and server log say which
server ranked); ``speclib analyze`` then reads them. Only what differs on this machine is
changed: ``--enforce-eager`` on a CPU (a start in a minute, not a compile). Usage:
``python scripts/rank_here.py RUN_DIR``; exit 1 when a ranking failed.
"""

from __future__ import annotations

import sys

from speclib.core.rundir import RunDir
from speclib.core.scores import read_ranks
from speclib.params.run_record import recorded_params
from speclib.run.placement import gpu_count
from speclib.run.scoring import ensure_ranked


def main(run_dir: str) -> int:
    rd = RunDir.at(run_dir)
    params = recorded_params(rd.params_resolved)
    if gpu_count() == 0:
        server = params.server.model_copy(update={"enforce_eager": True})
        params = params.model_copy(update={"server": server})
    print(ensure_ranked(rd.root, params=params, launch="ranking-here"))
    failed = rd.divergence_error.exists() or any(
        r.error is not None for r in read_ranks(rd.divergences).values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
