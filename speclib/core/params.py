"""Experiment parameter files: YAML → strict, validated, frozen pydantic models.

A params file says which server to start (or which endpoint to measure), which series to
run (a control without ``--speculative-config`` and one or more speculative experiments),
which workload to send and how to analyse it. Everything is checked here, before any server
starts: unknown keys are refused, and every error names the file, the field and the bad
value. Relative paths inside a params file are resolved against the file's own folder.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "DEMO_PREFIX",
    "SPEC_METHODS",
    "AnalysisParams",
    "ExperimentParams",
    "LoadLevel",
    "ParamsError",
    "ProtocolParams",
    "SeriesParams",
    "ServerParams",
    "WorkloadParams",
    "is_loopback",
    "load_params",
    "resolve_model_ref",
]

DEMO_PREFIX = "demo:"
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


class ParamsError(ValueError):
    """A params file is invalid; the message names the file, the field and the value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
        candidate = (base_dir / expanded).resolve()
    else:
        candidate = expanded.resolve()
    looks_local = ref.startswith(("/", ".", "~")) or ref.count("/") != 1
    if looks_local or candidate.is_dir():
        return "local", str(candidate)
    return "hub", ref


class ServerParams(_Strict):
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
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    extra_args: list[str] = Field(default_factory=list, description="More vLLM CLI arguments.")
    launcher: list[str] | None = Field(
        None,
        description="Command that replaces `<this python> -m vllm.entrypoints.openai.api_server`"
        " (e.g. another venv's python, or a numactl/taskset wrapper); --model etc. follow.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    start_timeout_s: float = Field(600.0, gt=0, description="Seconds to wait for readiness.")

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


class SeriesParams(_Strict):
    """One arm of the comparison: the control (no speculative_config) or an experiment."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    speculative_config: dict[str, Any] | None = Field(
        None, description="JSON object passed to --speculative-config; null for the control."
    )
    per_request_metrics: bool | None = Field(
        None,
        description="--per-request-spec-decode-metrics summary (default: on for experiments).",
    )
    base_url: str | None = Field(None, description="Measure an external endpoint for this arm.")

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

    @property
    def is_control(self) -> bool:
        return self.speculative_config is None

    @property
    def wants_per_request_metrics(self) -> bool:
        if self.per_request_metrics is None:
            return not self.is_control
        return self.per_request_metrics


def _validate_spec_config(spec: dict[str, Any]) -> None:
    if "tensor_parallel_size" in spec:
        raise ValueError(
            "'tensor_parallel_size' is not valid inside speculative_config: "
            "use 'draft_tensor_parallel_size' for the draft (server.tensor_parallel_size "
            "is the target's)"
        )
    method = spec.get("method")
    if method is None:
        raise ValueError(f"speculative_config needs a 'method' (one of {', '.join(SPEC_METHODS)})")
    if method not in SPEC_METHODS:
        raise ValueError(
            f"unknown speculative method {method!r} (known: {', '.join(SPEC_METHODS)})"
        )
    k = spec.get("num_speculative_tokens")
    if method != "suffix" and k is None:
        raise ValueError(f"method {method!r} needs num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k <= 0):
        raise ValueError(f"num_speculative_tokens must be a positive integer, got {k!r}")
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


class WorkloadParams(_Strict):
    """What is sent: the same prompts, in the same order, to every series."""

    prompts: str = Field(description="JSONL prompt set (id, messages, category).")
    num_prompts: int | None = Field(None, gt=0, description="Use the first N prompts.")
    repeats: int = Field(1, ge=1, description="Times each prompt is sent per series launch.")
    max_tokens: int = Field(64, gt=0)
    min_tokens: int | None = Field(None, ge=0)
    ignore_eos: bool = Field(False, description="Generate max_tokens even past EOS.")
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = Field(None, description="Unset by default (see known CPU bugs).")
    seed: int | None = Field(None, description="Per-request sampling seed.")
    concurrency: int | list[int] = Field(
        1, description="Requests in flight at once; a list runs one load level per value."
    )
    request_rates: list[float] | None = Field(
        None, description="Poisson arrival rates (requests/s), one open-loop load level each."
    )
    arrival_seed: int = Field(0, description="Seed of the Poisson arrival times.")
    replicates: int = Field(1, ge=1, description="Server launches per series.")
    warmup_requests: int = Field(2, ge=0, description="Unmeasured requests before a series.")
    request_timeout_s: float = Field(300.0, gt=0)
    max_error_rate: float = Field(
        0.5, gt=0, le=1, description="Stop a series early when this share of requests fail."
    )

    @field_validator("concurrency")
    @classmethod
    def _positive_levels(cls, value: int | list[int]) -> int | list[int]:
        values = value if isinstance(value, list) else [value]
        if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
            raise ValueError("concurrency must be a positive integer or a list of distinct ones")
        return value

    @field_validator("request_rates")
    @classmethod
    def _positive_rates(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (not value or any(r <= 0 for r in value)):
            raise ValueError("request_rates must be a non-empty list of positive numbers")
        return value

    @property
    def levels(self) -> list[LoadLevel]:
        """Load levels in run order: closed-loop concurrencies, then Poisson rates."""
        concs = self.concurrency if isinstance(self.concurrency, list) else [self.concurrency]
        out = [LoadLevel(concurrency=c) for c in concs]
        out += [LoadLevel(concurrency=max(concs), request_rate=r) for r in self.request_rates or []]
        return out


class LoadLevel(_Strict):
    """One load level: a fixed concurrency (closed loop) or Poisson arrivals at a rate."""

    concurrency: int = Field(ge=1)
    request_rate: float | None = Field(None, gt=0)

    @property
    def label(self) -> str:
        if self.request_rate is None:
            return f"c={self.concurrency}"
        return f"{self.request_rate:g} req/s"


class ProtocolParams(_Strict):
    """How the arms are kept comparable: prefix cache, launch order."""

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
    crosscheck_vllm_bench: bool = Field(
        False,
        description="After each launch's measured requests, while its server is still up, run "
        "`vllm bench serve` on the same prompts and sampling at the first closed-loop level and "
        "show its TTFT/TPOT/acceptance beside the kit's (needs vLLM installed client-side; "
        "its traffic comes after the kit's last /metrics snapshot, so it pollutes nothing).",
    )


class AnalysisParams(_Strict):
    """How the comparison is decided; declared before the run."""

    control: str | None = Field(
        None, description="Control series name (default: the one without speculative_config)."
    )
    confidence: float = Field(0.95, gt=0.5, lt=1)
    margin: float = Field(0.05, gt=0, lt=1, description="Equivalence margin δ on TPOT ratio.")
    n_resamples: int = Field(4000, ge=100)
    seed: int = Field(12345, description="Seed of the bootstrap rng.")
    max_error_rate_increase: float = Field(
        0.02, ge=0, le=1, description="Gate: allowed rise in failed-request share vs control."
    )
    min_greedy_agreement: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Gate (greedy runs): minimum share of prompts whose output equals the "
        "control's; below it the experiment's outputs are treated as suspect.",
    )
    memory_limit_gib: float | None = Field(None, gt=0, description="Gate: peak server RSS.")
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
    plausibility_margin_nats: float = Field(
        0.5,
        gt=0,
        description="Gate (scored runs): a series whose outputs are less likely under the "
        "target than the control's by more than this (nats/token, CI entirely below −δ) "
        "is implausible.",
    )

    @field_validator("score_outputs", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML 1.1 (yaml.safe_load) reads a bare on/off as true/false
        if isinstance(value, bool):
            return "on" if value else "off"
        return value


class ExperimentParams(_Strict):
    """A whole experiment file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    output_dir: str | None = Field(None, description="Run folder (default runs/<name>-<time>).")
    server: ServerParams
    series: list[SeriesParams] = Field(min_length=2)
    workload: WorkloadParams
    analysis: AnalysisParams = Field(default_factory=AnalysisParams)
    protocol: ProtocolParams = Field(default_factory=ProtocolParams)
    source: str | None = Field(None, description="Set by load_params: the file's path.")

    @model_validator(mode="after")
    def _check_series(self) -> ExperimentParams:
        names = [s.name for s in self.series]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate series names: {dupes}")
        controls = [s.name for s in self.series if s.is_control]
        if self.analysis.control is not None:
            if self.analysis.control not in names:
                raise ValueError(f"analysis.control {self.analysis.control!r} is not a series")
            if self.analysis.control not in controls:
                raise ValueError(
                    f"analysis.control {self.analysis.control!r} has a speculative_config"
                )
        elif len(controls) != 1:
            raise ValueError(
                f"exactly one series without speculative_config is needed as control "
                f"(found {controls or 'none'}); or name one in analysis.control"
            )
        return self

    @model_validator(mode="after")
    def _reset_only_on_loopback(self) -> ExperimentParams:
        if self.protocol.cache_policy == "reset" and not is_loopback(self.server.host):
            raise ValueError(
                "protocol.cache_policy 'reset' needs vLLM's dev-mode endpoints, allowed only on "
                f"a loopback server (server.host is {self.server.host!r}); use 'salt' instead"
            )
        return self

    @property
    def control_name(self) -> str:
        if self.analysis.control:
            return self.analysis.control
        return next(s.name for s in self.series if s.is_control)

    @property
    def base_dir(self) -> Path:
        return Path(self.source).resolve().parent if self.source else Path.cwd()

    def series_by_name(self, name: str) -> SeriesParams:
        for s in self.series:
            if s.name == name:
                return s
        raise KeyError(f"no series named {name!r} (have {[s.name for s in self.series]})")

    def resolve_path(self, value: str) -> Path:
        """Resolve a path written in this params file (relative to the file's folder)."""
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.base_dir / path).resolve()


def _format_loc(loc: tuple[Any, ...], data: Any) -> str:
    parts: list[str] = []
    names: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            label = _series_label(data, names, item)
            if label:
                parts[-1] = f"[{item}] ({label})"
        else:
            parts.append(("." if parts else "") + str(item))
        names.append(str(item))
    return "".join(parts)


def _series_label(data: Any, names: list[str], index: int) -> str | None:
    if names == ["series"] and isinstance(data, dict):
        seq = data.get("series")
        if isinstance(seq, list) and index < len(seq) and isinstance(seq[index], dict):
            name = seq[index].get("name")
            return f"name={name!r}" if name else None
    return None


def _lookup(data: Any, loc: tuple[Any, ...]) -> Any:
    cur = data
    for item in loc:
        try:
            cur = cur[item]
        except (KeyError, IndexError, TypeError):
            return None
    return cur


def _describe(exc: ValidationError, data: Any, source: str) -> str:
    lines = [f"{source}: invalid parameters ({exc.error_count()} problem(s))"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = _format_loc(loc, data) or "(top level)"
        value = err.get("input") if err["type"] != "missing" else None
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not allowed here; check the spelling)"
        if err["type"] == "missing":
            lines.append(f"  - {field}: required field is missing")
        else:
            shown = value if value is not None else _lookup(data, loc)
            text = json.dumps(shown, default=str) if shown is not None else "null"
            if len(text) > 160:
                text = text[:157] + "..."
            lines.append(f"  - {field}: {msg} (value: {text})")
    return "\n".join(lines)


def _check_files(params: ExperimentParams, source: str) -> None:
    problems: list[str] = []
    prompts = params.resolve_path(params.workload.prompts)
    if not prompts.is_file():
        problems.append(f"  - workload.prompts: file not found (value: {str(prompts)!r})")
    kind, where = resolve_model_ref(params.server.model, params.base_dir)
    if kind == "local" and not Path(where).is_dir():
        problems.append(f"  - server.model: local model folder not found (value: {where!r})")
    for i, s in enumerate(params.series):
        spec = s.speculative_config or {}
        if "model" in spec and isinstance(spec["model"], str):
            kind, where = resolve_model_ref(spec["model"], params.base_dir)
            if kind == "local" and not Path(where).is_dir():
                problems.append(
                    f"  - series[{i}] (name={s.name!r}).speculative_config.model: "
                    f"local model folder not found (value: {where!r})"
                )
    if params.server.api_key_env and not os.environ.get(params.server.api_key_env):
        problems.append(
            f"  - server.api_key_env: environment variable {params.server.api_key_env!r} "
            "is not set (the key is read from the environment, never from the file)"
        )
    if problems:
        raise ParamsError(f"{source}: invalid parameters\n" + "\n".join(problems))


def load_params(path: str | os.PathLike[str], *, check_files: bool = True) -> ExperimentParams:
    """Read and validate a params YAML file; raise :class:`ParamsError` naming what is wrong."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ParamsError(f"{source}: cannot read params file: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParamsError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: top level must be a mapping, got {type(data).__name__}")
    if "source" in data:
        raise ParamsError(f"{source}: 'source' is set by the kit, remove it from the file")
    data = {**data, "source": str(Path(path).resolve())}
    try:
        params = ExperimentParams.model_validate(data)
    except ValidationError as exc:
        raise ParamsError(_describe(exc, data, source)) from None
    if check_files:
        _check_files(params, source)
    return params
