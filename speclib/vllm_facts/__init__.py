"""Layer 1 — facts of the installed vLLM, read in a child process and cached per vLLM
install: its ``SpeculativeConfig`` schema (:mod:`~speclib.vllm_facts.spec_schema`), its
``vllm serve`` flags (:mod:`~speclib.vllm_facts.cli_flags`) and what its source says about
speculative checkpoints (:mod:`~speclib.vllm_facts.spec_source`); the child itself:
:mod:`~speclib.vllm_facts.child`. Imports no other speclib package."""
