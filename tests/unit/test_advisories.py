"""The security-advisory reminder compares versions, not strings."""

from speclib.vllm_facts.advisories import affecting, parse_version


def test_parse_version():
    assert parse_version("0.32.0") == (0, 32, 0)
    assert parse_version("0.8.5.post1") == (0, 8, 5)
    assert parse_version("0.10") == (0, 10, 0)
    assert parse_version("dev") is None


def test_old_versions_are_flagged_and_current_ones_not():
    assert {a.id for a in affecting("0.8.4")} >= {"CVE-2025-47277", "CVE-2025-32444"}
    assert "CVE-2025-24357" not in {a.id for a in affecting("0.7.0")}
    assert affecting("0.32.0") == []
    assert affecting("0.10.9") and not affecting("0.11.0")
    assert affecting(None) == []
