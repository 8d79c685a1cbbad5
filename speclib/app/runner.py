"""The batch run: validate params, then execute the notebooks in order with papermill.

``00_setup`` (environment, models, manifest) → ``10_series`` once per series × replicate, in
the order of the design → ``20_analysis`` (records → statistics → figures → decision), then
``report.html`` is exported from the executed analysis notebook with code hidden. Every
executed notebook is kept in ``RUN_DIR/notebooks`` with its injected parameters. A series
that fails is recorded and the others still run; a server left behind by a killed notebook
kernel is reaped through the run's pidfile.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.params import ExperimentParams, load_params
from speclib.core.rundir import RunDir, launch_id, write_json_atomic

__all__ = [
    "NOTEBOOKS_DIR",
    "RunFailed",
    "RunResult",
    "default_run_dir",
    "execute_notebook",
    "resume_params_file",
    "run_analysis",
    "run_experiment",
    "series_order",
]

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"


class RunFailed(RuntimeError):
    """The run could not produce a report; the message says which step and why."""


@dataclass(frozen=True)
class RunResult:
    """Where the outputs of a run are, and which launches failed."""

    run_dir: Path
    report: Path
    summary: Path
    failed_launches: tuple[str, ...]


def default_run_dir(params: ExperimentParams) -> Path:
    """``output_dir`` from params, else ``runs/<name>-<timestamp>`` in the current folder."""
    if params.output_dir:
        return params.resolve_path(params.output_dir)
    return Path.cwd() / "runs" / f"{params.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def series_order(params: ExperimentParams) -> list[dict[str, Any]]:
    """Launch order by ``protocol.order``, in replicate blocks (one launch per series each).

    ``abba``: file order in even blocks, reversed in odd ones, so slow drift over time
    (thermal, background load) does not favour one arm; ``random``: each block shuffled
    with ``protocol.seed``; ``fixed``: file order in every block.
    """
    names = [s.name for s in params.series]
    rng = random.Random(params.protocol.seed)
    order = []
    for rep in range(params.workload.replicates):
        block = list(names)
        if params.protocol.order == "random":
            rng.shuffle(block)
        elif params.protocol.order == "abba" and rep % 2 == 1:
            block = block[::-1]
        order += [{"series": n, "replicate": rep, "launch_id": launch_id(n, rep)} for n in block]
    return order


def execute_notebook(
    name: str, out_path: Path, parameters: dict[str, Any], *, cwd: Path | None = None
) -> None:
    """Execute ``notebooks/<name>.ipynb`` into ``out_path`` with papermill.

    Ctrl-C reaches the whole foreground process group, kernel included, while nbclient's
    own SIGINT handler keeps it from this process: the kernel reports it as a cell error.
    That error is raised here as :class:`KeyboardInterrupt`, so an interrupted run stops
    instead of going on with the next launch.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(
            str(NOTEBOOKS_DIR / f"{name}.ipynb"),
            str(out_path),
            parameters=parameters,
            cwd=str(cwd or out_path.parent),
            progress_bar=False,
            log_output=False,
            kernel_name="python3",
        )
    except PapermillExecutionError as exc:
        if exc.ename == "KeyboardInterrupt":
            raise KeyboardInterrupt(f"{name} interrupted") from exc
        raise


def _signal_guard() -> tuple[Callable[[], None], Callable[[], bool]]:
    """Turn SIGTERM into SystemExit so every ``finally`` (server stop) runs, and remember
    SIGINT: a Ctrl-C whose KeyboardInterrupt a library swallowed still stops the run at the
    next launch. Returns ``(restore, interrupted)``.
    """
    hit: list[int] = []

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    def on_int(signum: int, frame: Any) -> None:
        hit.append(signum)
        signal.default_int_handler(signum, frame)

    try:
        previous = signal.signal(signal.SIGTERM, on_term), signal.signal(signal.SIGINT, on_int)
    except ValueError:  # not the main thread
        return (lambda: None), (lambda: False)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])

    return restore, lambda: bool(hit)


def _prepare(params: ExperimentParams, rd: RunDir, *, resume: bool) -> None:
    if rd.root.exists() and any(rd.root.iterdir()) and not resume:
        raise RunFailed(f"run folder {rd.root} is not empty: use --resume or another --out")
    rd.root.mkdir(parents=True, exist_ok=True)
    if params.source and not rd.params_copy.exists():
        shutil.copyfile(params.source, rd.params_copy)
    data = params.model_dump()
    data["workload"]["prompts"] = str(params.resolve_path(params.workload.prompts))
    write_json_atomic(rd.params_resolved, data)


def _log(msg: str) -> None:
    print(f"[speclib {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _setup(params_file: str, rd: RunDir) -> None:
    from papermill.exceptions import PapermillExecutionError

    nb = rd.notebooks / "00_setup.ipynb"
    try:
        execute_notebook("00_setup", nb, {"params_file": params_file, "run_dir": str(rd.root)})
    except PapermillExecutionError as exc:
        raise RunFailed(
            f"setup failed, no server was started: {exc.ename}: {exc.evalue} (notebook: {nb})"
        ) from None


def resume_params_file(run_dir: str | Path) -> str:
    """The params file an interrupted run was started with (recorded in the run folder)."""
    rd = RunDir.at(run_dir)
    try:
        source = json.loads(rd.params_resolved.read_text("utf-8")).get("source")
    except (OSError, ValueError):
        source = None
    if not source or not Path(source).is_file():
        raise RunFailed(
            f"cannot resume {rd.root}: the params file it was started with "
            f"({source}) is gone; pass it again: speclib run PARAMS --resume DIR"
        )
    return str(source)


def _run_one_launch(params_file: str, rd: RunDir, item: dict[str, Any]) -> str | None:
    """Execute the series notebook for one launch; return an error string or None."""
    from papermill.exceptions import PapermillExecutionError

    from speclib.serve.process import reap_pidfile

    lid = item["launch_id"]
    out = rd.notebooks / f"10_series-{lid}.ipynb"
    try:
        execute_notebook(
            "10_series",
            out,
            {
                "params_file": params_file,
                "run_dir": str(rd.root),
                "series": item["series"],
                "replicate": item["replicate"],
            },
        )
    except PapermillExecutionError as exc:
        return f"{exc.ename}: {exc.evalue}"
    finally:
        reap_pidfile(rd.pidfile)
    status = rd.read_status(lid) or {}
    return None if status.get("ok") else (status.get("error") or "series failed")


def run_experiment(
    params_file: str | Path,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    log: Callable[[str], None] = _log,
) -> RunResult:
    """Validate, run setup, every series launch and the analysis; export the report."""
    from speclib.serve.process import reap_pidfile

    params = load_params(params_file)  # raises ParamsError before anything starts
    rd = RunDir.at(out or default_run_dir(params))
    restore, interrupted = _signal_guard()
    try:
        reap_pidfile(rd.pidfile)
        _prepare(params, rd, resume=resume)
        pfile = str(Path(params_file).resolve())
        log(f"run folder: {rd.root}")
        log("setup: environment, models, manifest")
        _setup(pfile, rd)
        order = json.loads(rd.manifest.read_text("utf-8"))["order"]
        failed = []
        for item in order:
            status = rd.read_status(item["launch_id"])
            if resume and status and status.get("ok"):
                log(f"{item['launch_id']}: done before, kept (resume)")
                continue
            moved = _supersede(rd, item["launch_id"]) if resume else 0
            if moved:
                log(
                    f"{item['launch_id']}: {moved} records of the unfinished launch moved to "
                    f"{rd.root / 'requests.superseded.jsonl'}"
                )
            log(f"{item['launch_id']}: starting server and sending requests")
            err = _run_one_launch(pfile, rd, item)
            if interrupted():
                raise KeyboardInterrupt(f"{item['launch_id']} interrupted")
            if err:
                failed.append(item["launch_id"])
                log(f"{item['launch_id']}: FAILED: {err.splitlines()[0][:300]}")
            else:
                log(f"{item['launch_id']}: done")
        _record_launches(rd)
        _score_outputs(params, rd, log)
        run_analysis(rd.root, params_file=pfile, log=log)
    finally:
        reap_pidfile(rd.pidfile)
        restore()
    return RunResult(rd.root, rd.report, rd.summary, tuple(failed))


def _record_launches(rd: RunDir) -> None:
    """Add every launch's server command line (secrets redacted) and times to the manifest."""
    keep = ("launch_id", "series", "replicate", "ok", "command", "base_url", "started_at")
    keep += ("ended_at", "server_ready_s")
    manifest = rd.read_manifest()
    if not manifest:
        return
    manifest["launches"] = [{k: s.get(k) for k in keep} for s in rd.statuses()]
    write_json_atomic(rd.manifest, manifest)


def _score_outputs(params: ExperimentParams, rd: RunDir, log: Callable[[str], None]) -> None:
    """The sampling check: score every output under the target without speculation."""
    from speclib.analysis.plausibility import score_run, scoring_enabled

    if not scoring_enabled(params):
        return
    log("sampling check: scoring every output under the target without speculation")
    try:
        score_run(params, rd.root)
    except Exception as exc:  # the report says the check is missing; the run goes on
        log(f"output scoring failed: {type(exc).__name__}: {str(exc)[:500]}")


def _supersede(rd: RunDir, lid: str) -> int:
    """Move the records of an unfinished launch out of ``requests.jsonl`` before re-running
    it (kept in ``requests.superseded.jsonl``, so nothing is lost and nothing counts twice).
    """
    if not rd.requests.exists():
        return 0
    keep, moved = [], []
    for line in rd.requests.read_text("utf-8").splitlines():
        if not line.strip():
            continue
        try:
            is_mine = json.loads(line).get("launch_id") == lid
        except ValueError:  # a torn last line from a crash: drop it with the launch
            is_mine = True
        (moved if is_mine else keep).append(line)
    if moved:
        with (rd.root / "requests.superseded.jsonl").open("a", encoding="utf-8") as fh:
            fh.write("\n".join(moved) + "\n")
        tmp = rd.requests.with_suffix(".tmp")
        tmp.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
        tmp.replace(rd.requests)
    return len(moved)


def run_analysis(
    run_dir: str | Path, *, params_file: str | None = None, log: Callable[[str], None] = _log
) -> RunResult:
    """Execute ``20_analysis`` on the records on disk and export ``report.html``."""
    from papermill.exceptions import PapermillExecutionError

    from speclib.report.export import export_report

    rd = RunDir.at(run_dir)
    if not rd.requests.exists():
        raise RunFailed(f"{rd.root} holds no requests.jsonl: nothing to analyse")
    log("analysis: statistics, figures, report")
    nb = rd.notebooks / "20_analysis.ipynb"
    error = None
    try:
        execute_notebook(
            "20_analysis", nb, {"run_dir": str(rd.root), "params_file": params_file or ""}
        )
    except PapermillExecutionError as exc:
        error = f"analysis notebook failed at cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    export_report(nb, rd.report)
    if error:
        raise RunFailed(f"{error} (the notebook with the error is at {nb}; report: {rd.report})")
    log(f"report: {rd.report}")
    statuses = rd.statuses()
    failed = tuple(s["launch_id"] for s in statuses if not s.get("ok"))
    return RunResult(rd.root, rd.report, rd.summary, failed)
