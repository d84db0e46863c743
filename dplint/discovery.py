"""Which files a run looks at: the given files, and the `*.py` files under the given folders."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Iterable

# Folders never walked into (explicitly named files are still checked).
SKIPPED_FOLDERS = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".dplint_cache", "node_modules", ".eggs", "site-packages",
}
PYTHON_SUFFIXES = (".py", ".pyi")


@dataclass(frozen=True)
class PathProblem:
    path: str
    message: str  # one line


def _is_virtualenv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg"))


def discover(paths: Iterable[str]) -> tuple[list[str], list[PathProblem]]:
    """Expand paths into Python files, sorted and without duplicates, plus the problems met."""
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
            found = list(_walk(path, problems))
            ignored |= _git_ignored(found, path)
            files.extend(found)
        elif exists:
            files.append(path)
        elif os.path.islink(path):
            problems.append(PathProblem(path, "cannot read: broken symbolic link or symlink loop"))
        else:
            problems.append(PathProblem(path, "cannot read: No such file or directory"))
    unique: dict[str, str] = {}
    for file in files:
        key = os.path.realpath(file)
        if file in ignored or key in unique:
            continue
        unique[key] = os.path.normpath(file)
    return sorted(unique.values()), problems


def _walk(root: str, problems: list[PathProblem]) -> Iterable[str]:
    def on_error(error: OSError) -> None:
        problems.append(PathProblem(error.filename or root, f"cannot read: {error.strerror}"))

    for folder, subfolders, names in os.walk(root, onerror=on_error, followlinks=False):
        subfolders[:] = sorted(
            name for name in subfolders
            if name not in SKIPPED_FOLDERS and not name.endswith(".egg-info")
            and not _is_virtualenv(os.path.join(folder, name))
        )
        for name in sorted(names):
            if name.endswith(PYTHON_SUFFIXES):
                path = os.path.join(folder, name)
                if os.path.islink(path) and not os.path.exists(path):
                    problems.append(PathProblem(path, "cannot read: broken symbolic link or symlink loop"))
                    continue
                yield path


def _git_ignored(paths: list[str], root: str) -> set[str]:
    """The paths .gitignore excludes, asked of git in one batch (none when git is unavailable)."""
    if not paths:
        return set()
    absolute = {os.path.abspath(path): path for path in paths}
    try:
        completed = subprocess.run(
            ["git", "check-ignore", "--stdin", "-z"],
            input="\0".join(absolute).encode(),
            capture_output=True,
            timeout=30,
            cwd=root,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if completed.returncode not in (0, 1):  # 128: not a git repository
        return set()
    return {absolute.get(item.decode(), item.decode()) for item in completed.stdout.split(b"\0") if item}
