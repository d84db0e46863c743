"""Reading and writing source files: encodings, BOMs, line endings, atomic writes."""

from __future__ import annotations

import io
import os
import re
import tempfile
import tokenize
from dataclasses import dataclass

LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the line breaks Python's tokenizer (and LibCST) know


class SourceError(Exception):
    """A file that cannot be read or decoded; the message is one line for the user."""


@dataclass
class SourceFile:
    path: str
    text: str
    encoding: str  # "utf-8-sig" when the file starts with a BOM: it is written back with it
    raw: bytes


def decode(raw: bytes) -> tuple[str, str]:
    """Decode Python source the way Python does (PEP 263 cookie, BOM). Returns (text, encoding)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:
        raise SourceError(f"cannot decode: {error.msg if hasattr(error, 'msg') else error}") from None
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(f"cannot decode as {encoding}: {error}") from None
    return text, encoding


def read_source(path: str) -> SourceFile:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None
    text, encoding = decode(raw)
    return SourceFile(path, text, encoding, raw)


def line_starts(text: str) -> list[int]:
    """Offsets of the first character of each line (index 0 is line 1)."""
    starts = [0]
    starts.extend(match.end() for match in LINE_BREAK.finditer(text))
    return starts


def write_atomic(path: str, data: bytes) -> None:
    """Replace `path` with `data` so that readers see the old or the new file, never half of one.

    The temp file lives in the same folder (same file system, so the rename is atomic), is
    fsynced before the rename, and takes over the original's permission bits.
    """
    folder = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o7777
    handle, temp_path = tempfile.mkstemp(prefix=".dplint-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.chmod(temp_path, mode)
        os.replace(temp_path, path)
    except BaseException:
        try:
            os.unlink(temp_path)
        except OSError:
            pass
        raise
