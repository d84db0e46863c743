"""Jupyter notebooks (`.ipynb`): checked and fixed as one Python module made of their code cells.

A notebook runs its cells in one namespace, so a sampler made in cell 2 and iterated in cell 5
is one program: the code cells are joined, in order, into one module, with a boundary line
between cells. IPython syntax (`%matplotlib inline`, `!pip install x`, `files = !ls`, `obj?`,
cell magics such as `%%time` or `%%bash`) is masked with text of the same length, so that
columns stay right: a line magic becomes an expression statement and a comment (`0#atplotlib
inline`), a non-Python cell becomes comments. Masked lines go back as they were when a fix
writes the notebook.

Findings name the cell (1-based, counting every cell as Jupyter shows them, as ruff does) and
the line inside it: `nb.ipynb:cell 3:2:7: DPL007 ...`; so do the lines their messages cite
("the loop at cell 3, line 4"). A fix rewrites only the `source` of the cells it changed;
outputs, metadata, ids, the JSON's indentation and its final newline stay. `fix --diff` prints
the patch of the JSON text as stored, which `git apply` and `patch` take.
Notebooks that cannot be read (invalid JSON, nbformat 3, no cells list) are one DPL000 line.
Notebooks whose kernel is not Python are passed over.

This module turns cells into one text and findings back into cells, and runs nothing: the
runner (`dplint.runner.process_notebook_file`) reads a notebook, lints or fixes its text and
writes it back.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from dataclasses import dataclass, field, replace
from typing import Optional, Union

from dplint.rule import Finding, Position, TextEdit
from dplint.source import LINE_BREAK

NOTEBOOK_SUFFIX = ".ipynb"
# Between two cells in the joined module. A comment on its own line: no fix anchors on it, and
# fixes that insert or delete statements keep it in place, so the cells split back cleanly.
CELL_BOUNDARY = "# %% dplint-cell-boundary"
_BOUNDARY_LINE = re.compile(r"^# %% dplint-cell-boundary(?:\r\n|\r|\n)", re.M)
# Cell magics whose body is Python (IPython runs it); any other (`%%bash`, `%%writefile`,
# `%%html`, ...) makes the whole cell something else, masked as comments.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "profile", "cache"})
# `x = !ls`, `files = %sx ls`: an assignment whose value is a shell escape or magic.
_ASSIGNED_ESCAPE = re.compile(r"^\s*[\w.\[\], ]+\s*=\s*(?=[!%])")
# `obj?`, `obj.method??`: IPython's help.
_HELP = re.compile(r"^\s*[\w.]+\?\??\s*$")


class NotebookError(Exception):
    """A notebook that cannot be read; the message is one line for the user."""


def is_notebook(path: str) -> bool:
    return path.endswith(NOTEBOOK_SUFFIX)


@dataclass
class CodeCell:
    index: int  # 1-based, among all cells (as the notebook shows them)
    source: str  # as written in the notebook
    as_list: bool  # `source` is stored as a list of lines (nbformat's usual form)
    masked: str = ""  # with IPython syntax masked, same length line by line
    restore: dict[str, str] = field(default_factory=dict)  # masked line -> original line
    first_row: int = 1  # its first line in the joined module
    added_newline: bool = False  # a newline was added after its last line when joining


@dataclass
class Notebook:
    data: dict
    raw: str
    cells: list[CodeCell]
    text: str = ""  # the joined module

    def locate(self, row: int, column: int) -> tuple[int, Position]:
        """A position in the joined module -> (cell, position inside the cell)."""
        starts = [cell.first_row for cell in self.cells]
        at = max(bisect.bisect_right(starts, row) - 1, 0)
        cell = self.cells[at]
        return cell.index, Position(max(row - cell.first_row + 1, 1), column)

    def split(self, text: str) -> Optional[list[str]]:
        """The joined module (after fixes) back into the code cells' sources; None if the
        boundaries no longer line up."""
        pieces = _BOUNDARY_LINE.split(text)
        if len(pieces) != len(self.cells) + 1:
            return None
        if pieces[-1].strip():
            return None
        sources = []
        for cell, piece in zip(self.cells, pieces):
            if piece == cell.masked:
                sources.append(cell.source)
                continue
            lines = piece.splitlines(keepends=True)
            restored = []
            for line in lines:
                body = line.rstrip("\r\n")
                restored.append(cell.restore.get(body, body) + line[len(body):])
            new = "".join(restored)
            if cell.added_newline and new.endswith("\n"):
                new = new[:-1]
            sources.append(new)
        return sources

    def dumps(self, sources: list[str]) -> str:
        """The notebook's JSON with the code cells' sources replaced, formatted as it was."""
        cells = self.data["cells"]
        for cell, source in zip(self.cells, sources):
            if source != cell.source:
                cells[cell.index - 1]["source"] = source.splitlines(keepends=True) if cell.as_list else source
        return _dump_like(self.data, self.raw)

    def laid_out_as(self, text: str) -> "Notebook":
        """The notebook with its cells starting where they start in `text`, the joined module
        after fixes (which may have added or removed lines in a cell)."""
        first_rows, row, offset = [1], 1, 0
        for boundary in _BOUNDARY_LINE.finditer(text):
            row += len(LINE_BREAK.findall(text, offset, boundary.end()))
            offset = boundary.end()
            first_rows.append(row)
        if len(first_rows) != len(self.cells) + 1:
            return self  # the fix is refused in this case (see `split`)
        cells = [replace(cell, first_row=first) for cell, first in zip(self.cells, first_rows)]
        return replace(self, cells=cells)


def loads(raw: str) -> Notebook:
    """Read a notebook's JSON text; raises NotebookError with a one-line reason."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise NotebookError(f"cannot read notebook: invalid JSON ({error.msg} at line {error.lineno}, column {error.colno})") from None
    except RecursionError:
        raise NotebookError("cannot read notebook: the JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise NotebookError("cannot read notebook: the JSON is not an object")
    version = data.get("nbformat")
    if isinstance(version, int) and version < 4:
        raise NotebookError(
            f"cannot read notebook: nbformat {version} is not supported (dplint reads nbformat 4; "
            "convert with `jupyter nbconvert --to notebook --nbformat 4`)"
        )
    if version != 4:
        raise NotebookError(f"cannot read notebook: unknown nbformat {version!r} (dplint reads nbformat 4)")
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise NotebookError("cannot read notebook: it has no list of cells")
    notebook = Notebook(data, raw, [])
    if not _is_python(data):
        return notebook  # an R or Julia notebook: nothing for dplint
    for index, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            notebook.cells.append(CodeCell(index, "".join(source), True))
        elif isinstance(source, str):
            notebook.cells.append(CodeCell(index, source, False))
        else:
            raise NotebookError(f"cannot read notebook: cell {index}'s source is neither text nor a list of lines")
    _join(notebook)
    return notebook


def _is_python(data: dict) -> bool:
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    for key, name_key in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(name_key), str):
            return table[name_key].lower() == "python"
    return True  # no say: assume Python, as Jupyter does


def _join(notebook: Notebook) -> None:
    parts = []
    row = 1
    for cell in notebook.cells:
        cell.masked, cell.restore = mask_cell(cell.source)
        if cell.masked and not cell.masked.endswith(("\n", "\r")):
            cell.masked += "\n"
            cell.added_newline = True
        cell.first_row = row
        parts.append(cell.masked)
        parts.append(CELL_BOUNDARY + "\n")
        row += len(LINE_BREAK.findall(cell.masked)) + 1
    notebook.text = "".join(parts)


def mask_cell(source: str) -> tuple[str, dict[str, str]]:
    """The cell with IPython syntax replaced by Python of the same length on each line, and
    the map back from each masked line to the original."""
    lines = source.splitlines(keepends=True)
    masked_lines = []
    restore: dict[str, str] = {}
    first = next((line.strip() for line in lines if line.strip()), "")
    whole_cell = first.startswith("%%") and first[2:].split(" ", 1)[0].strip() not in PYTHON_CELL_MAGICS
    continued = False  # the previous line was masked and ended with a backslash
    python = _Scanner()  # IPython syntax only starts a statement: `% b` inside brackets is Python
    for line in lines:
        body = line.rstrip("\r\n")
        stripped = body.lstrip()
        indent = len(body) - len(stripped)
        new = body
        if whole_cell or continued:
            new = body[:indent] + "#" + stripped[1:] if stripped else body
        elif python.at_statement_start():
            if stripped.startswith(("%", "!", "?")) or _HELP.match(body):
                new = _as_expression(body, indent)
            else:
                assigned = _ASSIGNED_ESCAPE.match(body)
                if assigned:
                    new = _as_expression(body, assigned.end())
        if new != body:
            restore[new] = body
            continued = body.endswith("\\")
        else:
            continued = False
            python.feed(body)
        masked_lines.append(new + line[len(body):])
    return "".join(masked_lines), restore


class _Scanner:
    """Just enough of Python's tokenizer to tell whether a line starts a statement: not
    inside brackets, a string or a backslash continuation."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: Optional[str] = None  # the open string's quote (only triple quotes span lines)
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line: str) -> None:
        index, comment = 0, False
        while index < len(line):
            character = line[index]
            if self.quote is not None:
                if character == "\\":
                    index += 2
                elif line.startswith(self.quote, index):
                    index += len(self.quote)
                    self.quote = None
                else:
                    index += 1
                continue
            if character == "#":
                comment = True
                break
            if character in "\"'":
                self.quote = line[index : index + 3] if line[index : index + 3] in ('"""', "'''") else character
                index += len(self.quote)
                continue
            if character in "([{":
                self.depth += 1
            elif character in ")]}":
                self.depth = max(self.depth - 1, 0)
            index += 1
        if self.quote in ('"', "'"):
            self.quote = None  # a one-line string left open: a syntax error the parser will report
        self.continued = self.quote is None and not comment and line.endswith("\\")


def _as_expression(body: str, start: int) -> str:
    """`body` from `start` on replaced by `0` and a comment: valid wherever a statement or a
    value is (`!pip install x` -> `0#ip install x`, `x = !ls` -> `x = 0#s`)."""
    rest = body[start:]
    if len(rest) < 2:
        return body[:start] + "0" * len(rest)
    return body[:start] + "0#" + rest[2:]


def _dump_like(data: dict, original: str) -> str:
    """JSON text for `data` in the original's layout: its indentation, separators, escaping of
    non-ASCII characters, line breaks and what follows the closing brace. The layout is the one
    that reproduces the original file exactly (nbformat's, Colab's and Kaggle's compact one all
    do); when none does, the detected indentation with nbformat's other choices."""
    stripped = original.rstrip()
    trailing = original[len(stripped):]
    line_break = "\r\n" if "\r\n" in stripped else "\n"
    indent_match = re.match(r"\s*\{\r?\n([ \t]+)\"", original)
    indent: Union[str, int, None] = indent_match.group(1) if indent_match else None
    if isinstance(indent, str) and set(indent) == {" "}:
        indent = len(indent)
    layouts = [
        {"indent": indent, "ensure_ascii": ensure_ascii, "separators": separators}
        for ensure_ascii in (False, True)
        for separators in (None, (",", ":"), (", ", ": "))
    ]
    chosen = {"indent": indent, "ensure_ascii": False, "separators": None}
    try:
        before = json.loads(original)
    except ValueError:
        before = None
    for layout in layouts:
        if before is not None and json.dumps(before, **layout).replace("\n", line_break) == stripped:
            chosen = layout
            break
    return json.dumps(data, **chosen).replace("\n", line_break) + trailing


# ---------------------------------------------------------------------------- running
def relocate(finding: Finding, notebook: Notebook) -> Finding:
    """A finding in joined-module coordinates -> the same in its cell's coordinates."""
    if getattr(finding, "cell", None) is not None or not notebook.cells:
        return finding
    cell, start = notebook.locate(finding.location.row, finding.location.column)
    end_cell, end = notebook.locate(finding.end_location.row, finding.end_location.column)
    if end_cell != cell:
        end = start
    edits = []
    for edit in finding.edits:
        _, edit_start = notebook.locate(edit.location.row, edit.location.column)
        _, edit_end = notebook.locate(edit.end_location.row, edit.end_location.column)
        edits.append(TextEdit(edit.start, edit.end, edit.content, edit_start, edit_end))
    message = with_cell_lines(finding.message, notebook)
    return replace(finding, message=message, location=start, end_location=end, edits=edits, cell=cell)


# `line 20` in a message: a line of the joined module, unless it is another file's ("line 9 of
# its file"; other files' lines are written `path:9`).
_CITED_LINE = re.compile(r"\bline (\d+)\b(?! of its file)")
_CODE_SPAN = re.compile(r"(`[^`]*`)")


def with_cell_lines(message: str, notebook: Notebook) -> str:
    """The message with each line it cites named by cell and line inside it ("the loop at
    line 20" -> "the loop at cell 3, line 4"). Rules count lines in the joined module; this
    keeps them from having to know about notebooks. Code in backticks is left as it is."""
    if not notebook.cells or "line " not in message:
        return message

    def in_cell(match: re.Match) -> str:
        cell, position = notebook.locate(int(match.group(1)), 1)
        return f"cell {cell}, line {position.row}"

    parts = _CODE_SPAN.split(message)
    return "".join(part if index % 2 else _CITED_LINE.sub(in_cell, part) for index, part in enumerate(parts))


def relocate_project_findings(findings: list[Finding]) -> list[Finding]:
    """Project-wide findings come in joined-module coordinates: notebooks' go into cells."""
    out = []
    for finding in findings:
        notebook = _read_for_positions(finding.filename) if is_notebook(finding.filename) else None
        out.append(relocate(finding, notebook) if notebook is not None else finding)
    return out


def _read_for_positions(path: str) -> Optional[Notebook]:
    try:
        with open(path, encoding="utf-8-sig") as handle:
            return loads(handle.read())
    except (OSError, UnicodeDecodeError, NotebookError):
        return None


# ---------------------------------------------------------------------------- cells for code frames
def cell_lines(path: str, cell: int) -> Optional[list[str]]:
    """The lines of a code cell's source as the notebook at `path` stores it (IPython syntax
    and all), for the `full` output's code frames; None when it cannot be read."""
    notebook = _read_for_positions(path)
    for code_cell in notebook.cells if notebook is not None else ():
        if code_cell.index == cell:
            return LINE_BREAK.split(code_cell.source)
    return None


# ---------------------------------------------------------------------------- positions in the JSON
def json_position(path: str, cell: int, row: int, column: int) -> Optional[Position]:
    """Where a cell's line and column lie in the notebook's JSON text (for SARIF and GitHub
    annotations, which point into the file as stored); None when it cannot be told."""
    lines = _json_source_lines(path).get(cell)
    if not lines or row > len(lines):
        return None
    json_row, json_column, text = lines[row - 1]
    escaped = len(json.dumps(text[: column - 1], ensure_ascii=False)) - 2
    return Position(json_row, json_column + 1 + escaped)


@functools.lru_cache(maxsize=32)
def _json_source_lines(path: str) -> dict[int, list[tuple[int, int, str]]]:
    """cell -> for each of its source lines: (row, column of the string's quote, the line)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            raw = handle.read()
        cells = json.loads(raw)["cells"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return {}
    decoder = json.JSONDecoder()
    key = re.compile(r'"source"\s*:\s*')
    found: dict[int, list[tuple[int, int, str]]] = {}
    position = max(raw.find('"cells"'), 0)
    for index, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or "source" not in cell:
            continue
        while True:  # the next `"source":` whose value is this cell's source
            match = key.search(raw, position)
            if match is None:
                return found
            try:
                value, end = decoder.raw_decode(raw, match.end())
            except ValueError:
                value, end = None, match.end()
            position = end
            if value == cell["source"]:
                break
        elements = []  # (offset of the string's quote, its text)
        if isinstance(value, str):
            elements.append((match.end(), value))
        elif isinstance(value, list):
            offset = match.end() + 1
            for _ in value:
                offset = _skip(raw, offset, " \t\r\n")
                text, after = decoder.raw_decode(raw, offset)
                elements.append((offset, text))
                offset = _skip(raw, after, " \t\r\n,")
        rows = []
        for offset, text in elements:
            row = raw.count("\n", 0, offset) + 1
            column = offset - (raw.rfind("\n", 0, offset) + 1) + 1
            consumed = 0  # a string holding several lines: the ones before sit on the same JSON line
            for line in text.splitlines(keepends=True) or [""]:
                rows.append((row, column + len(json.dumps(text[:consumed], ensure_ascii=False)) - 2, line.rstrip("\r\n")))
                consumed += len(line)
        found[index] = rows
    return found


def _skip(raw: str, offset: int, characters: str) -> int:
    while offset < len(raw) and raw[offset] in characters:
        offset += 1
    return offset
