"""Where a command may write its ``--out`` file: never over a run folder's own files.

``speclib compare --out`` and ``speclib schedule --out`` write one new file. A run folder is
the user's record (its records, logs and results), so :func:`writable_out` refuses a path
that is already a file of a run folder (the ones given on the command line, or any folder
above the path that holds ``requests.jsonl``), even with ``--force``, and an existing file
elsewhere unless ``--force``; :class:`OutputRefused` is an invalid input (exit 2).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["OutputRefused", "writable_out"]


class OutputRefused(ValueError):
    """An ``--out`` file would write over a run's own file or an existing file."""


def writable_out(out: str, run_dirs: list[str], *, force: bool) -> Path:
    """``out``, unless writing it would replace a run folder's own file (never) or an
    existing file (only with ``--force``)."""
    from speclib.core.rundir import RunDir

    path = Path(out)
    folders = [RunDir.at(d) for d in run_dirs]
    folders += [RunDir(p) for p in path.parents if RunDir(p).requests.exists()]
    owner = next((rd for rd in folders if rd.owns(path)), None)
    if owner is not None:
        raise OutputRefused(
            f"--out {path}: a file of the run folder {owner.root}; its records and results "
            "are never written over: choose a path outside it (or a new file name)"
        )
    if path.is_dir():
        raise OutputRefused(f"--out {path}: a folder; give a file path")
    if not path.parent.is_dir():
        raise OutputRefused(f"--out {path}: its folder {path.parent} does not exist")
    if path.exists() and not force:
        raise OutputRefused(f"--out {path}: the file exists; add --force to replace it")
    return path
