"""The synthetic pair: its maps, its declared acceptance, its prompts and its weights.

The ``tiny`` preset is built here with torch on CPU and run with transformers: its greedy
next token must be the map's, for every word. (The ``qwen3-4b`` preset is the same code at
the seed pair's shapes; it is built on the GPU.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from speclib.demo.models import built_demo_dir, demo_model_dir
from speclib.demo.synthetic import (
    FIRST_WORD,
    PRESETS,
    SyntheticRecipe,
    chain_maps,
    declared_acceptance,
    expected_acceptance,
    read_declaration,
    synthetic_prompts,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_target_walks_one_cycle_through_every_word() -> None:
    recipe = SyntheticRecipe(preset="tiny")
    target_next, _ = chain_maps(recipe)
    words = recipe.shape.words
    seen, w = set(), FIRST_WORD
    for _ in range(words):
        seen.add(w)
        w = int(target_next[w])
    assert w == FIRST_WORD and len(seen) == words  # one cycle, every word once
    assert (target_next[:FIRST_WORD] == -1).all() and (
        target_next[FIRST_WORD + words :] == -1
    ).all()


@pytest.mark.parametrize("rate", [0.0, 0.55, 0.9, 1.0])
def test_the_draft_agrees_at_the_rate_asked_and_is_wrong_elsewhere(rate: float) -> None:
    recipe = SyntheticRecipe(preset="tiny", agreement=rate)
    target_next, draft_next = chain_maps(recipe)
    words = target_next >= 0
    agree = target_next[words] == draft_next[words]
    assert abs(agree.mean() - rate) < 0.03
    assert (draft_next[words] >= FIRST_WORD).all()  # a wrong guess is still a word
    again = chain_maps(recipe)
    assert (again[0] == target_next).all() and (again[1] == draft_next).all()


def test_the_declared_acceptance_is_the_geometric_one() -> None:
    d = declared_acceptance(0.7, 4)
    assert d["acceptance_per_position"] == pytest.approx([0.7, 0.49, 0.343, 0.2401])
    assert d["mean_acceptance_length"] == pytest.approx(1 + 0.7 + 0.49 + 0.343 + 0.2401)


def test_expected_acceptance_replays_the_verify_steps() -> None:
    draft_next = np.array([1, 2, 3, 9, 5, 6, 7, 8, 0, 0])  # wrong only at token 3 (→ 9)
    out = [[0, 1, 2, 3, 4, 5, 6, 7]]  # target chain 0 → 1 → … → 7
    got = expected_acceptance(draft_next, out, k=2)
    # from 0: guesses 1, 2 right, the target adds 3; from 3: guess 9 wrong, the target
    # says 4; from 4: guesses 5, 6 right, the target adds 7, the last token: 3 steps
    assert got["num_drafts"] == 3 and got["accepted_per_pos"] == [2, 2]
    assert got["mean_acceptance_length"] == pytest.approx(1 + 4 / 3)


def test_the_last_step_is_verified_past_max_tokens_as_vllm_counts_it() -> None:
    draft_next = np.array([1, 2, 3, 9, 5, 6, 7, 8, 0, 0])  # wrong only at token 3 (→ 9)
    target_next = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 0])
    out = [[0, 1, 2, 3, 4, 5]]  # cut at max_tokens = 6
    # from 4 the last step drafts 5 and 6: vLLM verifies both against the target's 5, 6
    # and counts both accepted before it cuts the output after 5
    cut = expected_acceptance(draft_next, out, k=2)
    assert cut["num_drafts"] == 3 and cut["accepted_per_pos"] == [2, 1]
    full = expected_acceptance(draft_next, out, k=2, target_next=target_next)
    assert full["num_drafts"] == 3 and full["accepted_per_pos"] == [2, 2]


def test_a_long_walk_accepts_what_is_declared() -> None:
    recipe = SyntheticRecipe(preset="tiny", agreement=0.7)
    target_next, draft_next = chain_maps(recipe)
    outputs, start = [], FIRST_WORD
    for _ in range(60):
        ids = [start]
        while len(ids) < 64:
            ids.append(int(target_next[ids[-1]]))
        outputs.append(ids)
        start = int(target_next[ids[-1]])
    got = expected_acceptance(draft_next, outputs, k=3)
    want = declared_acceptance(0.7, 3)["acceptance_per_position"]
    assert got["acceptance_per_position"] == pytest.approx(want, abs=0.04)


def test_prompts_echo_their_own_answers_or_nothing() -> None:
    recipe = SyntheticRecipe(preset="tiny")
    target_next, _ = chain_maps(recipe)
    rows = synthetic_prompts(recipe, per_category=3, words=100, echo=20)
    assert [r["category"] for r in rows] == ["fresh", "echo"] * 3
    last = set()
    for r in rows:
        ids = [int(w[1:]) + FIRST_WORD for w in r["messages"][0]["content"].split()]
        assert len(ids) == 100
        last.add(ids[-1])
        answer = [int(target_next[ids[-1]])]
        while len(answer) < 20:
            answer.append(int(target_next[answer[-1]]))
        text = " ".join(map(str, ids))
        assert (" ".join(map(str, answer)) in text) == (r["category"] == "echo")
    assert len(last) == len(rows)  # every answer starts somewhere else


def test_the_shipped_gpu_prompts_are_the_generators() -> None:
    rows = synthetic_prompts(
        SyntheticRecipe(preset="qwen3-4b"), per_category=16, words=128, echo=48
    )
    shipped = [
        json.loads(x) for x in (REPO / "prompts" / "gpu-demo.jsonl").read_text().splitlines()
    ]
    assert shipped == rows


def test_the_tiny_pair_serves_its_maps(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir = demo_model_dir("tiny/target", cache_dir=tmp_path, log=lambda _m: None)
    draft_dir = demo_model_dir("tiny/draft@0.6", cache_dir=tmp_path, log=lambda _m: None)
    recipe = SyntheticRecipe(preset="tiny", agreement=0.6)
    target_next, draft_next = chain_maps(recipe)
    ids = torch.arange(FIRST_WORD, FIRST_WORD + PRESETS["tiny"].words).reshape(40, -1)
    for folder, want in ((target_dir, target_next), (draft_dir, draft_next)):
        model = AutoModelForCausalLM.from_pretrained(folder)
        with torch.no_grad():
            got = model(ids).logits.argmax(-1).numpy()
        assert (got == want[ids.numpy()]).all()
    declared = read_declaration(draft_dir)
    assert declared["declared"]["4"]["k"] == 4
    assert declared["agreement_realised"] == pytest.approx(
        float(np.mean(target_next[target_next >= 0] == draft_next[target_next >= 0]))
    )
    tok = AutoTokenizer.from_pretrained(target_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "w5 w6 w7"}], tokenize=False, add_generation_prompt=True
    )
    assert tok(text, add_special_tokens=False)["input_ids"] == [7, 8, 9]  # the last word leads
    assert read_declaration(target_dir)["role"] == "target"


def test_a_built_synthetic_model_is_found_without_a_build(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECLIB_CACHE", str(tmp_path))
    assert built_demo_dir("tiny/target") is None
    folder = demo_model_dir("tiny/target", log=lambda _m: None)
    assert built_demo_dir("tiny/target") == folder
    with pytest.raises(ValueError, match="not a demo model"):
        built_demo_dir("tiny")


def test_the_pair_is_built_in_a_child_and_weighed_from_its_shapes(tmp_path: Path) -> None:
    """Built in a child process (torch's cache of the build's GPU memory dies with it: issue
    46's 18 GiB), and its weights weigh what its declared shapes say before it is built."""
    import subprocess
    import sys

    from speclib.demo.models import declared_demo_gib

    code = (
        "import sys; from pathlib import Path; from speclib.demo.models import demo_model_dir; "
        f"demo_model_dir('tiny/draft@0.6', cache_dir=Path({str(tmp_path)!r}), log=print); "
        "print('torch in parent:', 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "torch in parent: False" in out
    assert "draft (agreement" in out  # the child's log line reached the parent's log
    declared = declared_demo_gib("tiny/draft@0.6")
    folder = next(tmp_path.glob("synthetic-*/draft-a0.6000"))
    on_disk = (folder / "model.safetensors").stat().st_size / 2**30
    assert declared == pytest.approx(on_disk, rel=0.01)  # the file adds only its header
    assert declared_demo_gib("qwen3-4b/target") == pytest.approx(8.22, abs=0.01)
    assert declared_demo_gib("target") is None  # the CPU pair: known once trained
