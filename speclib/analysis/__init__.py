"""Layer 3 — pure functions of a run folder: pairing, statistics, decisions and gates,
acceptance and agreement, sampling plausibility, cross-check comparison. Never starts or
calls a server. Imports :mod:`speclib.params`, :mod:`speclib.vllm_facts` and
:mod:`speclib.core`.

Its subpackages form layers (the import-linter contract in ``pyproject.toml``), each
importing only those below it:

* :mod:`speclib.analysis.run_analysis` — the orchestration: a run folder → ``summary.json``;
* :mod:`speclib.analysis.load` (speculation against load: break-even, goodput, k schedules,
  sweep recommendations) beside :mod:`speclib.analysis.health` (bench trust, instruments,
  drift, idle load, workload checks, the ``vllm bench`` cross-check);
* :mod:`speclib.analysis.verdict` — the verdict: decision rule and gates, block-level TPOT
  decisions, the A/A bench check, per-category ratios, one comparison per arm and level;
* :mod:`speclib.analysis.speculation` — speculative-decoding metrics: acceptance, output
  agreement, sampling plausibility, stream chunks, the speed-up model, KV capacity, each
  launch's counters;
* :mod:`speclib.analysis.stats` — paired statistics: ratio intervals, block intervals,
  sequential looks, change points;
* :mod:`speclib.analysis.frames` — records as DataFrames, and the pairing step.
"""
