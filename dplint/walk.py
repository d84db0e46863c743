"""A read-only walk over a LibCST tree that does not rebuild it.

`CSTNode.visit` rebuilds every node it passes (`_visit_and_replace_children` constructs a new
node and validates it), even for a `CSTVisitor` that changes nothing: on a whole repository
that is about half of building the semantic models. `walk` calls the visitor's `on_visit` /
`on_leave` on the same nodes, in the same order, reading each node's children from its fields.

The order of a node type's child fields is the order LibCST's own visit takes: it is recorded
from that visit once per type (`on_visit_attribute`). A type whose visit skips a field when it
is unset (an f-string expression's format spec) is recorded again for each node where the field
is set. Per-attribute hooks (`visit_Call_func`) are not called.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst import CSTNode

_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # type -> (visited, not always)


class _FieldOrder(cst.CSTVisitor):
    """Records the fields a node's visit enters, in order, without going deeper."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_visit(self, node: CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: CSTNode, attribute: str) -> None:
        self.names.append(attribute)


def _recorded(node: CSTNode) -> tuple[str, ...]:
    recorder = _FieldOrder()
    node._visit_and_replace_children(recorder)
    return tuple(recorder.names)


def _holds_nodes(value) -> bool:
    return isinstance(value, CSTNode) or (isinstance(value, (tuple, list)) and any(isinstance(v, CSTNode) for v in value))


def child_fields(node: CSTNode) -> tuple[str, ...]:
    """The node's fields holding its children, in the order LibCST visits them."""
    known = _FIELDS.get(type(node))
    if known is None:
        visited = _recorded(node)
        others = tuple(f.name for f in dataclasses.fields(node) if f.name not in visited)
        known = _FIELDS[type(node)] = (visited, others)
    visited, others = known
    for name in others:
        if _holds_nodes(getattr(node, name)):
            return _recorded(node)  # a field its visit enters only when set: this node's own order
    return visited


def walk(node: CSTNode, visitor) -> None:
    """`node.visit(visitor)` for a visitor that changes nothing, without rebuilding the tree:
    `visitor.on_visit(node)` (False: not its children), the children, `visitor.on_leave(node)`."""
    if visitor.on_visit(node):
        for name in child_fields(node):
            value = getattr(node, name)
            if isinstance(value, CSTNode):
                walk(value, visitor)
            elif isinstance(value, (tuple, list)):
                for item in value:
                    if isinstance(item, CSTNode):
                        walk(item, visitor)
    visitor.on_leave(node)
