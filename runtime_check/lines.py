"""Which source lines a finding covers, and where they went in the fixed copy.

A finding points at a node; its runtime evidence comes from the statement holding it. The
fixed copy has other line numbers, so lines are mapped through a line diff.
"""

from __future__ import annotations

import ast
import difflib
from typing import Optional


def statement_lines(text: str, row: int, end_row: Optional[int] = None) -> range:
    """The lines of the innermost statement holding rows `row..end_row` (its header only,
    for a compound statement such as `for` or `with`); just those rows when it can't parse."""
    end_row = row if end_row is None else end_row
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return range(row, end_row + 1)
    best: Optional[tuple[int, int]] = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            last = max(first, _first_line(body[0]) - 1)  # the header of a compound statement
        if first <= row and end_row <= last and (best is None or last - first < best[1] - best[0]):
            best = (first, last)
    if best is None:
        return range(row, end_row + 1)
    return range(best[0], best[1] + 1)


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None)
    return min([node.lineno, *(d.lineno for d in decorators or ())])


class LineMap:
    """Maps 1-based line numbers of the original text to the fixed text."""

    def __init__(self, original: str, fixed: str) -> None:
        self.opcodes = difflib.SequenceMatcher(
            None, original.splitlines(), fixed.splitlines(), autojunk=False
        ).get_opcodes()

    def line(self, row: int) -> range:
        """The fixed lines that stand where original line `row` stood (empty when deleted)."""
        index = row - 1
        for tag, i1, i2, j1, j2 in self.opcodes:
            if i1 <= index < i2:
                if tag == "equal":
                    return range(j1 + index - i1 + 1, j1 + index - i1 + 2)
                return range(j1 + 1, j2 + 1)  # replaced (or deleted: empty) as a whole block
        return range(0)

    def lines(self, rows: range) -> range:
        mapped = [line for row in rows for line in self.line(row)]
        return range(min(mapped), max(mapped) + 1) if mapped else range(0)
