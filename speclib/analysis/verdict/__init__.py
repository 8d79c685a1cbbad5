"""The verdict: the decision rule and the gates, the block-level TPOT decisions with Holm
over the family, the A/A arm as a bench check, per-category ratios, absolute latencies, and
one :class:`~speclib.analysis.verdict.comparisons.Comparison` per arm and load level.
Imports :mod:`speclib.analysis.speculation`, :mod:`speclib.analysis.stats`,
:mod:`speclib.analysis.frames` and :mod:`speclib.core`."""
