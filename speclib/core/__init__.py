"""Layer 0 — the kit's vocabulary: prompts and prompt formats, request records, the
run-folder contract, Prometheus text parsing, scores, ratio wording, the auth header. No
process spawning, no network. Imports nothing above it."""
