"""Layer 4 — the side effects of one pipeline step: setup and manifest, a measured launch,
request preparation, the ``vllm bench`` runner, output scoring. Imports the layers below."""
