"""Command-line interface: a thin wrapper over the Python API.

``speclib validate FILE`` · ``speclib run PARAMS [--out DIR] [--resume RUN_DIR]`` ·
``speclib analyze RUN_DIR [--params FILE]`` · ``speclib build-demo`` ·
``speclib compare RUN_A RUN_B ...`` · ``speclib crosscheck PARAMS --base-url URL``.
Errors are one clear message and a non-zero exit code
(2 for bad input, 1 for a failed run, 130 for an interruption); no traceback for expected
failures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main"]


def _cmd_validate(args: argparse.Namespace) -> int:
    from speclib.core.params import load_params

    params = load_params(args.file)
    names = ", ".join(
        f"{s.name} ({'control' if s.is_control else s.speculative_config.get('method')})"
        for s in params.series
    )
    print(
        f"{args.file}: OK — {params.name}: series {names}; "
        f"{params.workload.replicates} replicate(s), concurrency {params.workload.concurrency}"
    )
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from speclib.app.runner import RunFailed, resume_params_file, run_experiment

    if args.params is None and not args.resume:
        raise RunFailed("give a params file (speclib run PARAMS) or --resume RUN_DIR")
    params = args.params or resume_params_file(args.resume)
    out = args.resume or args.out
    result = run_experiment(params, out=out, resume=bool(args.resume))
    print(f"report:  {result.report}\nsummary: {result.summary}")
    if result.failed_launches:
        print(
            f"failed launches: {', '.join(result.failed_launches)} (see the report)",
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from speclib.app.runner import run_analysis

    result = run_analysis(args.run_dir, params_file=args.params)
    print(f"report:  {result.report}\nsummary: {result.summary}")
    return 0


def _cmd_build_demo(args: argparse.Namespace) -> int:
    from speclib.demo.models import main as build_main

    return int(build_main(args.rest) or 0)


def _cmd_compare(args: argparse.Namespace) -> int:
    from speclib.report.multirun import compare_runs

    table = compare_runs(args.run_dirs)
    print(table.to_string(index=False))
    if args.out:
        Path(args.out).write_text(table.to_html(index=False), encoding="utf-8")
        print(f"written: {args.out}")
    return 0


def _cmd_crosscheck(args: argparse.Namespace) -> int:
    import os

    from speclib.core.params import load_params
    from speclib.run.benchcheck import BenchCheckError, crosscheck_server, format_crosscheck

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
    r.set_defaults(func=_cmd_run)
    a = sub.add_parser("analyze", help="re-run the analysis on a run folder (no server)")
    a.add_argument("run_dir")
    a.add_argument("--params", help="params file whose analysis section overrides the run's")
    a.set_defaults(func=_cmd_analyze)
    b = sub.add_parser("build-demo", help="build (or locate) the embedded tiny model pair")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=_cmd_build_demo)
    c = sub.add_parser("compare", help="verdict tables of several runs side by side")
    c.add_argument("run_dirs", nargs="+")
    c.add_argument("--out", help="also write the table as HTML here")
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
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``speclib`` and ``python -m speclib``; returns the exit code."""
    from speclib.core.params import ParamsError
    from speclib.core.prompts import PromptSetError

    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ParamsError, PromptSetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: servers stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # expected failures: one message, no traceback
        from speclib.app.runner import RunFailed
        from speclib.serve.process import PortInUseError, ServerStartError

        if isinstance(exc, RunFailed | ServerStartError | PortInUseError | FileNotFoundError):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise
