"""The test command's own rules (tests/conftest.py): a skip fails under the test command,
a timed real run's test must be marked ``alone``, and a shared real run or server is used
only from tests/integration (one xdist work unit)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import (
    LONGEST_FIRST,
    pytest_collection_modifyitems,
    pytest_runtest_makereport,
    real_servers_scope,
)
from tests.real_runs import REPO


def _report(outcome: str) -> pytest.TestReport:
    longrepr = ("tests/unit/x.py", 3, "Skipped: the demo pair is not built here")
    return pytest.TestReport(
        nodeid="tests/unit/x.py::t",
        location=("tests/unit/x.py", 3, "t"),
        keywords={},
        outcome=outcome,
        longrepr=longrepr if outcome == "skipped" else None,
        when="setup",
    )


def _through_hook(report: pytest.TestReport) -> pytest.TestReport:
    hook = pytest_runtest_makereport(None, None)
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(SimpleNamespace(get_result=lambda: report))
    return report


def test_a_skip_fails_under_the_test_command_and_names_its_reason(monkeypatch):
    monkeypatch.setenv("SPECLIB_NO_SKIPS", "1")
    report = _through_hook(_report("skipped"))
    assert report.outcome == "failed"
    assert "SPECLIB_NO_SKIPS=1" in report.longrepr
    assert "the demo pair is not built here" in report.longrepr
    assert _through_hook(_report("passed")).outcome == "passed"


def test_a_skip_stays_a_skip_outside_the_test_command(monkeypatch):
    monkeypatch.delenv("SPECLIB_NO_SKIPS", raising=False)
    assert _through_hook(_report("skipped")).outcome == "skipped"


def _item(nodeid: str, fixtures: tuple[str, ...], *, alone: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        nodeid=nodeid,
        fixturenames=fixtures,
        get_closest_marker=lambda name: object() if alone and name == "alone" else None,
    )


def test_a_timed_run_test_without_alone_is_refused():
    ok = _item("tests/integration/a.py::t1", ("demo_run",), alone=True)
    pytest_collection_modifyitems(None, [ok])
    bad = _item("tests/integration/a.py::t2", ("demo_run", "tmp_path"))
    with pytest.raises(pytest.UsageError, match=r"must be marked alone: .*a\.py::t2"):
        pytest_collection_modifyitems(None, [ok, bad])


def test_a_shared_real_run_or_server_outside_the_real_server_files_is_refused():
    inside = [
        _item("tests/integration/a.py::t", ("sampled_run",)),
        _item("tests/integration/b.py::t", ("sampled_run", "demo_servers")),
    ]
    pytest_collection_modifyitems(None, inside)  # several files of the one xdist unit: fine
    for fixture in ("synthetic_run", "eagle3_run", "demo_servers"):
        outside = _item("tests/unit/c.py::t", (fixture, "tmp_path"))
        with pytest.raises(pytest.UsageError, match=rf"outside tests/integration/: .*{fixture}"):
            pytest_collection_modifyitems(None, [*inside, outside])


def test_every_real_run_has_its_session_fixture(request):
    from tests.real_runs import REAL_RUNS

    for name, run in REAL_RUNS.items():
        assert run.fixture == name
        (definition,) = request._fixturemanager.getfixturedefs(name, request.node)
        assert definition.scope == "session", name


def test_real_server_files_are_one_xdist_unit_and_the_others_one_each():
    assert real_servers_scope("tests/integration/test_a.py::t") == "tests/integration"
    assert real_servers_scope("tests/integration/test_b.py::C::t[x]") == "tests/integration"
    assert real_servers_scope("tests/unit/test_a.py::t") == "tests/unit/test_a.py"
    assert (
        real_servers_scope("tests/unit/test_integration.py::t") == "tests/unit/test_integration.py"
    )


def test_files_are_sent_integration_first_then_the_longest_and_keep_their_tests_order():
    items = [
        _item("tests/unit/test_aa.py::t1", ()),
        _item(f"{LONGEST_FIRST[1]}::t1", ()),
        _item("tests/integration/test_x.py::t1", ()),
        _item(f"{LONGEST_FIRST[0]}::t2", ()),
        _item(f"{LONGEST_FIRST[1]}::t0", ()),
        _item(f"{LONGEST_FIRST[0]}::t1", ()),
        _item("tests/unit/test_zz.py::t1", ()),
        _item("tests/integration/test_a.py::t1", ()),
    ]
    pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [
        "tests/integration/test_x.py::t1",
        "tests/integration/test_a.py::t1",
        f"{LONGEST_FIRST[0]}::t2",
        f"{LONGEST_FIRST[0]}::t1",
        f"{LONGEST_FIRST[1]}::t1",
        f"{LONGEST_FIRST[1]}::t0",
        "tests/unit/test_aa.py::t1",
        "tests/unit/test_zz.py::t1",
    ]
    assert all((REPO / f).is_file() for f in LONGEST_FIRST)
