"""A params file's YAML, read strictly: a key written twice in one mapping is an error.

YAML says the keys of a mapping are unique, but PyYAML's ``safe_load`` keeps the last of two
equal keys silently, so ``max_tokens: 48`` followed by ``max_tokens: 32`` (or two
``analysis:`` sections) would pass validation with one of them dropped. :func:`load_yaml`
reads with :class:`UniqueKeyLoader`, PyYAML's ``SafeLoader`` whose ``construct_mapping``
checks the keys (the documented way to extend a loader), and raises
:class:`DuplicateKeyError` naming the key and both lines.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["DuplicateKeyError", "UniqueKeyLoader", "load_yaml"]


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping names one key twice (YAML says keys are unique; PyYAML keeps the last)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, refusing a key written twice in one mapping instead of letting
    the last one silently win (the documented way: a loader subclass whose
    ``construct_mapping`` checks the keys)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                break
            if first is None:
                seen[key] = line
            else:
                raise DuplicateKeyError(
                    problem=f"key {key!r} is written twice, at line {first} and at line "
                    f"{line} (the second would silently replace the "
                    "first): keep one",
                    problem_mark=key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse YAML like ``yaml.safe_load``, refusing a key written twice in one mapping."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: safe
