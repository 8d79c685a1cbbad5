"""Where the wall time of a run went, from the run folder's own timestamps.

Prints the phase breakdown of a finished run: setup (run start → first server launch),
per replicate block the parallel server start (first launch → last server ready), warm-up
and snapshots (ready → first measured request), measured requests (first send → last end
of stream), the rest of the block (cross-check, stop), and analysis + report (last launch
end → ``report.html`` written). The share of server starts + measured requests is the
issue's efficiency figure. A benchmark helper, not a test:

    .venv/bin/python -m tests.benchmarks.bench_demo runs/cpu-demo
    bash scripts/demo.sh && .venv/bin/python -m tests.benchmarks.bench_demo runs/cpu-demo
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def _records(run: Path) -> list[dict]:
    rows = []
    for line in (run / "requests.jsonl").read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def _end(rec: dict) -> float:
    return rec["t_start"] + (rec.get("e2e_s") or 0.0)


def breakdown(run: Path) -> list[tuple[str, float]]:
    """``(phase, seconds)`` in run order."""
    statuses = [json.loads(p.read_text()) for p in (run / "launches").glob("*/status.json")]
    start = (run / "params.yaml").stat().st_mtime
    end = (run / "report.html").stat().st_mtime
    by_block: dict[str, list[dict]] = defaultdict(list)
    for s in statuses:
        by_block[s.get("block") or s["launch_id"]].append(s)
    measured = [r for r in _records(run) if r["phase"] == "measure" and r.get("t_start")]
    phases = [("setup", min(s["started_at"] for s in statuses) - start)]
    for block, group in sorted(
        by_block.items(), key=lambda kv: min(s["started_at"] for s in kv[1])
    ):
        b0 = min(s["started_at"] for s in group)
        ready = max(s["started_at"] + (s.get("server_ready_s") or 0) for s in group)
        b1 = max(s["ended_at"] for s in group)
        recs = [r for r in measured if r.get("block") == block]
        first = min((r["t_start"] for r in recs), default=ready)
        last = max((_end(r) for r in recs), default=first)
        phases += [
            (f"{block}: start {len(group)} server(s)", ready - b0),
            (f"{block}: warm-up, snapshots", first - ready),
            (f"{block}: measured requests", last - first),
            (f"{block}: cross-check, stop", b1 - last),
        ]
    last_end = max(s["ended_at"] for s in statuses)
    phases.append(("analysis + report", end - last_end))
    phases.append(("between blocks (notebook, reaping)", (end - start) - sum(p[1] for p in phases)))
    return phases


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    run = Path(args[0] if args else "runs/cpu-demo")
    phases = breakdown(run)
    total = sum(s for _, s in phases)
    print("| phase | seconds | share |\n| --- | ---: | ---: |")
    for name, secs in phases:
        print(f"| {name} | {secs:.0f} | {secs / total:.0%} |")
    useful = sum(s for n, s in phases if "start" in n or "measured" in n)
    share = f"starts + requests: {useful / total:.0%}"
    print(f"| **total** | **{total:.0f}** ({total / 60:.1f} min) | {share} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
