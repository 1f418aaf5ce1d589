"""Reading a YAML input that a person wrote: duplicate keys refused, and nothing that could hang or crash.

PyYAML's safe loader still takes two shapes badly (issue 24): an alias bomb — a few lines of anchors
and aliases that expand to billions of values (``a: &a [x, x, …]``, ``b: &b [*a, *a, …]``, …) — builds
quickly as shared objects, but anything that then walks the value (validation, hashing, a dump) never
ends; and a list nested 5,000 deep overflows the composer's recursion with a 3,000-line traceback.
:func:`yaml_shape_problem` walks the *event* stream once — PyYAML's parser keeps its own stack, so this
walk neither recurses nor expands an alias — and reports the nesting depth and the size the document
would have with every alias expanded, so the loader can refuse both in one line before composing.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "MAX_VALUES", "UniqueKeyLoader", "yaml_shape_problem"]

MAX_DEPTH = 64
"""Deepest nesting of lists and mappings a YAML input may have (an evaluation config has 3)."""
MAX_VALUES = 100_000
"""Most values (scalars and collections) a YAML input may hold once every alias is expanded."""


class UniqueKeyLoader(yaml.SafeLoader):
    """Safe loader that refuses a mapping with the same key twice (PyYAML keeps the last silently)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # the base constructor reports unhashable keys itself
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def yaml_shape_problem(text: str, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> str | None:
    """What makes *text* unsafe to compose, as the middle of a one-line message; None when it is fine.

    Linear in the length of *text*: sizes of anchored values are remembered, an alias adds its anchor's
    size without being expanded, and the walk stops at the first limit crossed.

    Raises:
        yaml.YAMLError: *text* is not YAML at all (the caller reports it as a syntax error).
    """
    sizes: dict[str, int] = {}  # values an anchored node stands for, aliases expanded
    stack: list[list[Any]] = []  # [anchor, values so far] of each open collection
    expanded = 0  # values of the whole document so far, aliases expanded
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        count = 0
        line = event.start_mark.line + 1 if event.start_mark is not None else "?"
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([event.anchor, 1])
            expanded += 1
            if len(stack) > max_depth:
                return (
                    f"lists and mappings nested more than {max_depth} levels deep at line "
                    f"{line}; a config is a few levels deep — fix the brackets or the indentation"
                )
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, size = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
            if stack:
                stack[-1][1] += size
        elif isinstance(event, yaml.ScalarEvent):
            count = 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            count = sizes.get(event.anchor or "", 1)
        if count:
            expanded += count
            if stack:
                stack[-1][1] += count
        if expanded > max_values:
            return (
                f"expands to more than {max_values:,} values through its aliases by line {line} "
                "(an alias bomb: anchors that repeat anchors); write the values out — a config needs no aliases "
                "of that size"
            )
    return None
