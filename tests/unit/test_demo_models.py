"""Tests of the demo corpus, prompt sets and tiny model pair (no vLLM here).

The corpus and prompt tests need only the standard library. The tokenizer, config and chat
template tests need ``tokenizers``/``transformers`` (skipped when absent). The build test
trains a very small pair into ``tmp_path`` and is marked ``integration``.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from pathlib import Path

import pytest

from speclib.demo import models as dm
from speclib.demo import prompts_gen as pg
from speclib.demo import recipe as dr
from speclib.demo import tokenizer as dtok
from speclib.demo import training as dtr

REPO = Path(__file__).resolve().parents[2]


# --- corpus and prompt sets (pure Python) ----------------------------------------------------
@pytest.mark.unit
def test_corpus_is_deterministic_and_seed_dependent() -> None:
    a = pg.generate_chats(60, seed=3)
    assert a == pg.generate_chats(60, seed=3)
    assert a != pg.generate_chats(60, seed=4)
    assert [c.kind for c in a[:6]] == list(pg.TASK_KINDS)


@pytest.mark.unit
def test_corpus_answers_are_long_and_follow_from_the_prompt() -> None:
    for chat in pg.generate_chats(120, seed=0):
        assert len(chat.assistant.split()) >= 30, chat
        if chat.kind == "repeat":
            sentence = chat.user.split(": ", 1)[1]
            assert chat.assistant.split("\n")[0] == sentence
        if chat.kind == "count":
            first = chat.user.split()[2]
            assert chat.assistant.split(": ", 1)[1].startswith(f"{first} ")


@pytest.mark.unit
@pytest.mark.parametrize(("bad", "message"), [(-1, "`n`"), (2.5, "`n`")])
def test_generate_chats_validates_n(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pg.generate_chats(bad, seed=0)  # type: ignore[arg-type]


@pytest.mark.unit
def test_make_chat_names_the_bad_kind() -> None:
    import random

    with pytest.raises(ValueError, match="`kind`"):
        pg.make_chat("poetry", random.Random(0))


@pytest.mark.unit
def test_prompt_sets_shape_and_unique_ids() -> None:
    sets = pg.build_prompt_sets()
    assert set(sets) == set(pg.PROMPT_SET_NAMES)
    ids = [row["id"] for name in ("demo-known", "demo-unseen", "demo-repeat") for row in sets[name]]
    assert len(ids) == len(set(ids))
    for name, rows in sets.items():
        for row in rows:
            assert set(row) == {"id", "category", "messages"}
            assert row["id"].startswith(row["category"] + "-")
            assert row["messages"][0]["role"] == "user" and row["messages"][0]["content"]
        if name != "demo-mixed":
            assert len({row["category"] for row in rows}) == 1
    categories = [row["category"] for row in sets["demo-mixed"]]
    assert {c: categories.count(c) for c in set(categories)} == {
        "known": 8,
        "unseen": 8,
        "repeat": 8,
    }


@pytest.mark.unit
def test_unseen_prompts_avoid_the_training_vocabulary() -> None:
    train_words = {
        w.strip(".,:!?").lower()
        for chat in pg.generate_chats(600, seed=0)
        for w in (chat.user + " " + chat.assistant).split()
    }
    for row in pg.build_prompt_sets()["demo-unseen"]:
        words = {w.strip(".,:!?'").lower() for w in row["messages"][0]["content"].split()}
        content_words = {w for w in words if len(w) > 4}
        assert len(content_words & train_words) <= 1, content_words & train_words


@pytest.mark.unit
def test_checked_in_prompt_files_match_the_generator() -> None:
    for name, rows in pg.build_prompt_sets().items():
        path = REPO / "prompts" / f"{name}.jsonl"
        assert path.read_text(encoding="utf-8") == pg.prompt_set_lines(rows), (
            f"{path} is stale: run `python -m speclib.demo.prompts_gen`"
        )


@pytest.mark.unit
def test_write_prompt_sets_round_trips(tmp_path: Path) -> None:
    paths = pg.write_prompt_sets(tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"{n}.jsonl" for n in pg.PROMPT_SET_NAMES)
    rows = [json.loads(line) for line in paths[0].read_text().splitlines()]
    assert rows == pg.build_prompt_sets()[paths[0].stem]


# --- recipe, cache key, paths ----------------------------------------------------------------
@pytest.mark.unit
def test_recipe_key_changes_with_the_recipe_and_builder_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = dm.recipe_key()
    assert len(key) == 12 and key == dm.recipe_key(dr.DemoRecipe())
    assert dm.recipe_key(dataclasses.replace(dr.DEFAULT_RECIPE, target_steps=1)) != key
    monkeypatch.setattr(dm, "BUILDER_VERSION", dm.BUILDER_VERSION + 1)
    assert dm.recipe_key() != key


@pytest.mark.unit
def test_default_cache_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECLIB_CACHE", str(tmp_path))
    assert dm.default_cache_dir() == tmp_path
    monkeypatch.delenv("SPECLIB_CACHE")
    assert dm.default_cache_dir() == Path.home() / ".cache" / "speclib"


@pytest.mark.unit
def test_demo_model_dir_rejects_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a demo model"):
        dm.demo_model_dir("teacher", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="presets"):
        dm.demo_model_dir("qwen9/target", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="only the draft"):
        dm.demo_model_dir("tiny/target@0.5", cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        dm.demo_model_dir("tiny/draft@1.5", cache_dir=tmp_path)


def _fake_build(out: Path, *, recipe: dr.DemoRecipe, key: str, log: object) -> None:
    for name in ("target", "draft"):
        (out / name).mkdir()
        (out / name / "config.json").write_text("{}")
    info = {
        "key": key,
        "tokenizer": {
            "vocab_size": 7,
            "bos_token": dtok.BOS_TOKEN,
            "eos_token": dtok.EOS_TOKEN,
            "eos_token_id": 1,
            "chat_template": dtok.CHAT_TEMPLATE,
        },
    }
    (out / "build-info.json").write_text(json.dumps(info))


@pytest.mark.unit
def test_build_is_cached_and_published_atomically(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []

    def fake(out: Path, **kw: object) -> None:
        calls.append(str(out))
        _fake_build(out, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(dm, "build_into", fake)
    pair = dm.build_demo_pair(cache_dir=tmp_path, log=lambda _m: None)
    assert pair.root == tmp_path / f"demo-{dm.recipe_key()}"
    assert pair.target_dir == pair.root / "target" and pair.draft_dir == pair.root / "draft"
    assert pair.eos_token == dtok.EOS_TOKEN and pair.vocab_size == 7
    assert Path(calls[0]).parent == tmp_path and Path(calls[0]) != pair.root
    assert dm.build_demo_pair(cache_dir=tmp_path, log=lambda _m: None) == pair
    assert len(calls) == 1
    assert dm.demo_model_dir("draft", cache_dir=tmp_path) == pair.draft_dir
    dm.build_demo_pair(cache_dir=tmp_path, force=True, log=lambda _m: None)
    assert len(calls) == 2
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


@pytest.mark.unit
def test_failed_build_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def boom(out: Path, **_kw: object) -> None:
        (out / "target").mkdir()
        raise RuntimeError("disk full")

    monkeypatch.setattr(dm, "build_into", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        dm.build_demo_pair(cache_dir=tmp_path, log=lambda _m: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"demo-{dm.recipe_key()}.lock"]


def _locked_builder(cache_dir: str, marker: str) -> None:
    import time

    def slow(out: Path, **kw: object) -> None:
        with open(marker, "a") as handle:
            handle.write("build\n")
        time.sleep(0.5)
        _fake_build(out, **kw)  # type: ignore[arg-type]

    dm.build_into = slow  # type: ignore[assignment]  # child process only
    dm.build_demo_pair(cache_dir=Path(cache_dir), log=lambda _m: None)


@pytest.mark.unit
def test_concurrent_builders_build_once(tmp_path: Path) -> None:
    marker = tmp_path / "builds.txt"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_locked_builder, args=(str(tmp_path), str(marker))) for _ in "ab"]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    assert marker.read_text() == "build\n"


@pytest.mark.unit
def test_main_prints_the_folders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(dm, "build_into", _fake_build)
    assert dm.main(["--cache-dir", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    key = dm.recipe_key()
    assert out == [
        f"target: {tmp_path / f'demo-{key}' / 'target'}",
        f"draft:  {tmp_path / f'demo-{key}' / 'draft'}",
    ]


# --- tokenizer, template, configs (need the demo extras) -------------------------------------
@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    pytest.importorskip("tokenizers")
    chats = pg.generate_chats(300, seed=0)
    return dtok.train_tokenizer(chats, dr.DEFAULT_RECIPE)


@pytest.mark.unit
def test_tokenizer_is_deterministic(tokenizer) -> None:  # type: ignore[no-untyped-def]
    again = dtok.train_tokenizer(pg.generate_chats(300, seed=0), dr.DEFAULT_RECIPE)
    assert again.to_str() == tokenizer.to_str()


@pytest.mark.unit
def test_tokenizer_round_trip_and_special_tokens(tokenizer) -> None:  # type: ignore[no-untyped-def]
    for i, token in enumerate(dtok.SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == i
    text = "Count from 7 to 40.\nÜber naïve café — 東京 🚀"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    rendered = dtok.render_chat("hi", "there")
    ids = tokenizer.encode(rendered).ids
    assert ids[0] == 0 and ids.count(dtok.SPECIAL_TOKENS.index(dtok.EOS_TOKEN)) == 2
    assert tokenizer.decode(ids, skip_special_tokens=False) == rendered


@pytest.mark.unit
def test_chat_template_matches_render_chat(tokenizer) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    hf = dtok.hf_tokenizer(tokenizer)
    messages = [{"role": "user", "content": "Count from 3 to 40."}]
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == dtok.render_chat("Count from 3 to 40.")
    convo = [*messages, {"role": "assistant", "content": "3, 4"}]
    text = hf.apply_chat_template(convo, tokenize=False)
    assert text == dtok.render_chat("Count from 3 to 40.", "3, 4")
    assert hf.eos_token == dtok.EOS_TOKEN and hf.bos_token == dtok.BOS_TOKEN


@pytest.mark.unit
def test_saved_tokenizer_loads_with_autotokenizer(tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    dtok.save_tokenizer(dtok.hf_tokenizer(tokenizer), tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["chat_template"] == dtok.CHAT_TEMPLATE
    loaded = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(loaded, transformers.PreTrainedTokenizerFast)
    assert loaded.eos_token == dtok.EOS_TOKEN
    messages = [{"role": "user", "content": "hello"}]
    assert loaded.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    ) == dtok.render_chat("hello")


@pytest.mark.unit
def test_model_configs_share_the_vocabulary() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    recipe = dr.DEFAULT_RECIPE
    target = dtr.new_model(recipe.target, 1216, recipe)
    draft = dtr.truncated_copy(target, recipe.draft_layers)
    for model in (target, draft):
        cfg = model.config
        assert cfg.vocab_size == 1216
        assert cfg.max_position_embeddings >= 1024
        assert cfg.eos_token_id == dtok.SPECIAL_TOKENS.index(dtok.EOS_TOKEN)
        assert cfg.hidden_size // cfg.num_attention_heads == 64
    assert target.config.num_hidden_layers == recipe.target.layers
    assert draft.config.num_hidden_layers == recipe.draft_layers
    t_state, d_state = target.state_dict(), draft.state_dict()
    assert set(d_state) < set(t_state)
    assert all((d_state[k] == t_state[k]).all() for k in d_state)


@pytest.mark.unit
def test_ballast_keeps_the_core_and_appends_fresh_blocks() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    recipe = dr.DEFAULT_RECIPE
    core = dtr.new_model(recipe.target, 1216, recipe)
    target = dtr.with_ballast(core, 3, seed=1)
    n_core = recipe.target.layers
    assert target.config.num_hidden_layers == n_core + 3
    t_state, c_state = target.state_dict(), core.state_dict()
    assert all((t_state[k] == c_state[k]).all() for k in c_state)
    fresh = [k for k in t_state if k not in c_state]
    assert fresh and {int(k.split(".")[2]) for k in fresh} == {n_core, n_core + 1, n_core + 2}
    again = dtr.with_ballast(core, 3, seed=1).state_dict()
    assert all((again[k] == t_state[k]).all() for k in fresh)  # deterministic
    assert dtr.with_ballast(core, 0, seed=1) is core
    ids = torch.randint(0, 1216, (2, 24))
    with torch.inference_mode():
        core_logits, logits = core(input_ids=ids).logits, target(input_ids=ids).logits
    assert not torch.equal(core_logits, logits)  # the blocks do compute something


@pytest.mark.integration
def test_tiny_build_produces_loadable_folders(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    recipe = dataclasses.replace(
        dr.DEFAULT_RECIPE, n_chats=120, target_steps=3, draft_steps=2, eval_chats=2
    )
    shape = recipe.target
    messages: list[str] = []
    pair = dm.build_demo_pair(cache_dir=tmp_path, recipe=recipe, log=messages.append)
    assert pair.root.name == f"demo-{dm.recipe_key(recipe)}"
    info = json.loads((pair.root / "build-info.json").read_text())
    assert info["recipe"]["target_steps"] == 3 and set(info["weights_sha256"]) == {
        "target",
        "draft",
    }
    for folder in (pair.target_dir, pair.draft_dir):
        assert (folder / "model.safetensors").is_file()
        generation = json.loads((folder / "generation_config.json").read_text())
        assert generation["eos_token_id"] == pair.eos_token_id
        config = transformers.AutoConfig.from_pretrained(folder)
        assert config.eos_token_id == pair.eos_token_id
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        assert tok.eos_token == pair.eos_token
    assert any("built in" in m for m in messages)
    layers = transformers.AutoConfig.from_pretrained(pair.target_dir).num_hidden_layers
    assert layers == shape.layers + recipe.ballast_layers


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target_steps": 0}, "`target_steps`"),
        ({"batch_size": 2.0}, "`batch_size`"),
        ({"draft_layers": 4}, "`draft_layers`"),
        ({"draft_layers": 0}, "`draft_layers`"),
        ({"ballast_layers": -1}, "`ballast_layers`"),
    ],
)
@pytest.mark.unit
def test_recipe_validation_names_the_field(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(dr.DEFAULT_RECIPE, **change)


@pytest.mark.unit
def test_build_removes_leftovers_of_a_killed_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stale = tmp_path / f".demo-{dm.recipe_key()}.tmp-killed"
    (stale / "target").mkdir(parents=True)
    monkeypatch.setattr(dm, "build_into", _fake_build)
    pair = dm.build_demo_pair(cache_dir=tmp_path, log=lambda _m: None)
    assert not stale.exists()
    assert oct(pair.root.stat().st_mode & 0o777) == oct(0o755)
