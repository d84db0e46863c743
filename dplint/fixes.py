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
    groups: list[list[cst.SimpleStatementLine]] = []  # runs of import lines, no blank line between
    previous = None
    for top in model.module.body:
        if model.order(top) >= before:
            break
        if isinstance(top, cst.SimpleStatementLine) and all(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in top.body
        ):
            anchor = top
            if groups and groups[-1][-1] is previous and not top.leading_lines:
                groups[-1].append(top)
            else:
                groups.append([top])
        previous = top
    placed = _sorted_place(model, groups, module, name)
    if placed is not None:
        return name, placed
    if anchor is not None:
        return name, Edit(anchor, statement, EditKind.INSERT_AFTER_STATEMENT)
    first = _first_code_statement(model.module)
    if first is None:
        return name, None
    return name, Edit(first, statement, EditKind.INSERT_BEFORE_STATEMENT)


def _sorted_place(model: SemanticModel, groups: list[list[cst.SimpleStatementLine]], module: str,
                  name: str) -> Optional[Edit]:
    """Where isort (and ruff's `I001`, with their defaults) would put `from module import name`:
    joined to a one-line `from module import ...`, or in the group of imports of the same
    top-level package (`torch`), with `import x` lines first, then `from x import` lines, each
    sorted by module. None when no group imports that package (the caller appends it)."""
    package = module.split(".")[0]
    ours = (1, module.lower())
    for group in groups:
        keys = [_sort_key(model, line) for line in group]
        if not any(key is not None and key[1].split(".")[0] == package for key in keys):
            continue
        for line, key in zip(group, keys):
            joined = _joined(model, line, module, name) if key == ours else None
            if joined is not None:
                return joined
        after = [line for line, key in zip(group, keys) if key is not None and key <= ours]
        if after:
            return Edit(after[-1], f"from {module} import {name}", EditKind.INSERT_AFTER_STATEMENT)
        return Edit(group[0], f"from {module} import {name}", EditKind.INSERT_BEFORE_STATEMENT)
    return None


def _sort_key(model: SemanticModel, line: cst.SimpleStatementLine) -> Optional[tuple[int, str]]:
    """isort's order of a line within its section: `import x` lines, then `from x import`."""
    if len(line.body) != 1:
        return None
    (statement,) = line.body
    if isinstance(statement, cst.Import):
        return (0, model.code(statement.names[0].name).lower())
    if statement.relative or statement.module is None:
        return None
    return (1, model.code(statement.module).lower())


def _joined(model: SemanticModel, line: cst.SimpleStatementLine, module: str, name: str) -> Optional[Edit]:
    """`from module import a, b` with `name` among its names, sorted as isort sorts them
    (CONSTANTS, Classes, then the rest), when the line is one plain line."""
    (statement,) = line.body
    if isinstance(statement.names, cst.ImportStar) or statement.lpar is not None:
        return None
    names = [model.code(alias).strip().rstrip(",").strip() for alias in statement.names] + [name]

    def order(alias: str) -> tuple[int, str]:
        bare = alias.split(" ")[0]
        return (0 if bare.isupper() and len(bare) > 1 else 1 if bare[:1].isupper() else 2, bare.lower())

    return Edit(statement, f"from {module} import {', '.join(sorted(names, key=order))}")


def _first_code_statement(module: cst.Module) -> Optional[cst.CSTNode]:
    for statement in module.body:
        if not is_docstring(statement):
            return statement
    return None
