"""Bench health and workload checks: which instrument the verdict's TPOT comes from, the
bench-trust panel, background load of idle servers, drift, the workload checks (cut
outputs, near duplicates, arrival rate, prompt and category counts), and the comparison
with ``vllm bench serve``. Sits above :mod:`speclib.analysis.verdict` (the A/A bench check,
the category sizes); independent of :mod:`speclib.analysis.load`."""
