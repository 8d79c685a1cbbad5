"""Command-line interface: a thin wrapper over the Python API.

``speclib validate FILE`` · ``speclib run PARAMS [--out DIR] [--resume RUN_DIR]`` ·
``speclib analyze RUN_DIR [--params FILE]`` · ``speclib doctor [PARAMS]`` ·
``speclib build-demo`` · ``speclib compare RUN_A RUN_B ...`` ·
``speclib crosscheck PARAMS --base-url URL`` · ``speclib schedule RUN_DIR --out FILE`` ·
``speclib replay-acceptance RUN_DIR``.
Path arguments are resolved against the caller's folder first (the notebooks run
elsewhere). ``run`` and ``analyze`` show what is happening (:mod:`speclib.app.terminal`)
and end with the verdict table; ``--quiet`` prints only errors and the report path,
``--json`` one JSON object on stdout. Errors are one clear message and a non-zero exit code
(2 for bad input, 1 for a failed run, 130 for an interruption); no traceback for expected
failures.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main"]

_PATH_ARGS = ("params", "out", "resume", "run_dir")


def _absolute_paths(args: argparse.Namespace) -> None:
    """Resolve path arguments against the caller's working directory, before anything else."""
    from speclib.core.fspaths import resolved

    for name in _PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(args, name, str(resolved(value)))
    if getattr(args, "run_dirs", None):
        args.run_dirs = [str(resolved(d)) for d in args.run_dirs]


def _cmd_validate(args: argparse.Namespace) -> int:
    from speclib.demo.models import built_demo_dir
    from speclib.params.loader import ParamsError
    from speclib.params.validation import validate_params
    from speclib.run.cli_check import require_commands
    from speclib.run.manifest import hardware
    from speclib.run.preflight import plan_design, require_memory_plan

    result = validate_params(args.file, resolve_demo=built_demo_dir)
    params = result.params
    commands = require_commands(params, args.file)
    try:
        _, blocks = plan_design(params, hardware())
    except ValueError as exc:  # protocol.design: interleaved where it cannot fit
        raise ParamsError(f"{args.file}: {exc}") from None
    placed, _ = require_memory_plan(params, blocks, args.file)
    names = ", ".join(_series_label(s) for s in params.series)
    aa = " + A/A arm 'aa'" if params.protocol.aa else ""
    aa += "".join(f" + draft-alone arm {a!r}" for a in params.draft_alone_arms.values())
    print(
        f"{args.file}: OK — {params.name}: {len(params.arms)} arms: series {names}{aa}; design "
        f"{params.protocol.design}, {params.workload.replicates} replicate block(s), "
        f"concurrency {params.workload.concurrency}; {len(result.prompts)} prompt(s)"
    )
    for note in [*result.notes, *commands.notes()]:
        print(f"note: {note}")
    if commands.skipped is None:
        print(f"server commands: every flag accepted by vLLM {commands.vllm}'s parser")
    for name, p in placed.items():
        if p.gpus is not None:
            share = f"{p.utilization:g}" + (" (derived)" if p.derived else "")
            kv = ""
            if p.kv_cache_gib is not None:
                kv = f", KV cache {p.kv_cache_gib:g} GiB" + (" (auto)" if p.kv_auto else "")
            print(f"placement: {name} on GPU {','.join(map(str, p.gpus))}, share {share}{kv}")
    return 0


def _series_label(s: Any) -> str:
    """``name (method)``, and for an expanded sweep ``name (method, sweep of family)``."""
    what = "control" if s.is_control else s.speculative_config.get("method")
    if s.sweep_family:
        what += f", sweep of {s.sweep_family}"
    return f"{s.name} ({what})"


def _cmd_run(args: argparse.Namespace) -> int:
    from speclib.app.outcome import RunFailed
    from speclib.app.run_folder import default_run_dir
    from speclib.app.runner import run_experiment
    from speclib.params.loader import load_params

    if args.params is None and not args.resume:
        raise RunFailed("give a params file (speclib run PARAMS) or --resume RUN_DIR")
    params = args.params  # with --resume: the run's recorded params (a file given: the same)
    out = args.resume or args.out
    if out is None:  # named here, so that the display watches the folder the run writes
        out = str(default_run_dir(load_params(params, check_files=False, check_vllm=False)))

    if args.detach:
        return _detached(args, params, out)

    def run(log: Callable[[str], None]) -> Any:
        return run_experiment(params, out=out, resume=bool(args.resume), log=log)

    return _shown(args, out, run)


def _detached(args: argparse.Namespace, params: str | None, out: str) -> int:
    """Start this same run in a session of its own, writing to ``OUT/run.log``; return at
    once. The detached kit still stops every server it started when it ends or is killed."""
    import subprocess

    from speclib.app.run_folder import check_run_folder
    from speclib.core.rundir import RunDir
    from speclib.run.preflight import checked_params

    rd = RunDir.at(out)
    check_run_folder(rd, resume=bool(args.resume))  # refused here, not in the child's log
    checked_params(params, resume=out if args.resume else None)
    rd.root.mkdir(parents=True, exist_ok=True)
    log = rd.run_log
    argv = [sys.executable, "-m", "speclib", "run", "--out", out]
    argv += ["--resume", out] if args.resume else []
    argv += [params] if params else []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    print(f"running detached (pid {proc.pid}, its own session): {out}")
    print(f"progress: tail -f {log}   stop: kill {proc.pid}   (servers stop with it)")
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from speclib.app.analyze import run_analysis

    def analyze(log: Callable[[str], None]) -> Any:
        return run_analysis(
            args.run_dir,
            params_file=args.params,
            allow_incomplete=args.allow_incomplete,
            log=log,
            mix=args.mix,
        )

    return _shown(args, args.run_dir, analyze, analysis=True)


def _shown(
    args: argparse.Namespace,
    run_dir: str,
    call: Callable[[Callable[[str], None]], Any],
    *,
    analysis: bool = False,
) -> int:
    """Run ``call(log)`` under the terminal display; end with the verdicts or one line."""
    from speclib.app.terminal import interrupted_line, open_display
    from speclib.app.verdicts import (
        failed_line,
        mix_line,
        outcome_json,
        print_verdicts,
        record_lines,
    )
    from speclib.core.run_summary import read_summary

    try:
        with open_display(run_dir, quiet=args.quiet) as display:
            result = call(display.log)
    except (KeyboardInterrupt, SystemExit) as exc:
        code = exc.code if isinstance(exc, SystemExit) else 130
        if not isinstance(code, int) or code < 128:
            raise
        print(interrupted_line(run_dir, analysis=analysis), file=sys.stderr)
        return code
    summary = read_summary(result.summary)
    if args.json:
        print(outcome_json(result, summary))
    elif args.quiet:
        print(f"report: {result.report}")
        if mix := mix_line(summary):
            print(mix)
    else:
        print_verdicts(summary)
        print(f"report:  {result.report}\nsummary: {result.summary}")
    for line in record_lines(summary):
        print(line, file=sys.stderr if args.json or args.quiet else sys.stdout)
    if result.failed_launches:
        print(failed_line(result.failed_launches), file=sys.stderr)
        return 1
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from speclib.app.doctor import run_doctor

    return run_doctor(args.params)


def _cmd_build_demo(args: argparse.Namespace) -> int:
    from speclib.demo.models import main as build_main

    return int(build_main(args.rest) or 0)


def _cmd_replay_acceptance(args: argparse.Namespace) -> int:
    import json

    from speclib.analysis.speculation.replay_check import replay_lines, replay_rows
    from speclib.app.run_lock import hold_run
    from speclib.core.rundir import RunDir
    from speclib.run.draft_replay import replay_run

    rd = RunDir.at(args.run_dir)
    if not rd.params_resolved.exists():
        print(f"error: {rd.root} is no run folder (no params.resolved.json)", file=sys.stderr)
        return 2
    try:
        with hold_run(rd, "replay"):  # it writes into the folder: never beside its owner
            path = replay_run(rd.root, device=args.device, dtype=args.dtype, log=_stderr_line)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    replay = json.loads(path.read_text("utf-8"))
    print(f"written: {path} ({replay['seconds']} s on {replay['device']}, {replay['dtype']})")
    check = replay.get("target_check") or {}
    if check.get("same_share") is not None:
        print(
            f"the target's greedy token in transformers is the served one at "
            f"{check['same_share']:.2%} of {check['positions']} positions "
            f"({check['answers']} answers)"
        )
    try:
        metrics = json.loads(rd.summary.read_text("utf-8")).get("launch_metrics") or []
    except (OSError, ValueError):
        metrics = []
    for line in replay_lines(replay_rows(replay, metrics), replay.get("control_answers")):
        print(line)
    if args.analyze:
        from speclib.app.analyze import run_analysis

        run_analysis(rd.root, log=_stderr_line)
        print(f"report: {rd.report}")
    else:
        print(f"the report shows it after: speclib analyze {rd.root}")
    return 0


def _stderr_line(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _cmd_compare(args: argparse.Namespace) -> int:
    from speclib.app.out_guard import writable_out
    from speclib.report.multirun import compare_runs

    out = writable_out(args.out, args.run_dirs, force=args.force) if args.out else None
    table = compare_runs(args.run_dirs)
    print(table.to_string(index=False))
    if out is not None:
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(table.to_html(index=False), encoding="utf-8")
        os.replace(tmp, out)
        print(f"written: {out}")
    return 0


def _cmd_crosscheck(args: argparse.Namespace) -> int:
    import os

    from speclib.analysis.health.bench_agreement import format_crosscheck
    from speclib.params.loader import load_params
    from speclib.run.bench_crosscheck import BenchCheckError, crosscheck_server

    params = load_params(args.params)
    key_env = params.server.api_key_env
    try:
        check = crosscheck_server(
            params,
            base_url=args.base_url,
            out_dir=args.out,
            concurrency=args.concurrency,
            tokenizer_dir=args.tokenizer,
            tolerance=args.tolerance,
            rounds=args.rounds,
            api_key=os.environ.get(key_env) if key_env else None,
        )
    except BenchCheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_crosscheck(check))
    print(f"written: {Path(args.out) / 'crosscheck.json'}")
    return 0 if check.verdict in ("agree", None) else 1


def _cmd_schedule(args: argparse.Namespace) -> int:
    from speclib.app.confirm import ConfirmError, describe, write_confirmation
    from speclib.app.out_guard import writable_out

    out = writable_out(args.out, [args.run_dir], force=args.force)
    try:
        path = write_confirmation(args.run_dir, out, family=args.family)
    except ConfirmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    print(f"confirmation params written: {path}\n{describe(data)}")
    print(f"run it: python -m speclib run {path}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="speclib",
        description="Does vLLM speculative decoding pay off here? Run, analyse, decide.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="check a params file (nothing is started)")
    v.add_argument("file")
    v.set_defaults(func=_cmd_validate)
    r = sub.add_parser("run", help="run an experiment: servers, requests, report")
    r.add_argument("params", nargs="?", help="params YAML file (optional with --resume)")
    r.add_argument("--out", help="run folder (default: output_dir or runs/<name>-<time>)")
    r.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run")
    r.add_argument(
        "--detach",
        action="store_true",
        help="run in a session of its own and return at once (progress in RUN_DIR/run.log)",
    )
    _output_options(r)
    r.set_defaults(func=_cmd_run)
    a = sub.add_parser("analyze", help="re-run the analysis on a run folder (no server)")
    a.add_argument("run_dir")
    a.add_argument(
        "--params",
        help="params file whose analysis section overrides the run's (describes the records "
        "when the folder holds only requests.jsonl)",
    )
    a.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="decide although records are missing or damaged; every output says what is missing",
    )
    a.add_argument(
        "--mix",
        help="the user's traffic mix, CATEGORY=SHARE,... summing to 1 (e.g. "
        "fresh=0.8,echo=0.2): the pooled ratio and verdict are re-decided for it",
    )
    _output_options(a)
    a.set_defaults(func=_cmd_analyze)
    d = sub.add_parser("doctor", help="is this machine ready to run (these params)?")
    d.add_argument("params", nargs="?", help="params YAML file to check the machine against")
    d.set_defaults(func=_cmd_doctor)
    b = sub.add_parser("build-demo", help="build (or locate) the embedded tiny model pair")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=_cmd_build_demo)
    y = sub.add_parser(
        "replay-acceptance",
        help="count each draft launch's acceptance outside vLLM (transformers) and compare",
    )
    y.add_argument("run_dir")
    y.add_argument("--device", help="torch device (default: cuda when there is one, else cpu)")
    y.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="the models' dtype"
    )
    y.add_argument(
        "--analyze", action="store_true", help="re-run the analysis after (the report shows it)"
    )
    y.set_defaults(func=_cmd_replay_acceptance)
    c = sub.add_parser("compare", help="verdict tables of several runs side by side")
    c.add_argument("run_dirs", nargs="+")
    c.add_argument("--out", help="also write the table as HTML here (a new file)")
    c.add_argument("--force", action="store_true", help="replace --out if it exists")
    c.set_defaults(func=_cmd_compare)
    x = sub.add_parser(
        "crosscheck", help="kit vs vllm bench serve on one running server, same prompts"
    )
    x.add_argument("params", help="params YAML file (its workload: prompts, sampling, load)")
    x.add_argument("--base-url", required=True, help="the running server, e.g. http://h:8000")
    x.add_argument("--out", default="crosscheck", help="folder for both tools' raw results")
    x.add_argument("--concurrency", type=int, help="default: the workload's first level")
    x.add_argument("--tokenizer", help="local tokenizer dir (default: the params' model)")
    x.add_argument("--tolerance", type=float, default=0.02, help="median TPOT, fraction")
    x.add_argument("--rounds", type=int, default=4, help="kit/bench rounds, ABBA order")
    x.set_defaults(func=_cmd_crosscheck)
    k = sub.add_parser(
        "schedule", help="params for the confirmation run of a run's recommended k schedule"
    )
    k.add_argument("run_dir")
    k.add_argument("--out", required=True, help="params YAML file to write (a new file)")
    k.add_argument("--force", action="store_true", help="replace --out if it exists")
    k.add_argument("--family", help="sweep family (default: the first with a schedule)")
    k.set_defaults(func=_cmd_schedule)
    return p


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="print only errors and the report path")
    p.add_argument(
        "--json", action="store_true", help="print one JSON object (verdicts, paths) on stdout"
    )


def _skip_iri_format_checker() -> None:
    """Keep jsonschema (imported by nbformat, hence by papermill) from importing
    ``rfc3987_syntax``: that module builds ~35 Lark parsers at import (~2.7 s of CPU on
    every ``speclib`` command) for jsonschema's ``iri`` format checker, which no notebook
    schema uses. A ``None`` in ``sys.modules`` makes that optional import fail, as
    jsonschema expects when the package is absent; in this process only."""
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``speclib`` and ``python -m speclib``; returns the exit code."""
    from speclib.app.out_guard import OutputRefused
    from speclib.core.prompts import PromptSetError
    from speclib.core.run_summary import SummaryError
    from speclib.params.loader import ParamsError

    argv = list(sys.argv[1:] if argv is None else argv)
    _skip_iri_format_checker()
    if argv[:1] == ["build-demo"]:  # its own parser owns every option after the verb
        return _cmd_build_demo(argparse.Namespace(rest=argv[1:]))
    args = _parser().parse_args(argv)
    _absolute_paths(args)
    try:
        return int(args.func(args))
    except (ParamsError, PromptSetError, OutputRefused, SummaryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: servers stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # expected failures: one message, no traceback
        from speclib.analysis.health.integrity import RunNotWhole
        from speclib.app.analyze import AnalysisRefused
        from speclib.app.outcome import RunFailed
        from speclib.app.run_folder import RunFolderRefused
        from speclib.app.run_lock import RunFolderBusy
        from speclib.report.multirun import CompareRefused
        from speclib.serve.process import PortInUseError, ServerStartError

        refused = AnalysisRefused | RunNotWhole | RunFolderRefused | RunFolderBusy | CompareRefused
        if isinstance(exc, refused):  # invalid input: nothing written
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, RunFailed | ServerStartError | PortInUseError | FileNotFoundError):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise
