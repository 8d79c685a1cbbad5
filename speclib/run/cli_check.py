"""Every server command a params file implies, checked against the installed vLLM's parser.

The kit adds flags of its own to each ``vllm serve`` command. Two of them only measure
(``OPTIONAL_FLAGS`` of :mod:`speclib.vllm_facts.cli_flags`): where the installed vLLM lacks one,
it is left out of every command, and the run says so, with what is measured instead.
Every other flag of a command comes from the params (a field the kit turns into a flag,
or ``server.extra_args``): where vLLM lacks it, :func:`check_commands` names the field
and the flag before any server starts, instead of a server exiting with argparse's code
2. The flags are read from vLLM's own parser (:mod:`speclib.vllm_facts.cli_flags`), never from
a table of versions. With ``server.launcher`` set, the vLLM that runs may not be the one
installed here, and nothing is checked or left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError
from speclib.params.server import SeriesParams
from speclib.vllm_facts.cli_flags import OPTIONAL_FLAGS, CliFlags, cli_flag, installed_cli_flags

__all__ = ["CommandCheck", "OmittedFlag", "check_commands", "require_commands"]

_FIELD_OF_FLAG = {
    "--speculative-config": "series[{i}].speculative_config",
    "--served-model-name": "server.served_model_name",
    "--max-model-len": "server.max_model_len",
    "--seed": "server.seed",
    "--dtype": "server.dtype",
    "--enforce-eager": "server.enforce_eager",
    "--tensor-parallel-size": "server.tensor_parallel_size",
    "--gpu-memory-utilization": "server.gpu_memory_utilization",
    "--kv-cache-memory-bytes": "server.kv_cache_memory_gib",
    "--enable-prefix-caching": "protocol.cache_policy",
    "--no-enable-prefix-caching": "protocol.cache_policy",
}


@dataclass(frozen=True)
class OmittedFlag:
    """A measurement flag the installed vLLM lacks, left out of these series' commands."""

    flag: str
    series: tuple[str, ...]
    why: str

    def note(self, vllm: str | None) -> str:
        who = ", ".join(self.series)
        return f"{self.flag} left out ({vllm or 'this vLLM'} has no such flag; {who}): {self.why}"


@dataclass(frozen=True)
class CommandCheck:
    """What the check found: flags left out, params fields vLLM would refuse, and why
    nothing was checked (``skipped``)."""

    vllm: str | None
    omitted: tuple[OmittedFlag, ...] = ()
    problems: tuple[str, ...] = ()
    skipped: str | None = None
    flags: CliFlags | None = field(default=None, repr=False, compare=False)

    def notes(self) -> list[str]:
        """One line per omitted flag (for the terminal, the report and summary.json)."""
        return [o.note(self.vllm) for o in self.omitted]

    def to_dict(self) -> dict[str, Any]:
        return {
            "vllm": self.vllm,
            "checked": self.skipped is None,
            "skipped": self.skipped,
            "omitted": [
                {"flag": o.flag, "series": list(o.series), "why": o.why} for o in self.omitted
            ],
            "notes": self.notes(),
        }


def _series_args(params: ExperimentParams, series: SeriesParams) -> list[str]:
    from speclib.run.launching import command_args

    return command_args(params, series, model=params.server.model, port=1)


def _field(flag: str, index: int, extra: Sequence[str]) -> str:
    if any(cli_flag(a) == flag for a in extra if a.startswith("--")):
        return "server.extra_args"
    return _FIELD_OF_FLAG.get(flag, "server").format(i=index)


def check_commands(params: ExperimentParams, flags: CliFlags | None = None) -> CommandCheck:
    """Check the command of every arm the kit would start against ``flags`` (default: the
    installed vLLM's server parser)."""
    if params.server.launcher:
        return CommandCheck(None, skipped="server.launcher is set: its vLLM is not checked here")
    arms = [s for s in params.arms if not (s.base_url or params.server.base_url)]
    if not arms:
        return CommandCheck(None, skipped="every arm is an external server (base_url)")
    flags = flags or installed_cli_flags()
    if flags.flags is None:
        return CommandCheck(flags.vllm_version, skipped=flags.note, flags=flags)
    label = f"vLLM {flags.vllm_version}"
    omitted: dict[str, list[str]] = {}
    problems: list[str] = []
    for arm in arms:
        index = next((i for i, s in enumerate(params.series) if s.name == arm.name), 0)
        args = _series_args(params, arm)
        for arg in flags.unknown(args):
            flag = cli_flag(arg)
            if flag in OPTIONAL_FLAGS:
                omitted.setdefault(flag, []).append(arm.name)
                continue
            problem = (
                f"  - {_field(flag, index, params.server.extra_args)}: {flag} is not a flag "
                f"of {label}'s server (its parser would refuse it){flags.suggest(arg)}"
            )
            if problem not in problems:
                problems.append(problem)
    return CommandCheck(
        flags.vllm_version,
        omitted=tuple(OmittedFlag(f, tuple(s), OPTIONAL_FLAGS[f][1]) for f, s in omitted.items()),
        problems=tuple(problems),
        flags=flags,
    )


def require_commands(params: ExperimentParams, source: str) -> CommandCheck:
    """:func:`check_commands`, raising :class:`ParamsError` (every refused field named)."""
    result = check_commands(params)
    if result.problems:
        raise ParamsError(
            f"{source}: the installed vLLM would refuse to start\n" + "\n".join(result.problems)
        )
    return result
