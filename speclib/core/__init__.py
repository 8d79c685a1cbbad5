"""Layer 0 — the kit's vocabulary: params, prompts, request records, the run-folder contract,
Prometheus text parsing and the one place for control-plane HTTP. Imports nothing above it."""
