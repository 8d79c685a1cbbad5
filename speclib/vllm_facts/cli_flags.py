"""Which command-line flags the installed vLLM's server accepts, read from vLLM's own parser.

vLLM builds its server's parser with ``make_arg_parser(FlexibleArgumentParser())``
(``vllm/entrypoints/openai/cli_args.py`` up to the 0.2x releases,
``vllm/entrypoints/launchers/cli_args.py`` later); an unknown flag makes the server exit
with argparse's code 2 before it starts. This module builds that parser in a child
process (``python -m speclib.vllm_facts.cli_flags OUT``: importing it pulls in torch) and keeps
every option string it registers, cached on disk (under ``$SPECLIB_CACHE``, default
``~/.cache/speclib``, keyed by the interpreter and the installed files that define the
parser) and per process, so a command line can be checked against exactly the vLLM that
will run, before any server starts. Import-light: the calling process never imports vLLM.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.vllm_facts.child import cache_file, cache_lock, read_cache, run_child, write_cache
from speclib.vllm_facts.spec_schema import close_matches, vllm_location

__all__ = [
    "CLI_FORMAT",
    "OPTIONAL_FLAGS",
    "CliFlags",
    "cli_flag",
    "fit_argv",
    "flags_from_json",
    "installed_cli_flags",
    "introspect_cli",
]

CLI_FORMAT = 1
# flag -> (values it takes, what the kit measures without it)
OPTIONAL_FLAGS: dict[str, tuple[int, str]] = {
    "--per-request-spec-decode-metrics": (
        1,
        "per-request acceptance is not in the responses; acceptance comes from each "
        "launch's /metrics deltas",
    ),
    "--enable-per-request-metrics": (
        0,
        "the server's own per-request stamps (the second instrument) are missing: TPOT "
        "verdicts use the client's timing, and the instruments check reads /metrics",
    ),
}
_PARSER_MODULES = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args")
_ARGPARSE_UTILS = ("vllm.utils.argparse_utils", "vllm.utils")
_STAMP_FILES = (
    "__init__.py",
    "version.py",
    "entrypoints/openai/cli_args.py",
    "entrypoints/launchers/cli_args.py",
    "engine/arg_utils.py",
)
_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class CliFlags:
    """The option strings of the installed vLLM's server parser (``flags`` None: unknown,
    and ``note`` says why)."""

    vllm_version: str | None
    flags: frozenset[str] | None
    note: str | None = None

    def knows(self, arg: str) -> bool:
        """True when the flag of ``arg`` (``--x``, ``--x=1``, ``--x_y``, ``--x.key``) is
        accepted, or when the flags are unknown (nothing to check against)."""
        return self.flags is None or cli_flag(arg) in self.flags

    def unknown(self, args: Iterable[str]) -> list[str]:
        """The flags among ``args`` (values skipped) that this vLLM does not accept."""
        return [a for a in args if a.startswith("--") and not self.knows(a)]

    def suggest(self, arg: str) -> str:
        """``; did you mean '--x'?`` for a refused flag, or an empty string."""
        near = close_matches(cli_flag(arg), self.flags or ())
        return f"; did you mean {' or '.join(map(repr, near))}?" if near else ""


def cli_flag(arg: str) -> str:
    """The option string an argument stands for, as vLLM's FlexibleArgumentParser reads it:
    the part before ``=`` or ``.`` (JSON-field syntax), underscores as dashes."""
    flag = arg.split("=", 1)[0]
    head, dot, _ = flag[2:].partition(".")
    return "--" + (head if dot else flag[2:]).replace("_", "-")


def fit_argv(argv: Sequence[str], flags: CliFlags) -> tuple[tuple[str, ...], list[str]]:
    """``argv`` without the :data:`OPTIONAL_FLAGS` that ``flags`` lacks (each with its
    values), and the flags left out."""
    out: list[str] = []
    dropped: list[str] = []
    skip = 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        flag = cli_flag(arg) if arg.startswith("--") else None
        if flag in OPTIONAL_FLAGS and not flags.knows(arg):
            dropped.append(flag)
            skip = 0 if "=" in arg else OPTIONAL_FLAGS[flag][0]
            continue
        out.append(arg)
    return tuple(out), dropped


# --- the child process: imports vLLM -----------------------------------------------------
def _import_first(names: Sequence[str], attr: str) -> Any:
    import importlib

    for name in names:
        try:
            value = getattr(importlib.import_module(name), attr, None)
        except ImportError:
            continue
        if value is not None:
            return value
    raise ImportError(f"no {attr} in {' or '.join(names)}")


def introspect_cli() -> dict[str, Any]:
    """Build the installed vLLM server's parser and list its option strings (imports vLLM:
    run it in a child)."""
    import vllm

    make_arg_parser = _import_first(_PARSER_MODULES, "make_arg_parser")
    parser_class = _import_first(_ARGPARSE_UTILS, "FlexibleArgumentParser")
    parser = make_arg_parser(parser_class())
    flags = sorted({s for a in parser._actions for s in a.option_strings if s.startswith("--")})
    return {
        "format": CLI_FORMAT,
        "vllm_version": str(getattr(vllm, "__version__", "unknown")),
        "parser": f"{make_arg_parser.__module__}.make_arg_parser",
        "flags": flags,
    }


def _child_main(argv: list[str]) -> int:
    Path(argv[0]).write_text(json.dumps(introspect_cli()), encoding="utf-8")
    return 0


# --- the calling process: no vLLM import -------------------------------------------------
def flags_from_json(data: dict[str, Any]) -> CliFlags:
    """A :class:`CliFlags` from the JSON that :func:`introspect_cli` writes."""
    return CliFlags(vllm_version=str(data["vllm_version"]), flags=frozenset(data["flags"]))


@functools.lru_cache(maxsize=1)
def installed_cli_flags() -> CliFlags:
    """The installed vLLM server's flags (cached on disk and per process); ``flags`` is
    None, with a note, when vLLM is not installed or its parser cannot be built."""
    where = vllm_location()
    if where is None:
        return CliFlags(None, None, "vLLM is not installed here (client-only install)")
    cache = cache_file("vllm-cli", where, fmt=CLI_FORMAT, files=_STAMP_FILES)
    with cache_lock(cache):
        data = read_cache(cache, fmt=CLI_FORMAT)
        if data is None or not isinstance(data.get("flags"), list):
            try:
                data = run_child("speclib.vllm_facts.cli_flags", timeout_s=_TIMEOUT_S)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
                return CliFlags(None, None, f"could not build vLLM's server parser ({exc})")
            write_cache(cache, data)
    return flags_from_json(data)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
