"""Reading and writing source files: encodings, BOMs, line endings, atomic writes.

Also the two guards every parse needs, kept here so that the engine and the runner share them:
Python's own verdict on a file LibCST rejects (`python_syntax_error`), and a thread with a
stack deep enough for LibCST's native parser (`call_with_deep_stack`).
"""

from __future__ import annotations

import ast
import errno
import io
import os
import re
import stat
import sys
import tempfile
import threading
import tokenize
import warnings
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the line breaks Python's tokenizer (and LibCST) know

Result = TypeVar("Result")


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
        raise SourceError(_encoding_problem(raw, str(error))) from None
    try:
        return raw.decode(encoding), encoding
    except UnicodeDecodeError as error:
        declared = "" if encoding in ("utf-8", "utf-8-sig") else " (the encoding its coding cookie declares)"
        raise SourceError(f"cannot decode as {encoding}{declared}: {_bad_byte(raw, error.start)}") from None
    except LookupError as error:  # a codec that exists but cannot decode bytes (e.g. "rot13")
        raise SourceError(f"cannot decode: the coding cookie names an unusable encoding ({error})") from None


def _encoding_problem(raw: bytes, message: str) -> str:
    """One line for `tokenize.detect_encoding`'s SyntaxErrors."""
    if message.startswith("unknown encoding"):
        name = message.rsplit(": ", 1)[-1]
        return f"cannot decode: the coding cookie names an unknown encoding {name!r}"
    if message.startswith("encoding problem"):
        return "cannot decode: the file starts with a UTF-8 BOM but its coding cookie declares another encoding"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"cannot decode as utf-8: {_bad_byte(raw, error.start)}"
    return f"cannot decode: {message}"


def _bad_byte(raw: bytes, offset: int) -> str:
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return f"invalid byte 0x{raw[offset]:02x} at line {line}, byte {column} of the line"


def read_source(path: str) -> SourceFile:
    raw = read_bytes(path)
    text, encoding = decode(raw)
    return SourceFile(path, text, encoding, raw)


def read_bytes(path: str) -> bytes:
    """The file's bytes, undecoded (`read_source` without `decode`: what hashing needs)."""
    # O_NONBLOCK: opening a FIFO named `x.py` must not wait for a writer; only regular files
    # are read (a character device would never end).
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise SourceError(f"cannot read: {_os_reason(error)}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise SourceError("cannot read: is a directory")
        if not stat.S_ISREG(mode):
            raise SourceError("cannot read: not a regular file (a pipe, socket or device)")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            raw = handle.read()
    except OSError as error:
        raise SourceError(f"cannot read: {_os_reason(error)}") from None
    finally:
        os.close(descriptor)
    return raw


def _os_reason(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "symbolic link loop"
    return error.strerror or str(error)


def line_starts(text: str) -> list[int]:
    """Offsets of the first character of each line (index 0 is line 1)."""
    starts = [0]
    starts.extend(match.end() for match in LINE_BREAK.finditer(text))
    return starts


def write_atomic(path: str, data: bytes) -> None:
    """Replace `path` with `data` so that readers see the old or the new file, never half of one.

    The temp file lives in the target's folder (same file system, so the rename is atomic), is
    fsynced before the rename, and takes over the original's permission bits (and owner, where
    allowed). A symbolic link is followed: the file it points to is replaced, the link is kept.
    A file the user may not write is refused, although the folder would allow the rename.
    """
    target = os.path.realpath(path)
    info = os.stat(target)
    if not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "Permission denied (the file is read-only)", path)
    handle, temp_path = tempfile.mkstemp(prefix=".dplint-", suffix=".tmp", dir=os.path.dirname(target))
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.chmod(temp_path, stat.S_IMODE(info.st_mode))
        if hasattr(os, "chown"):
            try:
                os.chown(temp_path, info.st_uid, info.st_gid)
            except OSError:
                pass  # only root may give a file away; the new file is then the writer's
        os.replace(temp_path, target)
    except BaseException:
        try:
            os.unlink(temp_path)
        except OSError:
            pass
        raise


def python_syntax_error(text: str) -> Optional[tuple[str, int, int]]:
    """Python's own complaint about the text: (message, line, 1-based column), or None.

    Parsing to an AST (`ast.parse`) never runs the code. Its messages are the ones users know
    ("Missing parentheses in call to 'print'. Did you mean print(...)?") and its positions are
    exact, where LibCST's native parser often reports the end of the file. None when Python
    accepts the text (LibCST may still refuse syntax newer than it knows).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning: invalid escape sequence, ...
            ast.parse(text)
    except SyntaxError as error:
        message = " ".join((error.msg or "invalid syntax").split())
        return (message, *_inside(text, error.lineno or 1, error.offset or 1))
    except (ValueError, RecursionError, MemoryError) as error:  # null bytes, absurd nesting
        return " ".join(str(error).split()) or type(error).__name__, 1, 1
    return None


def _inside(text: str, line: int, column: int) -> tuple[int, int]:
    """The position moved into the file ("unexpected EOF" points past its last line)."""
    lines = LINE_BREAK.split(text)
    line = min(max(line, 1), len(lines))
    return line, min(max(column, 1), len(lines[line - 1]) + 1)


# LibCST's native parser recurses once per nesting level on the C stack: 10,000 chained
# `and`s (valid Python) overflow the default 8 MiB main-thread stack and kill the process
# with SIGSEGV. 512 MiB is address space, not memory: pages are touched only when used.
DEEP_STACK_BYTES = 512 * 1024 * 1024
DEEP_RECURSION_LIMIT = 100_000  # LibCST's visitors recurse in Python, several frames per nesting level
_deep = threading.local()
_deep_lock = threading.Lock()  # guards the process-wide stack size and recursion limit
_deep_calls = 0
_saved_recursion_limit = 0


def call_with_deep_stack(function: Callable[..., Result], *args) -> Result:
    """`function(*args)` in a thread with a deep stack and recursion limit; re-raises its error."""
    global _deep_calls, _saved_recursion_limit
    if getattr(_deep, "inside", False):
        return function(*args)
    with _deep_lock:
        worker = _idle_deep_threads.pop() if _idle_deep_threads else None
    if worker is None:
        try:
            worker = _DeepThread()
        except (RuntimeError, ValueError):  # no room for such a stack (ulimit -v)
            return function(*args)  # on the plain stack, with the plain recursion limit
    with _deep_lock:
        if _deep_calls == 0:
            _saved_recursion_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_recursion_limit, DEEP_RECURSION_LIMIT))
        _deep_calls += 1
    try:
        succeeded, value = worker.run(function, args)
    finally:
        with _deep_lock:
            _release_deep_call()
    with _deep_lock:
        _idle_deep_threads.append(worker)  # not when interrupted above: it may still be busy
    if succeeded:
        return value
    raise value


class _DeepThread:
    """A thread with a deep stack that runs one call at a time, kept for the next one: a run
    lints each file on such a stack, and starting a thread (a fresh 512 MiB mapping) for every
    file cost as much as a small file's analysis."""

    def __init__(self) -> None:
        self._call: Optional[tuple] = None
        self._outcome: tuple = (False, None)
        self._start = threading.Lock()
        self._start.acquire()
        self._finished = threading.Lock()
        self._finished.acquire()
        previous_stack = threading.stack_size(DEEP_STACK_BYTES)
        try:
            threading.Thread(target=self._serve, name="dplint-deep-stack", daemon=True).start()
        finally:
            threading.stack_size(previous_stack)

    def run(self, function: Callable, args: tuple) -> tuple:
        """(True, result) or (False, the exception it raised)."""
        self._call = (function, args)
        self._start.release()
        self._finished.acquire()
        outcome, self._outcome = self._outcome, (False, None)
        return outcome

    def _serve(self) -> None:
        _deep.inside = True
        while True:
            self._start.acquire()
            function, args = self._call
            self._call = None
            try:
                self._outcome = (True, function(*args))
            except BaseException as error:  # handed to the caller's thread
                self._outcome = (False, error)
            self._finished.release()


_idle_deep_threads: list[_DeepThread] = []  # guarded by `_deep_lock`


def _forget_deep_threads() -> None:
    """In a forked child: the parent's threads do not exist there."""
    global _deep_lock, _deep_calls
    _idle_deep_threads.clear()
    _deep_lock = threading.Lock()
    _deep_calls = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_deep_threads)


def _release_deep_call() -> None:
    """The last deep call out puts the recursion limit back (called holding `_deep_lock`)."""
    global _deep_calls
    _deep_calls -= 1
    if _deep_calls == 0:
        sys.setrecursionlimit(_saved_recursion_limit)
