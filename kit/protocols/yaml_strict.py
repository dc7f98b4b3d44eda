"""YAML for protocol files: safe loading that refuses a key given twice in one mapping (plain YAML keeps
the last one silently), naming the key and both lines."""

from __future__ import annotations

from typing import Any

import yaml

from kit.core.errors import ConfigError

MAX_DEPTH = 64  # nesting of mappings and lists; protocol files need 4
MAX_NODES = 100_000  # values after expanding aliases (a "billion laughs" file would otherwise hang)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose mappings refuse duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key ([a, b]: 1); SafeLoader reports it below
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise DuplicateKey(key, first, line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


class DuplicateKey(Exception):
    def __init__(self, key: Any, first: int, line: int) -> None:
        super().__init__(key, first, line)
        self.key, self.first, self.line = key, first, line


def _depth(node: yaml.Node, limit: int) -> None:
    stack, visited = [(node, 1)], 0
    while stack:
        current, depth = stack.pop()
        visited += 1
        if visited > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES} values once aliases are expanded")
        if depth > limit:
            raise ValueError(f"nested deeper than {limit} levels (line {current.start_mark.line + 1})")
        if isinstance(current, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in current.value)
        elif isinstance(current, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in current.value for child in pair)


def load(raw: bytes | str, source: str) -> Any:
    """Parse one YAML document; raise ConfigError naming `source` on bad syntax or a repeated key."""
    loader = _Loader(raw)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _depth(node, MAX_DEPTH)
        return loader.construct_document(node)
    except DuplicateKey as dup:
        raise ConfigError(f"{source}: key {dup.key!r} is given twice (lines {dup.first} and {dup.line})",
                          "keep one of them: YAML would silently use the last") from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{source}: not valid YAML ({first})", "fix the YAML syntax") from None
    finally:
        loader.dispose()
