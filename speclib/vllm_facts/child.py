"""Facts read from the installed vLLM in a child process, kept in an on-disk cache.

Importing vLLM pulls in torch (seconds, hundreds of MiB), so the kit reads what it needs
from vLLM (its ``SpeculativeConfig``, its server's parser) in a child process
(``python -m MODULE OUT``, which writes JSON to ``OUT``) and caches the result under
``$SPECLIB_CACHE`` (default ``~/.cache/speclib``), keyed by the interpreter, the vLLM
folder and the size and time of the files the fact comes from. Used by
:mod:`speclib.vllm_facts.spec_schema` and :mod:`speclib.vllm_facts.cli_flags`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["cache_file", "cache_lock", "read_cache", "run_child", "write_cache"]


def cache_file(kind: str, vllm_dir: Path, *, fmt: int, files: Sequence[str]) -> Path:
    """Where the fact ``kind`` of the vLLM in ``vllm_dir`` is cached."""
    stamp: list[Any] = [fmt, os.path.realpath(sys.executable), str(vllm_dir.resolve())]
    for name in files:
        path = vllm_dir / name
        if path.is_file():
            st = path.stat()
            stamp += [name, st.st_mtime_ns, st.st_size]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:16]
    root = os.environ.get("SPECLIB_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "speclib"
    return base / kind / f"{key}.json"


def run_child(module: str, *, timeout_s: float) -> dict[str, Any]:
    """Run ``python -m module OUT`` with the kit importable and return the JSON it wrote;
    a RuntimeError carries the child's last line of stderr."""
    paths = [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    with tempfile.TemporaryDirectory(prefix="speclib-vllm-") as tmp:
        out = Path(tmp) / "out.json"
        proc = subprocess.run(
            [sys.executable, "-m", module, str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"exit code {proc.returncode}: {tail[:200]}")
        return json.loads(out.read_text(encoding="utf-8"))


@contextlib.contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``'s cache entry while it is read and, if missing,
    computed: processes that start together (a test command's workers, a Ray cluster's
    blocks) read vLLM once and the others read the cache it wrote. Where no lock file can
    be made (a read-only home), no lock: each reads vLLM itself, as before."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.with_name(f".{path.name}.lock").open("a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_cache(path: Path, *, fmt: int) -> dict[str, Any] | None:
    """The cached JSON object of format ``fmt`` (None: absent, unreadable or older)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == fmt else None


def write_cache(path: Path, data: dict[str, Any]) -> None:
    """Write the cache atomically; a read-only home only means reading vLLM again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
