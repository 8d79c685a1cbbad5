"""Layer 6 — the entry points: the batch runner (papermill) and the command-line interface."""
