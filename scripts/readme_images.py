"""Regenerate the report images of README.md and docs/ from a real run folder.

``python scripts/readme_images.py RUN_DIR`` writes ``docs/report-first-screen.png`` (the
report's first screen in headless Chromium at 1400×1000, as the browser test sees it) and
``docs/forest-cpu-demo.png`` (the run's forest plot). Run it on a fresh ``scripts/demo.sh``
run; nothing here is drawn from anything but that run's files.
``python scripts/readme_images.py --load RUN_DIR`` writes ``docs/load-cpu-demo.png``: the
speed-up against load with the break-even marks, from a ``params/cpu-demo-load.yaml`` run.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from speclib.analysis.run_analysis import analyze_run  # noqa: E402
from speclib.report.forest import forest_figure  # noqa: E402
from tests.browser import open_page  # noqa: E402


def load_image(run_dir: Path) -> None:
    from speclib.report.evidence import load_figures

    (fig,) = load_figures(analyze_run(run_dir, write=False))
    (REPO / "docs" / "load-cpu-demo.png").write_bytes(fig.to_png(dpi=110))
    print("wrote", REPO / "docs" / "load-cpu-demo.png")


def main(run_dir: Path) -> None:
    docs = REPO / "docs"
    with open_page((run_dir / "report.html").resolve().as_uri(), width=1400, height=1000) as page:
        page.screenshot(docs / "report-first-screen.png")
    fig = forest_figure(analyze_run(run_dir, write=False))
    (docs / "forest-cpu-demo.png").write_bytes(fig.to_png(dpi=110))
    print("wrote", docs / "report-first-screen.png", "and", docs / "forest-cpu-demo.png")


if __name__ == "__main__":
    if sys.argv[1] == "--load":
        load_image(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]))
