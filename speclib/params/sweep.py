"""Sweeps in a params file: one series written with ``sweep`` becomes one series per value.

A series may carry ``sweep: {num_speculative_tokens: [1, 2, 4, 6]}`` (any key of its
``speculative_config`` except ``method``; several keys give their cartesian product, in
the order written). :func:`expand_sweeps` turns the raw ``series`` list of a params file
into hand-written-like series, before pydantic sees them, so each expanded series is
validated exactly like one written by hand (its name, its ``speculative_config`` by the
kit's rules and against the installed vLLM) and every error names the expanded series.

**Naming rule** (:func:`sweep_name`): ``<base>-<part>[-<part>…]``, one part per swept key
in the order written; the part is ``k<value>`` for ``num_speculative_tokens`` and
``<key><value>`` for any other key (``draft-k2``, ``ngram-prompt_lookup_max3``,
``draft-k2-prompt_lookup_max3``). In a value, characters other than letters, digits, ``_``
and ``.`` become ``_``; ``true``/``false`` for booleans.

An expanded series remembers its family (the base name, ``sweep_family``) and its value
(``sweep_value``, ``{key: value}``); both are set here, and a params file that writes them
is refused by :func:`speclib.params.loader.load_params`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KIT_SERIES_KEYS",
    "SweepError",
    "expand_file_series",
    "expand_sweeps",
    "sweep_name",
    "sweep_sort_key",
]

KIT_SERIES_KEYS = ("sweep_family", "sweep_value")
"""Series keys the kit sets when it expands a sweep (never written in a params file)."""

_LABELS = {"num_speculative_tokens": "k"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")


class SweepError(ValueError):
    """A series' ``sweep`` is malformed; the message names the series, the key and value."""


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return _UNSAFE.sub("_", str(value))


def sweep_name(base: str, value: Mapping[str, Any]) -> str:
    """The name of the expanded series of family ``base`` at ``value`` (see module doc)."""
    parts = [f"{_LABELS.get(k, k)}{_value_text(v)}" for k, v in value.items()]
    return "-".join([base, *parts])


def sweep_sort_key(value: Mapping[str, Any]) -> tuple[Any, ...]:
    """Order of sweep values ("smallest k" first): numbers by size, then text, per key."""
    return tuple(
        (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool)
        else (1, 0.0, json.dumps(v))
        for v in value.values()
    )  # fmt: skip


def _where(i: int, raw: Mapping[str, Any]) -> str:
    name = raw.get("name")
    return f"series[{i}]" + (f" (name={name!r})" if name else "")


def _check(i: int, raw: Mapping[str, Any]) -> dict[str, list[Any]]:
    where = _where(i, raw)
    sweep = raw.get("sweep")
    if not isinstance(sweep, Mapping) or not sweep:
        raise SweepError(
            f"{where}.sweep: must map speculative_config keys to lists of values, e.g. "
            f"{{num_speculative_tokens: [1, 2, 4]}} (value: {json.dumps(sweep, default=str)})"
        )
    spec = raw.get("speculative_config")
    if not isinstance(spec, Mapping):
        raise SweepError(
            f"{where}.sweep: the control (no speculative_config) cannot be swept; put the "
            "sweep on a speculative series"
        )
    if raw.get("base_url"):
        raise SweepError(f"{where}.sweep: an external endpoint (base_url) cannot be swept")
    for key in KIT_SERIES_KEYS:
        if key in raw:
            raise SweepError(f"{where}.{key}: set by the kit from the sweep, not in a params file")
    for key, values in sweep.items():
        at = f"{where}.sweep.{key}"
        if key == "method":
            raise SweepError(f"{at}: sweep one method per series (write one series per method)")
        if key in spec:
            raise SweepError(
                f"{at}: {key} is also set in speculative_config; set it in one place only"
            )
        ok = isinstance(values, list) and values
        ok = ok and all(isinstance(v, (int, float, str, bool)) for v in values)
        if not ok:
            raise SweepError(
                f"{at}: must be a non-empty list of numbers or strings "
                f"(value: {json.dumps(values, default=str)})"
            )
        if len({json.dumps(v) for v in values}) != len(values):
            raise SweepError(f"{at}: values repeat (value: {json.dumps(values)})")
    return {str(k): list(v) for k, v in sweep.items()}


def _expand_one(i: int, raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    sweep = _check(i, raw)
    base = {k: v for k, v in raw.items() if k != "sweep"}
    out = []
    for combo in itertools.product(*sweep.values()):
        value = dict(zip(sweep, combo, strict=True))
        spec = {**raw["speculative_config"], **value}
        name = sweep_name(str(raw.get("name", "")), value)
        out.append(
            {**base, "name": name, "speculative_config": spec, "sweep_family": raw.get("name"),
             "sweep_value": value}
        )  # fmt: skip
    return out


def expand_sweeps(series: Any) -> Any:
    """The raw ``series`` list with every swept series replaced by its expansion.

    Anything that is not a list of mappings is returned unchanged (pydantic then says what
    is wrong with it); series without ``sweep`` are kept as written. Raises
    :class:`SweepError` naming ``series[i] (name=…).sweep.<key>`` for a malformed sweep, a
    sweep on the control or on an external endpoint, or a key set both ways.
    """
    if not isinstance(series, list):
        return series
    out: list[Any] = []
    for i, raw in enumerate(series):
        if isinstance(raw, Mapping) and "sweep" in raw:
            out += _expand_one(i, raw)
        else:
            out.append(raw)
    return out


def expand_file_series(data: dict[str, Any]) -> dict[str, Any]:
    """A params file's ``data`` with its sweeps expanded (so errors name the expanded
    series); refuses the keys the kit sets on expanded series (:data:`KIT_SERIES_KEYS`)."""
    series = data.get("series")
    if not isinstance(series, list):
        return data
    for i, raw in enumerate(series):
        for key in KIT_SERIES_KEYS:
            if isinstance(raw, dict) and key in raw:
                label = f" (name={raw['name']!r})" if raw.get("name") else ""
                raise SweepError(
                    f"series[{i}]{label}.{key}: set by the kit when it expands a series' "
                    "sweep, not in a params file"
                )
    return {**data, "series": expand_sweeps(series)}
