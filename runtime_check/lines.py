"""Which source lines a finding covers, and where they went in the fixed copy.

A finding points at a node; its runtime evidence comes from the statement holding it. The
fixed copy has other line numbers, so lines are mapped through a line diff.
"""

from __future__ import annotations

import ast
import difflib
import re
from typing import Optional

# What a statement line is about: its assignment target or the call it makes.
HEAD = re.compile(r"\s*([\w.]+)\s*(?:=(?!=)|\()")


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
    """Maps 1-based line numbers of the original text to the fixed text.

    Unchanged lines map one to one. Inside a changed block, each original line is paired
    with the fixed line most like it (in order; the same assignment target or called name
    counts most); the lines a fix inserted before a paired line belong to it (an import,
    `state_dict = torch.load(...)` above the load it fixes), and the lines after the last
    pair belong to the last one.
    """

    SIMILAR = 0.5  # difflib ratio from which two lines are the same line, edited

    def __init__(self, original: str, fixed: str) -> None:
        self.original = original.splitlines()
        self.fixed = fixed.splitlines()
        self.mapping: dict[int, range] = {}  # 0-based original line -> 0-based fixed range
        self._back: Optional[dict[int, int]] = None  # 0-based fixed line -> 0-based original line
        matcher = difflib.SequenceMatcher(None, self.original, self.fixed, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for offset in range(i2 - i1):
                    self.mapping[i1 + offset] = range(j1 + offset, j1 + offset + 1)
            else:
                self._map_block(i1, i2, j1, j2)

    def _map_block(self, i1: int, i2: int, j1: int, j2: int) -> None:
        pairs = self._pairs(i1, i2, j1, j2)
        if not pairs:
            for i in range(i1, i2):
                self.mapping[i] = range(j1, j2)  # nothing recognisable: the whole block
            return
        previous_j = j1
        for index, (i, j) in enumerate(pairs):
            last = index == len(pairs) - 1
            self.mapping[i] = range(previous_j, j2 if last else j + 1)
            previous_j = j + 1
        paired = dict(pairs)
        for i in range(i1, i2):
            if i not in paired:  # rewritten past recognition: the lines between its neighbours
                before = max((j for k, j in pairs if k < i), default=j1 - 1)
                after = min((j for k, j in pairs if k > i), default=j2)
                self.mapping[i] = range(before + 1, after)

    def _pairs(self, i1: int, i2: int, j1: int, j2: int) -> list[tuple[int, int]]:
        """The in-order pairing of similar lines with the greatest total similarity."""
        n, m = i2 - i1, j2 - j1
        similarity = [[_similarity(self.original[i1 + a], self.fixed[j1 + b]) for b in range(m)] for a in range(n)]
        score = [[0.0] * (m + 1) for _ in range(n + 1)]
        for a in range(1, n + 1):
            for b in range(1, m + 1):
                best = max(score[a - 1][b], score[a][b - 1])
                if similarity[a - 1][b - 1] >= self.SIMILAR:
                    best = max(best, score[a - 1][b - 1] + similarity[a - 1][b - 1])
                score[a][b] = best
        pairs, a, b = [], n, m
        while a > 0 and b > 0:
            if similarity[a - 1][b - 1] >= self.SIMILAR and score[a][b] == score[a - 1][b - 1] + similarity[a - 1][b - 1]:
                pairs.append((i1 + a - 1, j1 + b - 1))
                a, b = a - 1, b - 1
            elif score[a][b] == score[a - 1][b]:
                a -= 1
            else:
                b -= 1
        return pairs[::-1]

    def line(self, row: int) -> range:
        """The fixed lines (1-based) that stand where original line `row` stood (empty: removed)."""
        mapped = self.mapping.get(row - 1, range(0))
        return range(mapped.start + 1, mapped.stop + 1) if mapped else range(0)

    def lines(self, rows: range) -> range:
        mapped = [line for row in rows for line in self.line(row)]
        return range(min(mapped), max(mapped) + 1) if mapped else range(0)

    def back(self, row: int) -> int:
        """The original line (1-based) that fixed line `row` stands for: the inverse of `line`,
        so that evidence from the fixed copy quotes the user's lines. A line that only a fix
        added (an import, a `set_epoch` call) belongs to the original line after it, the one it
        was inserted before (the last line, at the end)."""
        if self._back is None:
            self._back = {}
            for original in sorted(self.mapping):
                for fixed in self.mapping[original]:
                    self._back.setdefault(fixed, original)
        if row - 1 in self._back:
            return self._back[row - 1] + 1
        later = [fixed for fixed in self._back if fixed > row - 1]
        if later:
            return self._back[min(later)] + 1
        return max(self._back.values(), default=row - 1) + 1

    def back_lines(self, rows: range) -> range:
        """The original lines that fixed lines `rows` stand for (empty for no rows)."""
        mapped = [self.back(row) for row in rows]
        return range(min(mapped), max(mapped) + 1) if mapped else range(0)


def _similarity(original: str, fixed: str) -> float:
    ratio = difflib.SequenceMatcher(None, original.strip(), fixed.strip()).ratio()
    head_a, head_b = HEAD.match(original), HEAD.match(fixed)
    if head_a and head_b and head_a.group(1) == head_b.group(1):
        return ratio + 1.0
    return ratio
