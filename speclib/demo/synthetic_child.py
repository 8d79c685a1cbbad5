"""Building a synthetic model in a child process, so no GPU memory outlives the build.

torch's caching allocator keeps what a build used on the GPU for as long as the process
lives (a Qwen3-4B-shaped target is built in float32: about 18 GiB). Built inside ``speclib
run`` (first use), that memory stayed taken while the servers started, and the memory plan
counted it as another process's (issue 46: 18,336 MiB on an H100, held by the kit's own
process). :func:`build_in_child` runs :mod:`speclib.demo.synthetic_build` as
``python -m speclib.demo.synthetic_child ROLE RECIPE FOLDER`` and passes its lines on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from speclib.demo.synthetic import SyntheticRecipe
from speclib.demo.synthetic_build import (
    build_synthetic_draft,
    build_synthetic_eagle3,
    build_synthetic_mtp,
    build_synthetic_target,
)

__all__ = ["build_in_child"]


def build_in_child(
    recipe: SyntheticRecipe,
    role: str,
    folder: Path,
    *,
    log: Callable,
    target_dir: Path | None = None,
) -> None:
    """Write ``role`` (``target``, ``draft``, ``mtp``: the target with an MTP layer, or
    ``eagle3`` from the built target in ``target_dir``) of ``recipe``'s pair into
    ``folder`` from a child process, passing its lines to ``log``; a RuntimeError with its
    last lines if it fails."""
    argv = [sys.executable, "-m", __name__, role, json.dumps(asdict(recipe)), str(folder)]
    if target_dir is not None:
        argv.append(str(target_dir))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        log(lines[-1])
    if proc.wait() != 0:
        tail = "\n".join(lines[-20:])
        raise RuntimeError(
            f"building the synthetic {role} failed (exit {proc.returncode}):\n{tail}"
        )


def _main(argv: list[str]) -> int:
    role, recipe_json, folder, *rest = argv
    recipe = SyntheticRecipe(**json.loads(recipe_json))

    def log(message: str) -> None:
        print(message, flush=True)

    if role == "eagle3":
        build_synthetic_eagle3(recipe, Path(folder), target_dir=Path(rest[0]), log=log)
    elif role == "target":
        build_synthetic_target(recipe, Path(folder), log=log)
    elif role == "mtp":
        build_synthetic_mtp(recipe, Path(folder), log=log)
    else:
        build_synthetic_draft(recipe, Path(folder), log=log)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
