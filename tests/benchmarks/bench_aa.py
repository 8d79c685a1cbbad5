"""A/A benchmark: does the kit's verdict survive when there is no effect at all?

Runs the CPU demo target against a second copy of itself (``params/cpu-demo-aa.yaml``:
control plus ``protocol.aa``) through ``speclib run``, many times in a row on this machine:

* **new design** (the default): interleaved arms, ≥ 2 replicate blocks, the block-level
  interval on each arm's own block-to-block variance (the file as it is: a calibration of
  3 to 6 blocks that stops once the A/A resolution is ±10 %, ``protocol.target_resolution``);
* **old design**: one sequential launch per arm, decided as the kit used to decide, by a
  prompt-level paired bootstrap over that single launch (computed here from the run's own
  ``requests.jsonl`` with :func:`speclib.analysis.stats.paired.paired_ratio_ci`); the kit's own
  verdict for such a run is also recorded (it must now refuse to decide).

The true ratio is exactly 1, so every ADOPT or WORSE is a false verdict, and an interval that
excludes 1 missed. Criteria (issue "verdicts that survive an A/A test"): new design ≤ 1 run
with a verdict other than equivalent/inconclusive, and intervals covering 1 in ≥ 90 % of
runs. Prints both tables (markdown, dated) and writes every run's numbers to
``OUT/bench_aa.json``. It is a benchmark, not a test: pytest does not collect it.

    .venv/bin/python -m tests.benchmarks.bench_aa --runs 20 --old-runs 10 --out runs/bench-aa
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from speclib.analysis.frames import load_records, pair_frame
from speclib.analysis.stats.paired import paired_ratio_ci
from speclib.params.experiment import AA_ARM

REPO = Path(__file__).resolve().parents[2]
PARAMS = REPO / "params" / "cpu-demo-aa.yaml"


def _params_file(out: Path, design: str, extra: dict[str, Any]) -> Path:
    data = yaml.safe_load(PARAMS.read_text())
    data["workload"]["prompts"] = str(REPO / "prompts" / "demo-mixed.jsonl")
    if design == "old":
        data["protocol"]["design"] = "sequential"
        data["workload"]["replicates"] = 1
        # one launch per arm: no calibration target, no blocks added
        data["protocol"].pop("max_replicates", None)
        data["protocol"].pop("target_resolution", None)
    for key, value in extra.items():
        section, field = key.split(".", 1)
        data[section][field] = value
    path = out / f"params-{design}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _word(low: float, high: float, margin: float) -> str:
    if high < 1 - margin:
        return "adopt"
    if low > 1:
        return "worse"
    if low > 1 - margin and high < 1 + margin:
        return "equivalent"
    return "inconclusive"


def _naive(run: Path, confidence: float, margin: float) -> dict[str, Any]:
    """The old rule: one prompt-level paired bootstrap over all pairs, launches ignored."""
    df = load_records(run)
    pairs = pair_frame(df, control="control", experiment=AA_ARM).pairs
    c, e = pairs["tpot_s_c"].to_numpy(float), pairs["tpot_s_e"].to_numpy(float)
    pairs = pairs[np.isfinite(c) & np.isfinite(e) & (c > 0) & (e > 0)]  # as the kit pairs
    ci = paired_ratio_ci(
        pairs["tpot_s_c"].to_numpy(),
        pairs["tpot_s_e"].to_numpy(),
        confidence_level=confidence,
        n_resamples=4000,
        rng=np.random.default_rng(12345),
    )
    return {
        "ratio": ci.estimate,
        "ci": [ci.ci_low, ci.ci_high],
        "verdict": _word(ci.ci_low, ci.ci_high, margin),
    }


def _one_run(params: Path, out: Path, design: str, index: int) -> dict[str, Any]:
    run = out / f"{design}-{index:02d}"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "run", str(params), "--out", str(run), "--quiet"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    row: dict[str, Any] = {"run": run.name, "design": design, "wall_s": time.monotonic() - t0}
    if proc.returncode != 0 or not (run / "summary.json").exists():
        row["error"] = proc.stderr[-2000:]
        return row
    return _read_row(run, row)


def _reanalyze(out: Path, row: dict[str, Any]) -> dict[str, Any]:
    """Decide a finished run again from its records with the current code (no server)."""
    run = out / row["run"]
    if not (run / "requests.jsonl").exists():
        return row
    proc = subprocess.run(
        [sys.executable, "-m", "speclib", "analyze", str(run), "--quiet"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    fresh = {k: v for k, v in row.items() if k in ("run", "design", "wall_s")}
    if proc.returncode not in (0, 1) or not (run / "summary.json").exists():
        return {**fresh, "error": proc.stderr[-2000:]}
    return _read_row(run, fresh)


def _read_row(run: Path, row: dict[str, Any]) -> dict[str, Any]:
    summary = json.loads((run / "summary.json").read_text())
    aa = next((c for c in summary["comparisons"] if c["experiment"] == AA_ARM), None)
    if aa is None or aa.get("tpot_ratio") is None:
        return {**row, "error": "no A/A comparison (an interrupted run)"}
    conf, margin = summary["analysis"]["confidence_level"], summary["analysis"]["margin"]
    row.update(
        kit_ratio=aa["tpot_ratio"],
        kit_ci=aa["tpot_ratio_ci"],
        kit_verdict=aa["tpot_decision"],
        kit_final=aa["decision"],
        ci_method=aa["ci_method"],
        kit_reasons=aa.get("reasons"),
        naive=_naive(run, conf, margin),
    )
    return row


def _covers(ci: list[float | None] | None) -> bool | None:
    if not ci or ci[0] is None or ci[1] is None:
        return None
    return ci[0] <= 1 <= ci[1]


def _table(rows: list[dict[str, Any]], key: str) -> str:
    ok = [r for r in rows if "error" not in r]
    lines = [
        "| run | ratio | CI | verdict |",
        "| --- | ---: | --- | --- |",
    ]
    false, covered, finite = 0, 0, 0
    for r in ok:
        if key == "kit":
            ratio, ci, word = r["kit_ratio"], r["kit_ci"], r["kit_verdict"]
        else:
            ratio, ci, word = r["naive"]["ratio"], r["naive"]["ci"], r["naive"]["verdict"]
        false += word in ("adopt", "worse")
        cov = _covers(ci)
        covered += bool(cov)
        finite += cov is not None
        ci_text = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if cov is not None else "—"
        ratio_text = f"{ratio:.3f}" if ratio is not None else "—"
        lines.append(f"| {r['run']} | {ratio_text} | {ci_text} | {word} |")
    n = len(ok)
    lines.append("")
    lines.append(
        f"{n} runs ({len(rows) - n} failed): {false} false verdicts (adopt/worse); "
        f"intervals covering 1: {covered}/{finite or n}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="A/A runs with the new design")
    ap.add_argument("--old-runs", type=int, default=10, help="A/A runs with the old design")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench-aa")
    ap.add_argument(
        "--set", action="append", default=[], help="override a params field: workload.x=1"
    )
    ap.add_argument(
        "--reanalyze",
        action="store_true",
        help="decide every finished run again from its records with the current code",
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    extra = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    results_path = args.out / "bench_aa.json"
    rows: list[dict[str, Any]] = []
    if results_path.exists():
        rows = json.loads(results_path.read_text())["rows"]
    plan = [("new", i) for i in range(args.runs)] + [("old", i) for i in range(args.old_runs)]
    plan.sort(key=lambda x: (x[1], x[0]))  # alternate designs so drift hits both
    if args.reanalyze:
        rows = [_reanalyze(args.out, r) for r in rows]
        results_path.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}))
    done = {(r["design"], r["run"]) for r in rows}
    for design, i in plan:
        if (design, f"{design}-{i:02d}") in done:
            continue
        params = _params_file(args.out, design, extra)
        row = _one_run(params, args.out, design, i)
        rows.append(row)
        results_path.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}))
        print(json.dumps(row, default=str)[:400], flush=True)
    new = [r for r in rows if r["design"] == "new"]
    old = [r for r in rows if r["design"] == "old"]
    print(f"\n## A/A on this machine, {time.strftime('%Y-%m-%d')}\n")
    print("### New design (interleaved, ≥ 2 blocks, pooled block-level CI)\n")
    print(_table(new, "kit"))
    print("\n### Old design (one sequential launch per arm, prompt-level bootstrap)\n")
    print(_table(old, "naive"))
    print("\n### The kit's own verdicts on the old design (one launch per arm)\n")
    print(_table(old, "kit"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
