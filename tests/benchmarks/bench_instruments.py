"""The two instruments of finished runs, side by side, as the tables in docs/measurements.md.

For each run folder: one row per launch window (launch × load level) with the client's and
the server's mean TPOT and TTFT, their gaps, the streams read late, and whether the window
agrees within the kit's tolerances; then per arm the TPOT ratio by each instrument and the
bench-trust checks. Everything comes from ``summary.json`` (the analysis wrote it from the
records). A benchmark helper, not a test:

    .venv/bin/python -m tests.benchmarks.bench_instruments runs/demo-a runs/demo-b
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def table(run: Path) -> str:
    """Markdown tables of one run: launch windows, ratios per instrument, trust checks."""
    s = json.loads((run / "summary.json").read_text())
    out = [
        f"**{run.name}** — verdict TPOT from the {s['instrument']['tpot']}'s stamps",
        "",
        "| launch | late | client TPOT ms | server TPOT ms | gap | client TTFT ms "
        "| server TTFT ms | gap ms | agrees |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["instrument_agreement"]:
        gap = None if r["tpot_gap"] is None else 100 * r["tpot_gap"]
        out.append(
            f"| {r['launch_id']} | {r['n_read_late']}/{r['n_ok']} "
            f"| {_f(r['client_tpot_ms'], '.2f')} | {_f(r['server_tpot_ms'], '.2f')} "
            f"| {_f(gap, '+.1f')} % | {_f(r['client_ttft_ms'], '.1f')} "
            f"| {_f(r['server_ttft_ms'], '.1f')} | {_f(r['ttft_gap_ms'], '+.1f')} "
            f"| {r['agrees']} |"
        )
    out += ["", "| arm | verdict | ratio (verdict) | ratio client | ratio server | pairs used |"]
    out.append("|---|---|---|---|---|---|")
    for c in s["comparisons"]:
        rb = c["pairing"].get("ratio_by_instrument") or {}
        out.append(
            f"| {c['experiment']} | {c['decision']} | {_f(c['tpot_ratio'], '.3f')} "
            f"| {_f(rb.get('client'), '.3f')} | {_f(rb.get('server'), '.3f')} "
            f"| {c['pairing'].get('n_pairs_used')} of {c['pairing'].get('n_pairs')} |"
        )
    out.append("")
    for c in s["bench_trust"]["checks"]:
        out.append(f"- {c['check']}: **{c['status']}** ({c['figure']})")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    for arg in argv:
        print(table(Path(arg)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
