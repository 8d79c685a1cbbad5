"""Experiment parameter files: YAML → strict, validated, frozen pydantic models.

A params file says which server to start (or which endpoint to measure), which series to
run (a control without ``--speculative-config`` and one or more speculative experiments),
which workload to send and how to analyse it. Everything is checked here, before any server
starts: unknown keys are refused, and every error names the file, the field and the bad
value. Relative paths inside a params file are resolved against the file's own folder.

This module is the public face of the params file: :func:`load_params`, :class:`ParamsError`
and the top-level :class:`ExperimentParams` live here, and every section model is imported
from here too. The sections are defined in :mod:`speclib.core.params_server` (``server``,
``series``, model references) and :mod:`speclib.core.params_workload` (``workload``,
``protocol``, ``analysis``).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from speclib.core.params_server import (
    DEMO_PREFIX,
    SPEC_METHODS,
    SeriesParams,
    ServerParams,
    StrictModel,
    is_loopback,
    resolve_model_ref,
)
from speclib.core.params_sweep import SweepError, expand_file_series, expand_sweeps
from speclib.core.params_workload import (
    PROMPT_FORMATS,
    TURN_FORMATS,
    AnalysisParams,
    LoadLevel,
    ProtocolParams,
    SloParams,
    WorkloadParams,
)
from speclib.core.vllm_schema import KeyProblem, installed_spec_schema, spec_config_problems

__all__ = [
    "AA_ARM",
    "DEMO_PREFIX",
    "DRAFT_ALONE_SUFFIX",
    "PROMPT_FORMATS",
    "SPEC_METHODS",
    "TURN_FORMATS",
    "AnalysisParams",
    "ExperimentParams",
    "LoadLevel",
    "ParamsError",
    "ProtocolParams",
    "SeriesParams",
    "ServerParams",
    "SloParams",
    "WorkloadParams",
    "is_loopback",
    "load_params",
    "recorded_params",
    "resolve_model_ref",
]

AA_ARM = "aa"  # the name of the A/A arm that protocol.aa adds
DRAFT_ALONE_SUFFIX = ".draft-alone"  # arm serving a series' draft alone (measure_draft_cost)


class ParamsError(ValueError):
    """A params file is invalid; the message names the file, the field and the value."""


class ExperimentParams(StrictModel):
    """A whole experiment file."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="The experiment's name (the default run folder is runs/<name>-<time>).",
    )
    description: str = Field(
        "", description="Free text shown beside the answer at the top of the report."
    )
    output_dir: str | None = Field(None, description="Run folder (default runs/<name>-<time>).")
    server: ServerParams
    series: list[SeriesParams] = Field(
        min_length=1,
        description="The control and the experiments; a series with `sweep` stands for one "
        "series per value (expanded before validation, see speclib.core.params_sweep).",
    )
    workload: WorkloadParams
    analysis: AnalysisParams = Field(default_factory=AnalysisParams)
    protocol: ProtocolParams = Field(default_factory=ProtocolParams)
    source: str | None = Field(None, description="Set by load_params: the file's path.")

    @model_validator(mode="before")
    @classmethod
    def _expand_sweeps(cls, data: Any) -> Any:
        if isinstance(data, dict) and "series" in data:
            return {**data, "series": expand_sweeps(data["series"])}
        return data

    @model_validator(mode="after")
    def _check_series(self) -> ExperimentParams:
        names = [s.name for s in self.series]
        kit_set = [s.name for s in self.series if s.draft_alone_of is not None]
        if kit_set:
            raise ValueError(
                f"series {kit_set}: draft_alone_of is set by the kit "
                "(analysis.measure_draft_cost), not in a params file"
            )
        if self.analysis.measure_draft_cost and (
            self.server.base_url or any(s.base_url for s in self.series)
        ):
            raise ValueError(
                "analysis.measure_draft_cost serves the draft alone, which needs servers the "
                "kit starts (no server.base_url or series base_url)"
            )
        if self.protocol.aa and AA_ARM in names:
            raise ValueError(
                f"series name {AA_ARM!r} is reserved for the A/A arm that protocol.aa adds"
            )
        if len(names) < 2 and not self.protocol.aa:
            raise ValueError(
                "at least two series are needed (a control and an experiment), or one control "
                "with protocol.aa: true to measure this bench's noise floor"
            )
        reps = self.workload.replicates
        if self.protocol.max_replicates is not None and self.protocol.max_replicates < reps:
            raise ValueError(
                f"protocol.max_replicates ({self.protocol.max_replicates}) must be >= "
                f"workload.replicates ({reps})"
            )
        if self.protocol.max_replicates is not None and reps < 2:
            raise ValueError(
                f"workload.replicates ({reps}) must be >= 2 with protocol.max_replicates: it is "
                "the first look of run-until-decided, and one block has no degrees of freedom "
                "for an arm's own variance (a look there could never decide)"
            )
        if self.protocol.target_resolution is not None:
            if not self.protocol.aa or len(names) != 1:
                raise ValueError(
                    "protocol.target_resolution is for a calibration run: protocol.aa: true "
                    f"and the control as the only series (got series {names}, aa: "
                    f"{self.protocol.aa})"
                )
            if reps < 2:
                raise ValueError(
                    f"workload.replicates ({reps}) must be >= 2 with protocol.target_resolution: "
                    "one block has no degrees of freedom, so no resolution"
                )
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

    @model_validator(mode="after")
    def _multi_turn_where_supported(self) -> ExperimentParams:
        if not self.workload.multi_turn:
            return self
        if self.protocol.executor == "ray":
            raise ValueError(
                "workload.multi_turn is not supported with protocol.executor 'ray' yet: the "
                "history must exist before blocks run in parallel (use executor: local)"
            )
        if self.protocol.crosscheck_vllm_bench:
            raise ValueError(
                "workload.multi_turn cannot be cross-checked with vllm bench "
                "(protocol.crosscheck_vllm_bench): its custom dataset carries one user "
                "message per prompt, not a conversation"
            )
        return self

    @property
    def control_name(self) -> str:
        if self.analysis.control:
            return self.analysis.control
        return next(s.name for s in self.series if s.is_control)

    @property
    def arms(self) -> list[SeriesParams]:
        """Every arm that gets a server: the series, the A/A arm when protocol.aa, and a
        draft-alone arm per draft_model series when analysis.measure_draft_cost."""
        control = next(s for s in self.series if s.name == self.control_name)
        arms = list(self.series)
        if self.protocol.aa:
            arms.append(control.model_copy(update={"name": AA_ARM, "gpus": self.aa_gpus}))
        for of, name in self.draft_alone_arms.items():
            update = {"name": name, "draft_alone_of": of, "per_request_metrics": None}
            arms.append(control.model_copy(update=update))
        return arms

    def gpus_of(self, series: SeriesParams) -> list[int] | None:
        """The GPUs a series' server is placed on (None: not placed, vLLM's default)."""
        return series.gpus if series.gpus is not None else self.server.gpus

    @property
    def aa_gpus(self) -> list[int] | None:
        """Where the A/A arm runs: on the first experiment's GPUs when they are not the
        control's (so the A/A ratio measures the hardware difference the verdicts carry),
        else beside the control."""
        control = next(s for s in self.series if s.name == self.control_name)
        for s in self.series:
            if s.name != control.name and self.gpus_of(s) != self.gpus_of(control):
                return self.gpus_of(s)
        return control.gpus

    @property
    def draft_alone_arms(self) -> dict[str, str]:
        """One draft-alone arm per distinct draft model: the first experiment drafting with
        it → the arm's name (a sweep over k shares one arm: c does not depend on k)."""
        out: dict[str, str] = {}
        for exp, arm in self.draft_cost_arms.items():
            if arm not in out.values():
                out[exp] = arm
        return out

    @property
    def draft_cost_arms(self) -> dict[str, str]:
        """Experiment → the arm that serves its draft alone (analysis.measure_draft_cost).

        Experiments drafting with the same model share one arm, named after the first one's
        sweep family (or name). Only ``draft_model`` series get one: an n-gram lookup has no
        model (c = 0), and an EAGLE/MTP head cannot be served on its own.
        """
        if not self.analysis.measure_draft_cost:
            return {}
        out: dict[str, str] = {}
        by_model: dict[str, str] = {}
        for s in self.series:
            spec = s.speculative_config or {}
            model = spec.get("model")
            if spec.get("method") != "draft_model" or not isinstance(model, str):
                continue
            first = by_model.setdefault(model, (s.sweep_family or s.name) + DRAFT_ALONE_SUFFIX)
            out[s.name] = first
        return out

    @property
    def sweep_families(self) -> dict[str, list[str]]:
        """Sweep family (the name written with ``sweep``) → its expanded series, in order."""
        out: dict[str, list[str]] = {}
        for s in self.series:
            if s.sweep_family is not None:
                out.setdefault(s.sweep_family, []).append(s.name)
        return out

    @property
    def experiments(self) -> list[str]:
        """Names of the arms compared against the control (the A/A arm included; the
        draft-alone arms are references, never compared)."""
        return [
            s.name for s in self.arms if s.name != self.control_name and s.draft_alone_of is None
        ]

    @property
    def base_dir(self) -> Path:
        return Path(self.source).resolve().parent if self.source else Path.cwd()

    def series_by_name(self, name: str) -> SeriesParams:
        for s in self.arms:
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
            name, family = seq[index].get("name"), seq[index].get("sweep_family")
            swept = f", from the sweep of {family!r}" if family else ""
            return f"name={name!r}{swept}" if name else None
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


def _prompt_set_problems(params: ExperimentParams) -> list[str]:
    """The prompt set exists (a folder for format hf-disk, which also needs ``datasets``)."""
    prompts = params.resolve_path(params.workload.prompts)
    if params.workload.format != "hf-disk":
        if prompts.is_file():
            return []
        return [f"  - workload.prompts: file not found (value: {str(prompts)!r})"]
    problems = []
    if not prompts.is_dir():
        problems.append(
            "  - workload.prompts: folder not found; format hf-disk reads a folder written by "
            f"save_to_disk (value: {str(prompts)!r})"
        )
    if importlib.util.find_spec("datasets") is None:
        problems.append(
            "  - workload.format: 'hf-disk' needs the datasets package, which is not installed "
            "here: pip install datasets (or pip install 'speclib[datasets]') (value: \"hf-disk\")"
        )
    return problems


def _file_problems(params: ExperimentParams) -> list[str]:
    problems = _prompt_set_problems(params)
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
    return problems


def _kit_method_problems(spec: dict[str, Any], why: str | None) -> list[KeyProblem]:
    method = spec.get("method")
    if method in SPEC_METHODS:
        return []
    reason = f"; {why}, so the kit's own list is used" if why else ""
    return [
        KeyProblem(
            key="method",
            message=f"unknown speculative method (known: {', '.join(SPEC_METHODS)}{reason})",
            value=method,
        )
    ]


def _spec_problems(params: ExperimentParams) -> list[str]:
    """``speculative_config`` keys/values the installed vLLM would refuse at start."""
    specs = [(i, s) for i, s in enumerate(params.series) if s.speculative_config]
    if not specs:
        return []
    lookup = installed_spec_schema()
    problems: list[str] = []
    for i, s in specs:
        spec = s.speculative_config or {}
        if lookup.schema is not None:
            found = spec_config_problems(spec, lookup.schema)
        else:
            found = _kit_method_problems(spec, lookup.note)
        for p in found:
            text = json.dumps(p.value, default=str)
            text = text if len(text) <= 160 else text[:157] + "..."
            problems.append(
                f"  - series[{i}] (name={s.name!r}).speculative_config.{p.key}: "
                f"{p.message} (value: {text})"
            )
    return problems


def load_params(
    path: str | os.PathLike[str], *, check_files: bool = True, check_vllm: bool = True
) -> ExperimentParams:
    """Read and validate a params YAML file; raise :class:`ParamsError` naming what is wrong.

    ``check_files``: the prompt file (folder for ``hf-disk``, which also needs the datasets
    package), local model folders and the API key variable exist.
    ``check_vllm``: every ``speculative_config`` against the installed vLLM's
    ``SpeculativeConfig`` (keys, types, bounds, method names; the kit's own method list when
    vLLM is not installed). The prompt file's content (in its ``workload.format``) and
    prompt lengths are checked by :func:`speclib.core.validation.validate_params`.
    """
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
        data = expand_file_series(data)
    except SweepError as exc:
        raise ParamsError(f"{source}: invalid parameters\n  - {exc}") from None
    try:
        params = ExperimentParams.model_validate(data)
    except ValidationError as exc:
        raise ParamsError(_describe(exc, data, source)) from None
    problems = _spec_problems(params) if check_vllm else []
    problems += _file_problems(params) if check_files else []
    if problems:
        raise ParamsError(f"{source}: invalid parameters\n" + "\n".join(problems))
    return params


def recorded_params(path: str | os.PathLike[str]) -> ExperimentParams:
    """The params a run recorded (``params.resolved.json``), validated again.

    Settings this version of the kit no longer has are dropped, so a run folder written by
    an older kit can be re-analysed (with today's defaults for what changed).
    """
    data = json.loads(Path(path).read_text("utf-8"))
    data["source"] = None
    kept = {k: v for k, v in data.items() if k in ExperimentParams.model_fields}
    for name, info in ExperimentParams.model_fields.items():
        model, section = info.annotation, kept.get(name)
        if isinstance(section, dict) and hasattr(model, "model_fields"):
            kept[name] = {k: v for k, v in section.items() if k in model.model_fields}
    return ExperimentParams.model_validate(kept)
