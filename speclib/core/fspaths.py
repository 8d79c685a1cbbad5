"""Absolute paths from what a user typed, even where a path cannot be resolved.

``Path.resolve()`` raises on a symlink loop (``RuntimeError`` in Python 3.11, ``OSError``
later), so a typo'd link in a params file or on the command line would end in a traceback.
:func:`resolved` resolves what it can and otherwise returns the absolute path as written;
the caller's own check then finds no such file or folder and says so.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["resolved"]


def resolved(path: str | os.PathLike[str]) -> Path:
    """``path`` with ``~`` expanded, made absolute and resolved (symlinks followed); a path
    that cannot be resolved (a symlink loop) is returned absolute, unresolved."""
    p = Path(path).expanduser()
    try:
        return p.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(p))
