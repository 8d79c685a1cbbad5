"""Experiment parameter files: YAML → strict, validated, frozen pydantic models.

A params file says which server to start (or which endpoint to measure), which series to
run (a control without ``--speculative-config`` and one or more speculative experiments),
which workload to send and how to analyse it. Everything is checked here, before any server
starts: unknown keys are refused, and every error names the file, the field and the bad
value. Relative paths inside a params file are resolved against the file's own folder.

This module reads one (:func:`load_params`; a run folder's record of it:
:mod:`speclib.params.run_record`) and says what is wrong
with it (:class:`ParamsError`: pydantic's errors turned into lines naming the field and the
value, then the checks against the file system and the installed vLLM). The models are
defined in :mod:`speclib.params.experiment` (the top-level :class:`ExperimentParams`
and its cross-section rules), :mod:`speclib.params.server` (``server``, ``series``,
model references), :mod:`speclib.params.workload` (``workload``) and
:mod:`speclib.params.protocol` (``protocol``, ``analysis``), and imported from there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from speclib.core.fspaths import resolved
from speclib.core.rundir import place_problem
from speclib.params.experiment import ExperimentParams
from speclib.params.server import (
    SECRET_NAME,
    SPEC_METHODS,
    resolve_model_ref,
)
from speclib.params.spec_method_fields import ignored_field_problems
from speclib.params.strict_yaml import DuplicateKeyError, load_yaml
from speclib.params.sweep import SweepError, expand_file_series
from speclib.vllm_facts.spec_schema import KeyProblem, installed_spec_schema, spec_config_problems

__all__ = ["ParamsError", "load_params"]


class ParamsError(ValueError):
    """A params file is invalid; the message names the file, the field and the value."""


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


def _redacted(value: Any) -> Any:
    """``value`` with every secret-named key's value hidden (an error never echoes one)."""
    if isinstance(value, dict):
        return {
            k: "<redacted>" if isinstance(k, str) and SECRET_NAME.search(k) else _redacted(v)
            for k, v in value.items()
        }
    return value


def _field_info(loc: tuple[Any, ...]) -> FieldInfo | None:
    """The params field at ``loc`` (list indices skipped), or None."""
    model: Any = ExperimentParams
    info = None
    for item in loc:
        if isinstance(item, int):
            continue
        fields = getattr(model, "model_fields", None)
        if not isinstance(fields, dict) or item not in fields:
            return None
        info = fields[item]
        model = next(
            (t for t in (info.annotation, *_args(info.annotation)) if hasattr(t, "model_fields")),
            None,
        )
    return info


def _args(annotation: Any) -> list[Any]:
    """Every type inside ``annotation`` (``list[X] | None`` → list[X], X, None)."""
    out = []
    for arg in typing.get_args(annotation):
        out += [arg, *_args(arg)]
    return out


def _bound_reason(loc: tuple[Any, ...]) -> str | None:
    """``1000: <why>``: the bound and its reason as a field's description states them
    (:mod:`speclib.params.limits`); None for a field without one."""
    info = _field_info(loc)
    text = (info.description or "") if info is not None else ""
    _, found, why = text.partition(" At most ")
    return why.rstrip(".") if found else None


def _describe(exc: ValidationError, data: Any, source: str) -> str:
    lines = [f"{source}: invalid parameters ({exc.error_count()} problem(s))"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = _format_loc(loc, data) or "(top level)"
        value = err.get("input") if err["type"] != "missing" else None
        msg = err["msg"].removeprefix("Value error, ")
        bound = (
            _bound_reason(loc) if err["type"] in ("less_than_equal", "string_too_long") else None
        )
        if bound:
            msg = f"too {'long' if err['type'] == 'string_too_long' else 'large'}: at most {bound}"
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not allowed here; check the spelling)"
        if err["type"] == "missing":
            lines.append(f"  - {field}: required field is missing")
        else:
            shown = _redacted(value if value is not None else _lookup(data, loc))
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


def _length_problems(params: ExperimentParams) -> list[str]:
    """``num_speculative_tokens`` that cannot fit beside a request within ``max_model_len``:
    vLLM reserves k + 1 lookahead slots past a sequence (and caps a step's drafts at the
    room left), so a request of at least one prompt token and ``max_tokens`` output tokens
    leaves room for at most ``max_model_len - max_tokens - 2`` drafts."""
    problems = []
    out = params.workload.max_tokens
    for i, s in enumerate(params.series):
        spec = s.speculative_config or {}
        k = spec.get("num_speculative_tokens")
        if not isinstance(k, int) or isinstance(k, bool):
            continue
        for where, limit in (
            ("server.max_model_len", params.server.max_model_len),
            (f"series[{i}].speculative_config.max_model_len", spec.get("max_model_len")),
        ):
            room = limit - out - 2 if isinstance(limit, int) else None
            if room is not None and room >= 1 and k > room:  # room < 1: the prompts' check
                problems.append(
                    f"  - series[{i}] (name={s.name!r}).speculative_config."
                    f"num_speculative_tokens: {k} drafts cannot fit in {where} = {limit} "
                    f"beside a request of workload.max_tokens = {out} (at most "
                    f"{room}: vLLM reserves k + 1 slots past the sequence); "
                    f"lower k or raise max_model_len (value: {k})"
                )
    return problems


def _output_dir_problems(params: ExperimentParams) -> list[str]:
    """``output_dir`` can become the run folder: a folder (or none yet), writable."""
    if not params.output_dir:
        return []
    path = params.resolve_path(params.output_dir)
    shown = f"(value: {str(path)!r})"
    if why := place_problem(path):
        return [f"  - output_dir: {why} {shown}"]
    if path.exists() and not path.is_dir():
        return [f"  - output_dir: an existing file, not a folder; name a new folder {shown}"]
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return [f"  - output_dir: {existing} is a file, not a folder {shown}"]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [f"  - output_dir: {existing} is not writable by this user {shown}"]
    return []


def _file_problems(params: ExperimentParams) -> list[str]:
    problems = _prompt_set_problems(params) + _output_dir_problems(params)
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
            named = {p.key for p in found}
            found += [
                p
                for p in ignored_field_problems(
                    spec, fields=lookup.schema.fields, methods=lookup.schema.methods
                )
                if p.key not in named
            ]
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
    prompt lengths are checked by :func:`speclib.params.validation.validate_params`.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ParamsError(
            f"{source}: not UTF-8 text (byte {exc.start} is 0x{exc.object[exc.start]:02x}): "
            "save the params file as UTF-8"
        ) from None
    except OSError as exc:
        raise ParamsError(f"{source}: cannot read params file: {exc.strerror}") from None
    try:
        data = load_yaml(text)
    except DuplicateKeyError as exc:
        raise ParamsError(f"{source}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: top level must be a mapping, got {type(data).__name__}")
    if "source" in data:
        raise ParamsError(f"{source}: 'source' is set by the kit, remove it from the file")
    data = {**data, "source": str(resolved(path))}
    try:
        data = expand_file_series(data)
    except SweepError as exc:
        raise ParamsError(f"{source}: invalid parameters\n  - {exc}") from None
    try:
        params = ExperimentParams.model_validate(data)
    except ValidationError as exc:
        raise ParamsError(_describe(exc, data, source)) from None
    problems = _spec_problems(params) if check_vllm else []
    problems += _length_problems(params)
    problems += _file_problems(params) if check_files else []
    if problems:
        raise ParamsError(f"{source}: invalid parameters\n" + "\n".join(problems))
    return params
