"""Unified diffs that `git apply` and `patch` accept for every file shape.

`difflib.unified_diff` alone gets three shapes wrong: a last line without a newline (it needs
the `\\ No newline at end of file` marker, or the next line of the patch is glued to it), line
breaks other than `\\n` (`str.splitlines` also splits at form feeds and Unicode separators,
which are not line breaks in a patch), and a BOM (part of the first line's bytes).
"""

from __future__ import annotations

import difflib
import re

NO_NEWLINE = "\\ No newline at end of file\n"
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")  # lines as patch tools see them: split at \n only


def patch_lines(text: str) -> list[str]:
    return _LINES.findall(text)


def unified_diff(old: str, new: str, path: str, bom: bool = False) -> str:
    """The unified diff from `old` to `new` for the file at `path` (`--- path` / `+++ path`,
    applied with `git apply -p0` or `patch -p0`). `bom`: the file starts with a UTF-8 BOM that
    the texts do not carry; the first line gets it back, so that context lines match the file."""
    if old == new:
        return ""
    if bom:
        old, new = "\ufeff" + old, "\ufeff" + new
    out = []
    for line in difflib.unified_diff(patch_lines(old), patch_lines(new), path, path):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n" + NO_NEWLINE)
    return "".join(out)
