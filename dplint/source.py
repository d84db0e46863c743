"""Reading and writing source files: encodings, BOMs, line endings, atomic writes, the hash
of a file's bytes.

Also the two guards every parse needs, kept here so that the engine and the runner share them:
Python's own verdict on a file LibCST rejects (`python_syntax_error`), and a thread with a
stack deep enough for LibCST's native parser (`call_with_deep_stack`).
"""

from __future__ import annotations

import ast
import errno
import hashlib
import io
import os
import re
import stat
import sys
import tempfile
import threading
import time
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


def content_key(raw: bytes) -> str:
    """The hash of a file's bytes: the cache's key for what it holds, and the project's
    fingerprint of the files a result read."""
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _os_reason(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "symbolic link loop"
    return error.strerror or str(error)


_BARE_CR = re.compile(r"\r(?!\n)")


def scanned_text(text: str) -> str:
    """The text as dplint's text scanners read it: each bare CR (old Mac line ends, a line
    break to Python and LibCST) as `\n`, so that `^`, `$`, `readline` and line splits see the
    lines Python sees. Of the same length: every offset into one is the same in the other."""
    return _BARE_CR.sub("\n", text) if "\r" in text else text


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
    return _complaint(text, ast.parse)


def _complaint(text: str, read: Callable[[str], object]) -> Optional[tuple[str, int, int]]:
    """What `read(text)` (Python's parser or compiler, which never run the code) says is wrong
    with the text: (message, line, 1-based column), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning: invalid escape sequence, ...
            read(text)
    except SyntaxError as error:
        message = " ".join((error.msg or "invalid syntax").split())
        return (message, *_inside(text, error.lineno or 1, error.offset or 1))
    except MemoryError:
        return "too complex (Python's parser ran out of memory)", 1, 1
    except (ValueError, RecursionError) as error:  # null bytes, absurd nesting
        return " ".join(str(error).split()) or type(error).__name__, 1, 1
    return None


# What every Python refuses, whatever its version: its parser's limits and string literals
# that cannot be decoded. LibCST accepts some of these (`"\\u"`, and nesting far deeper than
# Python allows, at a cost of gigabytes), so they are refused before LibCST sees the file.
# Other syntax errors may be newer syntax (a 3.12 `type X = int` under Python 3.11) that
# LibCST knows: those it decides.
_REFUSED_BY_EVERY_PYTHON = (
    "too many nested parentheses", "too many levels of indentation", "too many statically nested blocks",
    "too complex", "(unicode error)", "(value error)", "bytes can only contain ASCII",
    "maximum recursion depth", "parser stack overflow",
)


PYTHON_RECURSION_LIMIT = 1000  # Python's default: the limit a script is compiled under when it is run


def refused_by_every_python(text: str) -> Optional[tuple[str, int, int]]:
    """Python's complaint about the text, only when no Python version would accept it either:
    (message, line, 1-based column), or None.

    The text is compiled, never run: Python's compiler refuses, beside its parser's limits,
    expressions nested deeper than a script may be (a chain of 3,000 `+`, `.f()` or `.module`,
    which LibCST's native parser takes minutes over, holding the interpreter all along). Its
    depth limit follows the recursion limit (up to Python 3.11), so it is compiled under
    Python's default, as a script would be, not under the raised limit analyses run with."""
    previous = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(PYTHON_RECURSION_LIMIT)
    except RecursionError:  # already deeper than that: compiled under the limit in force
        pass
    try:
        problem = _complaint(text, lambda source: compile(source, "<dplint>", "exec", dont_inherit=True))
    finally:
        sys.setrecursionlimit(previous)
    if problem is not None and any(reason in problem[0] for reason in _REFUSED_BY_EVERY_PYTHON):
        return problem
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


class AnalysisTimeout(BaseException):
    """An analysis ran past its time budget. Raised inside the analysis' thread to stop it, and
    in the caller's thread with what the analysis was doing (`stage`). A BaseException: the
    `except Exception` that keeps one rule's bug from taking the others down must not catch it."""

    def __init__(self, seconds: float = 0.0, stage: Optional[str] = None) -> None:
        super().__init__(seconds, stage)
        self.seconds = seconds
        self.stage = stage


# What each thread's analysis is doing now (a rule's code and name, "parsing", ...): the
# caller of a timed-out call names it. Keyed by thread ident; written by the analysis only.
_stages: dict[int, Optional[str]] = {}
TIMEOUT_GRACE_SECONDS = 2.0  # for the stopped analysis to unwind before its thread is given up


def set_stage(stage: Optional[str]) -> None:
    _stages[threading.get_ident()] = stage


def call_with_deep_stack(function: Callable[..., Result], *args, timeout: Optional[float] = None) -> Result:
    """`function(*args)` in a thread with a deep stack and recursion limit; re-raises its error.

    With `timeout` (seconds), a call still running then is stopped: `AnalysisTimeout` is raised
    in its thread (which ends any Python code at its next instruction), and here. A nested call
    runs inside the outer one's budget."""
    global _deep_calls, _saved_recursion_limit
    if getattr(_deep, "inside", False):
        return function(*args)
    with _deep_lock:
        worker = _idle_deep_threads.pop() if _idle_deep_threads else None
    if worker is None:
        try:
            worker = _DeepThread()
        except (RuntimeError, ValueError):  # no room for such a stack (ulimit -v)
            if timeout is not None:  # a budget needs a thread to stop: one with the plain stack
                worker = _DeepThread(stack_bytes=0)
            else:
                return function(*args)  # on the plain stack, with the plain recursion limit
    with _deep_lock:
        if _deep_calls == 0:
            _saved_recursion_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_recursion_limit, DEEP_RECURSION_LIMIT))
        _deep_calls += 1
    try:
        succeeded, value = worker.run(function, args, timeout)
    finally:
        with _deep_lock:
            _release_deep_call()
    if not worker.stopped:  # a stopped thread may still be unwinding (or stuck in C): never reused
        with _deep_lock:
            _idle_deep_threads.append(worker)
    if succeeded:
        return value
    raise value


class _DeepThread:
    """A thread with a deep stack that runs one call at a time, kept for the next one: a run
    lints each file on such a stack, and starting a thread (a fresh 512 MiB mapping) for every
    file cost as much as a small file's analysis."""

    def __init__(self, stack_bytes: int = DEEP_STACK_BYTES) -> None:
        self._call: Optional[tuple] = None
        self._outcome: tuple = (False, None)
        self._start = threading.Lock()
        self._start.acquire()
        self._finished = threading.Lock()
        self._finished.acquire()
        self.stopped = False  # a call ran out of time: the thread is not to be used again
        previous_stack = threading.stack_size(stack_bytes)
        try:
            self._thread = threading.Thread(target=self._serve, name="dplint-deep-stack", daemon=True)
            self._thread.start()
        finally:
            threading.stack_size(previous_stack)

    def run(self, function: Callable, args: tuple, timeout: Optional[float] = None) -> tuple:
        """(True, result) or (False, the exception it raised, or AnalysisTimeout)."""
        self._call = (function, args)
        self._start.release()
        if self._finished.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            outcome, self._outcome = self._outcome, (False, None)
            return outcome
        self.stopped = True
        ident = self._thread.ident
        stage = _stages.get(ident)
        # Python code stops at its next instruction; C code (a regex, the native parser) only
        # when it returns. Asked again while it unwinds: an `except BaseException` that goes
        # on (a `finally` that loops) is stopped once more.
        deadline = time.monotonic() + TIMEOUT_GRACE_SECONDS
        while _raise_in_thread(ident, AnalysisTimeout) and not self._finished.acquire(timeout=0.5):
            if time.monotonic() > deadline:
                break  # stuck in C: the daemon thread is left behind, the caller goes on
        return False, AnalysisTimeout(timeout or 0.0, stage)

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
            if self.stopped:
                self._finished.release()
                return  # never serves again (an AnalysisTimeout may still be pending for it)
            self._finished.release()


def _raise_in_thread(ident: Optional[int], error: type) -> bool:
    """Ask the interpreter to raise `error` in thread `ident` (CPython's
    PyThreadState_SetAsyncExc); False when no such thread runs Python any more."""
    import ctypes

    if ident is None:
        return False
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(error)) == 1


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
