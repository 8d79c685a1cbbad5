"""Layer 2 — the experiment's params: the params file's sections as strict frozen models
(:mod:`~speclib.params.server`, :mod:`~speclib.params.workload`,
:mod:`~speclib.params.protocol`, :mod:`~speclib.params.sweep`, the whole file in
:mod:`~speclib.params.experiment`), reading one (:mod:`~speclib.params.loader`), a
re-decision under another file (:mod:`~speclib.params.override`) and every check before a
server starts (:mod:`~speclib.params.validation`, a speculative checkpoint against its
target in :mod:`~speclib.params.spec_compat`). Imports :mod:`speclib.vllm_facts` and
:mod:`speclib.core`; callers import each name from the module that defines it."""
