"""The kit's model cache: where it is, its file lock and the atomic publish of a built folder.

Every model the kit builds or fetches for itself (the tiny pair of :mod:`speclib.demo.models`,
the real model of :mod:`speclib.demo.packaged`) lives under ``$SPECLIB_CACHE`` (default
``~/.cache/speclib``). A build happens in a temporary folder beside its final place, under an
exclusive ``flock``, and is renamed into place when complete, so concurrent callers build once
and never see a half-written folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["default_cache_dir", "file_lock", "file_sha256", "publish"]


def default_cache_dir() -> Path:
    """``$SPECLIB_CACHE`` if set, else ``~/.cache/speclib``."""
    env = os.environ.get("SPECLIB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "speclib"


@contextlib.contextmanager
def file_lock(path: Path, log: Callable[[str], Any]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed) for the ``with`` body."""
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build of the demo models ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``, moving an older ``final`` aside first (caller holds lock)."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
