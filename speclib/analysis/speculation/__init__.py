"""Speculative-decoding metrics: acceptance per request and from each launch's ``/metrics``
counters, greedy output agreement, plausibility of sampled outputs, tokens per streamed
chunk, the speed-up model and its measured decomposition, KV-cache capacity. Imports only
:mod:`speclib.analysis.stats` and :mod:`speclib.core`."""
