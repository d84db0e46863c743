"""Building blocks for fixes that several rules share."""

from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst

from dplint.rule import Edit, EditKind
from dplint.semantic import SemanticModel, is_docstring


def without_argument(args: Sequence[cst.Arg], removed: cst.Arg) -> list[cst.Arg]:
    """The argument list without one argument, keeping commas and line layout right."""
    index = list(args).index(removed)
    kept = [arg for arg in args if arg is not removed]
    if index == len(args) - 1 and index > 0:
        # The last argument goes: its predecessor takes over its comma (or lack of one) and
        # the whitespace before the closing parenthesis.
        kept[index - 1] = kept[index - 1].with_changes(
            comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg
        )
    return kept


def ensure_import(model: SemanticModel, module: str, name: str, used_at: cst.CSTNode) -> tuple[str, Optional[Edit]]:
    """How to refer to `module.name` at `used_at`, and the edit adding `from module import name`.

    An existing import (under any alias) is reused. Otherwise the import goes on its own line
    after the last top-level import that runs before `used_at` (or after the docstring when
    there is none). Two fixes asking for the same import produce the same edit, applied once.
    """
    qualified = f"{module}.{name}"
    for local, target in model.imports.items():
        if target == qualified:
            return local, None
    statement = f"from {module} import {name}"
    before = model.order(used_at)
    anchor = None
    for top in model.module.body:
        if model.order(top) >= before:
            break
        if isinstance(top, cst.SimpleStatementLine) and all(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in top.body
        ):
            anchor = top
    if anchor is not None:
        return name, Edit(anchor, statement, EditKind.INSERT_AFTER_STATEMENT)
    first = _first_code_statement(model.module)
    if first is None:
        return name, None
    return name, Edit(first, statement, EditKind.INSERT_BEFORE_STATEMENT)


def _first_code_statement(module: cst.Module) -> Optional[cst.CSTNode]:
    for statement in module.body:
        if not is_docstring(statement):
            return statement
    return None
