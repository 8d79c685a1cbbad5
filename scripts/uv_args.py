"""pip's configuration as uv's arguments, so that scripts/setup.sh installs what pip would.

uv does not read pip's configuration files or ``PIP_*`` variables. This prints, one per
line, the ``uv pip install`` arguments that say the same as pip's merged configuration
(``pip config list``: files and environment): the indexes, find-links, constraints and
trusted hosts, with pip's rule that every index is searched for the best match. It exits 1,
printing nothing, when pip's configuration holds a setting it cannot translate: setup.sh
then installs with pip. Measured on this 2-core machine (2026-12-06): setup.sh on a fresh
clone took 120 s with pip and 33 s with uv, byte-compiling included (local wheel indexes).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

# pip's list settings (whitespace-separated in a file or variable) and uv's flag for each
LISTS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
SINGLE = {"index-url": "--index-url"}
# settings left out: timeouts and output (nothing to install differs); ``cert`` (uv reads the
# system's store: where that fails, the install fails and setup.sh retries it with pip)
IGNORED = {"cert", "default-timeout", "timeout", "disable-pip-version-check", "no-input",
           "progress-bar", "quiet", "verbose", "retries", "root-user-action", "cache-dir",
           "no-cache-dir", "no-warn-script-location"}  # fmt: skip


def uv_args(pip_config: str) -> list[str] | None:
    """The uv arguments of ``pip config list`` output, or ``None`` where a setting has no
    translation here."""
    out = ["--index-strategy", "unsafe-best-match"]
    for line in pip_config.splitlines():
        if "=" not in line:
            continue
        key, _, raw = line.partition("=")
        name = key.rsplit(".", 1)[-1].strip()
        value = " ".join(shlex.split(raw)) if raw.strip() else ""
        if name in IGNORED:
            continue
        if name in SINGLE:
            out += [SINGLE[name], value]
        elif name in LISTS:
            for item in value.split():
                if item.startswith("file://") and not Path(item[len("file://") :]).exists():
                    continue  # pip ignores a missing local index with a warning; uv fails
                out += [LISTS[name], item]
        else:
            return None
    return out


def main() -> int:
    pip = [sys.executable, "-m", "pip", "config", "list"]
    proc = subprocess.run(pip, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return 1
    args = uv_args(proc.stdout)
    if args is None:
        return 1
    print("\n".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
