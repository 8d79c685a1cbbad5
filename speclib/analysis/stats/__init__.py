"""Paired statistics: ratio intervals (bootstrap and launch-clustered), block-level
t-intervals, alpha spending for sequential looks, change-point tests. Pure numerics on
arrays; knows nothing of run folders, arms or verdicts (imports only :mod:`speclib.core`)."""
