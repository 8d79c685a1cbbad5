"""What the installed vLLM accepts in ``--speculative-config``, read from vLLM's own class.

vLLM turns the ``--speculative-config`` JSON into ``SpeculativeConfig(**json)``, a pydantic
dataclass that forbids unknown keys; but it does so only after the server has spent ~20 s
starting. This module reads that class's fields, their declared types and bounds (as JSON
Schema) and the ``method`` ``Literal`` from the installed vLLM, so a params file can be
checked against exactly the version that will run, before anything starts.

Importing ``vllm.config`` takes ~5 s and ~450 MiB (it pulls in torch), so it happens in a
child process (``python -m speclib.vllm_facts.spec_schema OUT``); the result is cached on disk
(under ``$SPECLIB_CACHE``, default ``~/.cache/speclib``, keyed by the interpreter and the
installed ``vllm/config/speculative.py``) and per process. When vLLM is not installed (a
client-only install) or cannot be introspected, :func:`installed_spec_schema` says why and
the caller falls back to the kit's hand-kept checks. Import-light: this module never
imports the vllm package in the calling process. A k schedule
(``num_speculative_tokens_per_batch_size``) is checked by vLLM's own validator, loaded from
its pure-Python file ``vllm/v1/spec_decode/dynamic/utils.py`` by path
(:func:`vllm_dynamic_sd_module`, :func:`schedule_problem`).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import subprocess
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastjsonschema

from speclib.vllm_facts.child import cache_file, cache_lock, read_cache, run_child, write_cache

__all__ = [
    "SCHEDULE_KEY",
    "SCHEMA_FORMAT",
    "KeyProblem",
    "SchemaLookup",
    "SpecSchema",
    "close_matches",
    "installed_spec_schema",
    "introspect",
    "schedule_problem",
    "spec_config_problems",
    "vllm_dynamic_sd_module",
    "vllm_location",
]

SCHEMA_FORMAT = 1  # bump when the cached JSON's layout changes
_CLASS_PATHS = ("vllm.config.speculative", "vllm.config")
_INTROSPECT_TIMEOUT_S = 180.0
_STAMP_FILES = ("config/speculative.py", "config/__init__.py", "__init__.py")


@dataclass(frozen=True)
class SpecSchema:
    """The fields of the installed vLLM's ``SpeculativeConfig``."""

    vllm_version: str
    class_path: str  # e.g. vllm.config.speculative.SpeculativeConfig
    fields: Mapping[str, Mapping[str, Any] | None]  # name -> JSON Schema (None: not expressible)
    internal: frozenset[str]  # fields vLLM fills in itself (SkipValidation), not from the JSON
    methods: tuple[str, ...]  # the values of the ``method`` Literal

    @property
    def label(self) -> str:
        return f"vLLM {self.vllm_version}'s SpeculativeConfig"


@dataclass(frozen=True)
class SchemaLookup:
    """The installed schema, or ``None`` with a note saying why the fallback is used."""

    schema: SpecSchema | None
    note: str | None = None


@dataclass(frozen=True)
class KeyProblem:
    """One key of a ``speculative_config`` that the installed vLLM would refuse."""

    key: str
    message: str
    value: Any


def close_matches(word: str, choices: typing.Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` entries of ``choices`` that look like ``word`` (difflib, cutoff 0.6),
    one that differs only in case first (``EAGLE3`` → ``eagle3``)."""
    choices = list(choices)
    same = [c for c in choices if c.lower() == word.lower()]
    near = difflib.get_close_matches(word.lower(), choices, n=n, cutoff=0.6)
    return list(dict.fromkeys(same + near))[:n]


# --- the child process: imports vLLM -----------------------------------------------------
def _literal_strings(annotation: Any) -> list[str]:
    out: list[str] = []
    for arg in typing.get_args(annotation):
        if isinstance(arg, str):
            out.append(arg)
        elif arg is not None:
            out.extend(_literal_strings(arg))
    return list(dict.fromkeys(out))


def _field_schema(info: Any) -> dict[str, Any] | None:
    from pydantic import TypeAdapter

    annotation = info.annotation
    if info.metadata:
        annotation = typing.Annotated[(annotation, *info.metadata)]
    try:
        return TypeAdapter(annotation).json_schema()
    except Exception:  # a type with no JSON form (an engine object): keys only
        return None


def _find_class() -> tuple[str, Any]:
    import importlib

    for module_name in _CLASS_PATHS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cls = getattr(module, "SpeculativeConfig", None)
        if cls is not None:
            return f"{module_name}.SpeculativeConfig", cls
    raise ImportError(f"no SpeculativeConfig in {' or '.join(_CLASS_PATHS)}")


def introspect() -> dict[str, Any]:
    """Read the installed vLLM's ``SpeculativeConfig`` (imports vLLM: run it in a child)."""
    import vllm

    class_path, cls = _find_class()
    infos = cls.__pydantic_fields__
    fields = {name: _field_schema(info) for name, info in infos.items()}
    internal = [
        name
        for name, info in infos.items()
        if any(type(m).__name__ == "SkipValidation" for m in info.metadata)
    ]
    methods = _literal_strings(infos["method"].annotation) if "method" in infos else []
    return {
        "format": SCHEMA_FORMAT,
        "vllm_version": str(getattr(vllm, "__version__", "unknown")),
        "class_path": class_path,
        "fields": fields,
        "internal": internal,
        "methods": methods,
    }


def _child_main(argv: list[str]) -> int:
    Path(argv[0]).write_text(json.dumps(introspect()), encoding="utf-8")
    return 0


# --- the calling process: no vLLM import -------------------------------------------------
def vllm_location() -> Path | None:
    """The installed vllm package's folder, found without importing it (None: absent)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):  # ValueError: sys.modules["vllm"] is None
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _from_json(data: dict[str, Any]) -> SpecSchema:
    return SpecSchema(
        vllm_version=str(data["vllm_version"]),
        class_path=str(data["class_path"]),
        fields=dict(data["fields"]),
        internal=frozenset(data["internal"]),
        methods=tuple(data["methods"]),
    )


@functools.lru_cache(maxsize=1)
def installed_spec_schema() -> SchemaLookup:
    """The installed vLLM's ``SpeculativeConfig`` schema (cached on disk and per process).

    Returns a lookup with ``schema=None`` and a ``note`` when vLLM is not installed or its
    class cannot be read; the caller then uses the kit's hand-kept checks.
    """
    where = vllm_location()
    if where is None:
        return SchemaLookup(None, "vLLM is not installed here (client-only install)")
    cache = cache_file("vllm-schema", where, fmt=SCHEMA_FORMAT, files=_STAMP_FILES)
    with cache_lock(cache):
        data = read_cache(cache, fmt=SCHEMA_FORMAT)
        if data is None:
            try:
                data = run_child("speclib.vllm_facts.spec_schema", timeout_s=_INTROSPECT_TIMEOUT_S)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                return SchemaLookup(None, f"could not read vLLM's SpeculativeConfig ({exc})")
            write_cache(cache, data)
    try:
        return SchemaLookup(_from_json(data))
    except (KeyError, TypeError) as exc:
        return SchemaLookup(None, f"unexpected SpeculativeConfig schema ({exc!r})")


def _describe_schema(schema: Mapping[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_describe_schema(s) for s in schema["anyOf"])
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        shown = ", ".join(json.dumps(v) for v in values[:8])
        return f"one of {shown}{', ...' if len(values) > 8 else ''}"
    text = str(schema.get("type", "object" if "$ref" in schema else "a value"))
    bounds = [
        (">", schema.get("exclusiveMinimum")),
        (">=", schema.get("minimum")),
        ("<", schema.get("exclusiveMaximum")),
        ("<=", schema.get("maximum")),
    ]
    text += "".join(f" {op} {v}" for op, v in bounds if v is not None)
    if text == "array" and isinstance(schema.get("items"), Mapping):
        text += f" of {_describe_schema(schema['items'])}"
    return text


def _value_problem(key: str, value: Any, field: Mapping[str, Any], label: str) -> str | None:
    try:
        _validator(json.dumps(field, sort_keys=True))(value)
    except fastjsonschema.JsonSchemaValueException:
        return f"{label} expects {_describe_schema(field)}"
    except fastjsonschema.JsonSchemaDefinitionException:
        return None
    return None


@functools.lru_cache(maxsize=256)
def _validator(field_json: str) -> Callable[[Any], Any]:
    """A compiled validator of one field's JSON Schema, with ``format`` left as an annotation.

    fastjsonschema (a dependency of nbformat), not jsonschema: importing jsonschema costs
    ~2.7 s (its ``iri`` format checker builds ~35 Lark parsers at import), and every kernel
    of a run validates its params once. Formats are dropped as jsonschema's default
    ``validate`` ignores them; pydantic's 2020-12 ``prefixItems`` is not checked (the one
    field using it, the k schedule, goes through vLLM's own validator).
    """
    return fastjsonschema.compile(_without_formats(json.loads(field_json)))


def _without_formats(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: _without_formats(v)
            for k, v in schema.items()
            if not (k == "format" and isinstance(v, str))  # a property named format stays
        }
    if isinstance(schema, list):
        return [_without_formats(v) for v in schema]
    return schema


def _method_problem(method: Any, schema: SpecSchema) -> str | None:
    if not isinstance(method, str) or method in schema.methods:
        return None
    near = close_matches(method, schema.methods)
    hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
    return (
        f"unknown speculative method for {schema.label}: {hint}(known: {', '.join(schema.methods)})"
    )


def spec_config_problems(spec: Mapping[str, Any], schema: SpecSchema) -> list[KeyProblem]:
    """Keys and values of ``spec`` that the installed ``SpeculativeConfig`` would refuse.

    Unknown keys come with close matches; fields vLLM fills in itself are refused; values
    are checked against the field's declared type and bounds; ``method`` against the
    ``Literal``. Per-method rules vLLM enforces only at start stay with the caller.
    """
    problems: list[KeyProblem] = []
    for key, value in spec.items():
        if key == "method":
            message = _method_problem(value, schema)
        elif key not in schema.fields:
            near = close_matches(key, schema.fields)
            hint = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
            message = f"unknown key for {schema.label} (vLLM would refuse to start){hint}"
        elif key in schema.internal:
            message = f"{schema.label} fills {key!r} in itself; it cannot be set here"
        else:
            field = schema.fields[key]
            message = _value_problem(key, value, field, schema.label) if field else None
        if message:
            problems.append(KeyProblem(key=key, message=message, value=value))
    if SCHEDULE_KEY in spec and not any(p.key == SCHEDULE_KEY for p in problems):
        message = schedule_problem(spec)
        if message:
            problems.append(KeyProblem(key=SCHEDULE_KEY, message=message, value=spec[SCHEDULE_KEY]))
    return problems


SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


@functools.lru_cache(maxsize=1)
def vllm_dynamic_sd_module() -> Any:
    """vLLM's own ``vllm/v1/spec_decode/dynamic/utils.py`` (the k schedule's validator and
    lookup builder) loaded by path, once per process: a pure-Python file, so neither the
    vllm package nor torch is imported. None where the installed vLLM has no such file."""
    where = vllm_location()
    path = where / "v1" / "spec_decode" / "dynamic" / "utils.py" if where else None
    if path is None or not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_speclib_vllm_dynamic_sd", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schedule_problem(spec: Mapping[str, Any]) -> str | None:
    """What vLLM's own validator says of ``spec``'s k schedule (None: accepted), and a
    schedule k above ``num_speculative_tokens``, which vLLM clamps without a word."""
    module = vllm_dynamic_sd_module()
    if module is None:
        return "the installed vLLM has no dynamic-k schedule (vllm/v1/spec_decode/dynamic)"
    try:
        rows = module.validate_and_normalize_dynamic_sd_schedule(spec[SCHEDULE_KEY])
    except (ValueError, TypeError) as exc:
        return f"vLLM's validate_and_normalize_dynamic_sd_schedule refuses it: {exc}"
    k = spec.get("num_speculative_tokens")
    top = max(int(r[2]) for r in rows)
    if isinstance(k, int) and top > k:
        return (
            f"a k of {top} in the schedule is above num_speculative_tokens = {k}: vLLM clamps "
            f"every k to num_speculative_tokens, so set it to {top}"
        )
    return None


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
