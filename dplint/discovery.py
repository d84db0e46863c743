"""Which files a run looks at: the given files, and the `*.py` files under the given folders."""

from __future__ import annotations

import errno
import fnmatch
import os
import subprocess
from dataclasses import dataclass
from typing import Iterable

# Folders never walked into (explicitly named files are still checked).
SKIPPED_FOLDERS = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".dplint_cache", "node_modules", ".eggs", "site-packages",
    ".ipynb_checkpoints",  # Jupyter's autosaved copies of the notebooks beside them
}
PYTHON_SUFFIXES = (".py", ".pyi")
NOTEBOOK_SUFFIXES = (".ipynb",)  # Jupyter notebooks, checked by default as ruff does (`exclude` turns them off)


@dataclass(frozen=True)
class PathProblem:
    path: str
    message: str  # one line


def _is_virtualenv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg"))


def discover(paths: Iterable[str], include: tuple[str, ...] = ()) -> tuple[list[str], list[PathProblem]]:
    """Expand paths into Python files (and notebooks, and files matching the `include` globs,
    as ruff's `extend-include`), sorted and without duplicates, plus the problems met."""
    files: list[str] = []
    problems: list[PathProblem] = []
    ignored: set[str] = set()
    for path in paths:
        try:
            is_dir = os.path.isdir(path)
            exists = os.path.exists(path)
        except (OSError, ValueError) as error:
            problems.append(PathProblem(path, f"cannot read: {error}"))
            continue
        if is_dir:
            found = list(_walk(path, problems, include))
            ignored |= _git_ignored(found, path)
            files.extend(found)
        elif exists:
            files.append(path)
        elif os.path.islink(path):
            problems.append(PathProblem(path, _broken_link_message(path)))
        else:
            problems.append(PathProblem(path, "cannot read: No such file or directory"))
    # Spelled as the files are (`./a.py` -> `a.py`), and once per path (a path given twice).
    problems = list({os.path.normpath(p.path): PathProblem(os.path.normpath(p.path), p.message) for p in problems}.values())
    unique: dict[str, str] = {}
    real = _RealPaths()
    for file in files:
        if file in ignored:
            continue
        key = real(file)
        if key not in unique:
            unique[key] = os.path.normpath(file)
    return sorted(unique.values()), problems


class _RealPaths:
    """`os.path.realpath`, resolving each folder once: per file it is a system call per
    component of the path, a tenth of a warm run over a deep tree."""

    def __init__(self) -> None:
        self._folders: dict[str, str] = {}

    def __call__(self, file: str) -> str:
        folder, name = os.path.split(file)
        if name in ("", ".", ".."):
            return os.path.realpath(file)
        if folder not in self._folders:
            self._folders[folder] = os.path.realpath(folder)
        joined = os.path.join(self._folders[folder], name)
        return os.path.realpath(joined) if os.path.islink(joined) else joined


def _broken_link_message(path: str) -> str:
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "cannot read: symbolic link loop"
    return "cannot read: broken symbolic link (its target does not exist)"


def _included(folder: str, name: str, root: str, include: tuple[str, ...]) -> bool:
    """Whether an `extend-include` glob names the file (its name, or its path under the walk's root)."""
    if not include:
        return False
    relative = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
    return any(fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(relative, pattern) for pattern in include)


def _walk(root: str, problems: list[PathProblem], include: tuple[str, ...] = ()) -> Iterable[str]:
    def on_error(error: OSError) -> None:
        problems.append(PathProblem(error.filename or root, f"cannot read: {error.strerror}"))

    for folder, subfolders, names in os.walk(root, onerror=on_error, followlinks=False):
        subfolders[:] = sorted(
            name for name in subfolders
            if name not in SKIPPED_FOLDERS and not name.endswith(".egg-info")
            and not _is_virtualenv(os.path.join(folder, name))
        )
        for name in sorted(names):
            if name.endswith(PYTHON_SUFFIXES + NOTEBOOK_SUFFIXES) or _included(folder, name, root, include):
                path = os.path.join(folder, name)
                if os.path.islink(path) and not os.path.exists(path):
                    problems.append(PathProblem(path, _broken_link_message(path)))
                    continue
                yield path


def _git_ignored(paths: list[str], root: str) -> set[str]:
    """The paths .gitignore excludes, asked of git in one batch (none when git is unavailable)."""
    if not paths:
        return set()
    absolute = {os.path.abspath(path): path for path in paths}
    try:
        completed = subprocess.run(
            # The repository's own config must not run commands: `core.fsmonitor` names a
            # program git starts whenever it reads the index, so a cloned repository (or a
            # tarball with a .git folder) could otherwise run code when it is merely linted.
            ["git", "-c", "core.fsmonitor=false", "check-ignore", "--stdin", "-z"],
            input=b"\0".join(os.fsencode(path) for path in absolute),  # names need not be UTF-8
            capture_output=True,
            timeout=30,
            cwd=root,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if completed.returncode not in (0, 1):  # 128: not a git repository
        return set()
    ignored = (os.fsdecode(item) for item in completed.stdout.split(b"\0") if item)
    return {absolute.get(path, path) for path in ignored}
