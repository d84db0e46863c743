"""LibCST made cheaper for a linter that only reads trees: two process-wide adjustments.

1. `parse_module` without per-node validation. Every LibCST node validates itself when it
   is built (`CSTNode.__post_init__` calls `_validate`: balanced parentheses, whitespace that
   is whitespace, ...). That guards trees built by hand; a tree from the parser is valid by
   construction, and validating it costs about 40% of a parse (accelerate's 197 files: 5.9 s
   with, 3.6 s without). LibCST's own comment on `__post_init__` says as much ("avoid
   validating the tree when parsing a file"). Nodes built anywhere else (fixes, the fix
   check's re-parse, other code in the process) are still validated: the switch is per thread
   and on only while `parse_module` runs.
2. Identity `__hash__` and `__eq__` in C. LibCST nodes hash and compare by identity, through
   Python methods (`return id(self)`, `return self is other`); dplint keys dictionaries by
   node millions of times per run (parents, source order, scopes). `object`'s own methods
   mean the same, without a Python call each time.
3. Type tests in C. LibCST's node classes are ABCs, so `isinstance(node, cst.Name)` runs
   `ABCMeta.__instancecheck__`, a Python method, whenever `node` is of another type: the
   analysis makes millions of such tests. No node class is registered as a virtual subclass
   of another (LibCST never calls `register`), so `type`'s own tests give the same answers;
   the node classes' metaclass becomes an ABCMeta that uses them. Abstract classes stay
   abstract (that is a flag on each class, not the metaclass's doing).
"""

from __future__ import annotations

import abc
import threading

import libcst as cst
from libcst._nodes.base import CSTNode

_state = threading.local()
_validate_after_init = CSTNode.__post_init__


def _post_init(node: CSTNode) -> None:
    if not getattr(_state, "parsing", False):
        _validate_after_init(node)


def parse_module(text: str) -> cst.Module:
    """`cst.parse_module(text)`, the nodes left unvalidated (see the module docstring)."""
    _state.parsing = True
    try:
        return cst.parse_module(text)
    finally:
        _state.parsing = False


def _identity_in_c(node_class: type) -> None:
    """Replace LibCST's identity `__hash__`/`__eq__` (copied into every node class by
    `CSTNode.__init_subclass__`) by `object`'s, on the class and its subclasses."""
    for name, libcst_method in (("__hash__", _libcst_hash), ("__eq__", _libcst_eq)):
        if node_class.__dict__.get(name) is libcst_method:
            setattr(node_class, name, getattr(object, name))
    for subclass in node_class.__subclasses__():
        _identity_in_c(subclass)


_libcst_hash, _libcst_eq = CSTNode.__dict__["__hash__"], CSTNode.__dict__["__eq__"]
CSTNode.__post_init__ = _post_init
_identity_in_c(CSTNode)


class _NodeClass(abc.ABCMeta):
    """ABCMeta with `type`'s instance and subclass tests (see the module docstring, 3)."""

    __instancecheck__ = type.__instancecheck__
    __subclasscheck__ = type.__subclasscheck__


def _type_tests_in_c(node_class: type) -> None:
    if type(node_class) is abc.ABCMeta:
        node_class.__class__ = _NodeClass
    for subclass in node_class.__subclasses__():
        _type_tests_in_c(subclass)


_type_tests_in_c(CSTNode)
