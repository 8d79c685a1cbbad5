"""Which command-line flags the installed vLLM's server accepts, read from vLLM's own parser.

vLLM builds its server's parser with ``make_arg_parser(FlexibleArgumentParser())``
(``vllm/entrypoints/openai/cli_args.py`` up to the 0.2x releases,
``vllm/entrypoints/launchers/cli_args.py`` later); an unknown flag makes the server exit
with argparse's code 2 before it starts. This module builds that parser in a child
process (``python -m speclib.core.vllm_cli OUT``: importing it pulls in torch) and keeps
every option string it registers, cached on disk (under ``$SPECLIB_CACHE``, default
``~/.cache/speclib``, keyed by the interpreter and the installed files that define the
parser) and per process, so a command line can be checked against exactly the vLLM that
will run, before any server starts. Import-light: the calling process never imports vLLM.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.vllm_schema import close_matches, vllm_location

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
def _cache_file(vllm_dir: Path) -> Path:
    stamp: list[Any] = [CLI_FORMAT, os.path.realpath(sys.executable), str(vllm_dir.resolve())]
    for name in _STAMP_FILES:
        path = vllm_dir / name
        if path.is_file():
            st = path.stat()
            stamp += [name, st.st_mtime_ns, st.st_size]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:16]
    root = os.environ.get("SPECLIB_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "speclib"
    return base / "vllm-cli" / f"{key}.json"


def _run_child() -> dict[str, Any]:
    paths = [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    with tempfile.TemporaryDirectory(prefix="speclib-cli-") as tmp:
        out = Path(tmp) / "cli.json"
        proc = subprocess.run(
            [sys.executable, "-m", "speclib.core.vllm_cli", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"exit code {proc.returncode}: {tail[:200]}")
        return json.loads(out.read_text(encoding="utf-8"))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and data.get("format") == CLI_FORMAT
    return data if ok and isinstance(data.get("flags"), list) else None


def _write(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: read the parser again next time


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
    cache = _cache_file(where)
    data = _read(cache)
    if data is None:
        try:
            data = _run_child()
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            return CliFlags(None, None, f"could not build vLLM's server parser ({exc})")
        _write(cache, data)
    return flags_from_json(data)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
