"""Rank a finished greedy run's divergences with its target served on this machine.

For a run whose own machine went away before the run's ranking step (``speclib run`` ranks
after its last block; evidence/gpu-h100-coder lost its device first): the run's target
(``server.model`` of its recorded params, resolved here), served by this machine's vLLM
without speculation, ranks both tokens at every first difference into the folder's
``divergences.jsonl``, exactly as the ranking step would (:func:`speclib.run.scoring.
rank_divergences`); ``speclib analyze`` then reads them. The launch is recorded as
``launches/ranking-here`` (command, server log), so the folder says which server ranked.
Only what differs on this machine is changed: ``--enforce-eager`` on a CPU (a start in a
minute, not a compile). Usage: ``python scripts/rank_here.py RUN_DIR``.
"""

from __future__ import annotations

import sys

from speclib.core.rundir import RunDir
from speclib.core.scores import read_ranks, write_ranks
from speclib.params.run_record import recorded_params
from speclib.run.launching import api_key, server_for
from speclib.run.placement import gpu_count
from speclib.run.scoring import find_divergences, rank_divergences
from speclib.serve.httpapi import served_model


def main(run_dir: str) -> int:
    rd = RunDir.at(run_dir)
    params = recorded_params(rd.params_resolved)
    if params.workload.temperature != 0:
        print("a sampled run: nothing to rank")
        return 0
    if gpu_count() == 0:
        server = params.server.model_copy(update={"enforce_eager": True})
        params = params.model_copy(update={"server": server})
    items = find_divergences(params, rd.root)
    known = read_ranks(rd.divergences)
    todo = [d for d in items if (d.series, d.level, d.prompt_id) not in known]
    print(f"{len(items)} divergence(s), {len(todo)} to rank")
    if not todo:
        return 0
    key = api_key(params)
    control = params.series_by_name(params.control_name)
    with server_for(params, control, rd, "ranking-here") as (base_url, _, spec):
        model = spec.served_model if spec is not None else served_model(base_url, api_key=key)
        got = rank_divergences(base_url, todo, model=model, api_key=key, timeout_s=600)
    known.update({r.key: r for r in got})
    write_ranks(rd.divergences, known.values())
    failed = sum(r.error is not None for r in got)
    print(f"{len(got)} ranked ({failed} failed) into {rd.divergences}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
