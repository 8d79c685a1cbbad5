"""Layer 2 — the measuring instrument: the streaming timing client that turns prepared
requests into raw per-request records. Imports only :mod:`speclib.core`."""
