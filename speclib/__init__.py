"""speclib: does vLLM speculative decoding pay off on your hardware, model pair and workload?

The library behind the notebooks, in layers (each imports only the layers below it; the
contracts are in ``pyproject.toml`` and checked by import-linter):

- :mod:`speclib.core` — params, prompts, records, the run-folder contract, Prometheus text;
- :mod:`speclib.demo` — the embedded tiny model pair and its prompt sets;
- :mod:`speclib.serve` — server processes; :mod:`speclib.measure` — the timing client;
  :mod:`speclib.analysis` — pure functions of a run folder (statistics, decisions);
- :mod:`speclib.run` — one pipeline step's side effects (setup, a launch, scoring);
- :mod:`speclib.report` — figures, HTML sections, export;
- :mod:`speclib.app` — the batch runner and the CLI.

Import-light: importing ``speclib`` does not import vLLM or torch.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load_records"]


def load_records(run_dir):
    """All request records of a run folder as a pandas DataFrame (see speclib.analysis.frames)."""
    from speclib.analysis.frames import load_records as _load

    return _load(run_dir)
