"""Known security advisories of vLLM: warn when the installed version is affected.

A small static table (advisory id, what it is, first fixed version), taken from public
advisories; it is a reminder, not a scanner: check the project's security advisories page
for the current list. The setup step records the result in the manifest and the report
repeats it, because the kit starts API servers that may hold sensitive prompts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ADVISORIES", "Advisory", "affecting", "parse_version"]


@dataclass(frozen=True)
class Advisory:
    """One public advisory: ``fixed_in`` is the first vLLM release without it."""

    id: str
    summary: str
    fixed_in: tuple[int, ...]


ADVISORIES: tuple[Advisory, ...] = (
    Advisory("CVE-2025-24357", "torch.load of hub weights without weights_only (RCE)", (0, 7, 0)),
    Advisory("CVE-2025-47277", "PyNcclPipe deserialization on exposed port (RCE)", (0, 8, 5)),
    Advisory("CVE-2025-32444", "Mooncake integration pickle over network (RCE)", (0, 8, 5)),
    Advisory("GHSA-3f6c-7fw2-ppm4", "advisory fixed in vLLM 0.11.0", (0, 11, 0)),
    Advisory("GHSA-wr9h-g72x-mwhm", "advisory fixed in vLLM 0.11.0", (0, 11, 0)),
)


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"0.32.0"`` → ``(0, 32, 0)``; local or pre-release suffixes are ignored."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        return None
    return tuple(int(x) for x in m.groups(default="0"))


def affecting(version: str | None) -> list[Advisory]:
    """Advisories that affect ``version`` (empty when unknown or unaffected)."""
    parsed = parse_version(version) if version else None
    if parsed is None:
        return []
    return [a for a in ADVISORIES if parsed < a.fixed_in]
