"""Speculation against load: the per-level table, break-even loads, goodput under an SLO,
k schedules over batch sizes, and which value of a sweep to use. Sits above
:mod:`speclib.analysis.verdict` (it reads the comparisons); independent of
:mod:`speclib.analysis.health`."""
