"""speclib: does vLLM speculative decoding pay off on your hardware, model pair and workload?

The library behind the notebooks: params validation (:mod:`speclib.params`), server
lifecycle (:mod:`speclib.server`), the streaming client (:mod:`speclib.client`), raw records
(:mod:`speclib.records`), ``/metrics`` (:mod:`speclib.metrics`), statistics
(:mod:`speclib.stats`), analysis (:mod:`speclib.analysis`), figures (:mod:`speclib.plots`)
and the batch runner (:mod:`speclib.runner`). Import-light: importing ``speclib`` does not
import vLLM or torch.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load_records"]


def load_records(run_dir):
    """All request records of a run folder as a pandas DataFrame (see speclib.frames)."""
    from speclib.frames import load_records as _load

    return _load(run_dir)
