"""Unified diffs that `git apply` and `patch` accept for every file shape.

`difflib.unified_diff` alone gets five shapes wrong: a last line without a newline (it needs
the `\\ No newline at end of file` marker, or the next line of the patch is glued to it), line
breaks other than `\\n` (`str.splitlines` also splits at form feeds and Unicode separators,
which are not line breaks in a patch), a BOM (part of the first line's bytes), a file in
another encoding than UTF-8 (the patch must carry the file's own bytes), and file names that
hold a tab, a newline, a quote or bytes that are not ASCII (quoted as git quotes them).

A patch is bytes, a diff here is text: bytes that are not UTF-8 are carried as the lone
surrogates of Python's `surrogateescape`, so `diff.encode("utf-8", "surrogateescape")` gives
the patch's bytes (as for file names, `os.fsdecode`).
"""

from __future__ import annotations

import codecs
import difflib
import io
import re
import tokenize
from typing import Optional

NO_NEWLINE = "\\ No newline at end of file\n"
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")  # lines as patch tools see them: split at \n only
# git's quote_c_style: the characters with a letter escape; other control bytes, DEL and every
# byte from 0x80 (core.quotePath, git's default) are written in octal.
_C_ESCAPES = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
              0x22: '\\"', 0x5C: "\\\\"}


def patch_lines(text: str) -> list[str]:
    return _LINES.findall(text)


def quote_path(path: str) -> str:
    """`path` as git writes it after `--- ` and `+++ `: in double quotes with C escapes when it
    holds a control character, a quote, a backslash or a byte that is not ASCII; followed by a
    tab when it holds a space (GNU patch ends an unquoted name at whitespace otherwise)."""
    data = path.encode("utf-8", "surrogateescape")  # a name os.fsdecode made: its own bytes back
    if any(byte < 0x20 or byte >= 0x7F or byte in (0x22, 0x5C) for byte in data):
        quoted = "".join(
            _C_ESCAPES.get(byte) or (chr(byte) if 0x20 <= byte < 0x7F else f"\\{byte:03o}") for byte in data
        )
        quoted = f'"{quoted}"'
    else:
        quoted = path
    return quoted + "\t" if " " in path else quoted


def source_encoding(text: str) -> str:
    """The encoding Python source text is stored in: its PEP 263 coding cookie's, else UTF-8."""
    head = "".join(patch_lines(text)[:2]).encode("utf-8", "surrogateescape")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(head).readline)
    except SyntaxError:
        return "utf-8"
    return encoding


def unified_diff(old: str, new: str, path: str, bom: bool = False, encoding: Optional[str] = None) -> str:
    """The unified diff from `old` to `new` for the file at `path` (`--- path` / `+++ path`,
    applied with `git apply -p0` or `patch -p0`). `bom`: the file starts with a UTF-8 BOM that
    the texts do not carry; the first line gets it back, so that context lines match the file.
    `encoding`: the file's (default: the coding cookie of `old`); the lines carry its bytes."""
    if old == new:
        return ""
    if bom:
        old, new = "\ufeff" + old, "\ufeff" + new
    as_stored = _as_stored(encoding or source_encoding(old))
    name = quote_path(path)
    out = []
    for line in difflib.unified_diff(patch_lines(old), patch_lines(new), name, name):
        out.append(as_stored(line))  # the headers are ASCII, quoted: the same in any encoding
        if not line.endswith("\n"):
            out.append("\n" + NO_NEWLINE)
    return "".join(out)


def _as_stored(encoding: str):
    """A function from a line of text to the same line as the file's bytes (see the module's doc)."""
    if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig"):
        return lambda line: line

    def convert(line: str) -> str:
        try:
            return line.encode(encoding).decode("utf-8", "surrogateescape")
        except UnicodeError:  # cannot be stored in it: the fix cannot be written either
            return line

    return convert
