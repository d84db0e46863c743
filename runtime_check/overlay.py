"""The scratch overlay: the script runs where it lives, and nothing of the user's changes.

Runner side (no torch): `mirror` builds, in verify's temporary folder, a copy of the project
folder's *tree* (the common folder of the script and the working directory): real folders,
whose files are symbolic links to the user's files. Relative paths (`data/`, `checkpoints/`,
`../configs/x.yaml`) resolve as in the user's own run; a file or folder the script creates
lands in the overlay, because every folder there is the overlay's own. Past `MAX_ENTRIES`
entries (a data set of many files), a folder is linked whole instead of copied.

Harness side: a link is still the user's file, so `WriteGuard` breaks it before a write: an
`open()` (also `io.open`, `os.open`, `pathlib`) for writing or `torch.save` on a path in the
overlay first replaces a linked file with a copy (append, `r+`) or removes the link (`w`),
and turns a folder linked whole into an overlay folder. An absolute path into the user's
folder (`os.path.abspath("checkpoints")` taken before `os.chdir`, a path from the arguments)
is redirected to the same place in the overlay. Paths outside the user's folder (`/tmp`,
`~/.cache`) are not the overlay's: they are used as in a normal run. `Snapshot` (runner side) checks after
the runs that the user's folder is unchanged (sizes and modification times), as a last guard
against writers the guard cannot see (C extensions writing by name).
"""

from __future__ import annotations

import os
import shutil
from collections import deque

MAX_ENTRIES = 5000


def mirror(real_root: str, overlay_root: str, max_entries: int = MAX_ENTRIES, skip: str = "") -> None:
    """Overlay folders for the tree under real_root (breadth first), links for its files;
    `skip` (verify's own temporary folder, when the user's folder holds it) is left out."""
    os.makedirs(overlay_root, exist_ok=True)
    queue = deque([(real_root, overlay_root)])
    entries = 0
    while queue:
        real, overlay = queue.popleft()
        try:
            names = sorted(os.listdir(real))
        except OSError:
            continue
        for name in names:
            source, target = os.path.join(real, name), os.path.join(overlay, name)
            if skip and source == skip:
                continue
            entries += 1
            if os.path.isdir(source) and not os.path.islink(source) and entries < max_entries and name != ".git":
                os.mkdir(target)
                queue.append((source, target))
            else:
                os.symlink(source, target)


class Snapshot:
    """Sizes and modification times of the files under a folder (links not followed)."""

    def __init__(self, root: str, max_entries: int = 4 * MAX_ENTRIES, skip: str = "") -> None:
        self.root = root
        self.skip = skip
        self.state: dict[str, tuple] = {}
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != ".git" and os.path.join(folder, d) != skip]
            for name in dirs + files:
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                is_dir = name in dirs
                self.state[os.path.relpath(path, root)] = ("dir",) if is_dir else (info.st_size, info.st_mtime_ns)
                if len(self.state) >= max_entries:
                    return

    def changes(self) -> list[str]:
        """What differs now: created, removed or modified paths (relative to the root)."""
        after = Snapshot(self.root, max_entries=len(self.state) + 100, skip=self.skip)
        changed = [path for path, state in after.state.items() if self.state.get(path) != state]
        changed += [path for path in self.state if path not in after.state]
        return sorted(changed)


# --------------------------------------------------------------------------- harness side
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class WriteGuard:
    """Copy-on-write for the overlay's links (see the module docstring)."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder
        self.root = ""  # the current variant's overlay
        self.real_root = ""  # the user's folder it mirrors
        self.workdir = ""  # verify's temporary folder: never redirected

    def redirect(self, path):
        """An absolute path into the user's folder -> the same path in the overlay."""
        if not self.real_root or not isinstance(path, (str, os.PathLike)):
            return path
        text = os.fspath(path)
        if not os.path.isabs(text):
            return path
        real = os.path.join(self.real_root, "")
        if self.workdir and text.startswith(os.path.join(self.workdir, "")):
            return path
        if text == self.real_root or text.startswith(real):
            return os.path.join(self.root, os.path.relpath(text, self.real_root))
        return path

    def prepare(self, path, truncate: bool) -> None:
        """Make `path` (about to be written) the overlay's own."""
        if not self.root or not isinstance(path, (str, bytes, os.PathLike)) or isinstance(path, int):
            return
        path = os.fsdecode(os.fspath(path))
        absolute = os.path.normpath(os.path.join(os.getcwd(), path))
        root = os.path.join(self.root, "")
        if not absolute.startswith(root):
            return
        # folders linked whole, from the root down: replace each by an overlay folder of links
        current = self.root
        for part in os.path.relpath(absolute, self.root).split(os.sep)[:-1]:
            current = os.path.join(current, part)
            if os.path.islink(current) and os.path.isdir(current):
                real = os.path.realpath(current)
                os.unlink(current)
                os.mkdir(current)
                for name in os.listdir(real):
                    os.symlink(os.path.join(real, name), os.path.join(current, name))
        if os.path.islink(absolute):
            real = os.path.realpath(absolute)
            os.unlink(absolute)
            if not truncate and os.path.isfile(real):
                shutil.copy2(real, absolute)
            self.recorder.emit("overlay-copy", path=absolute, copied=not truncate)

    def install(self) -> None:
        import builtins
        import io

        guard = self
        original_open, original_os_open = builtins.open, os.open

        def open(file, mode="r", *args, **kwargs):
            file = guard.redirect(file)
            if isinstance(mode, str) and any(flag in mode for flag in "wax+"):
                guard.prepare(file, truncate="w" in mode or "x" in mode)
            return original_open(file, mode, *args, **kwargs)

        def os_open(path, flags, *args, **kwargs):
            path = guard.redirect(path)
            if flags & WRITE_FLAGS:
                guard.prepare(path, truncate=bool(flags & os.O_TRUNC))
            return original_os_open(path, flags, *args, **kwargs)

        builtins.open = io.open = open
        os.open = os_open
        try:
            import torch
            import torch.serialization
        except ImportError:
            return
        original_save = torch.save  # the probes' observer, when installed before

        def save(obj, f, *args, **kwargs):
            if isinstance(f, (str, os.PathLike)):
                f = guard.redirect(f)
                guard.prepare(f, truncate=True)
            return original_save(obj, f, *args, **kwargs)

        torch.save = torch.serialization.save = save
