"""Layer 3 — server processes: launch ``vllm serve`` in its own process group, wait for
readiness, sample its memory, stop the whole group on every exit path. Imports only
:mod:`speclib.core`."""
