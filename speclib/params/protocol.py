"""The ``protocol`` and ``analysis`` sections of a params file: how the arms are run and judged.

:class:`ProtocolParams` is how the arms are kept comparable (prefix cache, launch order,
interleaved or sequential design, the A/A arm, run-until-decided) and where the blocks run;
:class:`AnalysisParams` is how the comparison is decided, declared before the run
(confidence, equivalence margin, gates), with an optional :class:`SloParams`
(``analysis.slo``). :class:`LoadLevel` is one load level a run measures at (built from the
workload by :attr:`speclib.params.workload.WorkloadParams.levels`). Every field is
described, since the descriptions are the params file's documentation.

Import these names from :mod:`speclib.params.loader`, the public face of the params file.
"""

from __future__ import annotations

import importlib.util
import itertools
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from speclib.params.limits import BLOCKS, CONCURRENCY, RESAMPLES, bounded, describe_limit
from speclib.params.server import StrictModel

__all__ = [
    "AnalysisParams",
    "LoadLevel",
    "ProtocolParams",
    "SloParams",
]


class LoadLevel(StrictModel):
    """One load level: a fixed concurrency (closed loop) or Poisson arrivals at a rate."""

    concurrency: int = Field(ge=1)
    request_rate: float | None = Field(None, gt=0)

    @property
    def label(self) -> str:
        if self.request_rate is None:
            return f"c={self.concurrency}"
        return f"{self.request_rate:g} req/s"


class ProtocolParams(StrictModel):
    """How the arms are kept comparable (prefix cache, launch order, design), and where the
    blocks run (``executor``: this host, or a Ray cluster)."""

    cache_policy: Literal["off", "salt", "reset", "restart"] = Field(
        "off",
        description="off: --no-enable-prefix-caching; salt: caching on, a fresh cache_salt per "
        "series, replicate and load level; reset: caching on, POST /reset_prefix_cache before "
        "each measured level (dev-mode endpoint, loopback only); restart: caching on, a new "
        "server per series (the kit always restarts between series).",
    )
    cache_salt: str | None = Field(
        None,
        min_length=1,
        description="A fixed salt for every request (for demonstrating a leaky setup only).",
    )
    order: Literal["abba", "fixed", "random"] = Field(
        "abba",
        description="Launch order of the series within replicate blocks: abba reverses every "
        "other block, random shuffles each block with protocol.seed, fixed keeps file order.",
    )
    seed: int = Field(0, description="Seed of the random order.")
    design: Literal["auto", "interleaved", "sequential"] = Field(
        "auto",
        description="interleaved: in each replicate block the servers of all arms start "
        "together and stay up, and requests alternate between arms in short slots "
        "(protocol.slot_requests, in a fresh random arm order per slot), so drift in time hits "
        "every arm alike; "
        "sequential: one server at a time, in protocol.order; auto: interleaved when all "
        "arms fit in memory together, else sequential.",
    )
    aa: bool = Field(
        False,
        description="Add an arm named 'aa': the control's exact configuration as its own "
        "server(s), analysed like an experiment. Its ratio is this bench's noise floor; if "
        "it shows an effect, every verdict becomes 'untrustworthy bench'.",
    )
    max_replicates: int | Literal["auto"] | None = Field(
        "auto",
        description="Run until decided, the block cap: after the planned blocks "
        "(workload.replicates) the runner adds a block while a verdict the first screen shows "
        "(an arm's word at a load, or a segment its answer names) is inconclusive, the time "
        "budget (protocol.budget_min) affords one more block and fewer than this many ran. "
        "Each look spends its share of alpha by O'Brien-Fleming-type spending with this cap "
        "as the maximum information, so the error rate holds whenever the run stops; a cap the "
        "budget cannot reach spends little alpha at the looks it does reach, so set it to "
        "the blocks your budget affords (the run says how many once its first block is "
        "timed). auto: workload.replicates + 2; null, or workload.replicates: the planned "
        "blocks only, decided once at analysis.confidence. One planned block "
        "(workload.replicates: 1) runs alone. " + describe_limit(BLOCKS),
    )
    budget_min: float = Field(
        30.0,
        gt=0,
        le=10_000,
        description="Run until decided, the time budget in minutes from the start of "
        "`speclib run` to the end of its last block (the analysis and report follow, about a "
        "minute): a block is added only when it would likely end within it (a block is "
        "assumed to take as long as the longest block after the first, which on a GPU "
        "compiles). The planned blocks always run. 30: a safety net that the cap, not the "
        "budget, usually meets first, since a run that stops before its cap leaves alpha "
        "unspent: the CPU demo's 5 blocks take 8-10 min on 2 cores, the 4-server CPU demos' "
        "and SmolLM2's planned blocks 15-18 min plus 4-5 min per block added, the GPU demo's "
        "cold first block and three warm ones about 17 min on one H100. Set it to the time "
        "you have (the GPU demo: 15).",
    )
    target_resolution: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Calibration run (protocol.aa: true, the control as the only series): "
        "the A/A resolution to reach, as a fraction (0.10 = ±10 %: the half-width of the A/A "
        "ratio interval at analysis.confidence). The runner adds blocks until the resolution "
        "is reached, the cap (protocol.max_replicates) or the budget (protocol.budget_min) "
        "(the looks judge the width only, so they spend no alpha); the summary says the "
        "resolution reached and, if short, how many blocks it would need.",
    )

    @field_validator("max_replicates")
    @classmethod
    def _cap_positive(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"max_replicates must be 'auto', null or at least 1 (got {value})")
        if isinstance(value, int) and value > BLOCKS.value:  # the bound, said as a bound's
            raise PydanticCustomError("less_than_equal", "at most {le}", {"le": BLOCKS.value})
        return value

    slot_requests: int | None = bounded(
        None,
        CONCURRENCY,
        ge=1,
        description="Interleaved design: requests per arm per alternating slot (default: "
        "6 at concurrency 1 with a switch pause, 1 without; else 2 x concurrency and at "
        "least 4). Larger slots mean fewer switches (fewer pauses); smaller ones cancel "
        "faster drift.",
    )
    switch_pause_s: float = Field(
        1.2,
        ge=0,
        le=30,
        description="Interleaved design: quiet time after one arm's requests before another "
        "arm is served. A vLLM worker busy-polls its input queue for 1 s after each read "
        "(SpinCondition busy_loop_s in vllm/distributed/device_communicators/shm_broadcast.py); "
        "on few cores that steals CPU from the next arm: measured on the 2-core CPU demo, a "
        "request right after another arm's was slow (about 2x) 58 % of the time, after its "
        "own arm's 0-20 %, and more often for the faster speculative arms, which biases the "
        "ratio. 0 disables the pause.",
    )
    compile_cache: Literal["auto", "shared", "private"] = Field(
        "auto",
        description="vLLM's cache folder (VLLM_CACHE_ROOT: torch.compile artefacts, keyed by "
        "vLLM on the model and compilation config). shared: one folder under "
        "$SPECLIB_CACHE for every launch, so a configuration compiles once per machine; "
        "private: a fresh folder per launch (every start compiles). auto: shared on a GPU, "
        "private on a CPU (the CPU demo runs eager).",
    )
    server_nice: int = Field(
        19,
        ge=0,
        le=19,
        description="CPU niceness of every server the kit starts (inherited by all its "
        "processes and threads), so the kit's client gets the CPU first when it has a "
        "stream to read. A vLLM CPU server under load keeps both cores of a 2-core host "
        "busy; measured there (2026-12-01, control + A/A, 48 streams per run, 2 runs each) "
        "the client read 16 % of streams late at niceness 0 and 6 % at 19 (late reads are "
        "detected per request and warned about in the report). 0 keeps the servers at the "
        "kit's priority.",
    )
    memory_per_server_gib: float | None = Field(
        None,
        gt=0,
        description="Memory one server needs, for the check that all arms of a block fit "
        "together (default: 3.2 GiB per server on CPU, measured for the demo pair; on GPU "
        "the servers' gpu_memory_utilization shares are checked instead).",
    )
    crosscheck_vllm_bench: bool = Field(
        False,
        description="After the measured requests of each launch of the first replicate "
        "block, while its server is still up, run "
        "`vllm bench serve` on the same prompts and sampling at the first closed-loop level and "
        "show its TTFT/TPOT/acceptance beside the kit's (needs vLLM installed client-side; "
        "its traffic comes after the kit's last /metrics snapshot, so it pollutes nothing).",
    )
    executor: Literal["local", "ray"] = Field(
        "local",
        description="local: the replicate blocks run one after the other on this host; ray: "
        "each block is a Ray task with a placement group of the CPUs (and GPUs) its servers "
        "need, and blocks run in parallel across the Ray cluster; records and launch files "
        "come back into the one run folder, each record saying on which host it ran "
        "(needs pip install 'speclib[ray]').",
    )
    ray_address: str | None = Field(
        None,
        min_length=1,
        description="executor ray: the cluster to run on: unset starts a local Ray instance "
        "for the run (ray.init()); 'auto' joins the cluster this host belongs to (ray start); "
        "'ray://host:10001' reaches a remote head through Ray Client; 'host:6379' a GCS.",
    )
    ray_cpus_per_server: float = Field(
        1.0,
        gt=0,
        description="executor ray: CPUs each block reserves per kit-started server of the block "
        "(a block of 3 arms reserves 3 x this; at least this for a block of external "
        "endpoints). On CPU hosts set it to the cores one vLLM server should have.",
    )
    ray_gpus_per_block: float | None = Field(
        None,
        ge=0,
        description="executor ray: GPUs each block reserves; its servers share them, each "
        "with its server.gpu_memory_utilization share, exactly as on one host (unset: "
        "server.tensor_parallel_size when the cluster has GPUs, else 0).",
    )

    @field_validator("executor")
    @classmethod
    def _ray_importable(cls, value: str) -> str:
        if value == "ray" and importlib.util.find_spec("ray") is None:
            raise ValueError(
                "executor 'ray' needs the ray package, which is not installed here: "
                "pip install 'speclib[ray]' (or set protocol.executor: local)"
            )
        return value


class SloParams(StrictModel):
    """A service-level objective: the bounds a request must meet to count towards goodput
    (requests per second meeting every bound set). Any subset of the bounds."""

    ttft_ms: float | None = Field(None, gt=0, description="Bound on time to first token.")
    tpot_ms: float | None = Field(
        None, gt=0, description="Bound on time per output token (first token excluded)."
    )
    e2e_ms: float | None = Field(None, gt=0, description="Bound on end-to-end latency.")
    percentile: float = Field(
        90,
        gt=0,
        lt=100,
        description="Which percentile of each arm's requests the report shows against the "
        "bounds (goodput itself counts every request that meets them).",
    )

    @model_validator(mode="after")
    def _some_bound(self) -> SloParams:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("slo needs at least one of ttft_ms, tpot_ms, e2e_ms")
        return self

    def bounds_ms(self) -> dict[str, float]:
        """The bounds set, by metric name (``ttft``, ``tpot``, ``e2e``), in ms."""
        found = {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "e2e": self.e2e_ms}
        return {k: v for k, v in found.items() if v is not None}


class AnalysisParams(StrictModel):
    """How the comparison is decided; declared before the run."""

    control: str | None = Field(
        None, description="Control series name (default: the one without speculative_config)."
    )
    confidence: float = Field(
        0.95,
        gt=0.5,
        lt=1,
        description="Confidence of the intervals: the TPOT verdicts hold it family-wise (Holm "
        "over every experiment and load level); the gates, the A/A arm and goodput use it as is.",
    )
    margin: float = Field(0.05, gt=0, lt=1, description="Equivalence margin δ on TPOT ratio.")
    n_resamples: int = bounded(
        4000,
        RESAMPLES,
        ge=100,
        description="Bootstrap resamples: of the prompt-level TPOT interval (kept in "
        "summary.json as information) and of the sampled runs' log-prob interval.",
    )
    seed: int = Field(12345, ge=0, description="Seed of the bootstrap rng.")
    max_error_rate_increase: float = Field(
        0.02, ge=0, le=1, description="Gate: allowed rise in failed-request share vs control."
    )
    min_greedy_agreement: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Gate (greedy runs): minimum share of prompts whose output equals the "
        "control's. vLLM documents speculative decoding as lossless up to hardware "
        "numerics: a floating-point near-tie can flip one greedy token (then the rest of "
        "the output differs), more often in bf16 on GPU and when batches differ between "
        "arms; it cannot change most outputs. So most prompts must match exactly (the CPU "
        "demo, fp32: 24 of 24), and every divergent prompt is shown with its first "
        "differing token.",
    )
    near_tie_nats: float = Field(
        0.25,
        ge=0,
        description="Gate (greedy runs): where an arm's answer first differs from the "
        "control's, the target served without speculation ranks both tokens "
        "(divergences.jsonl); if their log-probabilities are within this many nats the "
        "answers parted on a floating-point near tie and the divergence is not held against "
        "the arm (min_greedy_agreement counts it as agreeing); beyond it, a real "
        "disagreement. The default is just above the most that bf16 numerics moved the gap "
        "between the two likeliest tokens of Qwen2.5-Coder-1.5B against float32 (0.21 nats "
        "over 763 positions, p99 0.17: tests/benchmarks/bench_bf16_noise.py).",
    )
    memory_limit_gib: float | None = Field(None, gt=0, description="Gate: peak server RSS.")
    measure_draft_cost: bool = Field(
        False,
        description="Serve each draft_model series' draft alone as one more arm (same "
        "prompts, interleaved with the others): its TPOT over the control's is the draft "
        "cost c, measured independently of the speculative run, from which the standard "
        "model (Leviathan et al. 2023) predicts the speed-up and the best k. n-gram needs "
        "no launch (c = 0 by definition); EAGLE/MTP heads cannot be served alone.",
    )
    max_contention_gap: float = Field(
        0.025,
        ge=0,
        le=1,
        description="Gate (interleaved design): idle servers load the machine while another "
        "arm is served; the share of a served server's CPU demand the machine could not meet "
        "(serving + background above the core count) may differ between arms by at most "
        "this (default δ/2 of the default δ: a bias that could move a verdict by half the "
        "margin); beyond it every verdict is 'untrustworthy'.",
    )
    ttft_margin: float = Field(
        0.5,
        ge=0,
        description="Gate: TTFT may rise by this share (CI lower bound) before it counts as "
        "clearly worse (speculation adds the draft's prefill).",
    )
    ttft_max_increase_ms: float = Field(
        50.0, ge=0, description="Gate: ...and only when the median TTFT rises by more than this."
    )
    score_outputs: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Score every output by its log-prob under the target served without "
        "speculation (one extra server launch after the series); auto = on when "
        "workload.temperature > 0.",
    )
    slo: SloParams | None = Field(
        None,
        description="Service-level objective (ttft_ms, tpot_ms, e2e_ms, percentile): per arm "
        "and load level, the share of requests meeting it and the goodput (requests/s "
        "meeting it), each with a block-level interval, and a goodput verdict beside the "
        "TPOT one.",
    )
    plausibility_margin_nats: float = Field(
        0.5,
        gt=0,
        description="Gate (scored runs): a series whose outputs are less likely under the "
        "target than the control's by more than this (nats/token, CI entirely below −δ) "
        "is implausible.",
    )

    segment_edges: dict[Literal["prompt_length", "output_length"], list[float]] | None = Field(
        None,
        description="The token counts that cut the traffic into length segments, per cut "
        "(prompt_length, output_length; e.g. {prompt_length: [128, 1024]}); default: the "
        "tertiles of the control's prompts.",
    )

    @field_validator("segment_edges")
    @classmethod
    def _edges_rise(cls, value: dict[str, list[float]] | None) -> dict[str, list[float]] | None:
        for cut, edges in (value or {}).items():
            if not edges or any(b <= a for a, b in itertools.pairwise(edges)) or edges[0] <= 0:
                raise ValueError(f"analysis.segment_edges.{cut} must be a non-empty rising "
                                 f"list of positive token counts (got {edges!r})")  # fmt: skip
        return value

    @field_validator("score_outputs", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML 1.1 (yaml.safe_load) reads a bare on/off as true/false
        if isinstance(value, bool):
            return "on" if value else "off"
        return value
