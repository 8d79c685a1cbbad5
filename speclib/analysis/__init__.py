"""Layer 2 — pure functions of a run folder: pairing, statistics, decisions and gates,
acceptance and agreement, sampling plausibility, cross-check comparison. Never starts or
calls a server. Imports only :mod:`speclib.core`."""
