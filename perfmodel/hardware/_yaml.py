"""Reading YAML that a careless or hostile user wrote, with every cost bounded.

``load_bounded(text, loader_class)`` parses to nodes first (linear in the text), then
counts the nodes the document would have with every alias expanded, and builds Python
objects only when that count is at most :data:`~perfmodel._limits.MAX_YAML_NODES`.
A "billion laughs" file of nested aliases is refused in milliseconds instead of
expanding to gigabytes; an alias that contains itself, and nesting deeper than
:data:`MAX_DEPTH`, are refused too.
"""

from __future__ import annotations

from typing import Any

import yaml

from perfmodel._limits import MAX_YAML_NODES

__all__ = ["MAX_DEPTH", "YamlLimitError", "load_bounded"]

#: Nesting depth of mappings and lists (a spec nests 4 deep); deeper is refused before
#: the recursive parser can exhaust the interpreter stack.
MAX_DEPTH = 64


_SELF_ALIAS = "the YAML has an alias (*name) inside the list or mapping it names"


class YamlLimitError(ValueError):
    """The document is too large, too deep, or expands too far through aliases."""


def _expanded_size(root: yaml.Node) -> int:
    """Nodes of the document with aliases expanded, counted without expanding them: a
    node shared through aliases is counted once per reference, from a memo of its size."""
    memo: dict[int, int] = {}
    on_path: set[int] = set()
    # iterative post-order walk: (node, depth, children done?)
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            if isinstance(node, yaml.MappingNode):
                kids = [n for pair in node.value for n in pair]
            else:
                kids = list(node.value)
            total = 1 + sum(memo[id(k)] for k in kids)
            memo[key] = min(total, MAX_YAML_NODES + 1)
            continue
        if key in memo:
            continue
        if depth > MAX_DEPTH:
            raise YamlLimitError(f"the YAML nests more than {MAX_DEPTH} levels deep")
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            memo[key] = 1
            continue
        if key in on_path:
            raise YamlLimitError(_SELF_ALIAS)
        on_path.add(key)
        stack.append((node, depth, True))
        children = [n for pair in node.value for n in pair] if isinstance(
            node, yaml.MappingNode) else list(node.value)
        for child in children:
            if id(child) in on_path:
                raise YamlLimitError(_SELF_ALIAS)
            if id(child) not in memo:
                stack.append((child, depth + 1, False))
    return memo[id(root)]


def _max_flow_depth(text: str) -> int:
    """Deepest bracket nesting of flow collections (``[[[...]]]``), a cheap upper bound
    checked before the recursive parser sees the text (quoted text may overcount)."""
    depth = best = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return best


def load_bounded(text: str, loader: type[Any]) -> Any:
    """``yaml.load(text, Loader=loader)`` with alias expansion and depth bounded.

    Raises :class:`YamlLimitError` (before building objects) when the document would hold
    more than :data:`MAX_YAML_NODES` nodes with aliases expanded, nests deeper than
    :data:`MAX_DEPTH`, or has an alias inside itself; ``yaml.YAMLError`` for bad YAML.
    """
    if _max_flow_depth(text) > MAX_DEPTH:
        raise YamlLimitError(f"the YAML nests more than {MAX_DEPTH} levels deep")
    instance = loader(text)
    try:
        try:
            node = instance.get_single_node()
        except RecursionError:
            raise YamlLimitError(f"the YAML nests more than {MAX_DEPTH} levels deep") from None
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_YAML_NODES:
            raise YamlLimitError(
                f"the YAML expands to more than {MAX_YAML_NODES:,} values through aliases "
                "(*name); a spec needs a few hundred: write the values out")
        return instance.construct_document(node)
    finally:
        instance.dispose()
